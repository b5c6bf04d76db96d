"""vLLM's gRPC `Generate` stream over our own HTTP/2 reader: the contract and the outcomes of
transport.grpc_io.GrpcStreamClient, at a fraction of its client cost.

Why: grpcio hands each message to Python through its own layers and, under gevent, a thread
switch; a worker read ~3,600 tokens per CPU-second that way (benchmarks/bench_grpc_ingest.py),
against ~160,000 for an HTTP stream. Here a read takes whatever the socket holds (up to
READ_SIZE) and hands it to the stream's frame reader (protocols/h2_frames.py: the frames on
bytes alone, walked in place with `struct.unpack_from`, no I/O); `_read` is the socket loop
around it (the reads, their deadlines and times, the answers the reader asks to write), and each
gRPC message goes straight to protocols.grpc_vllm.feed_response. Header blocks
(response headers and trailers, twice a request) are decoded with the `hpack` library (a block
of indexed fields only, what a server sends once its table holds its headers, is remembered);
the request's own block is encoded once per client, never indexed.

What it speaks (RFC 9113; the gRPC over HTTP/2 protocol): a cleartext connection (h2c, prior
knowledge) or TLS with ALPN h2; our SETTINGS disable push and open the stream and connection
windows to 2^31-1 (one WINDOW_UPDATE per GiB read); the peer's SETTINGS, PINGs and
WINDOW_UPDATEs are answered and obeyed (a request body waits for send window); GOAWAY and
RST_STREAM end the request as grpcio's client would. One request at a time per connection;
connections are kept for the next request of the same client (a pool of up to `max_idle`, as
the HTTP client keeps its keep-alive connections: an open-loop replay's concurrent requests each
have their own), closed after any error or cancellation.

Timing: as GrpcStreamClient (t_sent when the request's frames are written; each message stamped
when its read returned: messages that came in one read share the stamp, as SSE events do over
HTTP; t_headers when the response HEADERS arrived). Request phases: connect (and whether the
connection was new) and the rest after t_sent; no send phase, t_sent being after the write.
Outcomes: the same table (grpc_client's `status_outcome`), the status from the trailers, an HTTP
status mapped as gRPC does (http-grpc-status-mapping), a RST_STREAM's code, a closed connection
as UNAVAILABLE.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time
from collections.abc import Callable
from urllib.parse import unquote

from gevent import GreenletExit

from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.protocols import grpc_vllm
from llm_locust.protocols.base import CONTENT, Limits, ProtocolError, RequestSpec, StreamState, Timeouts
from llm_locust.protocols.h2_frames import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME,
    GOAWAY,
    HEADER_BLOCK_LIMIT,
    HEADERS,
    MAX_WINDOW,
    PING,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    EndedWithoutTrailers,
    GoAway,
    H2FrameError,
    H2FrameReader,
    Headers,
    Reset,
    Send,
    Settings,
    Window,
    control,
    frame,
    goaway_text,
)
from llm_locust.transport.grpc_io import _Ended, check_end, check_served, grpc_target, status_outcome
from llm_locust.transport.http import finish_record

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
READ_SIZE = 65536
_INDEXED_BYTES = bytes(range(0x80, 0xFF))  # one-byte indexed fields (index 0-126): all a pure-index block holds
_HTTP_CODES = {
    400: "INTERNAL",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "UNIMPLEMENTED",
    429: "UNAVAILABLE",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "UNAVAILABLE",
}
_RST_CODES = {0x7: "UNAVAILABLE", 0x8: "CANCELLED", 0xB: "RESOURCE_EXHAUSTED", 0xC: "PERMISSION_DENIED"}
_STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


def _readable(sock) -> bool:
    """Whether an idle connection has something to read (a close, a GOAWAY, a PING), without
    waiting. poll, not select: a process with many connections has descriptors past select's
    1024 (gevent patches both)."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _wait_time(deadline: float | None, no_progress: float | None) -> float | None:
    """How long the next read may wait: the no-progress limit, less when the total deadline is
    nearer (passed: DEADLINE_EXCEEDED, as grpcio's client ends a call past its deadline)."""
    if deadline is None:
        return no_progress
    left = deadline - time.perf_counter()
    if left <= 0:
        raise _Status("DEADLINE_EXCEEDED", "Deadline Exceeded")
    return left if no_progress is None else min(no_progress, left)


