"""One streaming request over HTTP/1.1, timed per the metrics spec. Knows nothing of Locust.

Sockets come from a geventhttpclient connection pool (the one a Locust FastHttpUser owns), but
the request is written and the body read here, so that:
  - t_sent is taken after the connection is ready, just before the request bytes are written;
  - every socket read is stamped once with perf_counter() as it returns, and every event
    decoded from that read gets that stamp (events that arrive together are timed together);
  - a connection closed before the body's end is a truncated stream, never a success;
  - a half-read connection is closed, never returned to the pool;
  - whatever the server sends, send() returns a record with a classified outcome: reads are
    bounded (Limits: header block, one event, framing without body bytes), every read loop lets
    other greenlets run at least every YIELD_AFTER seconds of back-to-back reads (so the total
    timeout and the no-progress watchdog fire on time even under a flood of bytes), and any
    exception while decoding a reply becomes a stream_error, never an exception out of send().
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import time
import weakref
from collections.abc import Callable
from typing import Protocol, cast
from urllib.parse import urlsplit

import gevent
import gevent.ssl
from gevent import GreenletExit
from geventhttpclient.connectionpool import SSLConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketResponse

from llm_locust.metrics.records import SOURCE_USAGE, Outcome, RequestRecord
from llm_locust.protocols import error_text, make_decoder, printable
from llm_locust.protocols.base import (
    CONTENT,
    REASONING,
    TOOL_CALL,
    Adapter,
    Limits,
    ProtocolError,
    RequestSpec,
    StreamState,
    Timeouts,
    resolve_tokens,
)
from llm_locust.protocols.embeddings import Reply
from llm_locust.protocols.sse import SSEDecoder
from llm_locust.protocols.token_reads import SCAN_LIMIT, token_read_matcher, whole_chunks
from llm_locust.transport.pump import PUMP
from llm_locust.transport.stamps import CMSG_SPACE, SO_TIMESTAMPNS, arrival, clock_offset_ns
from llm_locust.workload.cancel import CancelPlan

log = logging.getLogger(__name__)

READ_SIZE = 65536
# After a read that filled READ_SIZE (more is likely waiting: a server sending faster than we
# read), the next read may ask for up to this much: a 256-token SGLang stream (376 KB, its text
# repeated in every event) then takes 1-2 reads, not 6, which raised its burst ingest by ~20% at
# 256 KiB and ~15% more at 512 KiB (each read has its kernel and per-read costs). How much more:
# as much as the caller got through in READ_BUDGET at the pace it took the last full read, so
# that one read's bytes never keep the other greenlets waiting much past YIELD_AFTER (a flood of
# bytes that decode slowly, e.g. comment-only events, keeps READ_SIZE). Reads that find a token or
# two (a paced server) stay at READ_SIZE, so their buffer is never a large allocation (malloc
# would map and unmap it each time). Memory: only what was received is kept, and a stream's
# pending bytes are bounded by Limits.event_bytes, far above this.
BULK_READ_SIZE = 524288
READ_BUDGET = 0.002

ERROR_BODY_LIMIT = 4096
# A read loop that has found data waiting (never had to wait in the hub) for this long yields
# to the other greenlets: timers (the total timeout), the watchdog and other requests run.
YIELD_AFTER = 0.005
# How it yields: a timer of this length, not sleep(0). gevent's sleep(0) only runs the hub's
# callbacks, not a loop iteration, so timers (the total timeout, other greenlets' sleeps) and
# IO of other sockets could still wait for hundreds of milliseconds.
_YIELD_SLEEP = 1e-6
# A TLS read that took longer than this is taken to have waited in the hub (yielded).
_WAITED = 0.0005
# Paced streams' one-token reads recognised without parsing (protocols.token_reads); False reads
# every byte the general way (tests compare the two).
TOKEN_READS = True
# ... and read by the process's one pump greenlet, many streams a wake-up (transport/pump.py); False:
# each stream's greenlet reads its own.
PUMP_READS = True
# Templates a stream may take for its token reads without one of them taking a read.
TEMPLATE_TRIES = 3


def _next_read_size(last: int, spent: float) -> int:
    """The buffer for the read after one that brought `last` bytes (a full buffer) and whose
    bytes the caller took `spent` seconds to get through."""
    if spent <= 0:
        return BULK_READ_SIZE
    return max(READ_SIZE, min(BULK_READ_SIZE, int(last * READ_BUDGET / spent)))


class _CancelAt(StreamState):
    """The state of a stream the client aborts after `stop_at` token-bearing events (--cancel)."""

    __slots__ = ("stop_at",)

    def __init__(self, keep_text: bool, stop_at: int) -> None:
        super().__init__(keep_text)
        self.stop_at = stop_at


class _Ended(Exception):
    """Internal: the stream ended abnormally with this outcome and text."""

    def __init__(self, outcome: Outcome, text: str) -> None:
        super().__init__(text)
        self.outcome = outcome
        self.text = text


class StreamClient:
    """Sends streaming requests of one API flavour to one server and times them."""

    # --cancel: the process's plan (workload.cancel), set by whoever made the client; each send draws
    cancel: CancelPlan | None = None

    def __init__(
        self,
        http_client,  # geventhttpclient.HTTPClient for the target host
        base_url: str,
        adapter: Adapter,
        timeouts: Timeouts | None = None,
        headers: dict[str, str] | None = None,
        keep_text: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self.pool = http_client._connection_pool
        if not isinstance(self.pool, SSLConnectionPool):
            self.pool._is_socket_alive = _socket_alive
        _time_connects(self.pool)
        self.adapter = adapter
        self.timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()  # sizes accepted from the server (header block, one event)
        self.keep_text = keep_text
        parts = urlsplit(base_url)
        self.prefix = parts.path.rstrip("/")
        self.netloc = parts.netloc
        self._kept_alive: weakref.WeakSet = weakref.WeakSet()  # connections this client put back in the pool
        head = {
            "Host": parts.netloc,
            "User-Agent": "llm-locust",
            "Content-Type": "application/json",
            "Accept": "application/x-ndjson" if adapter.framing == "ndjson" else "text/event-stream",
            "Accept-Encoding": "identity",
        }
        head.update(headers or {})
        self._head_lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())

    def _request_bytes(self, path: str, body: bytes, request_id: str, headers: dict[str, str] | None = None) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        return (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head_lines}{extra}"
            f"X-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body

    def send(
        self,
        spec: RequestSpec,
        request_id: str,
        t_sched: float | None = None,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        step: int = 0,
        keep_text: bool | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Send one request, read its stream to the end, and return what happened.

        Never raises for server or network trouble, whatever bytes the server sends: that
        becomes the record's outcome. When the greenlet is killed (test stopped), the record is
        handed to `on_cancel` as cancelled and GreenletExit propagates. `on_record` gets the
        record once, as soon as it exists, before the request is written (the dispatcher's
        --max-prefill gate watches its t_first; nothing is added to the read path).
        """
        path, body = self.adapter.request(spec)
        data = self._request_bytes(path, body, request_id, spec.headers)
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
        if on_record is not None:
            on_record(rec)
        keep = self.keep_text if keep_text is None else keep_text
        after_s, after_tok = self.cancel.draw() if self.cancel is not None else (0.0, 0)
        state = _CancelAt(keep, after_tok) if after_tok else StreamState(keep)
        timer = _RequestTimer(self.timeouts.total)
        abort = _abort_timer(after_s)  # started by _exchange at the send, not before the connect
        try:
            self._exchange(data, rec, state, abort, timer)
        except _Ended as e:
            rec.outcome, rec.error = e.outcome, e.text
        except Exception as e:  # noqa: BLE001 - the last line of defence: a reply we could not read
            _log_unexpected(e)
            rec.outcome, rec.error = Outcome.STREAM_ERROR, f"unreadable reply: {_exception_text(e)}"
        except GreenletExit:
            rec.outcome, rec.error = Outcome.CANCELLED, "test stopped while in flight"
            rec.t_end = time.perf_counter()
            self._finish(rec, state)
            if on_cancel is not None:
                on_cancel(rec)
            raise
        finally:
            timer.close()
            if abort is not None:
                abort.close()
        if rec.t_end is None:
            rec.t_end = time.perf_counter()
        try:
            self._finish(rec, state)
        except Exception as e:  # noqa: BLE001 - adapters validate what they store; never raise here
            _log_unexpected(e)
            rec.outcome, rec.error = Outcome.STREAM_ERROR, f"unreadable reply: {_exception_text(e)}"
        return rec

    def _exchange(  # noqa: C901 (per-chunk hot path; split with the ingest benchmarks in issue 25)
        self,
        data: bytes,
        rec: RequestRecord,
        state: StreamState,
        abort: gevent.Timeout | None = None,
        total: _RequestTimer | None = None,
    ) -> None:
        """One request on one connection, never sent twice: the pool drops a kept-alive connection
        the server closed while it sat idle before a byte is written (`_socket_alive`); once the
        request is written, the server may have read it, so a close before the reply is a failure."""
        pool = self.pool
        try:
            sock = pool.get_socket()
        except OSError as e:
            raise _Ended(Outcome.CONNECT_ERROR, f"connect: {e}") from None
        opened = _OPENED.pop(sock, None)  # seconds to open it, when it was opened for this request
        rec.connect, rec.new_connection = (0.0, False) if opened is None else (opened, True)
        reused = sock in self._kept_alive
        resp = None
        # No per-read socket timeout (gevent arms a timer for every read that waits): the
        # process's watchdog closes the socket of a request that received nothing for too long.
        sock.settimeout(None)
        watch = _WATCHDOG.watch(sock, self.timeouts.no_progress)
        try:
            rec.t_sent = watch.last = time.perf_counter()
            rec.wall_sent = time.time()
            if total is not None:  # --request-timeout: the whole request from its send, as E2E is
                total.from_send()
            if abort is not None:  # --cancel after a delay: counted from the send (docs/load-shapes.md)
                abort.start()
            read = _reader(sock, rec.t_sent, watch)
            sock.sendall(data)
            rec.t_written = time.perf_counter()
            resp = _Response(sock, block_size=READ_SIZE, method="POST")
            rec.t_headers = _read_head(resp, read, rec, self.limits.head_bytes)
            rec.status = status = resp.status_code
            if self.netloc not in _SERVER_SEEN:
                _note_server(self.netloc, resp.get("server"))
            encoding = _content_encoding(resp)
            if status < 200 or status >= 300:
                if encoding:
                    text = f"({encoding}-encoded body)"
                else:
                    text = error_text(_read_body(resp, read, ERROR_BODY_LIMIT, self.limits.head_bytes))
                rec.t_end = time.perf_counter()
                raise _Ended(Outcome.HTTP_ERROR, f"HTTP {status}: {text}")
            if encoding:
                rec.t_end = time.perf_counter()
                raise _Ended(
                    Outcome.STREAM_ERROR,
                    f"the reply is {encoding}-encoded (Content-Encoding: {encoding}) though the request "
                    "asked for identity; llm-locust reads streams uncompressed",
                )
            self._read_stream(resp, read, rec, state)
        except _Ended:
            raise
        except (OSError, ValueError, HTTPParseError, HTTPConnectionClosed) if watch.fired else ():  # noqa: B030 (these mean the watchdog's close only once it fired)
            raise _Ended(Outcome.TIMEOUT, f"no data for {self.timeouts.no_progress:g}s") from None
        except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError) as e:
            if rec.t_headers is None:  # not sent again: the server may have read it
                if reused:
                    _stop_reusing(self.netloc)
                    raise _Ended(
                        Outcome.CONNECT_ERROR,
                        "the server closed a kept-alive connection without answering "
                        f"(not sent again: it may have read the request): {e}",
                    ) from None
                raise _Ended(Outcome.CONNECT_ERROR, f"connection closed before the reply: {e}") from None
            raise _Ended(Outcome.TRUNCATED, f"connection closed: {e}") from None
        except HTTPParseError as e:
            if rec.t_headers is None:
                raise _Ended(Outcome.HTTP_ERROR, f"invalid HTTP reply: {_parse_error_text(e)}") from None
            raise _Ended(Outcome.STREAM_ERROR, f"invalid HTTP body framing: {_parse_error_text(e)}") from None
        except (OSError, ValueError) as e:  # resets, refused, HTTP parse errors
            kind = Outcome.CONNECT_ERROR if rec.t_headers is None else Outcome.TRUNCATED
            raise _Ended(kind, f"{type(e).__name__}: {e}") from None
        finally:
            _WATCHDOG.unwatch(watch)
            # Exactly one of: back to the pool (body read to its end on a keep-alive
            # connection), or closed (anything else, including a kill or the total timeout).
            if resp is not None and resp.message_complete and not resp.should_close() and self.netloc not in NO_REUSE:
                self._kept_alive.add(sock)
                pool.return_socket(sock)
            else:
                pool.release_socket(sock)

    def _read_stream(self, resp: _Response, read, rec: RequestRecord, state: StreamState) -> None:  # noqa: C901 (per-chunk hot path; split with the ingest benchmarks in issue 25)
        adapter_feed = self.adapter.feed
        decoder = make_decoder(self.adapter, self.limits.event_bytes, state)
        decode = decoder.feed
        times = rec.chunk_times
        append = times.append
        # body bytes as llhttp hands them over (one fresh bytearray per piece), not appended to
        # the response's bytearray: each byte is copied once on its way to the decoder, not twice
        pieces = resp.pieces = []
        if resp._body_buffer:  # what came in the same read as the headers
            pieces.append(bytes(resp._body_buffer))
            del resp._body_buffer[:]
        head = b""  # first bytes of the body, for the error text when nothing decodes
        payloads = 0
        now = rec.t_headers
        assert now is not None, "the head is read first (_exchange)"
        # bytes read since the last body byte (chunk sizes, extensions, trailers): bounded, so
        # that framing without data cannot go on for ever
        framing = 0
        framing_limit = self.limits.head_bytes
        # Token reads taken without parsing (protocols.token_reads): `synced` while llhttp is
        # known to wait at a chunk's start (a read taken past it must leave it there);
        # `matcher` (it counts a read's token events) once a token event told the stream's
        # shape, and `is_token_read` the same while the SSE decoder holds nothing (a read
        # taken past a decoder that holds an unfinished line or event would not join it, as
        # the general path does: an event split across chunks). A read it refuses is read the
        # general way, and its last token event, if any, gives the shape anew (a server's
        # `created` changes every second): `tries` such templates are left; one that took
        # reads (`hits`) earns its successor, so a stream whose events never repeat stops
        # trying after TEMPLATE_TRIES.
        synced = resp.at_chunk_start
        matcher: Callable[[bytes], int] | None = None
        is_token_read: Callable[[bytes], int] | None = None
        hits = 0
        template: Callable[[bytes, StreamState], tuple[bytes, bytes] | None] | None = getattr(
            self.adapter, "token_template", None
        )
        sse = decoder if type(decoder) is SSEDecoder else None
        tries = (
            TEMPLATE_TRIES
            if (
                template is not None
                and TOKEN_READS
                and not state.keep_text
                and sse is not None
                and sse.read_events is None
            )
            else 0
        )
        via_pump = getattr(read, "via_pump", None) if PUMP_READS else None
        stop_at = getattr(state, "stop_at", 0)  # --cancel after N tokens: read the general way, counted
        if stop_at:
            tries = 0
        data: bytes | None
        chunk: bytes | None
        try:
            ended = closed = False  # closed: a close-delimited body ended with the connection
            while not ended:
                if pieces:
                    data = bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
                    pieces.clear()
                    if not head:
                        head = data[:300]
                    events = decode(data)
                    if matcher is not None:  # token reads only from an event's start
                        is_token_read = matcher if sse is not None and sse.idle() else None
                elif resp.broken is not None:
                    rec.t_end = now
                    raise _Ended(Outcome.STREAM_ERROR, resp.broken)
                elif closed or resp.message_complete:
                    ended = True
                    events = decoder.close()  # an event the body's end completed
                else:
                    data = chunk = None  # not held while this stream waits (up to BULK_READ_SIZE each)
                    if is_token_read is None:
                        chunk, now = read()
                    else:
                        if via_pump is not None:  # token reads taken by the pump; this one is not
                            chunk, now, n = via_pump(is_token_read, times)
                            if n:
                                payloads += n
                                hits += n
                                framing = 0
                        else:
                            chunk, now = read()
                            n = is_token_read(chunk)
                            if n:
                                payloads += n  # token events, as the general path would have read them
                                hits += n
                                if n == 1:
                                    append(now)
                                else:
                                    times += [now] * n
                                framing = 0
                                continue
                        if hits:  # refused after the template took reads: its successor may be tried
                            tries, hits = min(tries + 1, TEMPLATE_TRIES), 0
                    if not chunk:
                        if _close_delimited(resp):
                            closed = True
                            continue
                        rec.t_end = now
                        raise _Ended(Outcome.TRUNCATED, "connection closed before the end of the body")
                    try:
                        resp.feed(chunk)
                    except HTTPParseError as e:  # decode the body bytes before the fault first
                        resp.broken = f"invalid HTTP body framing: {_parse_error_text(e)}"
                        continue
                    if synced and not whole_chunks(chunk):
                        synced = False
                        matcher = is_token_read = None
                        tries = 0
                    if pieces:
                        framing = 0
                    else:
                        framing += len(chunk)
                        if framing > framing_limit:
                            rec.t_end = now
                            raise _Ended(
                                Outcome.STREAM_ERROR,
                                f"invalid HTTP body framing: over {framing_limit} bytes without body data",
                            )
                    continue
                if events and type(events[0]) is int:  # text events the adapter read in place
                    n = events[0]
                    payloads += 1
                    if n:
                        times += [now] * n
                        if rec.t_first is None:
                            rec.t_first = now
                        if rec.t_first_content is None:
                            rec.t_first_content = now
                    events = events[1:]
                for payload in events:
                    payloads += 1
                    kind = adapter_feed(payload, state)
                    if kind:
                        append(now)
                        if rec.t_first is None:
                            rec.t_first = now
                        if kind != REASONING and rec.t_first_content is None:
                            rec.t_first_content = now  # text or a tool call: what the user waits for
                        if kind == TOOL_CALL and rec.t_first_tool is None:
                            rec.t_first_tool = now
                if stop_at and len(times) >= stop_at and not state.done:
                    rec.t_end = now
                    raise _Ended(Outcome.CLIENT_CANCELLED, f"cancelled by the client after {len(times)} tokens")
                if (
                    tries
                    and events
                    and synced
                    and kind == CONTENT
                    and template is not None  # both hold while tries > 0
                    and sse is not None
                    and sse.idle()
                ):
                    tries -= 1
                    cut = template(events[-1], state)  # the read's last event: `kind` is its
                    if cut is not None:
                        matcher = is_token_read = token_read_matcher(*cut, self.limits.event_bytes)
        except ProtocolError as e:
            rec.t_end = now
            raise _Ended(Outcome.STREAM_ERROR, str(e)) from None
        except (_Ended, OSError, HTTPParseError):
            raise  # classified by the caller (timeouts, resets, HTTP framing)
        except Exception as e:  # noqa: BLE001 - a reply the adapter could not read is a stream error
            _log_unexpected(e)
            rec.t_end = now
            raise _Ended(Outcome.STREAM_ERROR, f"unreadable stream event: {_exception_text(e)}") from None
        rec.t_end = now
        if state.error is not None:
            raise _Ended(Outcome.STREAM_ERROR, state.error)
        if self.adapter.end_marker and not state.done:
            if not payloads:
                ctype = resp.get("content-type") or "none"
                text = printable(head)
                raise _Ended(Outcome.STREAM_ERROR, f"no stream events in reply (content-type {ctype}): {text[:200]}")
            raise _Ended(Outcome.TRUNCATED, "stream ended without its end marker")

    def _finish(self, rec: RequestRecord, state: StreamState) -> None:
        finish_record(rec, state)


