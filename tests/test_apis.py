"""The OpenAI Responses, Anthropic Messages and SGLang /generate adapters: real captures read
the same in any split, wire cases from the servers' sources, wrong types, errors inside the
stream, request bodies and headers, and end to end through StreamClient against the simulator
(token counts equal its ground truth)."""

from __future__ import annotations

import functools
import http.client
import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from support import stream_client

from llm_locust.metrics.records import SOURCE_CHUNKS, SOURCE_CONTINUOUS, SOURCE_USAGE, Outcome
from llm_locust.protocols import (
    API_NAMES,
    CHAT_APIS,
    CONTENT,
    NO_TOKEN,
    OPENAI_APIS,
    REASONING,
    TOOL_CALL,
    ProtocolError,
    RequestSpec,
    SSEDecoder,
    StreamState,
    get_adapter,
    make_decoder,
    request_headers,
    resolve_tokens,
)
from llm_locust.protocols.base import MAX_TOKEN_COUNT

APIS = Path(__file__).parent / "fixtures" / "captures" / "apis"
NEW_APIS = ("openai-responses", "anthropic-messages", "sglang-generate")

# every stream capture under captures/apis/ and the API it was recorded from
CAPTURE_API = {
    "llama_server_responses.sse": "openai-responses",
    "llama_server_responses_text.sse": "openai-responses",
    "llama_server_messages.sse": "anthropic-messages",
    "vllm_responses.sse": "openai-responses",
    "vllm_responses_text.sse": "openai-responses",
    "vllm_messages.sse": "anthropic-messages",
    "sglang_generate_source_example.sse": "sglang-generate",
    "sglang_generate_error_source_example.sse": "sglang-generate",
}
CAPTURES = sorted(n for n in CAPTURE_API if (APIS / n).exists())

client_for = functools.partial(stream_client, api_key="sk-test", concurrency=10)


@dataclass
class Result:
    kinds: list[int]
    text: str
    reasoning: str
    usage_in: int | None
    usage_out: int | None
    finish_reason: str | None
    error: str | None
    done: bool
    cont_tokens: list[int]
    extra: dict
    state: StreamState

    def key(self):
        return (
            self.kinds,
            self.text,
            self.reasoning,
            self.usage_in,
            self.usage_out,
            self.finish_reason,
            self.error,
            self.done,
            self.cont_tokens,
            self.extra,
        )

    def __eq__(self, other):
        return self.key() == other.key()

    @property
    def n_chunks(self) -> int:
        return sum(1 for k in self.kinds if k)

    def tokens(self):
        return resolve_tokens(self.state, self.n_chunks)


def run(api: str, pieces: list[bytes] | bytes) -> Result:
    adapter = get_adapter(api)
    decoder = make_decoder(adapter)
    state = StreamState(keep_text=True)
    kinds = []
    for piece in [pieces] if isinstance(pieces, bytes) else pieces:
        for payload in decoder.feed(piece):
            kinds.append(adapter.feed(payload, state))
    for payload in decoder.close():
        kinds.append(adapter.feed(payload, state))
    return Result(
        kinds,
        "".join(state.text),
        "".join(state.reasoning),
        state.usage_in,
        state.usage_out,
        state.finish_reason,
        state.error,
        state.done,
        list(state.cont_tokens),
        dict(state.extra),
        state,
    )


def sse(events: list[dict | bytes], named: bool = True) -> bytes:
    """Typed events framed as OpenAI and Anthropic send them (`event:` line, then `data:`)."""
    out = []
    for ev in events:
        data = ev if isinstance(ev, bytes) else orjson.dumps(ev)
        name = ev.get("type") if isinstance(ev, dict) and named else None
        out.append((b"event: %s\n" % name.encode() if name else b"") + b"data: " + data + b"\n\n")
    return b"".join(out)


def events_of(body: bytes) -> list[dict]:
    """The JSON event objects of an LF-framed body, read without the decoder."""
    out = []
    for block in body.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                out.append(orjson.loads(line[5:]))
    return out


def cut(body: bytes, points) -> list[bytes]:
    points = sorted(set(points))
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


# --- captures: any split, any line ending, the same result -----------------------------------


