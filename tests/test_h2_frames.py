"""The HTTP/2 frame reader of the gRPC client (protocols/h2_frames.py) on bytes alone: no socket,
no server. What a reply's frames give, the same however the bytes are cut into reads; each limit
and each frame HTTP/2 or gRPC forbids refused with its own words; and a fuzz test (Hypothesis,
derandomized by the suite's profile: conftest.py) feeding random and mutated replies in random
pieces: only H2FrameError ever comes out, the events do not depend on the cuts, and what the
reader holds stays bounded. benchmarks/fuzz_protocols.py runs the same check for longer.
transport/grpc_h2.py's socket loop over it is tested in test_grpc_h2.py."""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_locust.protocols.h2_frames import (
    HEADER_BLOCK_LIMIT,
    OUR_MAX_FRAME,
    WINDOW_STEP,
    EndedWithoutTrailers,
    GoAway,
    H2FrameError,
    H2FrameReader,
    Headers,
    Reset,
    Send,
    Settings,
    Window,
    frame,
)

SID = 3
LIMIT = 1000  # the gRPC message limit of these readers
HEAD = b"\x88\x5f\x10application/grpc"  # any bytes: the reader never decodes a header block
TRAIL = b"\x40\x0bgrpc-status\x010"


def msg(m: bytes, compressed: int = 0) -> bytes:
    return bytes([compressed]) + len(m).to_bytes(4, "big") + m


def read(data: bytes, pieces: list[int] | None = None, limit: int = LIMIT, sid: int = SID, unacked: int = 0):
    """(events, error text or None, ended, rest) of `data` fed whole or cut at `pieces`."""
    reader = H2FrameReader(sid, limit, unacked)
    cuts = [0, *sorted(set(pieces or [])), len(data)]
    events: list = []
    try:
        for a, b in zip(cuts, cuts[1:], strict=False):
            events += reader.feed(data[a:b])
    except H2FrameError as e:
        return events + e.events, str(e), reader.ended, None
    return events, None, reader.ended, reader.rest


def reply() -> bytes:
    """Every shape of a good reply: headers in HEADERS + CONTINUATION (padded, with priority),
    whole messages (the fast path), a padded DATA frame, a message cut across DATA frames, the
    connection's frames in between, a frame of another stream, trailers; then the next frame."""
    body = msg(b"two") + msg(b"three-" * 3)
    return (
        frame(4, 0, 0, struct.pack(">HLHL", 0x4, 1 << 20, 0x5, 1 << 15))  # SETTINGS
        + frame(1, 0x8 | 0x20, SID, b"\x02" + b"\x00\x00\x00\x00\x10" + HEAD[:5] + b"pp")  # padded, priority
        + frame(9, 0x4, SID, HEAD[5:])  # CONTINUATION, END_HEADERS
        + frame(0, 0, SID, msg(b"one"))  # the fast path
        + frame(6, 0, 0, b"pingpong")
        + frame(0, 0x8, SID, b"\x03" + body[:6] + b"\x00\x00\x00")  # padded, a message cut
        + frame(8, 0, 0, struct.pack(">L", 1000))  # WINDOW_UPDATE, connection
        + frame(8, 0, SID, struct.pack(">L", 1000))  # WINDOW_UPDATE, stream: nothing to do
        + frame(0, 0, 1, msg(b"old"))  # an earlier stream's tail
        + frame(0, 0, SID, body[6:])
        + frame(0x10, 0xFF, SID, b"an extension")  # unknown: ignored
        + frame(1, 0x5, SID, TRAIL)  # trailers
        + frame(6, 0, 0, b"nextping")  # the connection's next frame: left in rest
    )


REPLY_EVENTS = [
    Settings(1 << 20, 1 << 15),
    Send(frame(4, 1, 0)),
    Headers(HEAD, False, True),
    b"one",
    Send(frame(6, 1, 0, b"pingpong")),
    Window(1000),
    b"two",
    b"three-three-three-",
    Headers(TRAIL, True, False, 0),
]