class _RequestTimer:
    """--request-timeout (Timeouts.total): the whole request from its send, as E2E is. Started
    before the connection is taken, so that a connect or a wait for a pooled connection that never
    ends is cut too, then started again at the send: counted from before it, a slow connect ate
    into it (a 2 s timeout ended a request 1.996 s after its send). A gevent Timeout started again
    keeps its first deadline, so the send makes a new one."""

    __slots__ = ("seconds", "timeout")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.timeout = self._start()

    def _start(self) -> gevent.Timeout:
        t = gevent.Timeout(self.seconds, _Ended(Outcome.TIMEOUT, f"total timeout {self.seconds:g}s"))
        t.start()
        return t

    def from_send(self) -> None:
        self.timeout.close()
        self.timeout = self._start()

    def close(self) -> None:
        self.timeout.close()


def _abort_timer(after_s: float) -> gevent.Timeout | None:
    """--cancel after a delay: a timer, started at the send, that ends the request as the client's
    cancellation (the connection is closed, as for a stop or a timeout), or None for a request not
    aborted. Started before the connection was taken, it counted the connect (and a wait for a
    pooled connection) into the delay, and ended requests before their drawn time."""
    if not after_s:
        return None
    return gevent.Timeout(after_s, _Ended(Outcome.CLIENT_CANCELLED, f"cancelled by the client after {after_s:.3g}s"))


