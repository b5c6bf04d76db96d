"""SSEDecoder and NDJSONDecoder: framing rules, any split of the body, close()."""

from __future__ import annotations

import random
import re

import pytest

from llm_locust.protocols.sse import NDJSONDecoder, SSEDecoder


def decode(body: bytes, pieces: list[bytes] | None = None) -> list[bytes]:
    d = SSEDecoder()
    out = []
    for piece in pieces if pieces is not None else [body]:
        out += d.feed(piece)
    return out + d.close()


def cut(body: bytes, points) -> list[bytes]:
    points = sorted(set(points))
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


def random_pieces(body: bytes, rng: random.Random) -> list[bytes]:
    if len(body) < 2:
        return [body]
    n = rng.randint(1, max(1, len(body) // 3))
    return cut(body, rng.sample(range(1, len(body)), min(n, len(body) - 1)))


def reference(body: bytes) -> list[bytes]:
    """The event-stream rules read line by line over the whole body, plus close()'s flush."""
    lines = re.split(rb"\r\n|\r|\n", body)
    lines.pop()  # the unterminated last line (b"" when the body ends with a line ending)
    out, data = [], None
    for line in lines:
        if not line:
            if data is not None:
                out.append(data)
            data = None
        elif not line.startswith(b":"):
            name, colon, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                data = value if data is None else data + b"\n" + value
    if data is not None:
        out.append(data)
    return out


# --- the basic rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"data: a\n\n", [b"a"]),
        (b"data:a\n\n", [b"a"]),  # TGI/axum: no space
        (b"data:  a\n\n", [b" a"]),  # only one space is part of the syntax
        (b'data: {"a": "b:c"}\n\n', [b'{"a": "b:c"}']),
        (b"data:a\n\ndata: b\n\ndata:c\n\n", [b"a", b"b", b"c"]),  # spacing mixed
        (b"data: a\n\ndata:b\n\ndata: c\n\n", [b"a", b"b", b"c"]),
        (b"data: a\r\n\r\ndata: b\r\n\r\n", [b"a", b"b"]),
        (b"data: a\r\rdata: b\r\r", [b"a", b"b"]),
        (b"data: a\r\n\ndata: b\n\r\n", [b"a", b"b"]),  # mixed endings
        (b": ping\n\ndata: a\n\n", [b"a"]),
        (b":\n\n: keep-alive\n\n", []),
        (b"data: a\n: comment inside\ndata: b\n\n", [b"a\nb"]),
        (b"data: a\ndata: b\n\n", [b"a\nb"]),
        (b"data: a\ndata:\ndata: b\n\n", [b"a\n\nb"]),
        (b"data: [DONE]\n\n", [b"[DONE]"]),
        (b"event: message\nid: 7\nretry: 1000\ndata: x\n\n", [b"x"]),
        (b"event: ping\n\n", []),  # no data field: no event
        (b"id: 3\n\ndata: x\nid: 4\n\n", [b"x"]),
        (b"data\n\n", [b""]),  # a field name alone: empty value
        (b"data:\n\n", [b""]),
        (b"datum: x\n\nDATA: y\n\n", []),  # unknown fields (names are case-sensitive)
        (b"\n\n\ndata: a\n\n\n\n\ndata: b\n\n", [b"a", b"b"]),
        (b"data: a\n\n\n", [b"a"]),
    ],
)
def test_rules(body, expected):
    assert decode(body) == expected
    assert reference(body) == expected  # the test oracle agrees with the hand-written cases
    assert decode(body, [bytes([c]) for c in body]) == expected


def test_feed_returns_events_as_they_complete():
    d = SSEDecoder()
    assert d.feed(b"data: a") == []
    assert d.feed(b"\n") == []
    assert d.feed(b"\n") == [b"a"]
    assert d.feed(b"data: b\n\ndata: c\n\ndata: d") == [b"b", b"c"]
    assert d.feed(b"\n\n") == [b"d"]
    assert d.feed(b"") == []
    assert d.close() == []