def test_a_reply_gives_its_events_in_order_and_leaves_the_next_frames():
    events, error, ended, rest = read(reply())
    assert (events, error, ended, rest) == (REPLY_EVENTS, None, True, frame(6, 0, 0, b"nextping"))


def test_the_same_events_however_the_bytes_are_cut():
    data = reply()
    whole = read(data)
    for i in range(len(data) + 1):
        assert read(data, [i]) == whole, i
    assert read(data, list(range(len(data)))) == whole  # a byte a read


def test_a_trailers_only_reply_and_a_stream_ending_inside_a_message():
    assert read(frame(1, 0x5, SID, HEAD + TRAIL))[:3] == ([Headers(HEAD + TRAIL, True, True, 0)], None, True)
    data = frame(1, 4, SID, HEAD) + frame(0, 0, SID, msg(b"whole") + msg(b"cut")[:4]) + frame(1, 5, SID, TRAIL)
    assert read(data)[0] == [Headers(HEAD, False, True), b"whole", Headers(TRAIL, True, False, 4)]


def test_the_streams_end_by_reset_or_by_data_and_what_follows_is_kept():
    head = frame(1, 4, SID, HEAD) + frame(0, 0, SID, msg(b"a"))
    after = frame(0, 0, SID, msg(b"never"))
    assert read(head + frame(3, 0, SID, struct.pack(">L", 8)) + after) == (
        [Headers(HEAD, False, True), b"a", Reset(8)],
        None,
        True,
        after,
    )
    assert read(head + frame(3, 0, SID, b"") + after)[0][-1] == Reset(2)  # too short for a code: INTERNAL_ERROR
    assert read(head + frame(3, 0, 5, struct.pack(">L", 8)))[:3] == ([Headers(HEAD, False, True), b"a"], None, False)
    ended = read(head + frame(0, 1, SID, msg(b"b")) + after)
    assert ended == ([Headers(HEAD, False, True), b"a", b"b", EndedWithoutTrailers()], None, True, after)


def test_goaway_settings_ping_and_window_frames():
    events, error, ended, _ = read(
        frame(7, 0, 0, struct.pack(">LL", 0x80000001, 2) + b"bye")
        + frame(7, 0, 0, b"short")
        + frame(4, 1, 0)  # a SETTINGS ack: nothing
        + frame(4, 0, 0, struct.pack(">HL", 0x4, 7) + b"\x00\x04\x00")  # a partial entry ignored
        + frame(6, 1, 0, b"12345678")  # a PING ack: nothing
        + frame(8, 0, 0, struct.pack(">L", 0x80000005))  # the reserved bit dropped
        + frame(8, 0, 0, b"\x00\x00\x05")  # not 4 bytes: ignored
    )
    assert (error, ended) == (None, False)
    assert events == [
        GoAway(1, 2, b"bye"),
        GoAway(None, 0, b""),
        Settings(7, None),
        Send(frame(4, 1, 0)),
        Window(5),
    ]


def test_our_window_update_once_a_gib_of_data_is_read():
    data = frame(1, 4, SID, HEAD) + frame(0, 0, 1, b"x" * 10) + frame(0, 0, SID, msg(b"a"))
    events, *_ = read(data, unacked=WINDOW_STEP - 10)  # the other stream's DATA crosses it (the general walk)
    assert events == [Headers(HEAD, False, True), Send(frame(8, 0, 0, struct.pack(">L", WINDOW_STEP))), b"a"]
    reader = H2FrameReader(SID, LIMIT, WINDOW_STEP - 5)
    assert reader.feed(frame(1, 4, SID, HEAD) + frame(0, 0, SID, msg(b"a")))[-1] == b"a"  # the fast path counts
    assert reader.unacked == WINDOW_STEP + 1  # and the next read sends the update
    assert reader.feed(b"") == [Send(frame(8, 0, 0, struct.pack(">L", WINDOW_STEP + 1)))] and reader.unacked == 0


