"""OpenAI-compatible streaming: /v1/completions and /v1/chat/completions.

Covers what vLLM, SGLang, TGI's Messages API, llama.cpp's llama-server and llama-cpp-python
send on these routes: role-only and empty-text chunks, `reasoning` / `reasoning_content`
deltas, usage on a separate empty-choices chunk or on the finish chunk, running usage counts
(vLLM `continuous_usage_stats`), llama.cpp `timings`, and error objects inside a 200 stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import (
    CONTENT,
    MAX_TOKEN_COUNT,
    NO_TOKEN,
    REASONING,
    TOOL_CALL,
    ProtocolError,
    RequestSpec,
    StreamState,
)
from llm_locust.protocols.token_reads import text_template

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_DONE = b"[DONE]"
ERROR_TEXT_LIMIT = 500  # characters of an error message kept


def load_object(payload: bytes) -> dict[str, Any] | None:
    """One event payload as a JSON object; None for an empty payload (keep-alive).

    ProtocolError, quoting the start of the payload, when it is not a JSON object.
    """
    try:
        obj = _loads(payload)
    except _JSONDecodeError:
        if not payload.strip():
            return None
        raise ProtocolError(f"invalid JSON payload: {payload[:200]!r}") from None
    if type(obj) is not dict:
        raise ProtocolError(f"payload is not a JSON object: {payload[:200]!r}")
    return obj


def event_object(payload: bytes, state: StreamState) -> dict[str, Any] | None:
    """One SSE event's JSON object for the adapters whose events are objects (Responses,
    Anthropic, SGLang); None for `[DONE]` (marks the stream done) and for an empty payload;
    ProtocolError, quoting the payload, for anything else."""
    try:
        obj = _loads(payload)
    except _JSONDecodeError:
        if payload.strip() == b"[DONE]":
            state.done = True
            return None
        obj = None
    if type(obj) is not dict:
        load_object(payload)  # raises ProtocolError unless the payload is empty
        return None
    return obj


def brief(value: Any, limit: int = 60) -> str:
    """A short printable form of a JSON value, for error texts (never raises)."""
    if type(value) is str:
        text = repr(value[: limit + 1])
    else:
        try:
            text = orjson.dumps(value).decode()
        except (TypeError, ValueError):  # e.g. nested deeper than orjson writes
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_JSON_TYPE = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def wrong_type(field: str, value: Any, expected: str) -> ProtocolError:
    """The error for a field of the wrong JSON type."""
    got = _JSON_TYPE.get(type(value), type(value).__name__)
    return ProtocolError(f"{field} is {got} ({brief(value)}), not {expected}")


def token_count(value: Any, field: str) -> int:
    """A token count the server reported: a non-negative integer (not a boolean), believable."""
    if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    if type(value) is int:
        raise ProtocolError(f"{field} is {value}, not a token count (0..{MAX_TOKEN_COUNT})")
    raise wrong_type(field, value, "a non-negative integer")


def text_field(value: Any, field: str) -> str:
    """A text field that is set (truthy): it must be a string."""
    if type(value) is str:
        return value
    raise wrong_type(field, value, "a string")


def error_message(err: Any) -> str:
    """The message text of an `error` value: a string, or an object with `message`; bounded."""
    if isinstance(err, dict):
        msg = err.get("message")
        text = (msg if type(msg) is str else brief(msg, ERROR_TEXT_LIMIT)) if msg else brief(err, ERROR_TEXT_LIMIT)
    elif type(err) is str:
        text = err
    else:
        text = brief(err, ERROR_TEXT_LIMIT)
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 3] + "..."


def set_error(state: StreamState, err: Any) -> None:
    """Record an error the server reported inside the stream; the first one is kept."""
    if state.error is None:
        state.error = error_message(err)


def messages_to_prompt(messages: list[dict[str, Any]]) -> str:
    """A chat message list as one plain prompt, for routes that take text only."""
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content:
            parts.append(str(content))
    return "\n".join(parts)


def spec_prompt(spec: RequestSpec) -> str:
    if spec.prompt is not None:
        return spec.prompt
    return messages_to_prompt(spec.messages or [])


def spec_messages(spec: RequestSpec) -> list[dict[str, Any]]:
    if spec.messages is not None:
        return spec.messages
    return [{"role": "user", "content": spec.prompt or ""}]


class OpenAIAdapter:
    framing = "sse"
    end_marker = True

    def __init__(self, name: str, path: str, chat: bool) -> None:
        self.name = name
        self.path = path
        self.chat = chat
        self._text_key = b'"content":"' if chat else b'"text":"'

    def __repr__(self) -> str:
        return f"OpenAIAdapter({self.name!r})"

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        body: dict[str, Any] = {}
        if spec.model is not None:
            body["model"] = spec.model
        if self.chat:
            body["messages"] = spec_messages(spec)
        else:
            body["prompt"] = spec_prompt(spec)
        if spec.max_tokens is not None:
            body["max_tokens"] = spec.max_tokens
        body["stream"] = True
        stream_options = {"include_usage": True}
        if spec.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        body["stream_options"] = stream_options
        if spec.force_length:
            body["ignore_eos"] = True
            if spec.max_tokens is not None:
                body["min_tokens"] = spec.max_tokens
        body.update(spec.extra_body)
        return self.path, orjson.dumps(body)

    def feed(self, payload: bytes, state: StreamState) -> int:  # noqa: C901 - one pass over one event
        try:
            obj = _loads(payload)
        except _JSONDecodeError:
            if payload.strip() == _DONE:
                state.done = True
                return NO_TOKEN
            obj = None
        if type(obj) is not dict:
            load_object(payload)  # raises ProtocolError unless the payload is empty
            return NO_TOKEN

        # Every field read is type-checked where it is used (a cheap `type(x) is` test):
        # a server's wrong JSON type is a ProtocolError, never a TypeError out of here.
        kind = NO_TOKEN
        finished = False
        choices = obj.get("choices")
        if choices:
            if type(choices) is not list:
                raise wrong_type("choices", choices, "an array")
            for choice in choices:
                if type(choice) is not dict:
                    raise wrong_type("choices[]", choice, "an object")
                delta = choice.get("delta")
                if delta is None:
                    text = choice.get("text")
                    reasoning = None
                else:
                    if type(delta) is not dict:
                        raise wrong_type("delta", delta, "an object")
                    text = delta.get("content")
                    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                    calls = delta.get("tool_calls")
                    if not text and calls:
                        kind = TOOL_CALL  # generated tool-call tokens; no visible text
                        if state.keep_text:
                            _collect_tool_calls(calls, state)
                if text:
                    if type(text) is not str:
                        raise wrong_type("content" if delta is not None else "text", text, "a string")
                    kind = CONTENT
                    if state.keep_text:
                        state.text.append(text)
                if reasoning:
                    if type(reasoning) is not str:
                        raise wrong_type("reasoning", reasoning, "a string")
                    if not kind:
                        kind = REASONING
                    if state.keep_text:
                        state.reasoning.append(reasoning)
                reason = choice.get("finish_reason")
                if reason:
                    if type(reason) is not str:
                        raise wrong_type("finish_reason", reason, "a string")
                    state.finish_reason = reason
                    finished = True
        else:
            err = obj.get("error")
            if err is not None:
                set_error(state, err)
            elif obj.get("object") == "error":  # older vLLM: a bare ErrorResponse
                set_error(state, obj.get("message") or "error")

        count = None
        usage = obj.get("usage")
        if usage:
            if type(usage) is not dict:
                raise wrong_type("usage", usage, "an object")
            prompt = usage.get("prompt_tokens")
            if prompt is not None:
                state.usage_in = token_count(prompt, "usage.prompt_tokens")
                details = usage.get("prompt_tokens_details")
                if details:  # vLLM sends null unless prefix caching stats are on
                    if type(details) is not dict:
                        raise wrong_type("usage.prompt_tokens_details", details, "an object")
                    cached = details.get("cached_tokens")
                    if cached is not None:
                        state.usage_cached = token_count(cached, "usage.prompt_tokens_details.cached_tokens")
            count = usage.get("completion_tokens")
            if count is not None:
                if type(count) is not int or count < 0 or count > MAX_TOKEN_COUNT:
                    token_count(count, "usage.completion_tokens")  # raises
                # a usage-only chunk or usage on the finish chunk is final; else a running count
                if finished or not choices:
                    state.usage_out = count
        timings = obj.get("timings")
        if timings:
            if type(timings) is not dict:
                raise wrong_type("timings", timings, "an object")
            state.extra["timings"] = timings
            if state.usage_cached is None:
                cache_timings(timings, state)
        if kind and not state.cont_broken:
            _count_chunk(state, count)
        return kind

    def token_template(self, payload: bytes, state: StreamState) -> tuple[bytes, bytes] | None:
        """The bytes before and after the text of the token event just fed (`payload`), for
        reading the stream's later one-token reads without parsing them (protocols.token_reads);
        None unless feeding that event again with another text would change nothing but add a
        token: the text is not kept, no running count is kept (the first token event without
        one ended them), and it set no finish, final count, error or end."""
        if (
            state.keep_text
            or not state.cont_broken
            or state.finish_reason is not None
            or state.usage_out is not None
            or state.error is not None
            or state.done
        ):
            return None
        return text_template(payload, self._text_key)


def cache_timings(timings: dict[str, Any], state: StreamState) -> None:
    """llama.cpp's `timings.cache_n` (prompt tokens reused from the slot's cache) as the
    stream's cached prompt tokens."""
    cached = timings.get("cache_n")
    if cached is not None:
        state.usage_cached = token_count(cached, "timings.cache_n")