def test_capture_files_are_all_known():
    streams = {p.name for p in APIS.iterdir() if p.suffix == ".sse"}
    assert streams <= set(CAPTURE_API), streams - set(CAPTURE_API)
    assert {"llama_server_responses.sse", "llama_server_messages.sse", "sglang_generate_source_example.sse"} <= streams


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("name", CAPTURES)
def test_capture_same_result_in_any_split(name, ending):
    api = CAPTURE_API[name]
    raw = (APIS / name).read_bytes()
    expected = run(api, raw)
    body = raw.replace(b"\n", ending)
    assert run(api, body) == expected
    assert run(api, [bytes([c]) for c in body]) == expected
    rng = random.Random(name + repr(ending))
    for _ in range(25):
        assert run(api, cut(body, rng.sample(range(1, len(body)), rng.randint(1, 40)))) == expected


@pytest.mark.parametrize("name", [n for n in CAPTURES if "error" not in n])
def test_capture_agrees_with_an_independent_reading(name):
    """Token events, text, usage and the end as read straight from the JSON."""
    api = CAPTURE_API[name]
    body = (APIS / name).read_bytes()
    events = events_of(body)
    r = run(api, body)
    assert r.error is None and r.done
    if api == "openai-responses":
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta" and e["delta"]]
        final = next(e for e in events if e["type"] in ("response.completed", "response.incomplete"))
        usage = final["response"]["usage"]
        assert (r.usage_in, r.usage_out) == (usage["input_tokens"], usage["output_tokens"])
        assert r.text == "".join(deltas) == final["response"]["output"][-1]["content"][0]["text"]
        assert len(r.kinds) == len(events)
    elif api == "anthropic-messages":
        deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and e["delta"]["text"]]
        start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
        final = next(e for e in events if e["type"] == "message_delta")
        usage = {**start, **final["usage"]}
        assert r.usage_in == usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) + usage.get(
            "cache_creation_input_tokens", 0
        )
        assert r.usage_out == final["usage"]["output_tokens"]
        assert r.finish_reason == final["delta"]["stop_reason"]
        assert r.text == "".join(deltas)
        assert events[-1]["type"] == "message_stop"
    else:
        counts = [e["meta_info"]["completion_tokens"] for e in events]
        deltas = [b - a for a, b in zip([0, *counts], counts, strict=False) if b > a]
        assert r.cont_tokens == deltas and r.usage_out == counts[-1]
        assert r.text == events[-1]["text"]
        assert r.usage_in == events[-1]["meta_info"]["prompt_tokens"]
    assert r.n_chunks == len(deltas)
    total, source, per_chunk = r.tokens()
    assert total == r.usage_out and source in (SOURCE_USAGE, SOURCE_CONTINUOUS) and sum(per_chunk) >= r.n_chunks


def test_llama_server_responses_capture():
    body = (APIS / "llama_server_responses.sse").read_bytes()
    r = run("openai-responses", body)
    request = json.loads((APIS / "llama_server_responses.request.json").read_text())["body"]
    # ignore_eos was honoured: exactly max_output_tokens, one delta event per token here
    assert r.usage_out == request["max_output_tokens"] == r.n_chunks
    assert set(r.kinds) == {NO_TOKEN, CONTENT}
    assert r.kinds[:4] == [NO_TOKEN] * 4  # created, in_progress, output_item.added, content_part.added
    assert r.extra["timings"]["predicted_n"] == r.usage_out and r.extra["timings"]["prompt_n"] >= 1
    assert r.extra["details"] == {"cached_tokens": r.extra["timings"]["cache_n"]}
    assert r.finish_reason == "completed" and r.done
    assert r.tokens() == (r.usage_out, SOURCE_USAGE, [1] * r.n_chunks)
    assert b"[DONE]" not in body  # the final event is the end marker


def test_llama_server_messages_capture():
    body = (APIS / "llama_server_messages.sse").read_bytes()
    r = run("anthropic-messages", body)
    start = events_of(body)[0]["message"]["usage"]
    # llama-server reports the cached part of the prompt apart, as Anthropic does
    assert r.usage_in == start["input_tokens"] + start["cache_read_input_tokens"]
    assert r.extra["details"] == {"cached_tokens": start["cache_read_input_tokens"]}
    assert r.usage_out == 12 == r.n_chunks and r.finish_reason == "max_tokens" and r.done
    assert r.kinds[:2] == [NO_TOKEN, NO_TOKEN] and r.kinds[-3:] == [NO_TOKEN] * 3


