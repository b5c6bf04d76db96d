"""Property tests (Hypothesis) for the stream decoders and every adapter, on what a broken or
hostile server may send: mutated real captures, JSON of the wrong types anywhere, huge and
negative numbers, invalid UTF-8, arbitrary bytes.

Properties:
  - nothing but ProtocolError ever comes out of a decoder or an adapter;
  - the result (events, state, or the error's text) is the same however the body is split;
  - what an adapter stores is what the rest of the program expects (token counts are
    non-negative integers within MAX_TOKEN_COUNT, texts are strings, error texts bounded...);
  - nothing hangs (each example has a deadline).

Derandomized and bounded so the file runs in seconds; benchmarks/fuzz_protocols.py runs the same
checks for longer (random seeds, many more cases) and counts crashes instead of stopping.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_locust.protocols import API_NAMES, error_text, get_adapter, make_decoder, printable, resolve_tokens
from llm_locust.protocols.base import MAX_TOKEN_COUNT, NO_TOKEN, ProtocolError, StreamState
from llm_locust.protocols.openai import ERROR_TEXT_LIMIT
from llm_locust.protocols.sse import NDJSONDecoder, SSEDecoder

FIXTURES = Path(__file__).parent / "fixtures"

FAST = settings(  # derandomized by the suite's profile (conftest.py)
    max_examples=100,
    deadline=timedelta(milliseconds=1000),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- inputs ---------------------------------------------------------------------------------

# every field name an adapter reads, so random objects hit them with random types
FIELDS = (
    "choices", "delta", "text", "content", "reasoning", "reasoning_content", "tool_calls",
    "finish_reason", "usage", "prompt_tokens", "completion_tokens", "timings", "error", "object",
    "message", "token", "special", "generated_text", "details", "generated_tokens",
    "input_length", "response", "thinking", "done", "done_reason", "eval_count",
    "prompt_eval_count", "stop", "stop_type", "tokens_predicted", "tokens_evaluated",
    "text_output",
)  # fmt: skip

NUMBERS = st.one_of(
    st.integers(-5, 300),
    st.integers(-(2**70), 2**70),  # beyond 64 bits: orjson reads them as floats (or refuses)
    st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, MAX_TOKEN_COUNT, MAX_TOKEN_COUNT + 1]),
    st.floats(allow_nan=True, allow_infinity=True),  # json.dumps writes NaN/Infinity: invalid JSON
)
SCALARS = st.one_of(
    st.none(), st.booleans(), NUMBERS, st.text(max_size=8), st.sampled_from(["error", "stop", "length", ""])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)


def dumps(value) -> bytes:
    """JSON text the way a careless server might write it (big integers, NaN, escapes)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


# byte strings that break JSON and framing in interesting ways
TOKENS = [
    b'"choices":5,', b'"choices":"abc",', b'"usage":"x",', b'"usage":{"completion_tokens":-5},',
    b'"completion_tokens":1e400', b"18446744073709551616", b"-9223372036854775809", b"1e400",
    b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b'"\\ud800"', b"{", b"}", b"[", b"]", b"null", b",",
    b"\n", b"\n\n", b"\r", b"\r\n", b"data: ", b"data:", b": ping\n\n", b"[DONE]", b"\x00",
    b'"finish_reason":{},', b'"delta":[],', b'"token":"t",', b'"message":7,', b'"done":true,',
]  # fmt: skip


def _wire_api(name: str) -> tuple[str, ...]:
    """The APIs a wire example can be read as: every adapter of its framing."""
    framing = "ndjson" if name.endswith(".ndjson") else "sse"
    return tuple(a for a in API_NAMES if get_adapter(a).framing == framing)


def _bodies() -> list[tuple[str, bytes]]:
    """(api, body) for every real capture and wire example, read with every adapter of its framing."""
    out = []
    for path in sorted((FIXTURES / "captures").iterdir()) + sorted((FIXTURES / "wire").iterdir()):
        if path.suffix == ".json":  # parsed TGI events: frame them as axum does
            body = b"".join(b"data:" + orjson.dumps(ev) + b"\n\n" for ev in orjson.loads(path.read_bytes()))
        elif path.suffix in (".sse", ".ndjson"):
            body = path.read_bytes()
        else:
            continue
        out += [(api, body) for api in _wire_api(path.name)]
    return out


BODIES = _bodies()


@st.composite
def split(draw, body: bytes) -> list[bytes]:
    if len(body) < 2:
        return [body]
    points = draw(st.lists(st.integers(1, len(body) - 1), max_size=12))
    points = sorted(set(points))
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