def finish_record(rec: RequestRecord, state: StreamState) -> None:
    """A stream's record completed from what the stream said: its counts (resolve_tokens), finish
    reason, server facts, and the text when it was kept. Every stream client ends a request here
    (the HTTP one, both gRPC ones)."""
    rec.n_out, rec.n_out_source, rec.chunk_tokens = resolve_tokens(state, len(rec.chunk_times))
    rec.finish_reason = state.finish_reason
    if state.usage_in is not None:
        rec.n_in, rec.n_in_source = state.usage_in, SOURCE_USAGE
    if state.usage_cached is not None:
        rec.n_cached = state.usage_cached
    if state.extra:
        rec.extra = state.extra
    if state.keep_text:
        rec.text = "".join(state.text)


def _reader(sock, t_sent: float, watch: _Watch):  # noqa: C901 (per-chunk hot path; split with the ingest benchmarks in issue 25)
    """A function returning (bytes read, arrival time as perf_counter seconds) per call.

    With kernel timestamps (plain TCP on Linux) the arrival time is when the data reached the
    socket, kept within [t_sent, now]; otherwise (TLS, other systems) the time the read returned.

    A gevent socket read that finds data waiting returns without yielding to the hub, so a
    server that sends faster than we parse would starve every other greenlet (and the timers
    that end requests). Each read therefore yields when the reads since the last wait in the
    hub took more than YIELD_AFTER seconds.
    """
    perf_counter = time.perf_counter
    sleep = gevent.sleep
    busy_from = t_sent  # when this request's reads last waited in the hub (or yielded)
    raw = getattr(sock, "_sock", None)
    if (
        raw is not None
        and hasattr(sock, "recvmsg")
        and hasattr(raw, "recvmsg")
        and not isinstance(sock, (ssl.SSLSocket, gevent.ssl.SSLSocket))
        and raw.gettimeout() == 0.0  # non-blocking: a read with nothing there cannot block the process
    ):
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            raw = None
    else:
        raw = None
    if raw is None:
        recv = sock.recv

        size = READ_SIZE
        full_at = 0.0  # when the last read returned, if it filled its buffer

        def read_plain() -> tuple[bytes, float]:
            nonlocal busy_from, size, full_at
            t0 = perf_counter()
            if full_at:
                size = _next_read_size(size, t0 - full_at)
            try:
                data = recv(size)
            except ValueError:  # a TLS socket the watchdog closed between reads says so this way
                raise OSError(errno.EBADF, "read on a closed socket") from None
            watch.last = now = perf_counter()
            if len(data) >= size:
                full_at = now
            elif full_at:
                full_at, size = 0.0, READ_SIZE
            if now - t0 > _WAITED:
                busy_from = now  # the read waited: the hub ran
            elif now - busy_from > YIELD_AFTER:
                sleep(_YIELD_SLEEP)
                busy_from = perf_counter()
            return data, now

        return read_plain

    raw_recvmsg = raw.recvmsg  # never waits: raises BlockingIOError when nothing is there
    recvmsg = sock.recvmsg  # gevent's: waits in the hub until data comes
    # What gevent's recvmsg does when a read finds nothing: wait in the hub for the socket's
    # read event (under the socket's own timeout, None here), then read again. Done here, so
    # that a read that found nothing costs one failed recvmsg, not two (gevent's would try
    # again first) and one exception, not two: at a paced server's one token per read, nearly
    # every read waits.
    wait = sock._wait
    off_ns = clock_offset_ns()

    # A read that had to wait (the hub ran for over _WAITED) makes the next one wait first: at
    # a paced server's one token per read, trying first would fail (EAGAIN, an exception)
    # nearly every time. A read that finds its data at once goes back to trying first.
    waited = False
    size = READ_SIZE
    full_at = 0.0  # when the last read returned, if it filled its buffer

    def read_stamped() -> tuple[bytes, float]:  # noqa: C901 (per-chunk hot path; split with the ingest benchmarks in issue 25)
        nonlocal busy_from, waited, size, full_at
        if full_at:
            size = _next_read_size(size, perf_counter() - full_at)
        if not waited:
            try:
                data, anc, _flags, _addr = raw_recvmsg(size, CMSG_SPACE)
            except BlockingIOError:
                data = None
            else:
                watch.last = now = perf_counter()
                if now - busy_from > YIELD_AFTER:
                    sleep(_YIELD_SLEEP)
                    busy_from = perf_counter()
        else:
            data = None
        if data is None:
            t0 = perf_counter()
            while True:
                event = sock._read_event
                if event is None:  # closed meanwhile (the watchdog): gevent's read raises EBADF
                    data, anc, _flags, _addr = recvmsg(size, CMSG_SPACE)
                    break
                wait(event)
                try:
                    data, anc, _flags, _addr = raw_recvmsg(size, CMSG_SPACE)
                    break
                except BlockingIOError:  # woken with nothing to read: wait again, as gevent does
                    pass
            watch.last = now = busy_from = perf_counter()
            waited = now - t0 > _WAITED
        if len(data) >= size:
            full_at = now
        elif full_at:
            full_at, size = 0.0, READ_SIZE
        return data, arrival(anc, now, t_sent, off_ns)

    def via_pump(count_token_events, times: list[float]) -> tuple[bytes, float, int]:
        """Reads taken by the process's pump while they are token reads (transport/pump.py)."""
        return PUMP.read(raw, count_token_events, times, watch, t_sent, off_ns)

    vars(read_stamped)["via_pump"] = via_pump  # an attribute of the function: _read_stream looks for it
    return read_stamped


