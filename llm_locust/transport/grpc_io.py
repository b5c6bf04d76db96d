"""One streaming request over gRPC (vLLM's `VllmEngine/Generate`, served by `vllm serve --grpc`),
timed per the metrics spec, with the contract of transport.http.StreamClient.send.

The messages are encoded and decoded by protocols.grpc_vllm (by hand: no protobuf runtime);
grpcio carries them as raw bytes. One channel (one HTTP/2 connection, requests multiplexed on
it, as a gRPC client does) per client.

Timing: t_sent just before the call is started (the channel is connected first, once, bounded
by timeouts.connect); each streamed message is stamped with perf_counter() when the iterator
hands it over, and a message that carried output tokens is a chunk (TTFT, ITL from those
arrival times); t_headers is the first message's arrival (grpcio gives no separate moment for
the response headers: the server sends them with the first message). Token counts are the
server's own: each chunk's token ids (n_k), their total checked against the sum of its
per-chunk `completion_tokens` (n_out, source usage); n_in is its `prompt_tokens`.

Outcomes: a gRPC status before any message is an http_error ("gRPC CODE: details") except
UNAVAILABLE (connect_error: nothing listens, or the connection broke before the reply) and
DEADLINE_EXCEEDED (timeout, the total one); after a message, UNAVAILABLE/CANCELLED/UNKNOWN are
truncated, the rest a stream_error; a stream that ends without its `complete` message is
truncated; a reply the codec cannot read, or a message over limits.event_bytes, a stream_error.
No message for timeouts.no_progress seconds cancels the call (timeout); that watchdog runs in
gevent's hub, so it needs a gevent process (Locust's); the total timeout is the call's gRPC
deadline and needs nothing. A killed greenlet cancels the call and hands the record to
`on_cancel` as cancelled.

The Generate request has no model name: when the spec names one, the client checks it once
against GetModelInfo's served_model_name and fails the request (http_error, gRPC NOT_FOUND,
as vLLM's HTTP server answers 404) when it differs; nothing is sent.

Under gevent, grpcio must be told before its first channel: `grpc.experimental.gevent.
init_gevent()`; the client does it when gevent has patched the socket module.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

from gevent import GreenletExit

from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.protocols import grpc_vllm
from llm_locust.protocols.base import CONTENT, Limits, ProtocolError, RequestSpec, StreamState, Timeouts
from llm_locust.transport.http import finish_record

log = logging.getLogger(__name__)

_INIT_LOCK = threading.Lock()
_GEVENT_READY = False


def _grpc():
    """grpcio, set up for gevent when the process is gevent-patched (once, before any channel)."""
    global _GEVENT_READY
    # grpc-core's fork handlers restart its poller in a forked child, where subprocess closes the
    # descriptors before exec: the child aborted ("epoll_wait error: Bad file descriptor", exit
    # -6) in 2-4 of 60 spawns from a process that had used grpcio (measured here). Off, unless
    # the user asks for them; read when grpc is first imported.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    try:
        import grpc
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("the vllm-grpc API needs grpcio: pip install 'llm-locust[grpc]' (or grpcio)") from e
    with _INIT_LOCK:
        if not _GEVENT_READY:
            from gevent import monkey

            if monkey.is_module_patched("socket"):
                from grpc.experimental import gevent as grpc_gevent

                grpc_gevent.init_gevent()
            _GEVENT_READY = True
    return grpc


def grpc_target(url: str) -> tuple[str, bool]:
    """(host:port, tls) for a server address: host:port, grpc://host:port, grpcs://host:port, or
    http(s)://host:port (the scheme says TLS; a path is not allowed: gRPC has none to prefix)."""
    if "://" not in url:
        return url.rstrip("/"), False
    parts = urlsplit(url)
    if parts.scheme not in ("grpc", "grpcs", "http", "https"):
        raise ValueError(f"a gRPC server address is host:port or grpc[s]://host:port, not {url!r}")
    if parts.path.strip("/"):
        raise ValueError(f"a gRPC server address has no path: {url!r}")
    if not parts.port:
        raise ValueError(f"a gRPC server address needs a port: {url!r}")
    return parts.netloc, parts.scheme in ("grpcs", "https")


class _Ended(Exception):
    def __init__(self, outcome: Outcome, text: str) -> None:
        super().__init__(text)
        self.outcome = outcome
        self.text = text


_TRUNCATING = ("UNAVAILABLE", "CANCELLED", "UNKNOWN")


