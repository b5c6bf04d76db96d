"""One streaming request over HTTP/1.1, timed per the metrics spec. Knows nothing of Locust.

Sockets come from a geventhttpclient connection pool (the one a Locust FastHttpUser owns), but
the request is written and the body read here, so that:
  - t_sent is taken after the connection is ready, just before the request bytes are written;
  - every socket read is stamped once with perf_counter() as it returns, and every event
    decoded from that read gets that stamp (events that arrive together are timed together);
  - a connection closed before the body's end is a truncated stream, never a success;
  - a half-read connection is closed, never returned to the pool.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import gevent
import gevent.ssl
from gevent import GreenletExit
from geventhttpclient.connectionpool import SSLConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketResponse

from llm_locust.protocols import error_text, make_decoder
from llm_locust.protocols.base import Timeouts, CONTENT, Adapter, ProtocolError, RequestSpec, StreamState, resolve_tokens
from llm_locust.metrics.records import SOURCE_USAGE, Outcome, RequestRecord

log = logging.getLogger(__name__)

READ_SIZE = 65536
ERROR_BODY_LIMIT = 4096


class _Ended(Exception):
    """Internal: the stream ended abnormally with this outcome and text."""

    def __init__(self, outcome: Outcome, text: str) -> None:
        super().__init__(text)
        self.outcome = outcome
        self.text = text


class _StaleConnection(Exception):
    """A kept-alive connection the server had closed before our request reached it."""


MAX_STALE_RETRIES = 3


class StreamClient:
    """Sends streaming requests of one API flavour to one server and times them."""

    def __init__(
        self,
        http_client,  # geventhttpclient.HTTPClient for the target host
        base_url: str,
        adapter: Adapter,
        timeouts: Timeouts | None = None,
        headers: dict[str, str] | None = None,
        collect_text: bool = False,
    ) -> None:
        self.pool = http_client._connection_pool
        if not isinstance(self.pool, SSLConnectionPool):
            self.pool._is_socket_alive = _socket_alive
        self._kept_alive: weakref.WeakSet = weakref.WeakSet()  # sockets we returned to the pool
        self.adapter = adapter
        self.timeouts = timeouts or Timeouts()
        self.collect_text = collect_text
        parts = urlsplit(base_url)
        self.prefix = parts.path.rstrip("/")
        head = {
            "Host": parts.netloc,
            "User-Agent": "llm-locust",
            "Content-Type": "application/json",
            "Accept": "application/x-ndjson" if adapter.framing == "ndjson" else "text/event-stream",
            "Accept-Encoding": "identity",
        }
        head.update(headers or {})
        self._head_lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())

    def _request_bytes(self, path: str, body: bytes, request_id: str) -> bytes:
        return (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head_lines}"
            f"X-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body

    def send(
        self,
        spec: RequestSpec,
        request_id: str,
        t_sched: float | None = None,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        step: int = 0,
        collect_text: bool | None = None,
    ) -> RequestRecord:
        """Send one request, read its stream to the end, and return what happened.

        Never raises for server or network trouble: that becomes the record's outcome. When the
        greenlet is killed (test stopped), the record is handed to `on_cancel` as cancelled and
        GreenletExit propagates.
        """
        path, body = self.adapter.request(spec)
        data = self._request_bytes(path, body, request_id)
        now = time.perf_counter()
        rec = RequestRecord(
            request_id=request_id,
            api=self.adapter.name,
            t_sched=now if t_sched is None else t_sched,
            t_sent=now,
            wall_sent=time.time(),
            requested_out=spec.max_tokens if spec.force_length else None,
            step=step,
        )
        collect = self.collect_text if collect_text is None else collect_text
        state = StreamState(collect)
        timer = gevent.Timeout(self.timeouts.total, _Ended(Outcome.TIMEOUT, f"total timeout {self.timeouts.total:g}s"))
        timer.start()
        try:
            for attempt in range(MAX_STALE_RETRIES + 1):
                try:
                    self._exchange(data, rec, state, may_retry=attempt < MAX_STALE_RETRIES)
                    break
                except _StaleConnection:
                    continue  # the server closed an idle connection as we reused it: send again
        except _Ended as e:
            rec.outcome, rec.error = e.outcome, e.text
        except GreenletExit:
            rec.outcome, rec.error = Outcome.CANCELLED, "test stopped while in flight"
            rec.t_end = time.perf_counter()
            self._finish(rec, state)
            if on_cancel is not None:
                on_cancel(rec)
            raise
        finally:
            timer.close()
        if rec.t_end is None:
            rec.t_end = time.perf_counter()
        self._finish(rec, state)
        return rec

    def _exchange(self, data: bytes, rec: RequestRecord, state: StreamState, may_retry: bool) -> None:
        pool = self.pool
        try:
            sock = pool.get_socket()
        except OSError as e:
            raise _Ended(Outcome.CONNECT_ERROR, f"connect: {e}") from None
        reused = sock in self._kept_alive
        resp = None
        # No per-read socket timeout (gevent arms a timer for every read that waits): the
        # process's watchdog closes the socket of a request that received nothing for too long.
        sock.settimeout(None)
        watch = _WATCHDOG.watch(sock, self.timeouts.no_progress)
        try:
            rec.t_sent = watch.last = time.perf_counter()
            rec.wall_sent = time.time()
            read = _reader(sock, rec.t_sent, watch)
            sock.sendall(data)
            head, t_head = _read_head(read)
            resp = _Response(sock, block_size=READ_SIZE, method="POST", pre_buffered=head)
            rec.t_headers = t_head
            rec.status = status = resp.status_code
            if status < 200 or status >= 300:
                body = _read_limited(resp, ERROR_BODY_LIMIT)
                rec.t_end = time.perf_counter()
                raise _Ended(Outcome.HTTP_ERROR, f"HTTP {status}: {error_text(body)}")
            self._read_stream(resp, read, rec, state)
        except _Ended:
            raise
        except (OSError, ValueError, HTTPParseError, HTTPConnectionClosed) if watch.fired else ():
            raise _Ended(Outcome.TIMEOUT, f"no data for {self.timeouts.no_progress:g}s") from None
        except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError) as e:
            if rec.t_headers is None and reused and may_retry:
                raise _StaleConnection() from None
            kind = Outcome.CONNECT_ERROR if rec.t_headers is None else Outcome.TRUNCATED
            raise _Ended(kind, f"connection closed: {e}") from None
        except HTTPParseError as e:
            if rec.t_headers is None:
                raise _Ended(Outcome.HTTP_ERROR, f"invalid HTTP reply: {e}") from None
            raise _Ended(Outcome.STREAM_ERROR, f"invalid HTTP framing: {e}") from None
        except (OSError, ValueError) as e:  # resets, refused, HTTP parse errors
            kind = Outcome.CONNECT_ERROR if rec.t_headers is None else Outcome.TRUNCATED
            raise _Ended(kind, f"{type(e).__name__}: {e}") from None
        finally:
            _WATCHDOG.unwatch(watch)
            # Exactly one of: back to the pool (body read to its end on a keep-alive
            # connection), or closed (anything else, including a kill or the total timeout).
            if resp is not None and resp.message_complete and not resp.should_close():
                self._kept_alive.add(sock)
                pool.return_socket(sock)
            else:
                pool.release_socket(sock)

    def _read_stream(self, resp: HTTPSocketResponse, read, rec: RequestRecord, state: StreamState) -> None:
        adapter_feed = self.adapter.feed
        decoder = make_decoder(self.adapter)
        decode = decoder.feed
        times = rec.chunk_times
        append = times.append
        buf = resp._body_buffer
        head = b""  # first bytes of the body, for the error text when nothing decodes
        payloads = 0
        now = rec.t_headers
        try:
            ended = closed = False  # closed: a close-delimited body ended with the connection
            while not ended:
                if buf:
                    data = bytes(buf)
                    del buf[:]
                    if not head:
                        head = data[:300]
                    events = decode(data)
                elif closed or resp.message_complete:
                    ended = True
                    events = decoder.close()  # an event the body's end completed
                else:
                    chunk, now = read()
                    if not chunk:
                        if _close_delimited(resp):
                            closed = True
                            continue
                        rec.t_end = now
                        raise _Ended(Outcome.TRUNCATED, "connection closed before the end of the body")
                    resp.feed(chunk)
                    continue
                for payload in events:
                    payloads += 1
                    kind = adapter_feed(payload, state)
                    if kind:
                        append(now)
                        if rec.t_first is None:
                            rec.t_first = now
                        if kind == CONTENT and rec.t_first_content is None:
                            rec.t_first_content = now
        except ProtocolError as e:
            rec.t_end = now
            raise _Ended(Outcome.STREAM_ERROR, str(e)) from None
        rec.t_end = now
        if state.error is not None:
            raise _Ended(Outcome.STREAM_ERROR, state.error)
        if self.adapter.end_marker and not state.done:
            if not payloads:
                ctype = resp.get("content-type") or "none"
                text = head.decode("utf-8", "replace").strip()
                raise _Ended(Outcome.STREAM_ERROR, f"no stream events in reply (content-type {ctype}): {text[:200]}")
            raise _Ended(Outcome.TRUNCATED, "stream ended without its end marker")

    def _finish(self, rec: RequestRecord, state: StreamState) -> None:
        n_chunks = len(rec.chunk_times)
        rec.n_out, rec.n_out_source, rec.chunk_tokens = resolve_tokens(state, n_chunks)
        rec.finish_reason = state.finish_reason
        if state.usage_in is not None:
            rec.n_in, rec.n_in_source = state.usage_in, SOURCE_USAGE
        if state.extra:
            rec.extra = state.extra
        if state.collect_text:
            rec.text = "".join(state.text)


# Kernel receive timestamps: the time a read's data reached the socket, not the time this
# process got round to reading it. Under load (a thousand streams whose tokens land together)
# the difference is tens of milliseconds; see docs/metrics.md.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python does not export it
_TIMESPEC = struct.Struct("qq")
_CMSG_SPACE = 64


def _reader(sock, t_sent: float, watch: "_Watch"):
    """A function returning (bytes read, arrival time as perf_counter seconds) per call.

    With kernel timestamps (plain TCP on Linux) the arrival time is when the data reached the
    socket, kept within [t_sent, now]; otherwise (TLS, other systems) the time the read returned.
    """
    perf_counter = time.perf_counter
    raw = getattr(sock, "_sock", None)
    if raw is not None and hasattr(sock, "recvmsg") and not isinstance(sock, (ssl.SSLSocket, gevent.ssl.SSLSocket)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            raw = None
    else:
        raw = None
    if raw is None:
        recv = sock.recv

        def read_plain() -> tuple[bytes, float]:
            data = recv(READ_SIZE)
            watch.last = now = perf_counter()
            return data, now

        return read_plain

    recvmsg = sock.recvmsg
    unpack = _TIMESPEC.unpack
    off_ns = time.time_ns() - time.perf_counter_ns()  # CLOCK_REALTIME - CLOCK_MONOTONIC

    def read_stamped() -> tuple[bytes, float]:
        data, anc, _flags, _addr = recvmsg(READ_SIZE, _CMSG_SPACE)
        watch.last = now = perf_counter()
        if anc:
            level, kind, payload = anc[0]
            if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET:
                sec, nsec = unpack(payload)
                t = (sec * 1_000_000_000 + nsec - off_ns) / 1e9
                if t_sent <= t < now:
                    return data, t
        return data, now

    return read_stamped


def _read_head(read) -> tuple[bytes, float]:
    """Bytes up to the end of the response headers (and whatever came with them), and when
    the read that completed them arrived."""
    buf = b""
    while True:
        data, t = read()
        if not data:
            if buf:
                raise HTTPParseError("connection closed before the end of the headers")
            raise HTTPConnectionClosed("connection closed.")
        buf += data
        if b"\r\n\r\n" in buf or b"\n\n" in buf:
            return buf, t


class _Watch:
    __slots__ = ("sock", "limit", "last", "fired")

    def __init__(self, sock, limit: float) -> None:
        self.sock = sock
        self.limit = limit
        self.last = time.perf_counter()
        self.fired = False


class _Watchdog:
    """One greenlet per process ends requests that received nothing for their no-progress
    timeout, by closing their socket: the blocked read raises, and the request sees `fired`.
    Closing (rather than throwing into the greenlet) cannot reach a later request by mistake."""

    def __init__(self) -> None:
        self.active: set[_Watch] = set()
        self._greenlet = None

    def watch(self, sock, limit: float) -> _Watch:
        w = _Watch(sock, limit)
        self.active.add(w)
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)
        return w

    def unwatch(self, w: _Watch) -> None:
        self.active.discard(w)

    def _run(self) -> None:
        while self.active:
            period = min(0.25, min(w.limit for w in self.active) / 4)
            gevent.sleep(max(period, 0.005))
            now = time.perf_counter()
            for w in [w for w in self.active if now - w.last > w.limit]:
                w.fired = True
                self.active.discard(w)
                w.sock.close()


_WATCHDOG = _Watchdog()


def _socket_alive(sock) -> bool:
    """Pool check for an idle kept-alive socket, without yielding to other greenlets (the
    pool's own check goes through gevent's select, which does, and so delays every send)."""
    try:
        raw = sock._sock
        if raw.fileno() < 0:
            return False
        raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return False  # readable while idle: closed by the server, or stray bytes
    except BlockingIOError:
        return True
    except (OSError, AttributeError):
        return False


def fetch_models(base_url: str, headers: dict[str, str], timeouts: Timeouts) -> list[str]:
    """Model ids the server lists at /v1/models; [] (with a warning) when it lists none."""
    from geventhttpclient import HTTPClient

    from llm_locust.protocols.openai import parse_models

    try:
        http = HTTPClient.from_url(base_url, connection_timeout=timeouts.connect, network_timeout=10.0, insecure=True)
        try:
            r = http.get(urlsplit(base_url).path.rstrip("/") + "/v1/models", headers=headers)
            body = r.read()
        finally:
            http.close()
        models = parse_models(body) if r.status_code == 200 else []
        if not models:
            log.warning("%s/v1/models lists no model (HTTP %s); sending requests without one", base_url, r.status_code)
        return models
    except Exception as e:  # noqa: BLE001 - any failure here only costs the model name
        log.warning("could not list models at %s/v1/models: %s", base_url, e)
        return []


def _close_delimited(resp: HTTPSocketResponse) -> bool:
    """A body with neither Content-Length nor chunked encoding ends when the server closes."""
    te = (resp.get("transfer-encoding") or "").lower()
    return resp.content_length is None and "chunked" not in te


def _read_limited(resp: HTTPSocketResponse, limit: int) -> bytes:
    out = bytearray()
    try:
        while len(out) < limit:
            piece = resp.read(min(READ_SIZE, limit - len(out)))
            if not piece:
                break
            out += piece
    except (OSError, HTTPConnectionClosed, ValueError):
        pass
    return bytes(out)


class _Response(HTTPSocketResponse):
    """geventhttpclient's response parser, minus its socket handling: the client decides
    whether a connection goes back to the pool or is closed (see StreamClient._exchange)."""

    def release(self) -> None:
        self._sock = None

    def __del__(self) -> None:
        pass