def _read_head(resp: _Response, read, rec: RequestRecord, limit: int) -> float:
    """Feed the parser until a final (non-1xx) response's headers are complete; return when
    the read that completed them arrived. The parser is incremental: each read's bytes are
    scanned once. A header block (interim responses included) over `limit` bytes is an error.

    A body whose framing is broken right after good headers (a bad chunk size) is a stream
    error of a request that got its headers, not an invalid reply: `resp.broken` says so."""
    fed = 0
    while True:
        data, t = read()
        if not data:
            if fed:
                raise HTTPParseError("connection closed before the end of the headers")
            raise HTTPConnectionClosed("connection closed.")
        fed += len(data)
        try:
            resp.feed(data)
        except HTTPParseError as e:
            if not resp.headers_complete or resp.get_code() < 200:
                raise
            status = resp.get_code()
            if not 200 <= status < 300:
                rec.t_headers = rec.t_end = t
                rec.status = status
                raise _Ended(
                    Outcome.HTTP_ERROR, f"HTTP {status}: invalid body framing ({_parse_error_text(e)})"
                ) from None
            # the stream reads the body bytes that came before the fault, then ends with it
            resp.broken = f"invalid HTTP body framing: {_parse_error_text(e)}"
            return t
        if resp.headers_complete and resp.get_code() >= 200:
            resp.at_chunk_start = _at_chunk_start(resp, data)
            return t
        if fed > limit:
            raise _Ended(Outcome.HTTP_ERROR, f"invalid HTTP reply: header block over {limit} bytes")