HEADERS_FIRST = frame(1, 4, SID, HEAD)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (struct.pack(">HBBBL", 0x40, 0x01, 0, 0, SID), f"HTTP/2 frame of 16385 bytes, over the {OUR_MAX_FRAME}"),
        (HEADERS_FIRST + frame(0, 0, SID, msg(b"x" * (LIMIT + 1))), f"gRPC message of {LIMIT + 1} bytes, over the"),
        (HEADERS_FIRST + frame(0, 0, SID, msg(b"x", compressed=1)), "a compressed gRPC message"),
        (frame(0, 0, SID, msg(b"x")), "HTTP/2 DATA before the response headers"),
        (HEADERS_FIRST + frame(0, 0x8, SID, b"\x05abc"), "DATA frame with a bad pad length"),
        (HEADERS_FIRST + frame(0, 0x8, SID, b""), "DATA frame with a bad pad length"),
        (frame(1, 0x8 | 4, SID, b"\x09abc"), "HEADERS frame with bad padding"),
        (frame(1, 0x8 | 4, SID, b""), "HEADERS frame with bad padding"),
        (frame(1, 0x20 | 4, SID, b"abc"), "HEADERS frame with bad padding"),
        (frame(9, 4, SID, HEAD), "CONTINUATION without HEADERS"),
        (frame(1, 0, SID, HEAD) + frame(1, 4, SID, HEAD), "HEADERS inside an unfinished header block"),
        (frame(5, 4, SID, b"\x00\x00\x00\x02" + HEAD), "PUSH_PROMISE, though the client disabled push"),
        (frame(4, 0, 1, b""), "HTTP/2 frame type 4 on stream 1"),
        (frame(6, 0, SID, b"12345678"), "HTTP/2 frame type 6 on stream 3"),
        (frame(7, 0, 2, b""), "HTTP/2 frame type 7 on stream 2"),
        (frame(1, 4, 2, HEAD), "HEADERS on a stream the client did not open"),
        (frame(4, 0, 0, struct.pack(">HL", 0x4, 2**31)), "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1"),
        (
            frame(1, 0, SID, b"h" * OUR_MAX_FRAME)
            + b"".join(frame(9, 0, SID, b"h" * OUR_MAX_FRAME) for _ in range(HEADER_BLOCK_LIMIT // OUR_MAX_FRAME)),
            f"an HTTP/2 header block over {HEADER_BLOCK_LIMIT} bytes",
        ),
    ],
)
def test_each_limit_and_forbidden_frame_is_refused_in_its_words(data, words):
    events, error, _, _ = read(data)
    assert error is not None and words in error, (error, words)


def test_a_frame_over_the_size_is_refused_from_its_header_alone():
    reader = H2FrameReader(SID, LIMIT)
    with pytest.raises(H2FrameError, match="frame of 16777215 bytes"):
        reader.feed(b"\xff\xff\xff\x00\x00\x00\x00\x00\x03")  # 16 MiB announced, nothing of it sent


def test_what_came_before_a_bad_frame_is_on_the_error():
    data = HEADERS_FIRST + frame(0, 0, SID, msg(b"a") + msg(b"b")) + frame(0, 0, SID, msg(b"c", compressed=1))
    events, error, _, _ = read(data)
    assert events == [Headers(HEAD, False, True), b"a", b"b"] and "compressed" in error


def test_what_the_reader_holds_is_bounded():
    """An unfinished frame, at most; a partial gRPC message up to the limit."""
    reader = H2FrameReader(SID, LIMIT)
    reader.feed(HEADERS_FIRST)
    big = frame(0, 0, SID, msg(b"m" * LIMIT))
    for b in big[:-1]:
        reader.feed(bytes([b]))
        assert reader.buffered < 9 + OUR_MAX_FRAME
    assert reader.feed(big[-1:]) == [b"m" * LIMIT] and reader.buffered == 0
    part = msg(b"m" * LIMIT)[:-1]
    reader.feed(frame(0, 0, SID, part))
    assert reader.buffered == len(part) <= LIMIT + 5