def test_crlf_split_between_cr_and_lf():
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    assert d.feed(b"\n") == []  # the LF completes the CRLF: not a blank line
    assert d.feed(b"data: b\r") == []
    assert d.feed(b"") == []  # an empty piece must not lose the pending CR
    assert d.feed(b"\n\r") == [b"a\nb"]
    assert d.feed(b"\ndata: c\r\n\r\n") == [b"c"]


def test_cr_then_lf_in_next_piece_is_one_line_ending_not_two():
    # as one piece "\r\n" is a single line ending, so "x" and "y" belong to one event
    body = b"data: x\r\ndata: y\r\n\r\n"
    for i in range(len(body) + 1):
        assert decode(body, [body[:i], body[i:]]) == [b"x\ny"], i


def test_close_flushes_an_event_with_complete_lines():
    d = SSEDecoder()
    assert d.feed(b"data: a\n\ndata: b\n") == [b"a"]
    assert d.close() == [b"b"]
    assert d.close() == []  # nothing left twice


@pytest.mark.parametrize(
    "tail, expected",
    [
        (b"data: b", []),  # unterminated line: incomplete, dropped
        (b"data: b\r", [b"b"]),  # CR alone ends a line
        (b"data: b\r\n", [b"b"]),
        (b"data: b\ndata: c", [b"b"]),
        (b"data: b\n: comment\n", [b"b"]),
        (b": comment\n", []),
        (b"event: x\n", []),
        (b"", []),
    ],
)
def test_close_cases(tail, expected):
    d = SSEDecoder()
    assert d.feed(b"data: a\n\n" + tail) == [b"a"]
    assert d.close() == expected


def test_decoder_is_reusable_after_close():
    d = SSEDecoder()
    d.feed(b"data: a\r")
    d.close()
    assert d.feed(b"\ndata: b\n\n") == [b"b"]  # the old CR is forgotten: "\n" is a blank line


# --- any split gives the same events --------------------------------------------------------

ENDINGS = (b"\n", b"\r\n", b"\r")
PAYLOADS = (b'{"a": 1}', b"[DONE]", b'{"t":"x: y"}', b"", b" lead", b"plain text")


def random_stream(rng: random.Random) -> bytes:
    lines = []
    simple = rng.random() < 0.4  # mostly one-line data events: the decoder's fast paths
    for _ in range(rng.randint(1, 12)):
        if simple and rng.random() < 0.9:
            lines += [rng.choice((b"data: ", b"data:")) + rng.choice(PAYLOADS), b""]
            continue
        for _ in range(rng.randint(0, 3)):
            lines.append(
                rng.choice(
                    [
                        b"data: " + rng.choice(PAYLOADS),
                        b"data:" + rng.choice(PAYLOADS),
                        b"data",
                        b": ping",
                        b":",
                        b"event: message",
                        b"id: 42",
                        b"retry: 3000",
                        b"other: field",
                    ]
                )
            )
        lines.extend([b""] * rng.choice((1, 1, 1, 2)))
    endings = (b"\n",) if simple and rng.random() < 0.7 else ENDINGS
    body = b"".join(line + rng.choice(endings) for line in lines)
    if rng.random() < 0.3:
        body = body[: rng.randint(0, len(body))]  # cut anywhere: close() decides
    return body


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_match_reference_in_any_split(seed):
    rng = random.Random(seed)
    body = random_stream(rng)
    expected = reference(body)
    assert decode(body) == expected
    assert decode(body, [bytes([c]) for c in body]) == expected
    for _ in range(20):
        assert decode(body, random_pieces(body, rng)) == expected


def test_typical_stream_in_every_two_way_split():
    events = [b'{"choices":[{"text":" tok%d"}]}' % i for i in range(5)] + [b"[DONE]"]
    for sep in (b"data: ", b"data:"):
        for end in ENDINGS:
            body = b"".join(sep + e + end + end for e in events)
            for i in range(len(body) + 1):
                assert decode(body, [body[:i], body[i:]]) == events, (sep, end, i)


def test_many_events_in_one_feed_and_one_event_per_feed_agree():
    events = [b'{"i":%d}' % i for i in range(300)]
    body = b"".join(b"data: " + e + b"\n\n" for e in events)
    assert decode(body) == events
    assert decode(body, [b"data: " + e + b"\n\n" for e in events]) == events
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    assert decode(body, pieces) == events