def _at_chunk_start(resp: _Response, data: bytes) -> bool:
    """After the head, whose last read was `data`: whether llhttp waits at a chunk's start (a
    chunked body, and what of it came in that read is whole chunks). When body bytes came with
    the head, the read must hold the whole head (a busy client reads the head and the first
    token together) for the body's bytes to be found: the first blank line ends it."""
    if resp.message_complete or resp.get("transfer-encoding") != "chunked" or resp.get("content-length") is not None:
        return False
    if not resp._body_buffer:
        return data.endswith(b"\r\n\r\n")
    end = data.find(b"\r\n\r\n") + 4
    head = data[:end]
    if end < 4 or not data.startswith(b"HTTP/1.") or head.count(b"\n") != head.count(b"\r\n"):
        return False  # part of the head came before, or a line ends in a bare LF
    return len(data) - end <= SCAN_LIMIT and whole_chunks(data[end:])  # a burst's first read: not scanned


def _read_body(resp: _Response, read, limit: int, framing_limit: int) -> bytes:
    """Up to `limit` bytes of the body (an error reply's), read like the stream: deadlines apply
    and other greenlets run. Stops quietly at the body's end, a close, or a reset."""
    buf = resp._body_buffer
    framing = 0
    try:
        while len(buf) < limit and not resp.message_complete:
            chunk, _t = read()
            if not chunk:
                break
            before = len(buf)
            resp.feed(chunk)
            if len(buf) > before:
                framing = 0
            else:
                framing += len(chunk)
                if framing > framing_limit:
                    break
    except (OSError, HTTPParseError):
        pass
    return bytes(buf[:limit])