def _count_chunk(state: StreamState, count: int | None) -> None:
    """Continuous usage: n_k of this token-bearing chunk from the running completion count.

    The first token-bearing chunk without a usable count ends the n_k list for good.
    """
    prev = state.cont_out or 0
    if count is None or count <= prev:
        state.cont_tokens.clear()
        state.cont_broken = True
        return
    state.cont_tokens.append(count - prev)
    state.cont_out = count


def parse_models(body: bytes) -> list[str]:
    """Model ids from a `/v1/models` reply (`data[].id`; llama-server's `models[]` too).

    Entries of the wrong JSON type are skipped; a body that is not a JSON object raises
    ProtocolError."""
    obj = load_object(body) or {}
    data = obj.get("data")
    ids = (
        [m["id"] for m in data if isinstance(m, dict) and m.get("id") and type(m["id"]) is str]
        if type(data) is list
        else []
    )
    models = obj.get("models")
    if not ids and type(models) is list:
        for m in models:
            if isinstance(m, dict):
                name = m.get("model") or m.get("name")
                if name and type(name) is str:
                    ids.append(name)
    return ids


COMPLETIONS = OpenAIAdapter("openai-completions", "/v1/completions", chat=False)
CHAT = OpenAIAdapter("openai-chat", "/v1/chat/completions", chat=True)


def _collect_tool_calls(calls: Any, state: StreamState) -> None:
    """Assemble streamed tool calls (kept only with the text): each delta names its call by
    `index` and carries pieces of the function's name and arguments."""
    if type(calls) is not list:
        raise wrong_type("tool_calls", calls, "an array")
    kept = state.extra.setdefault("tool_calls", [])
    for call in calls:
        if type(call) is not dict:
            raise wrong_type("tool_calls[]", call, "an object")
        index = call.get("index", len(kept))
        if type(index) is not int or not 0 <= index < 1024:
            raise wrong_type("tool_calls[].index", index, "a small whole number")
        while len(kept) <= index:
            kept.append({"id": None, "name": "", "arguments": ""})
        target = kept[index]
        if type(call.get("id")) is str:
            target["id"] = call["id"]
        fn = call.get("function")
        if fn is not None:
            if type(fn) is not dict:
                raise wrong_type("tool_calls[].function", fn, "an object")
            for key in ("name", "arguments"):
                piece = fn.get(key)
                if piece is not None:
                    if type(piece) is not str:
                        raise wrong_type(f"tool_calls[].function.{key}", piece, "a string")
                    target[key] += piece
