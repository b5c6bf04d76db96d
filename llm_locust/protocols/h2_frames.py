"""The HTTP/2 frames of one gRPC call's reply, read from bytes alone (RFC 9113; gRPC over HTTP/2).

`H2FrameReader(sid, message_limit).feed(data)` takes whatever a read brought and returns what
the whole frames in it (with the bytes kept from earlier feeds) say, in order, as values:

  - `bytes`: one whole gRPC message of the stream (its 5-byte prefix gone);
  - `Headers`: a whole header block of the stream (HEADERS and its CONTINUATIONs, still HPACK
    encoded: the connection's decoder reads it), the response's headers first, then the
    trailers (`end_stream`);
  - `Reset` (RST_STREAM on the stream), `EndedWithoutTrailers` (DATA with END_STREAM);
  - `GoAway`, `Settings` (what the peer's SETTINGS change), `Window` (the peer's connection
    WINDOW_UPDATE: send window for our request bodies);
  - `Send`: bytes the caller must write: a SETTINGS ack, a PING ack, our connection
    WINDOW_UPDATE (one per GiB of DATA read).

The stream's end (trailers, RST_STREAM, DATA with END_STREAM) is the last event a reader gives:
it stops there, and `rest` holds the bytes after it (the next frames of the connection). Bytes
HTTP/2 or gRPC forbid raise `H2FrameError`, the one error a feed raises (a ProtocolError), whose
`events` are what the bytes before the bad frame gave: the caller acts on them first, as if they
had come alone. Nothing here waits, reads a socket or knows the time: the caller stamps each
event with the time of the read that brought it.

Memory: a reader holds at most one unfinished frame (a frame header declaring more than
OUR_MAX_FRAME is refused as soon as it is read, not once its bytes came), one header block of
up to HEADER_BLOCK_LIMIT bytes, and one unfinished gRPC message of up to the message limit.

The usual frame, DATA of the stream with no flags holding one whole uncompressed message, is
read with one `struct.unpack_from` (the per-token hot path); everything else by the general walk.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from llm_locust.protocols.base import ProtocolError

DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
MAX_WINDOW = 2**31 - 1
OUR_MAX_FRAME = 16384  # the protocol's default: we do not ask for larger frames
HEADER_BLOCK_LIMIT = 65536  # bytes of one header block (with its CONTINUATIONs) we accept
WINDOW_STEP = 1 << 30  # DATA bytes read between two of our connection WINDOW_UPDATEs
FRAME = struct.Struct(">HBBBL")  # length (24 bits as 16 + 8), type, flags, stream id (with its reserved bit)
# a frame header, then a gRPC message prefix: compressed flag, length
_unpack_message = struct.Struct(">HBBBLBL").unpack_from


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    """One frame's bytes."""
    n = len(payload)
    return FRAME.pack(n >> 8, n & 0xFF, ftype, flags, sid) + payload


class H2FrameError(ProtocolError):
    """Bytes HTTP/2 or gRPC forbid. `events`: what the bytes before the bad frame gave, in order."""

    def __init__(self, text: str, events: list | None = None) -> None:
        super().__init__(text)
        self.events = events if events is not None else []


class Headers(NamedTuple):
    """A whole header block of the stream (HPACK bytes). `first`: the response's headers (a
    trailers-only reply when `end_stream` too); `end_stream`: it ends the stream (the trailers);
    `unfinished`: bytes of a gRPC message the stream ends inside (0 when it ends between two)."""

    block: bytes
    end_stream: bool
    first: bool
    unfinished: int = 0


class Reset(NamedTuple):
    """RST_STREAM on the stream (`code` 2, INTERNAL_ERROR, when the frame is too short to hold one)."""

    code: int


class EndedWithoutTrailers(NamedTuple):
    """DATA with END_STREAM: the stream ended without its trailers."""


class GoAway(NamedTuple):
    """GOAWAY: the last stream the peer takes, its error code and debug data (`last_sid` None:
    a frame too short to say)."""

    last_sid: int | None
    code: int
    debug: bytes


class Settings(NamedTuple):
    """The peer's SETTINGS (not an ack): its new initial stream window and largest frame, None
    where it did not change them. Its ack follows as a `Send`."""

    initial_window: int | None
    max_frame: int | None


class Window(NamedTuple):
    """The peer's WINDOW_UPDATE for the connection: our send window grows by `increment`."""

    increment: int


class Send(NamedTuple):
    """Bytes to write to the peer (a SETTINGS or PING ack, our connection WINDOW_UPDATE)."""

    data: bytes