def test_sglang_source_example():
    body = (APIS / "sglang_generate_source_example.sse").read_bytes()
    r = run("sglang-generate", body)
    # 8 events, 8 tokens: the 7th ended inside a character (no new text) and still carries a token
    assert r.kinds == [CONTENT] * 8 + [NO_TOKEN]
    assert r.text == "The capital of France is Paris \u2014" and r.cont_tokens == [1] * 8
    assert (r.usage_in, r.usage_out, r.finish_reason, r.done) == (6, 8, "length", True)
    assert r.extra["details"] == {"cached_tokens": 2}
    err = run("sglang-generate", (APIS / "sglang_generate_error_source_example.sse").read_bytes())
    assert err.error.startswith("The input (4100 tokens) is longer") and err.done and err.n_chunks == 0


@pytest.mark.parametrize("name", sorted(p.name for p in APIS.glob("*.headers")))
def test_capture_headers_say_sse(name):
    headers = (APIS / name).read_bytes().decode().lower()
    assert headers.startswith("http/1.1 200") and "content-type: text/event-stream" in headers
    assert isinstance(make_decoder(get_adapter(CAPTURE_API[name.replace(".headers", ".sse")])), SSEDecoder)


# --- wire cases from the servers' documentation and sources ----------------------------------


def resp_delta(typ, delta):
    return {"type": typ, "item_id": "x", "output_index": 0, "delta": delta}


def test_responses_reasoning_tool_calls_and_incomplete():
    body = sse(
        [
            {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
            resp_delta("response.reasoning_text.delta", "Let me"),
            resp_delta("response.reasoning_summary_text.delta", " think"),
            resp_delta("response.function_call_arguments.delta", '{"city":'),
            resp_delta("response.output_text.delta", "Hi"),
            resp_delta("response.refusal.delta", "No"),
            resp_delta("response.output_text.delta", ""),
            {"type": "response.output_text.done", "text": "HiNo"},
            {
                "type": "response.incomplete",
                "response": {
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                    "usage": {
                        "input_tokens": 9,
                        "input_tokens_details": {"cached_tokens": 4},
                        "output_tokens": 20,
                        "output_tokens_details": {"reasoning_tokens": 11},
                        "total_tokens": 29,
                    },
                },
            },
        ]
    )
    r = run("openai-responses", body)
    assert r.kinds == [NO_TOKEN, REASONING, REASONING, TOOL_CALL, CONTENT, CONTENT, NO_TOKEN, NO_TOKEN, NO_TOKEN]
    assert (r.reasoning, r.text) == ("Let me think", "HiNo")  # tool-call arguments are not visible text
    assert (r.usage_in, r.usage_out, r.finish_reason, r.done) == (9, 20, "max_output_tokens", True)
    assert r.extra["details"] == {"cached_tokens": 4, "reasoning_tokens": 11}
    assert r.tokens() == (20, SOURCE_USAGE, [4, 4, 4, 4, 4])


@pytest.mark.parametrize(
    "event, message",
    [
        (
            {
                "type": "error",
                "code": "server_error",
                "message": "The server had an error",
                "param": None,
                "sequence_number": 3,
            },
            "The server had an error",
        ),
        (
            {
                "type": "response.failed",
                "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
            },
            "boom",
        ),
        ({"type": "response.failed", "response": {"status": "failed", "error": None}}, "response failed"),
        (
            {"error": {"message": "Internal server error", "type": "InternalServerError", "code": 500}},
            "Internal server error",
        ),
    ],
)
def test_responses_error_events(event, message):
    body = sse([resp_delta("response.output_text.delta", "A"), event])
    r = run("openai-responses", body)
    assert r.error == message and r.n_chunks == 1
    assert r.done is (event.get("type") == "response.failed")


def anth_delta(kind, field, value):
    return {"type": "content_block_delta", "index": 0, "delta": {"type": kind, field: value}}


def test_anthropic_thinking_tool_use_and_ping():
    body = sse(
        [
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "usage": {
                        "input_tokens": 10,
                        "cache_creation_input_tokens": 3,
                        "cache_read_input_tokens": 5,
                        "output_tokens": 1,
                    },
                },
            },
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
            anth_delta("thinking_delta", "thinking", "Hmm"),
            anth_delta("signature_delta", "signature", "EqQBCgIYAhIM"),
            {"type": "content_block_stop", "index": 0},
            {"type": "ping"},
            anth_delta("text_delta", "text", "Sure"),
            anth_delta("input_json_delta", "partial_json", '{"location": "San Fra'),
            anth_delta("input_json_delta", "partial_json", ""),
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 89},
            },
            {"type": "message_stop"},
        ]
    )
    r = run("anthropic-messages", body)
    assert r.kinds == [
        NO_TOKEN,
        NO_TOKEN,
        REASONING,
        NO_TOKEN,
        NO_TOKEN,
        NO_TOKEN,
        CONTENT,
        TOOL_CALL,
        NO_TOKEN,
        NO_TOKEN,
        NO_TOKEN,
    ]
    assert (r.reasoning, r.text) == ("Hmm", "Sure")
    # message_start's output_tokens (1) is a placeholder; message_delta's is the total
    assert (r.usage_in, r.usage_out, r.finish_reason, r.done) == (18, 89, "tool_use", True)
    assert r.extra["details"] == {"cached_tokens": 5}