def _parse_error_text(e: HTTPParseError) -> str:
    """llhttp's message without its error code: HTTPParseError('Invalid character in chunk size', 12)."""
    return str(e.args[0]) if e.args and isinstance(e.args[0], str) else str(e) or type(e).__name__


def _content_encoding(resp: HTTPSocketResponse) -> str | None:
    """The reply's content coding when it is not identity (we ask for identity), else None."""
    value = resp.get("content-encoding")
    if not value:
        return None
    if isinstance(value, list):
        value = ", ".join(value)
    value = value.strip()
    return None if value.lower() in ("", "identity") else printable(value.encode("latin-1", "replace"))[:40]


def _exception_text(e: BaseException) -> str:
    text = str(e)
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


_logged_unexpected: set[type] = set()


def _log_unexpected(e: BaseException) -> None:
    """A reply that raised something other than a classified error: log its traceback once per
    exception type (it is a gap in an adapter's checks), then only at debug level."""
    if type(e) not in _logged_unexpected:
        _logged_unexpected.add(type(e))
        log.warning("unexpected %s while reading a reply (counted as stream_error)", type(e).__name__, exc_info=e)
    else:
        log.debug("unexpected %s while reading a reply", type(e).__name__, exc_info=e)


class _Watch:
    __slots__ = ("sock", "limit", "last", "fired", "on_fire")

    def __init__(self, sock, limit: float) -> None:
        self.sock = sock
        self.limit = limit
        self.last = time.perf_counter()
        self.fired = False
        self.on_fire = None  # set while the stream waits in the pump (transport/pump.py): wakes it


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
            # checked every tenth of the shortest limit, at most every 100 ms: a timeout fires
            # within 10% (or 100 ms) of its value
            period = min(0.1, min(w.limit for w in self.active) / 10)
            gevent.sleep(max(period, 0.005))
            now = time.perf_counter()
            for w in [w for w in self.active if now - w.last > w.limit]:
                w.fired = True
                self.active.discard(w)
                w.sock.close()
                if w.on_fire is not None:
                    w.on_fire()