def parse_settings(payload: bytes) -> Settings:
    """A SETTINGS frame's payload: the initial stream window and the largest frame it sets (the
    last of each; a trailing partial entry is ignored). A window over 2^31-1 is refused."""
    window = max_frame = None
    for i in range(0, len(payload) - len(payload) % 6, 6):
        key, value = struct.unpack_from(">HL", payload, i)
        if key == 0x4:
            if value > MAX_WINDOW:
                raise H2FrameError("HTTP/2 SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")
            window = value
        elif key == 0x5:
            max_frame = max(16384, min(value, 16777215))
    return Settings(window, max_frame)


def parse_goaway(payload: bytes) -> GoAway:
    if len(payload) < 8:
        return GoAway(None, 0, b"")
    last, code = struct.unpack_from(">LL", payload)
    return GoAway(last & 0x7FFFFFFF, code, payload[8:200])


def goaway_text(ev: GoAway) -> str:
    """How a GOAWAY is named in an error: its code and the start of its debug data."""
    return f"GOAWAY (code {ev.code}){': ' + ev.debug.decode('utf-8', 'replace') if ev.debug else ''}"


class H2FrameReader:
    """Reads the frames of one stream's reply (stream id `sid`) from bytes fed in, as the module
    docstring says. `message_limit`: the largest gRPC message accepted; `unacked`: DATA bytes
    already read on the connection since our last WINDOW_UPDATE (the count goes on in `unacked`)."""

    __slots__ = (
        "sid",
        "limit",
        "unacked",
        "ended",
        "rest",
        "_fast",
        "_block",
        "_block_end",
        "_got_headers",
        "_pending",
    )

    def __init__(self, sid: int, message_limit: int, unacked: int = 0) -> None:
        self.sid = sid
        self.limit = message_limit
        self.unacked = unacked
        self.ended = False  # the stream's end was read: feed reads nothing more
        self.rest = b""  # bytes not yet read: an unfinished frame, or what follows the stream's end
        self._fast = min(OUR_MAX_FRAME, message_limit + 5)  # the largest usual frame
        self._block: bytes | None = None  # a header block being read (HEADERS + CONTINUATIONs)
        self._block_end = False
        self._got_headers = False
        self._pending = b""  # the start of a gRPC message split across DATA frames

    @property
    def buffered(self) -> int:
        """Bytes the reader holds."""
        return len(self.rest) + len(self._pending) + len(self._block or b"")

    def feed(self, data: bytes) -> list:
        """The events of the whole frames in what was kept and `data` (see the module docstring)."""
        if self.ended:
            self.rest += data
            return []
        data = self.rest + data if self.rest else data
        events: list = []
        if self.unacked >= WINDOW_STEP:  # the fast path's DATA bytes of the last feed
            events.append(Send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", self.unacked))))
            self.unacked = 0
        append = events.append
        unpack_message = _unpack_message
        sid = self.sid
        size = len(data)
        pos = 0
        fast = self._fast
        while True:
            if self._got_headers and not self._pending:
                # the usual frames: DATA for this stream, no flags, one whole uncompressed gRPC message each
                unacked = self.unacked
                while size - pos >= 14:
                    hi, lo, ftype, flags, fsid, compressed, n = unpack_message(data, pos)
                    length = hi << 8 | lo
                    end = pos + 9 + length
                    if ftype or flags or compressed or fsid != sid or n != length - 5 or end > size or length > fast:
                        break
                    unacked += length
                    append(data[pos + 14 : end])
                    pos = end
                self.unacked = unacked
            if size - pos < 9:
                break
            length = data[pos] << 16 | data[pos + 1] << 8 | data[pos + 2]
            if length > OUR_MAX_FRAME:
                raise H2FrameError(f"HTTP/2 frame of {length} bytes, over the {OUR_MAX_FRAME} we allow", events)
            if size - pos - 9 < length:
                break  # a frame not yet whole
            try:
                self._frame(data, pos, length, events)
            except H2FrameError as e:
                e.events = events
                raise
            pos += 9 + length
            if self.ended:
                break
        self.rest = data[pos:]
        return events

    def _frame(self, data: bytes, pos: int, length: int, events: list) -> None:
        """One whole frame (its header at `pos`) off the fast path: its events onto `events`."""
        _, _, ftype, flags, fsid = FRAME.unpack_from(data, pos)
        fsid &= 0x7FFFFFFF
        start = pos + 9
        end = start + length
        if ftype == DATA:
            self._data(data, start, end, flags, fsid, events)
        elif ftype == HEADERS or ftype == CONTINUATION:
            if fsid == self.sid:
                self._headers(data, start, end, ftype, flags, events)
            elif ftype == HEADERS and fsid and fsid % 2 == 0:
                raise H2FrameError("HTTP/2 HEADERS on a stream the client did not open")
        elif ftype == RST_STREAM:
            if fsid == self.sid:
                events.append(Reset(int.from_bytes(data[start : start + 4], "big") if length >= 4 else 2))
                self.ended = True
        elif ftype == WINDOW_UPDATE:
            if fsid == 0 and length == 4:
                events.append(Window(int.from_bytes(data[start:end], "big") & 0x7FFFFFFF))
        elif ftype in (SETTINGS, PING, GOAWAY):
            if fsid != 0:
                raise H2FrameError(f"HTTP/2 frame type {ftype} on stream {fsid}")
            control(ftype, flags, data[start:end], events)
        elif ftype == PUSH_PROMISE:
            raise H2FrameError("HTTP/2 PUSH_PROMISE, though the client disabled push")
        # other frame types (PRIORITY, unknown extensions) are ignored, as HTTP/2 says

    def _data(self, data: bytes, start: int, end: int, flags: int, fsid: int, events: list) -> None:
        self.unacked += end - start
        if self.unacked >= WINDOW_STEP:
            events.append(Send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", self.unacked))))
            self.unacked = 0
        if fsid != self.sid:
            return  # an earlier stream's tail (cancelled): its bytes counted, nothing else
        if flags & PADDED:
            if end == start or data[start] >= end - start:
                raise H2FrameError("HTTP/2 DATA frame with a bad pad length")
            end -= data[start]
            start += 1
        if not self._got_headers:
            raise H2FrameError("HTTP/2 DATA before the response headers")
        # (the usual frame, one whole message, took the fast path)
        self._pending = self._messages(self._pending + data[start:end], events)
        if flags & END_STREAM:
            events.append(EndedWithoutTrailers())
            self.ended = True

    def _messages(self, buf: bytes, events: list) -> bytes:
        """Every whole gRPC message in `buf` onto `events`; returns the unfinished rest."""
        pos = 0
        limit = self.limit
        while len(buf) - pos >= 5:
            n = int.from_bytes(buf[pos + 1 : pos + 5], "big")
            if buf[pos]:
                raise H2FrameError("a compressed gRPC message, though the client accepts no compression")
            if n > limit:
                raise H2FrameError(f"a gRPC message of {n} bytes, over the {limit}-byte limit")
            if len(buf) - pos - 5 < n:
                break
            events.append(buf[pos + 5 : pos + 5 + n])
            pos += 5 + n
        return buf[pos:]

    def _headers(self, data: bytes, start: int, end: int, ftype: int, flags: int, events: list) -> None:
        if ftype == HEADERS:
            if self._block is not None:
                raise H2FrameError("HTTP/2 HEADERS inside an unfinished header block")
            begin = start + (1 if flags & PADDED else 0) + (5 if flags & PRIORITY else 0)
            if flags & PADDED:
                if end == start:
                    raise H2FrameError("HTTP/2 HEADERS frame with bad padding")
                end -= data[start]
            if begin > end:
                raise H2FrameError("HTTP/2 HEADERS frame with bad padding")
            self._block, self._block_end = data[begin:end], bool(flags & END_STREAM)
        else:
            if self._block is None:
                raise H2FrameError("HTTP/2 CONTINUATION without HEADERS")
            self._block += data[start:end]
        if len(self._block) > HEADER_BLOCK_LIMIT:
            raise H2FrameError(f"an HTTP/2 header block over {HEADER_BLOCK_LIMIT} bytes")
        if flags & END_HEADERS:
            first = not self._got_headers
            self._got_headers = True
            if self._block_end:
                events.append(Headers(self._block, True, first, len(self._pending)))
                self.ended = True
            else:
                events.append(Headers(self._block, False, first))
            self._block = None


def control(ftype: int, flags: int, payload: bytes, events: list) -> None:
    """A SETTINGS, PING or GOAWAY frame of the connection: its events onto `events`."""
    if ftype == SETTINGS:
        if not flags & ACK:
            events.append(parse_settings(payload))
            events.append(Send(frame(SETTINGS, ACK, 0)))
    elif ftype == PING:
        if not flags & ACK:
            events.append(Send(frame(PING, ACK, 0, payload[:8])))
    else:
        events.append(parse_goaway(payload))