class _Status(Exception):
    """The call ended with a gRPC status other than OK (name, details)."""

    def __init__(self, name: str, details: str) -> None:
        super().__init__(f"{name}: {details}")
        self.name = name
        self.details = details


class _Conn:
    """One HTTP/2 connection: its socket, header codecs, windows and the bytes read but not parsed."""

    def __init__(self, sock: socket.socket, authority: str, scheme: str) -> None:
        import hpack

        self.sock = sock
        self.authority = authority
        self.scheme = scheme
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = HEADER_BLOCK_LIMIT
        # header blocks made only of indexed fields change nothing in the decoder's table: the
        # same bytes decode to the same headers until a block that may change it (then cleared)
        self.decoded: dict[bytes, dict[str, str]] = {}
        self.next_sid = 1
        self.send_window = 65535  # the connection's, for our request bodies
        self.stream_window_init = 65535  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self.peer_max_frame = 16384
        self.unacked = 0  # DATA bytes read since our last connection WINDOW_UPDATE
        self.rest = b""  # a read's tail: a frame not yet whole
        self.last_sid = None  # the GOAWAY's last stream id, once one came
        self.goaway = ""
        self.broken = False
        self.opened: float | None = None  # seconds _open took (TCP, TLS, preface); None once used
        sock.sendall(
            PREFACE
            + frame(SETTINGS, 0, 0, struct.pack(">HLHL", 0x2, 0, 0x4, MAX_WINDOW))  # no push; big windows
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", MAX_WINDOW - 65535))
        )

    def close(self) -> None:
        self.broken = True
        try:
            self.sock.close()
        except OSError:
            pass


