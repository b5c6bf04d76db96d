"""Token events and one-token reads recognised without parsing them.

A paced server (the real case: one token per stream every 10-50 ms) sends each token in its own
HTTP chunk, and each chunk arrives in its own read. Such a read is, on an OpenAI-style stream,
`<hex size>\\r\\ndata: {...}\\n\\n\\r\\n`, and its JSON differs from the stream's previous token event
only in the token's text. Reading it the general way (llhttp, the SSE decoder, orjson, the
adapter's checks) costs ~18 us of CPU a token in a 128-stream run, most of it cache misses
between streams, where the whole client spends ~47 (benchmarks/README.md).

So once one token event has been read the general way, the adapter cuts it into the bytes before
its text and the bytes after (`token_template`), and `token_read_matcher` recognises a later read
that is exactly one chunk holding exactly one event made of those same bytes around a different
text: the same JSON document but for one string's value, so the general path would have found
the same thing (one token, nothing else changed). The text must be valid JSON string content
without escapes (no quote, backslash or control byte; valid UTF-8): anything else, and any read
that is not exactly that (two chunks, part of one, the last chunk, an extension), goes the
general way. `whole_chunks` tells the client whether llhttp, fed a read, stopped at a chunk's
end, where such a read may be taken past it (transport/bodies.py, TokenReader).

The same template tells a decoded event of that shape apart without the adapter
(`event_matcher`): a burst's reads (a server sending faster than the client reads) hold hundreds
of events and are not whole chunks, but each event is still the last token event's bytes around
another text, and parsing each cost a third of the client's CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_HEX = re.compile(rb"[0-9a-fA-F]{1,8}")
# a JSON string's content that needs no check beyond this: printable ASCII, no quote or backslash
_PLAIN_TEXT = re.compile(rb"[ !#-\[\]-~]+")
# a byte that would end, escape or invalidate a JSON string's content
_UNSAFE = re.compile(rb'["\\\x00-\x1f]')
# chunk size lines as servers write them (lowercase hex, no leading zeros), for sizes below this
_SIZE_LINES = tuple(b"%x" % n for n in range(4096))
# reads longer than this are not scanned for whole chunks (a burst's reads: they go the general
# way anyway)
SCAN_LIMIT = 8192


def token_read_matcher(
    prefix: bytes, suffix: bytes, max_event: int, event_head: bytes = b"data: "
) -> Callable[[bytes], int]:
    """A count of the token events in one read: n when the read is exactly n whole HTTP chunks,
    each one SSE event `event_head` + prefix + text + suffix + a blank line, with a text that is
    non-empty, unescaped JSON string content, each event within max_event bytes (the decoder's
    limit); else 0. `event_head` is the event's lines before its data (`data: `, or a named
    event's `event: X\ndata: `, which the decoder drops: the payload is the same).

    Written for its cost (it runs once a token, between other streams' reads that evict it from
    the caches): the usual read, one chunk, takes four C calls; the rarer forms (uppercase or
    long size lines, non-ASCII text, several chunks: a reader that fell behind) slower checks."""
    head = event_head + prefix
    tail = suffix + b"\n\n\r\n"
    n_head, n_tail = len(head), len(tail)
    size_lines = _SIZE_LINES[: max(0, min(len(_SIZE_LINES), max_event + 1))]
    n_lines = len(size_lines)
    plain = _PLAIN_TEXT.fullmatch

    def count_token_events(read: bytes) -> int:
        i = read.find(b"\r\n", 0, 10)
        if i <= 0 or not read.startswith(head, i + 2) or not read.endswith(tail):
            return 0
        n = len(read)
        size = n - i - 4  # as one chunk: all between its size line and its final CRLF
        start = i + 2 + n_head
        end = n - n_tail
        if end <= start:
            return 0
        if size < n_lines and read[:i] == size_lines[size]:  # one chunk, its size line as servers write it
            return 1 if plain(read, start, end) is not None or _text(read, start, end) else 0
        return _several(read, head, tail, max_event)

    return count_token_events


def event_matcher(prefix: bytes, suffix: bytes) -> Callable[[bytes], bool]:
    """Whether one decoded event's payload is prefix + text + suffix with a text that is
    non-empty, unescaped JSON string content: a token event of the template's shape, which the
    adapter would read as one token and nothing else (the many events of a burst's read, each
    told with three C calls instead of a JSON parse)."""
    n_prefix, n_suffix = len(prefix), len(suffix)
    plain = _PLAIN_TEXT.fullmatch

    def is_token_event(payload: bytes) -> bool:
        end = len(payload) - n_suffix
        return (
            end > n_prefix
            and payload.startswith(prefix)
            and payload.endswith(suffix)
            and (plain(payload, n_prefix, end) is not None or _text(payload, n_prefix, end))
        )

    return is_token_event


# ASCII a JSON string holds as it is (no control byte, quote or backslash), to delete with translate
_PLAIN_BYTES = bytes(b for b in range(0x20, 0x80) if b not in b'"\\')
_NON_ASCII = bytes(range(0x80, 0x100))


def events_matcher(prefix: bytes, suffix: bytes) -> Callable[[list[bytes]], bool]:
    """Whether every payload of a list is a token event of the template's shape, event_matcher's
    test for each, taken at once: a burst's read holds hundreds of events, and one pass of C
    calls over their texts (a slice each, then one join, one translate) costs ~40% less than a
    call per event (benchmarks/README.md). False for anything else, the caller then tells
    them one by one."""
    n_prefix, n_suffix = len(prefix), len(suffix)

    def all_token_events(payloads: list[bytes]) -> bool:
        if not n_suffix:
            return False
        texts = [p[n_prefix:-n_suffix] for p in payloads if p.startswith(prefix) and p.endswith(suffix)]
        if len(texts) != len(payloads) or b"" in texts:  # another event, or prefix and suffix overlap
            return False
        joined = b"\n".join(texts)  # a byte no text may hold: the count of those left tells them apart
        rest = joined.translate(None, _PLAIN_BYTES)
        if rest.count(b"\n") != len(texts) - 1:
            return False
        if len(rest) == len(texts) - 1:  # printable ASCII only (the usual text)
            return True
        # non-ASCII texts: nothing else left, and each valid UTF-8 (a sequence cut by a newline is not)
        return not rest.translate(None, _NON_ASCII + b"\n") and _utf8(joined)

    return all_token_events


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _several(read: bytes, head: bytes, tail: bytes, max_event: int) -> int:
    """count_token_events for a read of several chunks, each taken from its size line."""
    n_head, n_tail = len(head), len(tail)
    pos, n, count = 0, len(read), 0
    while pos < n:
        i = read.find(b"\r\n", pos, pos + 10)
        if i <= pos or _HEX.fullmatch(read, pos, i) is None:
            return 0
        end = i + 4 + int(read[pos:i], 16)  # past the chunk's final CRLF
        start, stop = i + 2 + n_head, end - n_tail
        if (
            end > n
            or end - i - 4 > max_event
            or stop <= start
            or not read.startswith(head, i + 2)
            or not read.startswith(tail, stop)
            or not _text(read, start, stop)
        ):
            return 0
        count += 1
        pos = end
    return count


def _text(read: bytes, start: int, end: int) -> bool:
    """read[start:end] is JSON string content without escapes: no quote, backslash or control
    byte, and valid UTF-8."""
    if _UNSAFE.search(read, start, end) is not None:
        return False
    try:
        read[start:end].decode()
    except UnicodeDecodeError:
        return False
    return True


def whole_chunks(read: bytes) -> bool:
    """True when `read`, taken from a chunk's start, is one or more complete chunks of data (no
    extensions, not the last, zero-size chunk): a parser fed it from a chunk's start ends at the
    next chunk's start."""
    pos, n = 0, len(read)
    if n == 0 or n > SCAN_LIMIT:
        return False
    while pos < n:
        i = read.find(b"\r\n", pos, pos + 10)
        if i <= pos or _HEX.fullmatch(read, pos, i) is None:
            return False
        size = int(read[pos:i], 16)
        end = i + 2 + size
        if size == 0 or read[end : end + 2] != b"\r\n":
            return False
        pos = end + 2
    return True


def text_template(payload: bytes, key: bytes) -> tuple[bytes, bytes] | None:
    """(bytes before the text, bytes after it) of a token event whose text is the string value
    of the one `key` in it (e.g. b'"text":"'), when that text has no escapes; else None.

    In valid JSON, `"text":"` can only be a key and the quote opening its string value (inside
    a string a quote is escaped), so with `key` occurring once, the value runs to the next quote."""
    if payload.count(key) != 1:
        return None
    start = payload.find(key) + len(key)
    end = payload.find(b'"', start)
    if end <= start or payload.find(b"\\", start, end) >= 0:
        return None
    return payload[:start], payload[end:]
