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

import logging
import socket
import time
import weakref
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import gevent
from gevent import GreenletExit
from geventhttpclient.connectionpool import SSLConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketResponse

from llm_locust.metrics.records import Outcome, RequestRecord, work_of
from llm_locust.protocols import error_text, printable
from llm_locust.protocols.base import Adapter, Limits, RequestSpec, StreamState, Timeouts
from llm_locust.protocols.token_reads import SCAN_LIMIT, whole_chunks
from llm_locust.transport.bodies import (
    BodyReader,
    Ended,
    JSONAdapter,
    JSONReader,
    SSEReader,
    TokenReader,
    exception_text,
    feed_counting,
    finish_record,
    log_unexpected,
    parse_error_text,
)
from llm_locust.transport.reads import READ_SIZE, WATCHDOG, socket_reader
from llm_locust.transport.turns import take_turn
from llm_locust.workload.cancel import CancelPlan

__all__ = ["JSONClient", "StreamClient", "Timeouts", "finish_record"]

log = logging.getLogger(__name__)

ERROR_BODY_LIMIT = 4096


class _CancelAt(StreamState):
    """The state of a stream the client aborts after `stop_at` token-bearing events (--cancel)."""

    __slots__ = ("stop_at",)

    def __init__(self, keep_text: bool, stop_at: int) -> None:
        super().__init__(keep_text)
        self.stop_at = stop_at


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
        *,
        body: BodyReader | None = None,
        token_reads: bool = True,
        pump: bool = True,
    ) -> None:
        """`body`: how replies' bodies are read (transport/bodies.py); by default a TokenReader
        (token events told without parsing; `pump`: whole token reads taken by the process's
        pump), or with token_reads=False an SSEReader (every byte the general way)."""
        self.pool = http_client._connection_pool
        if not isinstance(self.pool, SSLConnectionPool):
            self.pool._is_socket_alive = _socket_alive
        _time_connects(self.pool)
        self.adapter = adapter
        self.timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()  # sizes accepted from the server (header block, one event)
        self.keep_text = keep_text
        if body is None:
            body = TokenReader(adapter, self.limits, pump) if token_reads else SSEReader(adapter, self.limits)
        self.body = body
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
        *,
        t_sched: float | None = None,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        step: int = 0,
        keep_text: bool | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Send one request, read its stream to the end, and return what happened: the
        `Client.send` contract (transport/client.py).

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
        if after_s or after_tok:  # counted drawn: a request that ends first is not cancelled
            work_of(rec).cancel_drawn = True
        state = _CancelAt(keep, after_tok) if after_tok else StreamState(keep)
        timer = _RequestTimer(self.timeouts.total)
        abort = _abort_timer(after_s)  # started by _exchange at the send, not before the connect
        try:
            self._exchange(data, rec, state, spec, abort, timer)
        except Ended as e:
            rec.outcome, rec.error = e.outcome, e.text
        except Exception as e:  # noqa: BLE001 - the last line of defence: a reply we could not read
            log_unexpected(e)
            rec.outcome, rec.error = Outcome.STREAM_ERROR, f"unreadable reply: {exception_text(e)}"
        except GreenletExit:
            rec.outcome, rec.error = Outcome.CANCELLED, "test stopped while in flight"
            rec.t_end = time.perf_counter()
            self.body.finish(rec, state)
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
            self.body.finish(rec, state)
        except Exception as e:  # noqa: BLE001 - adapters validate what they store; never raise here
            log_unexpected(e)
            rec.outcome, rec.error = Outcome.STREAM_ERROR, f"unreadable reply: {exception_text(e)}"
        return rec

    def _exchange(
        self,
        data: bytes,
        rec: RequestRecord,
        state: StreamState,
        spec: RequestSpec,
        abort: gevent.Timeout | None = None,
        total: _RequestTimer | None = None,
    ) -> None:
        """One request on one connection, never sent twice: the pool drops a kept-alive connection
        the server closed while it sat idle before a byte is written (`_socket_alive`); once the
        request is written, the server may have read it, so a close before the reply is a failure."""
        take_turn(reads_first=False)  # the streams' reads first when the loop has been busy (transport/turns.py)
        pool = self.pool
        try:
            sock = pool.get_socket()
        except OSError as e:
            raise Ended(Outcome.CONNECT_ERROR, f"connect: {e}") from None
        opened = _OPENED.pop(sock, None)  # seconds to open it, when it was opened for this request
        rec.connect, rec.new_connection = (0.0, False) if opened is None else (opened, True)
        reused = sock in self._kept_alive
        resp = None
        # No per-read socket timeout (gevent arms a timer for every read that waits): the
        # process's watchdog closes the socket of a request that received nothing for too long.
        sock.settimeout(None)
        watch = WATCHDOG.watch(sock, self.timeouts.no_progress)
        try:
            rec.t_sent = watch.last = time.perf_counter()
            rec.wall_sent = time.time()
            if total is not None:  # --request-timeout: the whole request from its send, as E2E is
                total.from_send()
            if abort is not None:  # --cancel after a delay: counted from the send (docs/load-shapes.md)
                abort.start()
            read = socket_reader(sock, rec.t_sent, watch)
            sock.sendall(data)
            rec.t_written = time.perf_counter()
            resp = _Response(sock, block_size=READ_SIZE, method="POST")
            self._head(resp, read, rec)
            self.body.read(resp, read, rec, state, spec)
            if watch.waits:
                rec.first_wait = watch.wait_at(rec.t_first)
        except Ended:
            raise
        except (OSError, ValueError, HTTPParseError, HTTPConnectionClosed) as e:
            raise self._ended(e, rec, reused, watch.fired) from None
        finally:
            WATCHDOG.unwatch(watch)
            # Exactly one of: back to the pool (body read to its end on a keep-alive
            # connection), or closed (anything else, including a kill or the total timeout).
            if resp is not None and resp.message_complete and not resp.should_close() and self.netloc not in NO_REUSE:
                self._kept_alive.add(sock)
                pool.return_socket(sock)
            else:
                pool.release_socket(sock)

    def _head(self, resp: _Response, read, rec: RequestRecord) -> None:
        """The reply's head read (rec.t_headers, rec.status); a reply that is not a 2xx stream we
        can read (an HTTP error, with its body's message; a compressed body) ends here."""
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
            raise Ended(Outcome.HTTP_ERROR, f"HTTP {status}: {text}")
        if encoding:
            rec.t_end = time.perf_counter()
            raise Ended(
                Outcome.STREAM_ERROR,
                f"the reply is {encoding}-encoded (Content-Encoding: {encoding}) though the request "
                "asked for identity; llm-locust reads streams uncompressed",
            )

    def _ended(self, e: Exception, rec: RequestRecord, reused: bool, fired: bool) -> Ended:
        """What a connection's error means: the watchdog's close (these errors mean it only once
        it fired), a close before the reply (never sent again), a cut stream, a broken reply."""
        if fired:
            return Ended(Outcome.TIMEOUT, f"no data for {self.timeouts.no_progress:g}s")
        if isinstance(e, (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError)):
            if rec.t_headers is not None:
                return Ended(Outcome.TRUNCATED, f"connection closed: {e}")
            if reused:  # not sent again: the server may have read it
                _stop_reusing(self.netloc)
                return Ended(
                    Outcome.CONNECT_ERROR,
                    "the server closed a kept-alive connection without answering "
                    f"(not sent again: it may have read the request): {e}",
                )
            return Ended(Outcome.CONNECT_ERROR, f"connection closed before the reply: {e}")
        if isinstance(e, HTTPParseError):
            if rec.t_headers is None:
                return Ended(Outcome.HTTP_ERROR, f"invalid HTTP reply: {parse_error_text(e)}")
            return Ended(Outcome.STREAM_ERROR, f"invalid HTTP body framing: {parse_error_text(e)}")
        kind = Outcome.CONNECT_ERROR if rec.t_headers is None else Outcome.TRUNCATED  # resets, refused
        return Ended(kind, f"{type(e).__name__}: {e}")


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
        t = gevent.Timeout(self.seconds, Ended(Outcome.TIMEOUT, f"total timeout {self.seconds:g}s"))
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
    return gevent.Timeout(after_s, Ended(Outcome.CLIENT_CANCELLED, f"cancelled by the client after {after_s:.3g}s"))


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
                raise Ended(
                    Outcome.HTTP_ERROR, f"HTTP {status}: invalid body framing ({parse_error_text(e)})"
                ) from None
            # the stream reads the body bytes that came before the fault, then ends with it
            resp.broken = f"invalid HTTP body framing: {parse_error_text(e)}"
            return t
        if resp.headers_complete and resp.get_code() >= 200:
            resp.at_chunk_start = _at_chunk_start(resp, data)
            return t
        if fed > limit:
            raise Ended(Outcome.HTTP_ERROR, f"invalid HTTP reply: header block over {limit} bytes")


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
    and other greenlets run. Stops quietly at the body's end, a close, a reset or broken framing."""
    buf = resp._body_buffer
    framing = 0
    try:
        while len(buf) < limit and not resp.message_complete and resp.broken is None:
            chunk, _t = read()
            if not chunk:
                break
            framing = feed_counting(resp, chunk, framing)
            if framing > framing_limit:
                break
    except OSError:
        pass
    return bytes(buf[:limit])


