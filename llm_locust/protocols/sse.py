"""Incremental stream framing: Server-Sent Events and newline-delimited JSON.

Both decoders take the response body in arbitrary pieces and return the payloads of the
events each piece completed. They are on the per-chunk hot path, so the common case
(`data: {...}\\n\\n` events with LF endings) is handled by splitting on the blank line with
no per-line Python work; anything else (CR/CRLF, comments, other fields, multi-line data)
takes the general path of the WHATWG event-stream rules.
"""

from __future__ import annotations


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

    The common case, done with a few C-level bytes operations; None for anything else.
    """
    if block.startswith(b"data: "):
        parts = block[6:].split(b"\n\ndata: ")
    elif block.startswith(b"data:") and block.find(b"\n\ndata: ") < 0:
        parts = block[5:].split(b"\n\ndata:")
    else:
        return None
    # any newline left means comments, other fields, multi-line data or extra blank lines
    rest = parts[0] if len(parts) == 1 else b"".join(parts)
    return parts if rest.find(b"\n") < 0 else None


class SSEDecoder:
    """Splits a text/event-stream body into event data payloads (`[DONE]` included)."""

    __slots__ = ("_buf", "_cr")

    def __init__(self) -> None:
        self._buf = b""  # bytes after the last blank line, line endings normalised to LF
        self._cr = False  # the previous piece ended in CR: a leading LF belongs to it

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []  # keeps a pending CR's state intact
        if self._cr or data.find(b"\r") >= 0:
            data = self._normalise(data)
        buf = self._buf
        if buf:
            start = len(buf) - 1  # a new blank line can only begin at the junction or later
            buf += data
        else:
            # fast path: the piece is exactly one one-line event, as servers flush them
            if data.find(b"\n") == len(data) - 2 and data.endswith(b"\n\n"):
                if data.startswith(b"data: "):
                    return [data[6:-2]]
                if data.startswith(b"data:"):
                    return [data[5:-2]]
            buf = data
            start = 0
        end = buf.rfind(b"\n\n", start)
        if end < 0:
            self._buf = buf
            return []
        self._buf = buf[end + 2 :]
        block = buf[:end]
        out = _single_line_events(block)
        if out is not None:
            return out
        out = []
        for event in block.split(b"\n\n"):
            payload = _event_data(event.split(b"\n"))
            if payload is not None:
                out.append(payload)
        return out

    def close(self) -> list[bytes]:
        """End of body: an event whose lines ended but no blank line followed still counts.

        A last line without its line ending is incomplete and dropped, as the SSE rules say.
        """
        lines = self._buf.split(b"\n")
        self._buf = b""
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

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data if self._buf else data
        if data.find(b"\n") < 0:
            self._buf = buf
            return []
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        return [s for s in (line.strip() for line in lines) if s]

    def close(self) -> list[bytes]:
        last = self._buf.strip()
        self._buf = b""
        return [last] if last else []
