"""vLLM's gRPC `Generate` stream over our own HTTP/2 reader: the contract and the outcomes of
transport.grpc_io.GrpcStreamClient, at a fraction of its client cost.

Why: grpcio hands each message to Python through its own layers and, under gevent, a thread
switch; a worker read ~3,600 tokens per CPU-second that way (benchmarks/bench_grpc_ingest.py),
against ~160,000 for an HTTP stream. Here a read takes whatever the socket holds (up to
READ_SIZE), the HTTP/2 frames in it are walked in place (`struct.unpack_from`), and each gRPC
message (5-byte prefix) goes straight to protocols.grpc_vllm.feed_response. Header blocks
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
from llm_locust.transport.grpc_io import _Ended, check_end, check_served, grpc_target, status_outcome
from llm_locust.transport.http import finish_record

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
MAX_WINDOW = 2**31 - 1
OUR_MAX_FRAME = 16384  # the protocol's default: we do not ask for larger frames
READ_SIZE = 65536
HEADER_BLOCK_LIMIT = 65536  # bytes of one header block (with its CONTINUATIONs) we accept
_FRAME = struct.Struct(">HBBBL")  # length (24 bits as 16 + 8), type, flags, stream id (with its reserved bit)
_FRAME_MESSAGE = struct.Struct(">HBBBLBL")  # a frame header, then a gRPC message prefix: compressed flag, length
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


def _frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return _FRAME.pack(n >> 8, n & 0xFF, ftype, flags, sid) + payload


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
            + _frame(SETTINGS, 0, 0, struct.pack(">HLHL", 0x2, 0, 0x4, MAX_WINDOW))  # no push; big windows
            + _frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", MAX_WINDOW - 65535))
        )

    def close(self) -> None:
        self.broken = True
        try:
            self.sock.close()
        except OSError:
            pass

    def settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - len(payload) % 6, 6):
            key, value = struct.unpack_from(">HL", payload, i)
            if key == 0x4:
                if value > MAX_WINDOW:
                    raise ProtocolError("HTTP/2 SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")
                self.stream_window_init = value
            elif key == 0x5:
                self.peer_max_frame = max(16384, min(value, 16777215))
        self.sock.sendall(_frame(SETTINGS, ACK, 0))


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
                hi, lo, ftype, flags, fsid = _FRAME.unpack_from(data, pos)
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
        out = [_frame(HEADERS, END_HEADERS if len(block) <= step else 0, sid, block[:step])]
        for i in range(step, len(block), step):
            out.append(_frame(CONTINUATION, END_HEADERS if i + step >= len(block) else 0, sid, block[i : i + step]))
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
            out.append(_frame(DATA, END_STREAM if last else 0, sid, message[pos : pos + n]))
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
            hi, lo, ftype, flags, fsid = _FRAME.unpack_from(data, pos)
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
        if ftype == SETTINGS:
            if not flags & ACK:
                conn.settings(payload)
        elif ftype == PING:
            if not flags & ACK:
                conn.sock.sendall(_frame(PING, ACK, 0, payload[:8]))
        elif ftype == GOAWAY and len(payload) >= 8:
            last, code = struct.unpack_from(">LL", payload)
            conn.last_sid = last & 0x7FFFFFFF
            conn.goaway = (
                f"GOAWAY (code {code}){': ' + payload[8:200].decode('utf-8', 'replace') if len(payload) > 8 else ''}"
            )

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
                        conn.sock.sendall(_frame(RST_STREAM, 0, conn.next_sid - 2, struct.pack(">L", 0x8)))
                except OSError:
                    pass
                conn.close()

    def _read(  # noqa: C901 (per-chunk hot path; split with the ingest benchmarks in issue 25)
        self,
        conn: _Conn,
        sid: int,
        on_message,
        deadline: float | None,
        no_progress: float | None,
        rec: RequestRecord | None,
    ) -> None:
        perf_counter = time.perf_counter
        unpack = _FRAME.unpack_from
        unpack_message = _FRAME_MESSAGE.unpack_from
        limit = self.limits.event_bytes
        sock = conn.sock
        block = None  # a header block being read (HEADERS + CONTINUATIONs)
        block_end = False
        got_headers = False
        pending = b""  # the start of a gRPC message split across DATA frames
        data, pos = conn.rest, 0
        conn.rest = b""
        now = perf_counter()
        size = len(data)
        fast_limit = min(OUR_MAX_FRAME, limit + 5)
        while True:
            if got_headers and not pending and size - pos >= 14:
                # the usual frame: DATA for this stream, no flags, one whole uncompressed gRPC message
                hi, lo, ftype, flags, fsid, compressed, n = unpack_message(data, pos)
                length = hi << 8 | lo
                end = pos + 9 + length
                if (
                    ftype == 0
                    and fsid == sid
                    and not flags
                    and not compressed
                    and n == length - 5
                    and end <= size
                    and length <= fast_limit
                ):
                    conn.unacked += length
                    on_message(data[pos + 14 : end], now)
                    pos = end
                    continue
            if size - pos < 9 or size - pos - 9 < (data[pos] << 16 | data[pos + 1] << 8 | data[pos + 2]):
                # a frame not yet whole: read more
                wait = no_progress
                if deadline is not None:
                    left = deadline - perf_counter()
                    if left <= 0:
                        raise _Status("DEADLINE_EXCEEDED", "Deadline Exceeded")
                    wait = left if wait is None else min(wait, left)
                sock.settimeout(wait)
                try:
                    more = self._recv(conn)
                except TimeoutError:
                    if deadline is not None and perf_counter() >= deadline:
                        raise _Status("DEADLINE_EXCEEDED", "Deadline Exceeded") from None
                    raise
                now = perf_counter()
                data = data[pos:] + more if pos < size else more
                pos = 0
                size = len(data)
                if conn.unacked >= 1 << 30:
                    sock.sendall(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", conn.unacked)))
                    conn.unacked = 0
                continue
            hi, lo, ftype, flags, fsid = unpack(data, pos)
            length = hi << 8 | lo
            fsid &= 0x7FFFFFFF
            if length > OUR_MAX_FRAME:
                raise ProtocolError(f"HTTP/2 frame of {length} bytes, over the {OUR_MAX_FRAME} we allow")
            start = pos + 9
            pos = start + length
            if ftype == DATA:
                conn.unacked += length
                if conn.unacked >= 1 << 30:
                    sock.sendall(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", conn.unacked)))
                    conn.unacked = 0
                if fsid != sid:
                    continue  # an earlier stream's tail (cancelled): its bytes counted, nothing else
                if flags & PADDED:
                    if length < 1 or data[start] >= length:
                        raise ProtocolError("HTTP/2 DATA frame with a bad pad length")
                    end = pos - data[start]
                    start += 1
                else:
                    end = pos
                if not got_headers:
                    raise ProtocolError("HTTP/2 DATA before the response headers")
                # (the usual frame, one whole message, took the fast path above)
                pending = self._messages(pending + data[start:end], on_message, now, limit)
                if flags & END_STREAM:
                    raise _Status("UNKNOWN" if got_headers else "INTERNAL", "the stream ended without its trailers")
            elif ftype == HEADERS or ftype == CONTINUATION:
                if fsid != sid:
                    if ftype == HEADERS and fsid and fsid % 2 == 0:
                        raise ProtocolError("HTTP/2 HEADERS on a stream the client did not open")
                    continue
                if ftype == HEADERS:
                    if block is not None:
                        raise ProtocolError("HTTP/2 HEADERS inside an unfinished header block")
                    begin = start
                    if flags & PADDED:
                        begin += 1
                    if flags & PRIORITY:
                        begin += 5
                    end = pos - (data[start] if flags & PADDED else 0)
                    if begin > end:
                        raise ProtocolError("HTTP/2 HEADERS frame with bad padding")
                    block, block_end = data[begin:end], bool(flags & END_STREAM)
                else:
                    if block is None:
                        raise ProtocolError("HTTP/2 CONTINUATION without HEADERS")
                    block += data[start:pos]
                if len(block) > HEADER_BLOCK_LIMIT:
                    raise ProtocolError(f"an HTTP/2 header block over {HEADER_BLOCK_LIMIT} bytes")
                if flags & END_HEADERS:
                    headers = self._decode(conn, block)
                    block = None
                    if not got_headers:
                        got_headers = True
                        self._check_response(headers, block_end)
                        if rec is not None:
                            rec.t_headers = now
                    if block_end:
                        if pending:
                            raise _Status("INTERNAL", f"the stream ended inside a gRPC message ({len(pending)} bytes)")
                        self._trailers(headers)
                        conn.rest = data[pos:]
                        return
            elif ftype == RST_STREAM:
                if fsid == sid:
                    code = int.from_bytes(data[start : start + 4], "big") if length >= 4 else 2
                    raise _Status(_RST_CODES.get(code, "INTERNAL"), f"Received RST_STREAM with error code {code}")
            elif ftype == WINDOW_UPDATE:
                if fsid == 0 and length == 4:
                    conn.send_window += int.from_bytes(data[start:pos], "big") & 0x7FFFFFFF
            elif ftype in (SETTINGS, PING, GOAWAY):
                if fsid != 0:
                    raise ProtocolError(f"HTTP/2 frame type {ftype} on stream {fsid}")
                self._control(conn, ftype, flags, data[start:pos])
                if ftype == GOAWAY and conn.last_sid is not None and sid > conn.last_sid:
                    raise _Status("UNAVAILABLE", f"{conn.goaway} before the request was taken")
            elif ftype == PUSH_PROMISE:
                raise ProtocolError("HTTP/2 PUSH_PROMISE, though the client disabled push")
            # other frame types (PRIORITY, unknown extensions) are ignored, as HTTP/2 says

    @staticmethod
    def _messages(buf: bytes, on_message, now: float, limit: int) -> bytes:
        """Hand every whole gRPC message in `buf` over; return the unfinished rest."""
        pos = 0
        while len(buf) - pos >= 5:
            n = int.from_bytes(buf[pos + 1 : pos + 5], "big")
            if buf[pos]:
                raise ProtocolError("a compressed gRPC message, though the client accepts no compression")
            if n > limit:
                raise ProtocolError(f"a gRPC message of {n} bytes, over the {limit}-byte limit")
            if len(buf) - pos - 5 < n:
                break
            on_message(buf[pos + 5 : pos + 5 + n], now)
            pos += 5 + n
        return buf[pos:]

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
        t_sched: float | None = None,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        step: int = 0,
        keep_text: bool | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Send one request, read its stream to the end, and return what happened (the contract
        of GrpcStreamClient.send: never raises for server or network trouble; a killed greenlet
        hands the record to `on_cancel` as cancelled and GreenletExit propagates; `on_record`
        gets the record once, as soon as it exists: StreamClient.send's)."""
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