_WATCHDOG = _Watchdog()


# Hosts that closed a kept-alive connection after reading a request and before answering it (a
# real llama-server does, now and then, after a streamed reply). Such a request is a counted
# failure and is never sent again (the server may have acted on it); from then on this process
# opens a fresh connection for every request to that host, so it happens once, not 1 time in 15.
NO_REUSE: set[str] = set()


# Servers known to close kept-alive connections that way (llama.cpp's llama-server, which names
# itself in its Server header): never reused from their first reply on, so the race is not even
# met once. Hosts whose first reply has been looked at are in _SERVER_SEEN.
NO_REUSE_SERVERS = ("llama.cpp",)
_SERVER_SEEN: set[str] = set()


def _note_server(netloc: str, server) -> None:
    _SERVER_SEEN.add(netloc)
    if isinstance(server, list):
        server = server[0] if server else None
    if isinstance(server, str) and server.strip().lower() in NO_REUSE_SERVERS and netloc not in NO_REUSE:
        NO_REUSE.add(netloc)
        log.info(
            "%s is %s: each request to it opens its own connection (it may close a kept-alive one "
            "after reading a request, without answering)",
            netloc,
            server.strip(),
        )


def _stop_reusing(netloc: str) -> None:
    if netloc not in NO_REUSE:
        NO_REUSE.add(netloc)
        log.warning(
            "%s closed a kept-alive connection without answering a request (counted as a connect_error, "
            "not sent again); from now on each request to it opens its own connection",
            netloc,
        )


# Sockets a pool has just opened -> the seconds it took (name resolution, TCP connect, TLS
# handshake): set by the pool's timed _create_socket (_time_connects), taken by the request that
# gets the socket (StreamClient._exchange). A socket nobody takes is dropped with it.
_OPENED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _time_connects(pool) -> None:
    """Make `pool` time the connections it opens (once per pool): the request phases' connect
    (docs/metrics.md, "Request phases"). The pool's own wait for a free slot is not in it."""
    if getattr(pool, "_llm_locust_timed", False):
        return
    create = pool._create_socket
    perf_counter = time.perf_counter

    def timed_create_socket():
        t0 = perf_counter()
        sock = create()
        _OPENED[sock] = perf_counter() - t0
        return sock

    pool._create_socket = timed_create_socket
    pool._llm_locust_timed = True


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


def _header_text(resp: HTTPSocketResponse, name: str) -> str:
    """A header's value ("" when absent): a header sent more than once comes as a list, its values
    joined as one (RFC 9110 5.3), so that it reads like a string."""
    value = resp.get(name)
    if isinstance(value, list):
        return ", ".join(value)
    return value or ""


def _close_delimited(resp: HTTPSocketResponse) -> bool:
    """A body with neither Content-Length nor chunked encoding ends when the server closes."""
    te = _header_text(resp, "transfer-encoding").lower()
    return resp.content_length is None and "chunked" not in te


class _Response(HTTPSocketResponse):
    """geventhttpclient's response parser, minus its socket handling: the client decides
    whether a connection goes back to the pool or is closed (see StreamClient._exchange)."""

    broken: str | None = None  # the body's framing broke here (after the bytes in the buffer)
    at_chunk_start = False  # set by _read_head: the parser, at the head's end, waits for a chunk's size line
    pieces: list | None = None  # set by StreamClient._read_stream: body pieces go here, not in _body_buffer

    def _on_body(self, buf: bytearray) -> None:
        pieces = self.pieces
        if pieces is None:
            self._body_buffer += buf
        else:
            pieces.append(buf)

    def _read_headers(self, pre_buffered: bytes = b"") -> None:
        pass  # the client reads the head itself (_read_head): bounded, timed, yielding

    def release(self) -> None:
        self._sock = None

    def __del__(self) -> None:
        pass