def _content_encoding(resp: HTTPSocketResponse) -> str | None:
    """The reply's content coding when it is not identity (we ask for identity), else None."""
    value = resp.get("content-encoding")
    if not value:
        return None
    if isinstance(value, list):
        value = ", ".join(value)
    value = value.strip()
    return None if value.lower() in ("", "identity") else printable(value.encode("latin-1", "replace"))[:40]


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


class _Response(HTTPSocketResponse):
    """geventhttpclient's response parser, minus its socket handling: the client decides
    whether a connection goes back to the pool or is closed (see StreamClient._exchange)."""

    broken: str | None = None  # the body's framing broke here (after the bytes in the buffer)
    at_chunk_start = False  # set by _read_head: the parser, at the head's end, waits for a chunk's size line
    pieces: list | None = None  # set by the body reader (transport/bodies.py): body pieces go here, not in _body_buffer

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


def JSONClient(  # noqa: N802 (a client, made as the stream client with a JSON body reader)
    http_client,
    base_url: str,
    adapter: JSONAdapter,
    timeouts: Timeouts | None = None,
    headers: dict[str, str] | None = None,
    keep_text: bool = False,
    limits: Limits | None = None,
) -> StreamClient:
    """A client for requests whose reply is one JSON document (embeddings, rerank, score): the
    stream client's exchange (connections, timeouts, limits, HTTP errors) with a JSONReader for the
    body. What each reply held waits in `client.body.replies[request_id]` (JSONReader)."""
    limits = limits or Limits()
    return StreamClient(
        http_client,
        base_url,
        # not a streaming Adapter (no feed): the client takes its name, framing, end marker and
        # requests; the body is read by the JSONReader, with the adapter's parse
        cast(Adapter, adapter),
        timeouts,
        {**(headers or {}), "Accept": "application/json"},
        keep_text,
        limits,
        body=JSONReader(adapter, limits),
    )