# ------------------------------------------------------------------ the fuzz test

FAST = settings(  # derandomized by the suite's profile (conftest.py)
    max_examples=300,
    deadline=timedelta(milliseconds=2000),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

FUZZ_LIMIT = 64

_payloads = st.one_of(
    st.binary(max_size=2),  # too short for what its flags say
    st.binary(max_size=40),
    st.lists(st.binary(max_size=20), max_size=3).map(lambda ms: b"".join(msg(m) for m in ms)),
    st.sampled_from([b"", b"\x05", HEAD, TRAIL, b"\x00\x00\x00\x08", struct.pack(">HL", 0x4, 2**31), msg(b"x" * 70)]),
)
_any_frame = st.tuples(
    st.sampled_from([0, 0, 0, 1, 1, 3, 4, 5, 6, 7, 8, 9, 0x10]),
    st.sampled_from([0, 0, 0x1, 0x4, 0x5, 0x8, 0x20, 0x2C, 0xFF]),
    st.sampled_from([SID, SID, SID, 0, 1, 2, SID | 0x80000000]),
    _payloads,
).map(lambda f: frame(*f))
_messages = st.lists(st.binary(max_size=30), max_size=4).map(lambda ms: b"".join(msg(m) for m in ms))
_good_frame = st.one_of(  # frames a good reply has, so that the odd ones are read past a good start
    _messages.map(lambda m: frame(0, 0, SID, m)),
    st.tuples(st.integers(0, 8), _messages).map(lambda t: frame(0, 0x8, SID, bytes([t[0]]) + t[1] + b"\0" * t[0])),
    st.sampled_from([frame(6, 0, 0, b"pingpong"), frame(4, 0, 0), frame(8, 0, 0, b"\0\0\1\0"), frame(1, 4, SID, HEAD)]),
)
_frames = st.one_of(_good_frame, _good_frame, _any_frame)


@st.composite
def wire_and_cuts(draw):
    """A reply of random frames (a plausible reply's, then an odd one, then any), mutated now
    and then, and where the reads cut it."""
    head = draw(st.sampled_from([b"", frame(1, 4, SID, HEAD), frame(1, 4, SID, HEAD)]))
    # good frames, then an odd one (read past a good start), then any
    frames = [*draw(st.lists(_good_frame, max_size=4)), draw(_any_frame), *draw(st.lists(_frames, max_size=6))]
    data = bytearray(head + b"".join(frames))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["set", "insert", "delete"]))
        if op == "set":
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[i]
    data = bytes(data)
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=6))
    return data, cuts


def check_reader(data: bytes, cuts: list[int]) -> None:
    """Only H2FrameError comes out; the events (and the error) do not depend on the cuts; what the
    reader holds between reads stays bounded. Raises AssertionError otherwise."""
    reader = H2FrameReader(SID, FUZZ_LIMIT)
    bounds = [0, *sorted(set(cuts)), len(data)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        try:
            reader.feed(data[a:b])
        except H2FrameError:
            break
        if reader.ended:
            break
        assert len(reader.rest) < 9 + OUR_MAX_FRAME
        assert reader.buffered < 9 + OUR_MAX_FRAME + FUZZ_LIMIT + 5 + HEADER_BLOCK_LIMIT
    whole = read(data, limit=FUZZ_LIMIT)
    assert read(data, cuts, limit=FUZZ_LIMIT) == whole
    if len(data) <= 600:  # a byte a read: every frame (and every field) ends where a read does
        assert read(data, list(range(len(data))), limit=FUZZ_LIMIT) == whole
    assert all(isinstance(e, bytes | tuple) for e in whole[0])


@FAST
@given(wire_and_cuts())
def test_fuzz_random_and_mutated_replies(case):
    check_reader(*case)


@FAST
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=4))
def test_fuzz_any_bytes(data, cuts):
    check_reader(data, [c for c in cuts if c <= len(data)])