class JSONAdapter(Protocol):
    """What JSONClient needs of a non-streaming request kind's adapter (protocols.embeddings)."""

    name: str
    framing: str
    end_marker: bool

    def request(self, spec: RequestSpec) -> tuple[str, bytes]: ...

    def parse(self, body: bytes, spec: RequestSpec, keep_text: bool = False) -> Reply: ...


class JSONClient(StreamClient):
    """Sends requests whose reply is one JSON document (embeddings, rerank, score: the adapters
    of protocols.embeddings) and times them: t_headers, then t_end when the whole body is in
    (E2E is the latency; no chunks, no TTFT). Connections, timeouts, limits and HTTP errors are
    the streaming path's (StreamClient._exchange); only the body is read differently: whole, up
    to limits.body_bytes, then parsed by the adapter. A reply the adapter cannot read (not JSON,
    the wrong shape, a wrong number of items, a wrong type) is a stream_error with its words.

    The record: n_in = the server's usage when it gives one, n_out = 0, extra["items"] = the
    embeddings returned or documents scored. What the reply held (scores; embeddings when asked
    with keep_text) waits in `replies[request_id]` for the caller (workload.scenario) to take."""

    MAX_KEPT = 64  # replies nobody took: the oldest are dropped past this many

    def __init__(
        self,
        http_client,
        base_url: str,
        adapter: JSONAdapter,
        timeouts: Timeouts | None = None,
        headers: dict[str, str] | None = None,
        keep_text: bool = False,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(
            http_client,
            base_url,
            # not a streaming Adapter (no feed): the base class takes its name, framing, end marker
            # and requests; the body is read by _read_stream below, with json_adapter's parse
            cast(Adapter, adapter),
            timeouts,
            {**(headers or {}), "Accept": "application/json"},
            keep_text,
            limits,
        )
        self.json_adapter = adapter
        self._specs: dict[str, RequestSpec] = {}
        self.replies: dict[str, object] = {}

    def send(
        self,
        spec: RequestSpec,
        request_id: str,
        t_sched: float | None = None,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        step: int = 0,
        keep_text: bool | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        self._specs[request_id] = spec
        try:
            return super().send(
                spec, request_id, t_sched, on_cancel, step=step, keep_text=keep_text, on_record=on_record
            )
        finally:
            self._specs.pop(request_id, None)

    def _read_stream(self, resp: _Response, read, rec: RequestRecord, state: StreamState) -> None:
        buf = resp._body_buffer
        limit = self.limits.body_bytes
        framing_limit = self.limits.head_bytes
        framing = 0
        now = rec.t_headers
        while not resp.message_complete:
            if resp.broken is not None:
                rec.t_end = now
                raise _Ended(Outcome.STREAM_ERROR, resp.broken)
            if len(buf) > limit:
                rec.t_end = now
                raise _Ended(Outcome.STREAM_ERROR, f"reply over {limit} bytes (the body limit)")
            chunk, now = read()
            if not chunk:
                if _close_delimited(resp):
                    break
                rec.t_end = now
                raise _Ended(Outcome.TRUNCATED, "connection closed before the end of the body")
            before = len(buf)
            try:
                resp.feed(chunk)
            except HTTPParseError as e:
                resp.broken = f"invalid HTTP body framing: {_parse_error_text(e)}"
                continue
            if len(buf) > before:
                framing = 0
            else:
                framing += len(chunk)
                if framing > framing_limit:
                    rec.t_end = now
                    raise _Ended(
                        Outcome.STREAM_ERROR, f"invalid HTTP body framing: over {framing_limit} bytes without body data"
                    )
        rec.t_end = now
        if resp.broken is not None:
            raise _Ended(Outcome.STREAM_ERROR, resp.broken)
        if len(buf) > limit:
            raise _Ended(Outcome.STREAM_ERROR, f"reply over {limit} bytes (the body limit)")
        body = bytes(buf)
        del buf[:]
        spec = self._specs[rec.request_id]  # send() keeps it while the request is in flight
        try:
            reply = self.json_adapter.parse(body, spec, keep_text=state.keep_text)
        except ProtocolError as e:
            ctype = _header_text(resp, "content-type") or "none"
            text = str(e) if "json" in ctype.lower() else f"{e} (content-type {ctype})"
            raise _Ended(Outcome.STREAM_ERROR, text) from None
        except Exception as e:  # noqa: BLE001 - a reply the adapter could not read is a stream error
            _log_unexpected(e)
            raise _Ended(Outcome.STREAM_ERROR, f"unreadable reply: {_exception_text(e)}") from None
        state.aux = reply
        state.usage_in = reply.usage_in
        state.done = True

    def _finish(self, rec: RequestRecord, state: StreamState) -> None:
        rec.n_out, rec.n_out_source = 0, SOURCE_USAGE  # no output tokens: exact, not an estimate
        reply = state.aux
        if reply is None:
            return
        rec.extra = {"items": reply.items}
        if state.usage_in is not None:
            rec.n_in, rec.n_in_source = state.usage_in, SOURCE_USAGE
        if rec.ok:
            replies = self.replies
            replies[rec.request_id] = reply
            while len(replies) > self.MAX_KEPT:
                del replies[next(iter(replies))]