def test_anthropic_vllm_style_usage_on_message_delta_replaces_the_start():
    # vLLM's message_start carries zeros (its first chunk has no usage); message_delta the real counts
    body = sse(
        [
            {"type": "message_start", "message": {"usage": {"input_tokens": 0, "output_tokens": 0}}},
            anth_delta("text_delta", "text", "A"),
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"input_tokens": 31, "output_tokens": 1},
            },
            {"type": "message_stop"},
        ]
    )
    r = run("anthropic-messages", body)
    assert (r.usage_in, r.usage_out) == (31, 1)
    # and a zero on message_delta does not undo message_start's count
    zero = body.replace(b'"input_tokens":0,', b'"input_tokens":7,').replace(b'"input_tokens":31', b'"input_tokens":0')
    assert run("anthropic-messages", zero).usage_in == 7


def test_anthropic_error_event_ends_without_message_stop():
    body = sse(
        [
            {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
            anth_delta("text_delta", "text", "Hel"),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ]
    )
    r = run("anthropic-messages", body)
    assert r.error == "Overloaded" and not r.done and r.n_chunks == 1
    assert run("anthropic-messages", sse([{"error": {"type": "x", "message": "untyped"}}])).error == "untyped"


def sg(text, count, finish=None, **meta):
    return {
        "text": text,
        "meta_info": {
            "id": "r",
            "finish_reason": finish,
            "prompt_tokens": 4,
            "completion_tokens": count,
            "cached_tokens": 0,
            **meta,
        },
    }


def test_sglang_cumulative_and_incremental_text_read_the_same():
    cumulative = sse(
        [sg("A", 1), sg("A b", 2), sg("A b b", 4), sg("A b b", 5, {"type": "length", "length": 5}), b"[DONE]"],
        named=False,
    )
    incremental = sse(
        [sg("A", 1), sg(" b", 2), sg(" b", 4), sg("", 5, {"type": "length", "length": 5}), b"[DONE]"], named=False
    )
    a, b = run("sglang-generate", cumulative), run("sglang-generate", incremental)
    assert a == b
    assert a.text == "A b b" and a.kinds == [CONTENT] * 4 + [NO_TOKEN]
    assert a.cont_tokens == [1, 1, 2, 1] and a.tokens() == (5, SOURCE_USAGE, [1, 1, 2, 1])
    assert (a.usage_in, a.usage_out, a.finish_reason, a.done) == (4, 5, "length", True)


def test_sglang_without_counts_counts_events_with_new_text():
    body = sse([{"text": "A"}, {"text": "A b"}, {"text": "A b"}, {"text": "A b c"}, b"[DONE]"], named=False)
    r = run("sglang-generate", body)
    assert r.kinds == [CONTENT, CONTENT, NO_TOKEN, CONTENT, NO_TOKEN] and r.usage_out is None
    assert r.tokens() == (3, SOURCE_CHUNKS, [1, 1, 1])


def test_sglang_abort_is_an_error_and_a_missing_done_is_not_the_end():
    r = run(
        "sglang-generate",
        sse([sg("A", 1), sg("A", 1, {"type": "abort", "message": "Abort before prefill"}), b"[DONE]"], named=False),
    )
    assert r.error == "Abort before prefill" and r.finish_reason == "abort" and r.done
    assert not run("sglang-generate", sse([sg("A", 1, {"type": "stop", "matched": 2})], named=False)).done


# --- wrong types, bad counts, invalid payloads -------------------------------------------------

WRONG = [
    ("openai-responses", {"type": "response.output_text.delta", "delta": 5}),
    ("openai-responses", {"type": "response.reasoning_text.delta", "delta": ["x"]}),
    ("openai-responses", {"type": "response.function_call_arguments.delta", "delta": {"a": 1}}),
    ("openai-responses", {"type": "response.completed", "response": "done"}),
    ("openai-responses", {"type": "response.completed", "response": {"usage": [1]}}),
    ("openai-responses", {"type": "response.completed", "response": {"usage": {"output_tokens": "12"}}}),
    ("openai-responses", {"type": "response.completed", "response": {"usage": {"output_tokens": 1.0}}}),
    ("openai-responses", {"type": "response.completed", "response": {"usage": {"output_tokens": True}}}),
    ("openai-responses", {"type": "response.completed", "response": {"usage": {"input_tokens": -1}}}),
    ("openai-responses", {"type": "response.completed", "response": {"usage": {"output_tokens": MAX_TOKEN_COUNT + 1}}}),
    ("openai-responses", {"type": "response.completed", "response": {"usage": {"input_tokens_details": 3}}}),
    (
        "openai-responses",
        {"type": "response.completed", "response": {"usage": {"output_tokens_details": {"reasoning_tokens": -2}}}},
    ),
    ("openai-responses", {"type": "response.completed", "response": {"status": 1}}),
    ("openai-responses", {"type": "response.incomplete", "response": {"incomplete_details": "x"}}),
    ("openai-responses", {"type": "response.completed", "timings": 7}),
    ("openai-responses", {"type": 3}),
    ("anthropic-messages", {"type": "content_block_delta", "delta": "x"}),
    ("anthropic-messages", {"type": "content_block_delta", "delta": {"type": "text_delta", "text": 1}}),
    ("anthropic-messages", {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": [1]}}),
    (
        "anthropic-messages",
        {"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": {"a": 1}}},
    ),
    ("anthropic-messages", {"type": "content_block_delta", "delta": {"type": 5}}),
    ("anthropic-messages", {"type": "message_start", "message": [1]}),
    ("anthropic-messages", {"type": "message_start", "message": {"usage": "u"}}),
    ("anthropic-messages", {"type": "message_start", "message": {"usage": {"input_tokens": "3"}}}),
    (
        "anthropic-messages",
        {"type": "message_start", "message": {"usage": {"input_tokens": 1, "cache_read_input_tokens": -1}}},
    ),
    (
        "anthropic-messages",
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": MAX_TOKEN_COUNT, "cache_read_input_tokens": 1}},
        },
    ),
    ("anthropic-messages", {"type": "message_delta", "delta": ["x"]}),
    ("anthropic-messages", {"type": "message_delta", "delta": {"stop_reason": 1}}),
    ("anthropic-messages", {"type": "message_delta", "usage": {"output_tokens": 2.5}}),
    ("anthropic-messages", {"type": "message_delta", "usage": {"output_tokens": -3}}),
    ("anthropic-messages", {"type": ["error"]}),
    ("sglang-generate", {"text": 5}),
    ("sglang-generate", {"text": "a", "meta_info": "m"}),
    ("sglang-generate", {"text": "a", "meta_info": {"completion_tokens": "1"}}),
    ("sglang-generate", {"text": "a", "meta_info": {"completion_tokens": -1}}),
    ("sglang-generate", {"text": "a", "meta_info": {"completion_tokens": 1, "finish_reason": 3}}),
    ("sglang-generate", {"text": "a", "meta_info": {"completion_tokens": 1, "finish_reason": {"type": 1}}}),
    ("sglang-generate", {"text": "a", "meta_info": {"finish_reason": "length", "prompt_tokens": 1.5}}),
    ("sglang-generate", {"text": "a", "meta_info": {"finish_reason": "length", "cached_tokens": False}}),
]


@pytest.mark.parametrize("api, event", WRONG, ids=[f"{a}-{i}" for i, (a, _) in enumerate(WRONG)])
def test_wrong_types_and_bad_counts_are_protocol_errors(api, event):
    with pytest.raises(ProtocolError):
        get_adapter(api).feed(orjson.dumps(event), StreamState(keep_text=True))


@pytest.mark.parametrize("api", NEW_APIS)
def test_invalid_payloads(api):
    adapter = get_adapter(api)
    payload = b'{"type": "response.output_text.delta", "delta": ' + b"x" * 500
    with pytest.raises(ProtocolError) as exc:
        adapter.feed(payload, StreamState())
    assert repr(payload[:200]) in str(exc.value)
    for bad in (b"[1, 2]", b'"text"', b"\xff\xfe", b"NaN"):
        with pytest.raises(ProtocolError):
            adapter.feed(bad, StreamState())
    assert adapter.feed(b"", StreamState()) == NO_TOKEN  # an empty data: line is a keep-alive
    state = StreamState()
    assert adapter.feed(b"[DONE]", state) == NO_TOKEN and state.done
    assert adapter.feed(b'{"type": "some.future.event", "x": [1]}', StreamState()) == NO_TOKEN


def test_fuzzed_json_raises_only_protocol_errors():
    """Random JSON (of the shapes these adapters read, any types anywhere): ProtocolError or a
    sane state, nothing else."""
    rng = random.Random(13)
    leaves = [None, True, 0, -1, 7, 2**64, 1.5, "", "x", "text_delta", [], {}, [1], {"a": 1}]
    keys = [
        "type",
        "delta",
        "text",
        "thinking",
        "partial_json",
        "response",
        "usage",
        "output_tokens",
        "input_tokens",
        "cache_read_input_tokens",
        "message",
        "error",
        "meta_info",
        "completion_tokens",
        "finish_reason",
        "prompt_tokens",
        "cached_tokens",
        "status",
        "incomplete_details",
        "timings",
        "input_tokens_details",
    ]
    types = [
        "response.output_text.delta",
        "response.completed",
        "response.failed",
        "error",
        "content_block_delta",
        "message_start",
        "message_delta",
        "message_stop",
    ]

    def value(depth):
        if depth > 2 or rng.random() < 0.4:
            return rng.choice(leaves + types)
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(1, 4))}

    for _ in range(3000):
        obj = value(0)
        if isinstance(obj, dict) and rng.random() < 0.7:
            obj["type"] = rng.choice(types)
        for api in NEW_APIS:
            state = StreamState(keep_text=True)
            try:
                kind = get_adapter(api).feed(json.dumps(obj).encode(), state)
            except ProtocolError:
                continue
            assert kind in (NO_TOKEN, CONTENT, REASONING)
            for count in (state.usage_in, state.usage_out, state.cont_out):
                assert count is None or (type(count) is int and 0 <= count <= MAX_TOKEN_COUNT)
            assert state.error is None or type(state.error) is str
            assert all(type(t) is str for t in state.text + state.reasoning)
            assert all(k in ("timings", "details") and type(v) is dict for k, v in state.extra.items())