class GrpcStreamClient:
    """Sends streaming Generate requests to one vLLM gRPC server and times them."""

    api = grpc_vllm.NAME

    def __init__(
        self,
        target: str,
        timeouts: Timeouts | None = None,
        metadata: dict[str, str] | None = None,
        keep_text: bool = False,
        limits: Limits | None = None,
    ) -> None:
        grpc = self._grpc = _grpc()
        self.timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()
        self.keep_text = keep_text  # the API returns token ids only: records get no text
        self.target, tls = grpc_target(target)
        # header names are lower case in HTTP/2; an Authorization header becomes gRPC metadata
        self.metadata = tuple((k.lower(), v) for k, v in (metadata or {}).items()) or None
        options = [
            ("grpc.max_receive_message_length", self.limits.event_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.enable_http_proxy", 0),  # never send load to a proxy from the environment
            ("grpc.primary_user_agent", "llm-locust"),
        ]
        if tls:
            self.channel = grpc.secure_channel(self.target, grpc.ssl_channel_credentials(), options=options)
        else:
            self.channel = grpc.insecure_channel(self.target, options=options)
        # raw bytes both ways (no serializer): protocols.grpc_vllm does the encoding
        self._generate = self.channel.unary_stream(grpc_vllm.GENERATE)
        self._model_info = self.channel.unary_unary(grpc_vllm.GET_MODEL_INFO)
        self._ready = False
        self._served: dict[str, str] | None = None

    def close(self) -> None:
        self.channel.close()

    # ------------------------------------------------------------------ one-off exchanges
    def _connect(self) -> None:
        """Wait (once per client) until the channel is connected, at most timeouts.connect."""
        if self._ready:
            return
        grpc = self._grpc
        try:
            grpc.channel_ready_future(self.channel).result(timeout=self.timeouts.connect)
        except grpc.FutureTimeoutError:
            raise _Ended(
                Outcome.CONNECT_ERROR, f"connect: no gRPC connection to {self.target} within {self.timeouts.connect:g}s"
            ) from None
        self._ready = True

    def warm_up(self, model: str | None = None) -> None:
        """Connect the channel (and ask for the served model when `model` is named) ahead of
        the first send, so that an open-loop replay's first requests leave on time: the send
        stamps t_sent after these. Failures are left for the sends to record."""
        try:
            self._connect()
            if model:
                self.model_info()
        except (_Ended, self._grpc.RpcError, ProtocolError):
            pass

    def model_info(self) -> dict[str, str]:
        """The server's GetModelInfo (model_path, served_model_name, tokenizer_path); cached."""
        if self._served is None:
            reply = self._model_info(b"", timeout=min(self.timeouts.total, 60.0), metadata=self.metadata)
            self._served = grpc_vllm.decode_model_info(reply)
        return self._served

    def _check_model(self, model: str) -> None:
        grpc = self._grpc
        try:
            info = self.model_info()
        except grpc.RpcError as e:
            raise _Ended(*_status_outcome(e, before_reply=True, what="GetModelInfo")) from None
        except ProtocolError as e:
            raise _Ended(Outcome.STREAM_ERROR, f"GetModelInfo: {e}") from None
        check_served(model, info)

    # ------------------------------------------------------------------ the request
    def send(
        self,
        spec: RequestSpec,
        request_id: str,
        *,
        t_sched: float | None = None,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        step: int = 0,
        keep_text: bool | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Send one request, read its stream to the end, and return what happened: the
        `Client.send` contract (transport/client.py).

        Never raises for server or network trouble (the record's outcome says it); raises
        ValueError for a spec the API cannot carry (an unknown extra_body key). When the
        greenlet is killed, the call is cancelled, the record handed to `on_cancel` as
        cancelled and GreenletExit propagates. `on_record` gets the record once, as soon as it
        exists, before the call is made."""
        data = grpc_vllm.encode_generate(spec, request_id)
        now = time.perf_counter()
        rec = RequestRecord(
            request_id=request_id,
            api=self.api,
            t_sched=now if t_sched is None else t_sched,
            t_sent=now,
            wall_sent=time.time(),
            requested_out=spec.max_tokens if spec.force_length else None,
            step=step,
        )
        if on_record is not None:
            on_record(rec)
        state = StreamState(False)  # token ids only: there is no text to collect
        call = None
        watch = _Watch(self.timeouts.no_progress)
        grpc = self._grpc
        try:
            self._connect()
            if spec.model:
                self._check_model(spec.model)
            rec.t_sent = watch.last = time.perf_counter()
            rec.wall_sent = time.time()
            call = self._generate(data, timeout=self.timeouts.total, metadata=self.metadata)
            watch.start(call)
            self._read(call, rec, state, watch)
        except _Ended as e:
            rec.outcome, rec.error = e.outcome, e.text
        except grpc.RpcError as e:
            if watch.fired:
                rec.outcome, rec.error = Outcome.TIMEOUT, f"no data for {self.timeouts.no_progress:g}s"
            else:
                rec.outcome, rec.error = _status_outcome(
                    e, before_reply=rec.t_headers is None, total=self.timeouts.total
                )
        except GreenletExit:
            if call is not None:
                call.cancel()
            rec.outcome, rec.error = Outcome.CANCELLED, "test stopped while in flight"
            rec.t_end = time.perf_counter()
            finish_record(rec, state)
            if on_cancel is not None:
                on_cancel(rec)
            raise
        except Exception as e:  # noqa: BLE001 - the last line of defence: a reply we could not read
            log.exception("unexpected error reading a gRPC reply")
            rec.outcome, rec.error = Outcome.STREAM_ERROR, f"unreadable reply: {type(e).__name__}: {e}"
        finally:
            watch.stop()
            if call is not None and rec.outcome is not Outcome.OK:
                call.cancel()  # no-op on a finished call; frees the server's request otherwise
        if rec.t_end is None:
            rec.t_end = time.perf_counter()
        finish_record(rec, state)
        return rec

    def _read(self, call, rec: RequestRecord, state: StreamState, watch: _Watch) -> None:
        feed = grpc_vllm.feed_response
        append = rec.chunk_times.append
        perf_counter = time.perf_counter
        now = rec.t_sent
        try:
            for msg in call:
                watch.last = now = perf_counter()
                if rec.t_headers is None:
                    rec.t_headers = now
                if feed(msg, state) == CONTENT:
                    append(now)
                    if rec.t_first is None:
                        rec.t_first = rec.t_first_content = now
        except ProtocolError as e:
            rec.t_end = now
            raise _Ended(Outcome.STREAM_ERROR, str(e)) from None
        except self._grpc.RpcError:
            rec.t_end = perf_counter()
            raise
        rec.t_end = now
        check_end(state)


def check_served(model: str, info: dict[str, str]) -> None:
    """The Generate request has no model name: a named model must be one GetModelInfo names."""
    served = info.get("served_model_name") or ""
    names = {n.strip() for n in served.split(",") if n.strip()} | {info.get("model_path") or ""}
    if model not in names:
        raise _Ended(
            Outcome.HTTP_ERROR,
            f"gRPC NOT_FOUND: model {model!r} is not served here (the server serves {served!r}; "
            "checked with GetModelInfo, the Generate request has no model name)",
        )


def check_end(state: StreamState) -> None:
    """A stream that ended with OK trailers: its `complete` came, and the chunks' counts agree."""
    if state.error is not None:
        raise _Ended(Outcome.STREAM_ERROR, state.error)
    if not state.done:
        raise _Ended(Outcome.TRUNCATED, "the gRPC stream ended without its complete message")
    ids = sum(state.cont_tokens)
    if state.usage_out is not None and state.usage_out != ids:
        raise _Ended(
            Outcome.STREAM_ERROR,
            f"the chunks' completion_tokens add up to {state.usage_out} but they carried {ids} token ids",
        )


def _status_outcome(e, *, before_reply: bool, total: float | None = None, what: str = "") -> tuple[Outcome, str]:
    """The outcome and error text for a gRPC status (an RpcError that is a grpc.Call)."""
    try:
        code = e.code()
        name = code.name if code is not None else "UNKNOWN"
        details = e.details() or ""
    except Exception:  # noqa: BLE001 - an RpcError that is not a Call
        name, details = "UNKNOWN", str(e)
    return status_outcome(name, details, before_reply=before_reply, total=total, what=what)


def status_outcome(
    name: str, details: str, *, before_reply: bool, total: float | None = None, what: str = ""
) -> tuple[Outcome, str]:
    """The outcome and error text for a gRPC status by name (both gRPC clients classify with it):
    DEADLINE_EXCEEDED a timeout; before any message UNAVAILABLE a connect_error, the rest an
    http_error; after one, UNAVAILABLE / CANCELLED / UNKNOWN truncated, the rest a stream_error."""
    prefix = f"{what}: " if what else ""
    text = f"{prefix}gRPC {name}: {details}"[:1000]
    if name == "DEADLINE_EXCEEDED":
        return Outcome.TIMEOUT, (f"total timeout {total:g}s" if total is not None else text)
    if before_reply:
        if name == "UNAVAILABLE":
            return Outcome.CONNECT_ERROR, text
        return Outcome.HTTP_ERROR, text
    if name in _TRUNCATING:
        return Outcome.TRUNCATED, text
    return Outcome.STREAM_ERROR, text


class _Call(Protocol):
    """What the watchdog needs of a gRPC call (grpcio ships no types)."""

    def cancel(self) -> bool: ...


class _Watch:
    """No-progress watchdog: a timer in gevent's hub that cancels the call when no message came
    for `limit` seconds. Checks every tenth of the limit, at most every 100 ms (at least every
    5 ms): it fires within 10% (or 100 ms) of its value, as the HTTP client's watchdog does
    (transport/http.py)."""

    __slots__ = ("limit", "last", "fired", "_timer", "_call")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.last = time.perf_counter()
        self.fired = False
        self._timer = None
        self._call: _Call | None = None

    def start(self, call: _Call) -> None:
        import gevent

        self._call = call
        period = min(0.1, max(self.limit / 10, 0.005))
        timer = self._timer = gevent.get_hub().loop.timer(period, period)
        timer.start(self._check)

    def _check(self) -> None:
        if time.perf_counter() - self.last > self.limit and not self.fired:
            self.fired = True
            call = self._call
            if call is not None:  # always while the timer runs: stop() closes it first
                call.cancel()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self._call = None
