"""Incremental stream framing: Server-Sent Events and newline-delimited JSON.

Both decoders take the response body in arbitrary pieces and return the payloads of the
events each piece completed. They are on the per-chunk hot path, so the common case
(`data: {...}\\n\\n` events with LF endings) is handled by splitting on the blank line with
no per-line Python work, and named one-line events (`event: X` + `data: {...}`, Responses and
Anthropic) with one partition per event; anything else (CR/CRLF, comments, other fields, multi-line data)
takes the general path of the WHATWG event-stream rules.

Memory is bounded: an event (SSE) or a line (NDJSON) longer than `max_event_bytes` raises
ProtocolError, as soon as its pending part passes the limit. A piece with no line ending at all
is set aside without copying what came before it, so a long line costs linear time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_locust.protocols.base import MAX_EVENT_BYTES, ProtocolError

# An adapter's reader of events in place: (buf, pos, end) -> (token events read, where it stopped).
ReadEvents = Callable[[bytes, int, int], tuple[int, int]]
# What SSEDecoder.feed returns: the events' payloads (bytes), and first, only when read_events is
# set, an int (the token events read in place). Items are Any, not bytes | int: every caller
# without read_events gets bytes alone, and would need a per-event check on the hot path.
Events = list[Any]


def _event_data(lines: list[bytes]) -> bytes | None:
    """The data of one event from its complete lines; None when it has no data field."""
    data = None
    for line in lines:
        if not line or line[0] == 58:  # blank, or ':' comment / keep-alive
            continue
        name, _, value = line.partition(b":")
        if name != b"data":
            continue  # event:, id:, retry: and unknown fields do not matter here
        if value[:1] == b" ":
            value = value[1:]
        data = value if data is None else data + b"\n" + value
    return data


def _single_line_events(block: bytes) -> list[bytes] | None:
    """Payloads when `block` is only one-line `data:` events separated by single blank lines.

    The common case, done with a few C-level bytes operations; None for anything else. Long
    events (SGLang's cumulative text and token ids: ~1.5 KB an event) are cut one memchr-speed
    find a line: split()'s multi-byte search, then a copy to look for stray newlines, read every
    byte twice at a fraction of that speed, most of that API's ingest cost.
    """
    if block.startswith(b"data: "):
        sep, skip = b"\n\ndata: ", 6
    elif block.startswith(b"data:") and block.find(b"\n\ndata: ") < 0:
        sep, skip = b"\n\ndata:", 5
    else:
        return None
    end = block.find(b"\n")
    if end < 0:
        return [block[skip:]]
    if end >= LONG_EVENT:
        out: list[bytes] = []
        append, find, at = out.append, block.find, block.startswith
        pos, step = skip, len(sep)
        while True:
            if not at(sep, end):  # another field, a comment, multi-line data or extra blank lines
                return None
            append(block[pos:end])
            pos = end + step
            end = find(b"\n", pos)
            if end < 0:
                append(block[pos:])
                return out
    parts = block[skip:].split(sep)
    # any newline left means comments, other fields, multi-line data or extra blank lines
    rest = parts[0] if len(parts) == 1 else b"".join(parts)
    return parts if rest.find(b"\n") < 0 else None


# The first event at least this long: events are cut one by one (find) rather than by split().
LONG_EVENT = 512


def _named_line_events(block: bytes) -> list[bytes] | None:
    """Payloads when `block` is only `event: X` + one `data: ...` line events separated by
    single blank lines, as the Responses and Anthropic APIs send them; None for anything else.

    One partition per event instead of the general path's per-line work.
    """
    out = []
    for event in block.split(b"\n\n"):
        if not event.startswith(b"event:"):
            return None
        head, sep, data = event.partition(b"\ndata: ")
        # exactly one event line, then one data line
        if not sep or head.find(b"\n") >= 0 or data.find(b"\n") >= 0:
            return None
        out.append(data)
    return out


def _too_long(limit: int, what: str) -> ProtocolError:
    return ProtocolError(f"{what} longer than {limit} bytes (the limit for one stream event)")


class SSEDecoder:
    """Splits a text/event-stream body into event data payloads (`[DONE]` included)."""

    __slots__ = ("_buf", "_cr", "_more", "_more_len", "max_event", "read_events")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""  # bytes after the last blank line, line endings normalised to LF
        self._cr = False  # the previous piece ended in CR: a leading LF belongs to it
        self._more: list[bytes] = []  # pieces without LF that follow _buf, not joined yet
        self._more_len = 0
        self.max_event = max_event_bytes
        # An adapter's reader of events in place (make_decoder sets it when the adapter has
        # one and the text is not kept): read_events(buf, pos, end) -> (token events, where it
        # stopped) reads the events at the start of buf[pos:end] without cutting them out; feed
        # then returns that count first (an int), before the payloads of the events after it.
        self.read_events: ReadEvents | None = None

    def idle(self) -> bool:
        """Nothing pending: the next bytes start a new event."""
        return not self._buf and not self._more and not self._cr

    def feed(self, data: bytes) -> Events:  # noqa: C901 (per-read hot path: the fast paths first, in one call)
        if not data:
            return []  # keeps a pending CR's state intact
        plain = True
        if self._cr or data.find(b"\r") >= 0:
            data = self._normalise(data)
            plain = False
        buf = self._buf
        if buf:
            if data.find(b"\n") < 0:  # ends no line, so no event: set it aside
                self._more.append(data)
                self._more_len += len(data)
                if len(buf) + self._more_len > self.max_event + 1:  # + the LF of its last line
                    raise _too_long(self.max_event, "an SSE event")
                return []
            if plain and self.read_events is not None:
                # only the event the pending bytes belong to is joined to them; the events
                # after it are read where they are, not copied into one buffer with it
                i = data.find(b"\n\n")
                if 0 <= i < len(data) - 2:
                    first = self.feed(data[: i + 2])
                    # the events read in place have been applied to the stream's state, so
                    # none may be read so after a payload the caller has yet to apply
                    if not first or (len(first) == 1 and type(first[0]) is int):
                        after = self._feed_fresh(data, i + 2, True)
                        if first and after and type(after[0]) is int:
                            return [first[0] + after[0], *after[1:]]
                        return first + after if first and after else first or after
                    return first + self._feed_fresh(data, i + 2, False)
            if self._more:
                buf = b"".join([buf, *self._more])
                self._more.clear()
                self._more_len = 0
            start = len(buf) - 1  # a new blank line can only begin at the junction or later
            buf += data
        else:
            # fast path: the piece is exactly one one-line event, as servers flush them
            if data.find(b"\n") == len(data) - 2 and data.endswith(b"\n\n") and len(data) <= self.max_event:
                if data.startswith(b"data: "):
                    return [data[6:-2]]
                if data.startswith(b"data:"):
                    return [data[5:-2]]
            # and one named event (`event: X` then one `data:` line), as the Responses and
            # Anthropic APIs flush them
            elif data.startswith(b"event:") and data.endswith(b"\n\n") and len(data) <= self.max_event:
                i = data.find(b"\n") + 1
                if data.find(b"\n", i) == len(data) - 2:
                    if data.startswith(b"data: ", i):
                        return [data[i + 6 : -2]]
                    if data.startswith(b"data:", i):
                        return [data[i + 5 : -2]]
            return self._feed_fresh(data, 0, True)
        end = buf.rfind(b"\n\n", start)
        if end < 0:
            self._buf = buf
            if len(buf) > self.max_event + 1:
                raise _too_long(self.max_event, "an SSE event")
            return []
        return self._complete(buf, 0, end, True)

    def _feed_fresh(self, buf: bytes, start: int, in_place: bool) -> Events:
        """Events in buf[start:], with nothing pending before it."""
        end = buf.rfind(b"\n\n", start)
        if end < 0:
            rest = self._buf = buf[start:] if start else buf
            if len(rest) > self.max_event + 1:
                raise _too_long(self.max_event, "an SSE event")
            return []
        return self._complete(buf, start, end, in_place)

    def _complete(self, buf: bytes, start: int, end: int, in_place: bool) -> Events:
        """The events in buf[start:end] (complete: a blank line follows); what follows the blank
        line is kept as pending. in_place: events at the start may be read by read_events."""
        rest = self._buf = buf[end + 2 :]
        if len(rest) > self.max_event + 1 or (end - start > self.max_event and self._any_too_long(buf[start:end])):
            raise _too_long(self.max_event, "an SSE event")
        read_events = self.read_events
        if read_events is not None and in_place:
            n, pos = read_events(buf, start, end)
            if pos >= end:
                return [n]
            if pos > start:
                out = self._events(buf[pos:end])
                return [n, *out] if n else out
        return self._events(buf[start:end] if start else buf[:end])

    def _events(self, block: bytes) -> list[bytes]:
        """The payloads of the complete events in block (no trailing blank line)."""
        out = _single_line_events(block)
        if out is not None:
            return out
        if block.startswith(b"event:"):
            out = _named_line_events(block)
            if out is not None:
                return out
        out = []
        for event in block.split(b"\n\n"):
            payload = _event_data(event.split(b"\n"))
            if payload is not None:
                out.append(payload)
        return out

    def _any_too_long(self, block: bytes) -> bool:
        limit = self.max_event
        return any(len(event) > limit for event in block.split(b"\n\n"))

    def close(self) -> list[bytes]:
        """End of body: an event whose lines ended but no blank line followed still counts.

        A last line without its line ending is incomplete and dropped, as the SSE rules say.
        """
        buf = b"".join([self._buf, *self._more]) if self._more else self._buf
        lines = buf.split(b"\n")
        self._buf = b""
        self._more.clear()
        self._more_len = 0
        self._cr = False
        payload = _event_data(lines[:-1])
        return [] if payload is None else [payload]

    def _normalise(self, data: bytes) -> bytes:
        if self._cr and data[:1] == b"\n":
            data = data[1:]  # the LF of a CRLF split across pieces
        self._cr = data[-1:] == b"\r"
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


class NDJSONDecoder:
    """Splits a newline-delimited JSON body (Ollama) into one payload per non-empty line."""

    __slots__ = ("_buf", "_more", "_more_len", "max_event")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self._more: list[bytes] = []  # pieces without LF that follow _buf, not joined yet
        self._more_len = 0
        self.max_event = max_event_bytes

    def feed(self, data: bytes) -> list[bytes]:
        if data.find(b"\n") < 0:
            if self._buf:
                self._more.append(data)
                self._more_len += len(data)
            else:
                self._buf = data
            if len(self._buf) + self._more_len > self.max_event:
                raise _too_long(self.max_event, "an NDJSON line")
            return []
        buf = self._buf
        if self._more:
            buf = b"".join([buf, *self._more, data])
            self._more.clear()
            self._more_len = 0
        elif buf:
            buf += data
        else:
            buf = data
        lines = buf.split(b"\n")
        rest = self._buf = lines.pop()
        limit = self.max_event
        if len(buf) > limit and (len(rest) > limit or any(len(line) > limit for line in lines)):
            raise _too_long(limit, "an NDJSON line")
        return [s for s in (line.strip() for line in lines) if s]

    def close(self) -> list[bytes]:
        buf = b"".join([self._buf, *self._more]) if self._more else self._buf
        last = buf.strip()
        self._buf = b""
        self._more.clear()
        self._more_len = 0
        return [last] if last else []