class H2GrpcClient:
    """Sends streaming Generate requests to one vLLM gRPC server over HTTP/2 and times them."""

    api = grpc_vllm.NAME

    def __init__(
        self,
        target: str,
        timeouts: Timeouts | None = None,
        metadata: dict[str, str] | None = None,
        keep_text: bool = False,
        limits: Limits | None = None,
        max_idle: int = 256,
    ) -> None:
        self.timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()
        self.keep_text = keep_text  # the API returns token ids only: records get no text
        self.target, self.tls = grpc_target(target)
        host, _, port = self.target.rpartition(":")
        self.address = (host.strip("[]"), int(port))
        # header names are lower case in HTTP/2; an Authorization header becomes gRPC metadata
        self.metadata = [(k.lower(), v) for k, v in (metadata or {}).items()]
        self._idle: list[_Conn] = []
        self._max_idle = max_idle
        self._served: dict[str, str] | None = None
        self._blocks: dict[str, bytes] = {}  # the request header block per path (see _headers)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    # ------------------------------------------------------------------ connections
    def _open(self) -> _Conn:
        try:
            t0 = time.perf_counter()
            sock = socket.create_connection(self.address, timeout=self.timeouts.connect)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                ctx = ssl.create_default_context()
                ctx.set_alpn_protocols(["h2"])
                sock = ctx.wrap_socket(sock, server_hostname=self.address[0])
            conn = _Conn(sock, self.target, "https" if self.tls else "http")
            conn.opened = time.perf_counter() - t0
            return conn
        except (OSError, ssl.SSLError) as e:
            raise _Ended(Outcome.CONNECT_ERROR, f"connect: no gRPC connection to {self.target}: {e}"[:1000]) from None

    def _take(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.broken and conn.last_sid is None and conn.next_sid < 2**31 - 2 and self._still_open(conn):
                return conn
            conn.close()  # a fresh connection, rather than a stale one failing the next request
        return self._open()

    def _still_open(self, conn: _Conn) -> bool:
        """Read what came while the connection was idle: SETTINGS, PINGs and WINDOW_UPDATEs are
        answered and it is kept; a close, a GOAWAY or anything else ends it."""
        if not _readable(conn.sock):
            return True
        try:
            conn.sock.settimeout(0.5)  # it is readable: this returns at once
            data = conn.rest + self._recv(conn)
            pos = 0
            while len(data) - pos >= 9:
                hi, lo, ftype, flags, fsid = FRAME.unpack_from(data, pos)
                length = hi << 8 | lo
                if len(data) - pos - 9 < length or ftype not in (SETTINGS, PING, WINDOW_UPDATE, GOAWAY):
                    return False
                payload = data[pos + 9 : pos + 9 + length]
                pos += 9 + length
                if ftype == WINDOW_UPDATE:
                    if fsid == 0 and length == 4:
                        conn.send_window += int.from_bytes(payload, "big") & 0x7FFFFFFF
                    continue
                self._control(conn, ftype, flags, payload)
            conn.rest = data[pos:]
            return conn.last_sid is None and not conn.rest and not _readable(conn.sock)
        except (OSError, _Status, ProtocolError):
            return False

    def _give(self, conn: _Conn) -> None:
        if conn.broken or conn.last_sid is not None or len(self._idle) >= self._max_idle:
            conn.close()
        else:
            self._idle.append(conn)

    def warm_up(self, model: str | None = None) -> None:
        """Open a connection (and ask for the served model when `model` is named) ahead of the
        first send; failures are left for the sends to record."""
        try:
            if model:
                self.model_info()
            else:
                conn = self._take()
                conn.opened = None  # opened ahead of any request: no request's connect phase
                self._give(conn)
        except (_Ended, _Status, ProtocolError, OSError):
            pass

    # ------------------------------------------------------------------ one call
    def _headers(self, path: str) -> bytes:
        """The request's header block, the same for every request of this client to `path`:
        encoded once, every field a literal that is never indexed (or a whole static-table
        entry), so that no connection's HPACK table depends on it (and a key in it is never
        kept in a table along the way)."""
        block = self._blocks.get(path)
        if block is None:
            import hpack

            headers = [
                (":method", "POST"),
                (":scheme", "https" if self.tls else "http"),
                (":path", path),
                (":authority", self.target),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("user-agent", "llm-locust"),
            ]
            if self.timeouts.total:
                headers.append(("grpc-timeout", f"{max(1, int(self.timeouts.total * 1000))}m"))
            block = self._blocks[path] = hpack.Encoder().encode(
                [hpack.NeverIndexedHeaderTuple(k, v) for k, v in headers + self.metadata]
            )
        return block

    def _start(self, conn: _Conn, path: str, body: bytes, deadline: float | None, no_progress: float | None) -> int:
        """Write the request's frames; a body past the send window waits for the peer's window
        updates, within the request's timeouts (`_wait_window`)."""
        sid = conn.next_sid
        conn.next_sid += 2
        block = self._headers(path)
        step = conn.peer_max_frame
        out = [frame(HEADERS, END_HEADERS if len(block) <= step else 0, sid, block[:step])]
        for i in range(step, len(block), step):
            out.append(frame(CONTINUATION, END_HEADERS if i + step >= len(block) else 0, sid, block[i : i + step]))
        message = b"\x00" + len(body).to_bytes(4, "big") + body
        window = conn.stream_window_init
        pos = 0
        while True:
            n = min(len(message) - pos, conn.peer_max_frame, window, conn.send_window)
            if n <= 0 and pos < len(message):
                if out:
                    conn.sock.sendall(b"".join(out))
                    out = []
                window += self._wait_window(conn, sid, deadline, no_progress)
                continue
            last = pos + n >= len(message)
            out.append(frame(DATA, END_STREAM if last else 0, sid, message[pos : pos + n]))
            pos += n
            window -= n
            conn.send_window -= n
            if last or len(out) > 16:
                conn.sock.sendall(b"".join(out))  # the usual request: its headers and body in one write
                out = []
            if last:
                return sid

    def _wait_window(self, conn: _Conn, sid: int, deadline: float | None, no_progress: float | None) -> int:
        """Read frames until the peer opens send window (stream or connection); returns the
        stream's increase. Anything else for the stream this early ends the call. Each read waits
        at most the no-progress limit and never past the total deadline: a peer that keeps the
        window shut, or sends only PINGs, ends the call in its timeouts."""
        conn.sock.settimeout(_wait_time(deadline, no_progress))
        try:
            data = conn.rest + self._recv(conn)
        except TimeoutError:
            _wait_time(deadline, no_progress)  # DEADLINE_EXCEEDED when the total deadline ended the wait
            raise
        conn.rest = b""
        grown, pos = 0, 0
        while len(data) - pos >= 9:
            hi, lo, ftype, flags, fsid = FRAME.unpack_from(data, pos)
            length, fsid = hi << 8 | lo, fsid & 0x7FFFFFFF
            if len(data) - pos - 9 < length:
                break
            payload = data[pos + 9 : pos + 9 + length]
            pos += 9 + length
            if ftype == WINDOW_UPDATE and length == 4:
                inc = struct.unpack(">L", payload)[0] & 0x7FFFFFFF
                if fsid == 0:
                    conn.send_window += inc
                elif fsid == sid:
                    grown += inc
            elif ftype in (SETTINGS, PING, GOAWAY) and fsid == 0:
                before = conn.stream_window_init
                self._control(conn, ftype, flags, payload)
                grown += conn.stream_window_init - before  # a new initial window moves the open stream's too
            elif fsid == sid:
                conn.rest = data[pos - 9 - length :]
                raise _Status("UNAVAILABLE", "the server answered before the request was sent whole")
        conn.rest = data[pos:]
        return grown

    def _control(self, conn: _Conn, ftype: int, flags: int, payload: bytes) -> None:
        """A SETTINGS, PING or GOAWAY frame read outside a reply: obeyed and answered."""
        events: list = []
        control(ftype, flags, payload, events)
        for ev in events:
            self._connection_event(conn, ev)

    @staticmethod
    def _connection_event(conn: _Conn, ev) -> None:
        """What the peer's SETTINGS, WINDOW_UPDATE or GOAWAY changes on the connection; an
        answer (Send) written."""
        kind = ev.__class__
        if kind is Send:
            conn.sock.sendall(ev.data)
        elif kind is Settings:
            if ev.initial_window is not None:
                conn.stream_window_init = ev.initial_window
            if ev.max_frame is not None:
                conn.peer_max_frame = ev.max_frame
        elif kind is Window:
            conn.send_window += ev.increment
        elif kind is GoAway and ev.last_sid is not None:
            conn.last_sid = ev.last_sid
            conn.goaway = goaway_text(ev)

    def _recv(self, conn: _Conn, size: int = READ_SIZE) -> bytes:
        data = conn.sock.recv(size)
        if not data:
            conn.broken = True
            raise _Status("UNAVAILABLE", conn.goaway or "the server closed the connection")
        return data

    def _call(
        self, path: str, body: bytes, on_message: Callable[[bytes, float], None], rec: RequestRecord | None = None
    ) -> None:
        """One call: send, then read until its trailers; each message to `on_message(bytes, t)`.
        Raises _Status for a non-OK end, ProtocolError for bytes HTTP/2 or gRPC forbid, socket
        errors as they come (the caller classifies them)."""
        timeouts = self.timeouts
        total = timeouts.total
        deadline = time.perf_counter() + total if total else None
        no_progress = timeouts.no_progress
        conn = self._take()
        if rec is not None:  # the request phases' connect: seconds to open it, 0 when kept alive
            rec.connect, rec.new_connection = (0.0, False) if conn.opened is None else (conn.opened, True)
        conn.opened = None
        ok = False
        try:
            # the request's writes wait no longer than its reads (a kept connection holds the
            # timeout its last read was given, a new one the connect timeout)
            conn.sock.settimeout(_wait_time(deadline, no_progress))
            sid = self._start(conn, path, body, deadline, no_progress)
            if rec is not None:
                rec.t_sent = time.perf_counter()
                rec.wall_sent = time.time()
            self._read(conn, sid, on_message, deadline, no_progress, rec)
            ok = True
        finally:
            if ok:
                self._give(conn)
            else:
                try:
                    if not conn.broken:
                        conn.sock.sendall(frame(RST_STREAM, 0, conn.next_sid - 2, struct.pack(">L", 0x8)))
                except OSError:
                    pass
                conn.close()

    def _read(
        self,
        conn: _Conn,
        sid: int,
        on_message: Callable[[bytes, float], None],
        deadline: float | None,
        no_progress: float | None,
        rec: RequestRecord | None,
    ) -> None:
        """The socket loop of one call's reply, until its end: each read's bytes to the stream's
        frame reader (protocols/h2_frames.py), its events acted on in order, each stamped with
        the time the read that brought it returned (the whole frames left from the last request
        first, with the time this one began reading). Each read waits at most the no-progress
        limit and never past the total deadline."""
        perf_counter = time.perf_counter
        reader = H2FrameReader(sid, self.limits.event_bytes, conn.unacked)
        feed = reader.feed
        sock = conn.sock
        data, conn.rest = conn.rest, b""
        now = perf_counter()
        while True:
            try:
                events = feed(data)
            except H2FrameError as e:
                self._act(conn, sid, e.events, on_message, now, rec)  # what came before the bad frame first
                raise
            for ev in events:  # _act, inline: this loop runs once a read
                if ev.__class__ is bytes:
                    on_message(ev, now)  # the usual event: one gRPC message
                else:
                    self._event(conn, sid, ev, now, rec)
            if reader.ended:
                conn.rest, conn.unacked = reader.rest, reader.unacked
                return
            # the next read: within the no-progress limit and the total deadline (as _wait_time)
            wait = no_progress
            if deadline is not None:
                left = deadline - perf_counter()
                if left <= 0:
                    raise _Status("DEADLINE_EXCEEDED", "Deadline Exceeded")
                wait = left if wait is None else min(wait, left)
            sock.settimeout(wait)
            try:
                data = sock.recv(READ_SIZE)
            except TimeoutError:
                if deadline is not None and perf_counter() >= deadline:
                    raise _Status("DEADLINE_EXCEEDED", "Deadline Exceeded") from None
                raise
            now = perf_counter()
            if not data:
                conn.broken = True
                raise _Status("UNAVAILABLE", conn.goaway or "the server closed the connection")

    def _act(self, conn: _Conn, sid: int, events: list, on_message, now: float, rec: RequestRecord | None) -> None:
        """Act on `events` in order (a message to `on_message`, anything else to `_event`)."""
        for ev in events:
            if ev.__class__ is bytes:
                on_message(ev, now)
            else:
                self._event(conn, sid, ev, now, rec)

    def _event(self, conn: _Conn, sid: int, ev, now: float, rec: RequestRecord | None) -> None:
        """One event of the reply other than a message: the response's headers checked and
        stamped, the end of the stream classified, the connection's frames obeyed and answered."""
        kind = ev.__class__
        if kind is Headers:
            headers = self._decode(conn, ev.block)
            if ev.first:
                self._check_response(headers, ev.end_stream)
                if rec is not None:
                    rec.t_headers = now
            if ev.end_stream:
                if ev.unfinished:
                    raise _Status("INTERNAL", f"the stream ended inside a gRPC message ({ev.unfinished} bytes)")
                self._trailers(headers)
        elif kind is Reset:
            raise _Status(_RST_CODES.get(ev.code, "INTERNAL"), f"Received RST_STREAM with error code {ev.code}")
        elif kind is EndedWithoutTrailers:
            raise _Status("UNKNOWN", "the stream ended without its trailers")
        else:
            self._connection_event(conn, ev)
            if kind is GoAway and conn.last_sid is not None and sid > conn.last_sid:
                raise _Status("UNAVAILABLE", f"{conn.goaway} before the request was taken")

    @staticmethod
    def _decode(conn: _Conn, block: bytes) -> dict[str, str]:
        import hpack

        block = bytes(block)
        known = conn.decoded.get(block)
        if known is not None:
            return dict(known)
        try:
            pairs = conn.decoder.decode(block, raw=True)
        except hpack.HPACKError as e:
            conn.broken = True
            raise ProtocolError(f"an HTTP/2 header block HPACK cannot read: {e}") from None
        headers = {k.decode("latin-1"): v.decode("utf-8", "replace") for k, v in pairs}
        if block.translate(None, _INDEXED_BYTES):  # a literal or a table size update: the table may have changed
            conn.decoded.clear()
        elif len(conn.decoded) < 16:
            conn.decoded[block] = dict(headers)
        return headers

    @staticmethod
    def _check_response(headers: dict[str, str], trailers_only: bool) -> None:
        status = headers.get(":status", "")
        if status != "200":
            code = int(status) if status.isdigit() else 0
            raise _Status(_HTTP_CODES.get(code, "UNKNOWN"), f"Received http2 header with status: {status or 'none'}")
        if not trailers_only and not headers.get("content-type", "").startswith("application/grpc"):
            raise _Status("UNKNOWN", f"the reply is not gRPC (content-type {headers.get('content-type')!r})")

    @staticmethod
    def _trailers(headers: dict[str, str]) -> None:
        code = headers.get("grpc-status")
        if code is None:
            raise _Status("UNKNOWN", "the trailers carry no grpc-status")
        if code != "0":
            name = _STATUS_NAMES[int(code)] if code.isdigit() and int(code) < len(_STATUS_NAMES) else "UNKNOWN"
            raise _Status(name, unquote(headers.get("grpc-message", "")))

    # ------------------------------------------------------------------ one-off exchanges
    def _unary(self, path: str, body: bytes) -> bytes:
        replies: list[bytes] = []
        self._call(path, body, lambda msg, _t: replies.append(msg))
        if len(replies) != 1:
            raise ProtocolError(f"{path} answered {len(replies)} messages, not one")
        return replies[0]

    def model_info(self) -> dict[str, str]:
        """The server's GetModelInfo (model_path, served_model_name, tokenizer_path); cached."""
        if self._served is None:
            try:
                reply = self._unary(grpc_vllm.GET_MODEL_INFO, b"")
            except (OSError, TimeoutError) as e:
                raise _Status("UNAVAILABLE", str(e) or type(e).__name__) from None
            self._served = grpc_vllm.decode_model_info(reply)
        return self._served

    def _check_model(self, model: str) -> None:
        try:
            info = self.model_info()
        except _Status as e:
            raise _Ended(*status_outcome(e.name, e.details, before_reply=True, what="GetModelInfo")) from None
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
        """Send one request, read its stream to the end, and return what happened (the contract
        of Client.send, transport/client.py: never raises for server or network trouble; a
        killed greenlet hands the record to `on_cancel` as cancelled and GreenletExit
        propagates; `on_record` gets the record once, as soon as it exists)."""
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
        replied = False
        feed = grpc_vllm.feed_response
        append = rec.chunk_times.append

        def on_message(msg: bytes, t: float) -> None:
            rec.t_end = t  # the last message's arrival (before it: None)
            if feed(msg, state) == CONTENT:
                append(t)
                if rec.t_first is None:
                    rec.t_first = rec.t_first_content = t

        try:
            if spec.model:
                self._check_model(spec.model)
            try:
                self._call(grpc_vllm.GENERATE, data, on_message, rec)
            finally:
                replied = rec.t_end is not None  # a message came (grpcio's "reply" begins there)
                if rec.t_end is None:
                    rec.t_end = time.perf_counter()
            check_end(state)
        except _Ended as e:
            rec.outcome, rec.error = e.outcome, e.text
        except _Status as e:
            rec.outcome, rec.error = status_outcome(
                e.name, e.details, before_reply=not replied, total=self.timeouts.total
            )
        except TimeoutError:
            rec.outcome, rec.error = Outcome.TIMEOUT, f"no data for {self.timeouts.no_progress:g}s"
        except (OSError, ssl.SSLError) as e:
            rec.outcome, rec.error = status_outcome("UNAVAILABLE", f"{type(e).__name__}: {e}", before_reply=not replied)
        except ProtocolError as e:
            rec.outcome, rec.error = Outcome.STREAM_ERROR, str(e)[:1000]
        except GreenletExit:
            rec.outcome, rec.error = Outcome.CANCELLED, "test stopped while in flight"
            rec.t_end = time.perf_counter()
            finish_record(rec, state)
            if on_cancel is not None:
                on_cancel(rec)
            raise
        finish_record(rec, state)
        return rec