def _replace_somewhere(draw, value):
    """The JSON value with one node (chosen by Hypothesis) replaced by a random JSON value."""
    nodes = []

    def walk(v, path):
        nodes.append(path)
        if isinstance(v, dict):
            for k, child in v.items():
                walk(child, (*path, k))
        elif isinstance(v, list):
            for i, child in enumerate(v):
                walk(child, (*path, i))

    walk(value, ())
    # mostly a field an adapter reads (choices, delta, usage, ...): that is where types matter
    read = [path for path in nodes if path and path[-1] in FIELDS or (path and type(path[-1]) is int)]
    path = draw(st.sampled_from(read if read and draw(st.integers(0, 4)) else nodes))
    new = draw(JSON)
    if not path:
        return new
    target = value
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return value


@st.composite
def mutated_capture(draw) -> tuple[str, bytes]:
    """A real capture, broken: JSON values replaced by random ones of any type, and/or bytes
    flipped, inserted (often from TOKENS) and deleted."""
    api, body = draw(st.sampled_from(BODIES))
    if draw(st.booleans()):  # structural: replace JSON values inside a few events
        sep = b"\n" if get_adapter(api).framing == "ndjson" else b"\n\n"
        events = body.split(sep)
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(events) - 1))
            ev = events[i]
            prefix, _, data = ev.partition(b":") if ev.startswith(b"data") else (b"", b"", ev)
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            new = dumps(_replace_somewhere(draw, value))
            events[i] = prefix + b": " + new if prefix else new
        body = sep.join(events)
    raw = bytearray(body)
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(0, len(raw)))
        op = draw(st.sampled_from(("flip", "insert", "token", "delete")))
        if op == "flip" and raw:
            raw[min(pos, len(raw) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            raw[pos:pos] = draw(st.binary(max_size=6))
        elif op == "token":
            raw[pos:pos] = draw(st.sampled_from(TOKENS))
        else:
            del raw[pos : pos + draw(st.integers(1, 20))]
    return api, bytes(raw)


# --- what a stream reads to -----------------------------------------------------------------


def check_state(state: StreamState, n_chunks: int) -> None:
    """What an adapter stored is what the client, the metrics and the report expect."""
    for count in (state.usage_in, state.usage_out, state.cont_out):
        assert count is None or (type(count) is int and 0 <= count <= MAX_TOKEN_COUNT), count
    assert all(type(n) is int and n > 0 for n in state.cont_tokens)
    assert state.finish_reason is None or type(state.finish_reason) is str
    assert all(type(t) is str for t in state.text) and all(type(t) is str for t in state.reasoning)
    assert state.error is None or (type(state.error) is str and len(state.error) <= ERROR_TEXT_LIMIT)
    for key, value in state.extra.items():
        assert key in ("timings", "details") and type(value) is dict
    total, _source, per_chunk = resolve_tokens(state, n_chunks)
    assert type(total) is int and total >= 0
    assert len(per_chunk) == n_chunks and all(type(n) is int and n >= 1 for n in per_chunk)
    "".join(state.text)


def read_stream(api: str, pieces: list[bytes]):
    """Decode and read a body as the client does: ("ok", what it read) or ("error", text).
    Anything other than ProtocolError propagates (and fails the property)."""
    adapter = get_adapter(api)
    decoder = make_decoder(adapter)
    state = StreamState(keep_text=True)
    kinds: list[int] = []
    try:
        for piece in pieces:
            for payload in decoder.feed(piece):
                kinds.append(adapter.feed(payload, state))
        for payload in decoder.close():
            kinds.append(adapter.feed(payload, state))
    except ProtocolError as e:
        check_state(state, sum(1 for k in kinds if k))
        return ("error", str(e), kinds)
    assert all(k in (0, 1, 2) for k in kinds)
    n_chunks = sum(1 for k in kinds if k)
    check_state(state, n_chunks)
    return (
        "ok",
        kinds,
        "".join(state.text),
        "".join(state.reasoning),
        state.usage_in,
        state.usage_out,
        state.finish_reason,
        state.error,
        state.done,
        list(state.cont_tokens),
        state.extra,
    )


# --- the checks (shared with benchmarks/fuzz_protocols.py) -----------------------------------


def check_capture(case, pieces_a, pieces_b) -> None:
    api, body = case
    whole = read_stream(api, [body])
    assert read_stream(api, pieces_a) == whole
    assert read_stream(api, pieces_b) == whole


def check_payload(api: str, payload: bytes) -> None:
    adapter = get_adapter(api)
    state = StreamState(keep_text=True)
    try:
        kind = adapter.feed(payload, state)
    except ProtocolError as e:
        assert str(e)
        return
    assert kind in (0, 1, 2)
    check_state(state, 1 if kind != NO_TOKEN else 0)


def sse_reference(body: bytes) -> list[bytes]:
    from test_sse import reference  # tests/ is on sys.path (rootdir conftest)

    return reference(body)


def check_sse(body: bytes, pieces: list[bytes]) -> None:
    def decode(parts):
        d = SSEDecoder()
        out = []
        for p in parts:
            out += d.feed(p)
        return out + d.close()

    expected = sse_reference(body)
    assert decode([body]) == expected
    assert decode(pieces) == expected


def check_ndjson(body: bytes, pieces: list[bytes]) -> None:
    def decode(parts):
        d = NDJSONDecoder()
        out = []
        for p in parts:
            out += d.feed(p)
        return out + d.close()

    expected = [s for s in (line.strip() for line in body.split(b"\n")) if s]
    assert decode([body]) == expected
    assert decode(pieces) == expected


def check_error_text(body: bytes) -> None:
    text = error_text(body)
    assert type(text) is str and len(text) <= 300
    assert "\x00" not in printable(body)


# byte streams that look like SSE/NDJSON more often than random bytes do
STREAM_BYTES = st.lists(st.sampled_from(TOKENS) | st.binary(max_size=8) | JSON.map(dumps), max_size=20).map(b"".join)
PAYLOAD_BYTES = st.one_of(JSON.map(dumps), st.binary(max_size=40), STREAM_BYTES)


@st.composite
def body_and_pieces(draw, bodies=STREAM_BYTES):
    body = draw(bodies)
    return body, draw(split(body))


@st.composite
def capture_and_splits(draw):
    case = draw(mutated_capture())
    return case, draw(split(case[1])), draw(split(case[1]))


# --- the tests ------------------------------------------------------------------------------


@FAST
@given(capture_and_splits())
def test_mutated_captures_read_the_same_in_any_split(args):
    check_capture(*args)


@FAST
@given(st.sampled_from(API_NAMES), JSON)
def test_adapters_take_any_json(api, value):
    check_payload(api, dumps(value))


@FAST
@given(st.sampled_from(API_NAMES), PAYLOAD_BYTES)
def test_adapters_take_any_bytes(api, payload):
    check_payload(api, payload)


@FAST
@given(body_and_pieces())
def test_sse_decoder_any_bytes_any_split(args):
    check_sse(*args)


@FAST
@given(body_and_pieces())
def test_ndjson_decoder_any_bytes_any_split(args):
    check_ndjson(*args)


@FAST
@given(PAYLOAD_BYTES)
def test_error_text_takes_any_body(body):
    check_error_text(body)


def test_decoders_bound_one_event_in_any_split():
    """An event over the limit is an error whether it comes whole or a byte at a time; one at
    the limit is not. (An unfinished SSE event may hold one byte more: its last line's LF.)"""
    limit = 64
    for make in (SSEDecoder, NDJSONDecoder):
        ok = (b"data: " + b"x" * (limit - 6)) if make is SSEDecoder else b"x" * limit
        over = ok + b"y"
        end = b"\n\n" if make is SSEDecoder else b"\n"
        for body, fails in ((ok + end, False), (over + end, True), (over + b"z", True)):
            for pieces in ([body], [bytes([c]) for c in body]):
                d = make(limit)
                try:
                    for p in pieces:
                        d.feed(p)
                    raised = False
                except ProtocolError as e:
                    raised = True
                    assert "longer than 64 bytes" in str(e)
                assert raised is fails, (make.__name__, body, len(pieces))


def test_specific_bad_values_are_protocol_errors():
    """A few the property tests reach by chance, pinned: each raised a TypeError (or stored a
    negative count) before the adapters checked types."""
    cases = [
        ("openai-chat", b'{"choices": 5}'),
        ("openai-chat", b'{"choices": "abc"}'),
        ("openai-chat", b'{"choices": [{"delta": {"content": ["a"]}}]}'),
        ("openai-completions", b'{"choices": [], "usage": "x"}'),
        ("openai-completions", b'{"choices": [], "usage": {"completion_tokens": -5}}'),
        ("openai-completions", b'{"choices": [{"text": "a"}], "usage": {"completion_tokens": "3"}}'),
        ("openai-completions", b'{"choices": [], "usage": {"completion_tokens": 18446744073709551615}}'),
        ("openai-completions", b'{"choices": [], "usage": {"completion_tokens": 1e300}}'),
        ("tgi", b'{"token": "t"}'),
        ("tgi", b'{"generated_text": "", "details": {"finish_reason": 5}}'),
        ("ollama-chat", b'{"message": [1]}'),
        ("ollama-generate", b'{"done": true, "prompt_eval_count": -1}'),
        ("llamacpp", b'{"stop": true, "timings": "fast"}'),
        ("triton", b'{"text_output": {"a": 1}}'),
    ]
    for api, payload in cases:
        try:
            get_adapter(api).feed(payload, StreamState())
        except ProtocolError:
            continue
        raise AssertionError(f"{api} accepted {payload!r}")