# --- requests, headers, registry -------------------------------------------------------------


def body_of(api, **kw):
    path, raw = get_adapter(api).request(RequestSpec(**kw))
    return path, orjson.loads(raw)


def test_responses_request():
    path, body = body_of("openai-responses", model="m", prompt="Hi", max_tokens=16)
    assert path == "/v1/responses"
    assert body == {"model": "m", "input": "Hi", "max_output_tokens": 16, "stream": True}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Yo"}]},
    ]
    _, body = body_of("openai-responses", messages=messages, max_tokens=4, force_length=True)
    assert body["input"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Yo"}]},
    ]
    assert body["ignore_eos"] is True and "min_tokens" not in body and "model" not in body


def test_anthropic_request_and_headers():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    path, body = body_of("anthropic-messages", model="claude", messages=messages, max_tokens=8, force_length=True)
    assert path == "/v1/messages"
    assert body == {
        "model": "claude",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 8,
        "stream": True,
        "ignore_eos": True,
    }
    _, body = body_of("anthropic-messages", prompt="Hi")
    assert body["messages"] == [{"role": "user", "content": "Hi"}] and body["max_tokens"] > 0  # always sent
    adapter = get_adapter("anthropic-messages")
    assert request_headers(adapter, "sk-1") == {"anthropic-version": "2023-06-01", "x-api-key": "sk-1"}
    assert request_headers(adapter, None) == {"anthropic-version": "2023-06-01"}
    for api in ("openai-responses", "sglang-generate", "openai-chat"):
        assert request_headers(get_adapter(api), "k") == {"Authorization": "Bearer k"}
        assert request_headers(get_adapter(api), None) == {}