def test_named_events_many_in_one_feed_match_reference():
    """Blocks of `event: X` + one `data:` line events (Responses, Anthropic) take a fast path
    when read many at a time; it must agree with the rules, also when one odd event (no event
    line, two data lines, `data:` without a space, a comment, an extra blank line) is mixed in."""
    events = [b'{"type":"content_block_delta","i":%d}' % i for i in range(200)]
    named = [b"event: content_block_delta\ndata: " + e + b"\n\n" for e in events]
    odd = (
        b"data: [DONE]\n\n",
        b"event: x\ndata: a\ndata: b\n\n",
        b"event: x\ndata:tight\n\n",
        b"event: x\n: ping\ndata: c\n\n",
        b"event: x\ndata: d\n\n\n",
        b"event: x\n\n",
        b"event: x\ndata: \n\n",
    )
    rng = random.Random(7)
    for extra in (None, *odd):
        parts = list(named)
        if extra is not None:
            parts.insert(rng.randint(0, len(parts)), extra)
        body = b"".join(parts)
        expected = reference(body)
        assert decode(body) == expected, extra
        assert decode(body, [body[i : i + 4096] for i in range(0, len(body), 4096)]) == expected, extra
        for _ in range(5):
            assert decode(body, random_pieces(body, rng)) == expected, extra


def test_long_events_many_in_one_feed_match_reference():
    """Blocks whose first event is long (SGLang's cumulative text: ~1.5 KB an event) are cut
    event by event rather than split; that must agree with the rules, also when one odd event
    (a comment, another field, two data lines, an extra blank line, `data:` without a space, a
    short event) sits anywhere among them, and for `data:` without a space throughout."""
    from llm_locust.protocols.sse import LONG_EVENT

    rng = random.Random(3)
    events = [b'{"text":"%s","i":%d}' % (b"x" * (LONG_EVENT + 50 * i), i) for i in range(40)]
    odd = (
        b": ping\n\n",
        b"id: 7\ndata: y\n\n",
        b"data: a\ndata: b\n\n",
        b"data: c\n\n\n",
        b"data:tight\n\n",
        b"data: short\n\n",
        b"event: x\ndata: z\n\n",
        b"data: [DONE]\n\n",
    )
    for prefix in (b"data: ", b"data:"):
        for extra in (None, *odd):
            parts = [prefix + e + b"\n\n" for e in events]
            if extra is not None:
                parts.insert(rng.randint(0, len(parts)), extra)
            body = b"".join(parts)
            expected = reference(body)
            assert decode(body) == expected, (prefix, extra)
            assert decode(body, [body[i : i + 65536] for i in range(0, len(body), 65536)]) == expected, (prefix, extra)
            for _ in range(5):
                assert decode(body, random_pieces(body, rng)) == expected, (prefix, extra)


# --- NDJSON ---------------------------------------------------------------------------------


def decode_nd(pieces: list[bytes]) -> list[bytes]:
    d = NDJSONDecoder()
    out = []
    for piece in pieces:
        out += d.feed(piece)
    return out + d.close()


def test_ndjson_lines():
    d = NDJSONDecoder()
    assert d.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert d.feed(b":2}\n\n  \n") == [b'{"b":2}']  # blank lines are skipped
    assert d.feed(b'{"c":3}\r\n') == [b'{"c":3}']  # CRLF tolerated
    assert d.feed(b'{"d":4}') == []
    assert d.close() == [b'{"d":4}']  # a final unterminated line
    assert d.close() == []


@pytest.mark.parametrize("seed", range(10))
def test_ndjson_any_split(seed):
    rng = random.Random(seed)
    lines = [b'{"response":"w%d","done":false}' % i for i in range(rng.randint(1, 30))]
    body = b"\n".join(lines) + rng.choice([b"", b"\n", b"\r\n", b"\n\n"])
    assert decode_nd([body]) == lines
    assert decode_nd([bytes([c]) for c in body]) == lines
    for _ in range(20):
        assert decode_nd(random_pieces(body, rng)) == lines