def test_sglang_request():
    path, body = body_of("sglang-generate", model="ignored", prompt="Hi", max_tokens=20, force_length=True)
    assert path == "/generate"
    assert body == {"text": "Hi", "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}, "stream": True}
    _, body = body_of(
        "sglang-generate",
        messages=[{"role": "user", "content": "Hello"}],
        extra_body={"sampling_params": {"temperature": 0}},
    )
    assert body["text"] == "Hello" and body["sampling_params"] == {"temperature": 0}


def test_registry():
    for api in NEW_APIS:
        adapter = get_adapter(api)
        assert api in API_NAMES and adapter.name == api and adapter.end_marker is True
        assert adapter.framing == "sse"
    assert {"openai-responses", "anthropic-messages"} <= set(CHAT_APIS) & set(OPENAI_APIS)
    assert "sglang-generate" not in CHAT_APIS and "sglang-generate" not in OPENAI_APIS


# --- end to end: StreamClient against the simulator -----------------------------------------

ids = itertools.count()


@pytest.fixture(scope="module")
def sim(sims):
    return sims(slots=8, iter_base=0.002, iter_per_seq=0.0002, token_log=True)  # test_client's too


def ground_truth(sim, rid):
    for line in sim.token_log.read_text().splitlines():
        rec = json.loads(line)
        if rec["id"] == rid:
            return rec
    raise AssertionError(f"{rid} not in the simulator's token log")


def spec(n, chat=True):
    if chat:
        return RequestSpec(
            model="sim",
            messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three"}],
            max_tokens=n,
            force_length=True,
        )
    return RequestSpec(model="sim", prompt="one two three four five", max_tokens=n, force_length=True)


@pytest.mark.parametrize("api", NEW_APIS)
def test_end_to_end_against_the_simulator(sim, api):
    rid = f"e2e-{api}-{next(ids)}"
    rec = client_for(sim.url, api).send(spec(12, chat=api in CHAT_APIS), rid)
    assert rec.outcome is Outcome.OK, rec.error
    truth = ground_truth(sim, rid)
    assert rec.n_out == truth["n_out"] == 12 and rec.n_out_source == "usage"
    assert rec.n_in == truth["n_in"] == 5 and not rec.length_mismatch
    assert len(rec.chunk_times) == len(truth["t_tokens"]) == 12 and rec.chunk_tokens == [1] * 12
    assert rec.t_sent < rec.t_headers <= rec.t_first == rec.chunk_times[0] <= rec.chunk_times[-1] <= rec.t_end
    assert rec.t_first_content == rec.t_first
    assert len(rec.text.split()) == 12
    # the client's gaps follow the server's (one token per engine iteration)
    server_span = truth["t_tokens"][-1] - truth["t_tokens"][0]
    client_span = rec.chunk_times[-1] - rec.chunk_times[0]
    assert abs(client_span - server_span) < 0.05
    # the connection went back to the pool: the next request reuses it
    assert client_for(sim.url, api).send(spec(2, chat=api in CHAT_APIS), f"again-{next(ids)}").ok


@pytest.mark.parametrize("api", NEW_APIS)
@pytest.mark.parametrize(
    "fault, outcome, tokens",
    [
        ("stream_error@3", Outcome.STREAM_ERROR, 3),
        ("truncate@4", Outcome.TRUNCATED, 4),
        ("http500", Outcome.HTTP_ERROR, 0),
    ],
)
def test_faults_against_the_simulator(sim, api, fault, outcome, tokens):
    rec = client_for(sim.url, api, headers={"x-sim-fault": fault}).send(
        spec(8, chat=api in CHAT_APIS), f"f-{next(ids)}"
    )
    assert rec.outcome is outcome, rec.error
    assert len(rec.chunk_times) == tokens
    if outcome is Outcome.STREAM_ERROR:
        assert rec.error == "simulated stream error after 3 tokens"


def test_simulator_eos_draws_end_early_with_the_server_count(tmp_path):
    from llm_locust.sim.process import SimProcess

    log = tmp_path / "t.jsonl"
    with SimProcess(slots=4, iter_base=0.001, iter_per_seq=0.0, eos_mean=4, seed=3, token_log=str(log)) as s:
        s.token_log = log
        for api in NEW_APIS:
            for _ in range(4):
                rid = f"eos-{api}-{next(ids)}"
                sp = spec(16, chat=api in CHAT_APIS)
                sp.force_length = False
                rec = client_for(s.url, api).send(sp, rid)
                truth = ground_truth(s, rid)
                assert rec.ok and rec.n_out == truth["n_out"] == len(rec.chunk_times) <= 16
                assert (
                    rec.finish_reason
                    in {
                        "openai-responses": ("incomplete", "completed", "max_output_tokens"),
                        "anthropic-messages": ("max_tokens", "end_turn"),
                        "sglang-generate": ("length", "stop"),
                    }[api]
                )


def post(url, path, body):
    host, port = url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_simulator_non_streaming_and_bad_requests(sim):
    status, obj = post(sim.url, "/v1/responses", {"input": "a b", "max_output_tokens": 3})
    assert status == 200 and obj["usage"]["output_tokens"] == 3 and obj["usage"]["input_tokens"] == 2
    status, obj = post(sim.url, "/v1/messages", {"messages": [{"role": "user", "content": "a"}], "max_tokens": 2})
    assert status == 200 and obj["usage"] == {"input_tokens": 1, "output_tokens": 2}
    assert obj["stop_reason"] == "max_tokens"
    status, obj = post(sim.url, "/generate", {"text": "a b c", "sampling_params": {"max_new_tokens": 4}})
    assert status == 200 and obj["meta_info"]["completion_tokens"] == 4 and len(obj["text"].split()) == 4
    assert post(sim.url, "/v1/messages", {"messages": [{"role": "user", "content": "a"}]})[0] == 400
    assert post(sim.url, "/v1/responses", {"max_output_tokens": 3})[0] == 400
    assert post(sim.url, "/generate", {"text": "a", "sampling_params": []})[0] == 400


def _sglang_state(body: bytes, keep_text: bool):
    adapter, decoder, state = (
        get_adapter("sglang-generate"),
        make_decoder(get_adapter("sglang-generate")),
        StreamState(keep_text),
    )
    kinds = [adapter.feed(p, state) for p in decoder.feed(body) + decoder.close()]
    return (
        kinds,
        list(state.cont_tokens),
        state.cont_out,
        state.usage_in,
        state.usage_out,
        state.usage_cached,
        state.finish_reason,
        state.error,
        state.done,
    )


def _long_sglang(n: int) -> bytes:
    words = ["Paris", " \\u00e9t\\u00e9", ' "quoted"', ' {"meta_info": 1}', " x"]
    events, text = [], ""
    for k in range(1, n + 1):
        text += words[k % len(words)]
        finish = {"type": "length", "length": n} if k == n else None
        events.append(
            {
                "text": text,
                "output_ids": list(range(k)),
                "meta_info": {
                    "id": "r",
                    "finish_reason": finish,
                    "prompt_tokens": 7,
                    "completion_tokens": k,
                    "cached_tokens": 3,
                },
                "index": 0,
            }
        )
    return sse(events + [b"[DONE]"], named=False)


@pytest.mark.parametrize("body", ["source", "error", "cumulative", "long", "nested", "no-counts"])
def test_sglang_counts_only_reading_agrees_with_reading_whole_events(body, monkeypatch):
    """Without the text kept, long events are read for their meta_info alone (cumulative text
    makes whole events dear); every count, kind, finish and error must be what reading each
    event whole gives, and anything unexpected must fall back to the whole read."""
    import llm_locust.protocols.sglang as sglang

    bodies = {
        "source": (APIS / "sglang_generate_source_example.sse").read_bytes(),
        "error": (APIS / "sglang_generate_error_source_example.sse").read_bytes(),
        "cumulative": sse(
            [
                sg("A", 1),
                sg("A b", 2),
                sg("A b b", 4),
                sg("A b b", 4),
                sg("A b b c", 5, {"type": "length", "length": 5}),
                b"[DONE]",
            ],
            named=False,
        ),
        "long": _long_sglang(300),
        # a meta_info key inside meta_info: the tail is not an object of its own -> whole read
        "nested": sse(
            [
                {"text": "A", "meta_info": {"completion_tokens": 1, "x": {"meta_info": {}}}},
                {"text": "A b", "meta_info": {"completion_tokens": 2, "finish_reason": "stop"}},
                b"[DONE]",
            ],
            named=False,
        ),
        "no-counts": sse([{"text": "A"}, {"text": "A b", "meta_info": {}}, b"[DONE]"], named=False),
    }
    whole = _sglang_state(bodies[body], keep_text=True)
    monkeypatch.setattr(sglang, "COUNTS_ONLY_FROM", 0)
    assert _sglang_state(bodies[body], keep_text=False) == whole
    monkeypatch.setattr(sglang, "COUNTS_ONLY_FROM", 1 << 30)
    assert _sglang_state(bodies[body], keep_text=False) == whole


def test_sglang_counts_only_reading_is_taken_and_still_checks_the_last_event(monkeypatch):
    import llm_locust.protocols.sglang as sglang

    monkeypatch.setattr(sglang, "COUNTS_ONLY_FROM", 0)
    whole_reads = []
    real = sglang.event_object
    monkeypatch.setattr(sglang, "event_object", lambda p, s: whole_reads.append(p) or real(p, s))
    kinds, *_ = _sglang_state(_long_sglang(50), keep_text=False)
    assert kinds == [CONTENT] * 50 + [NO_TOKEN]
    assert len(whole_reads) == 2 and whole_reads[-1] == b"[DONE]"  # the last event (finish) and [DONE]
    # a broken last event is still an error, as a whole read finds it
    body = _long_sglang(3).replace(b'"length":3}', b'"length":3')
    with pytest.raises(ProtocolError):
        _sglang_state(body, keep_text=False)
