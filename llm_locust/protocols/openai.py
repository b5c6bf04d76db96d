"""OpenAI-compatible streaming: /v1/completions and /v1/chat/completions.

Covers what vLLM, SGLang, TGI's Messages API, llama.cpp's llama-server and llama-cpp-python
send on these routes: role-only and empty-text chunks, `reasoning` / `reasoning_content`
deltas, usage on a separate empty-choices chunk or on the finish chunk, running usage counts
(vLLM `continuous_usage_stats`), llama.cpp `timings`, and error objects inside a 200 stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, REASONING, ProtocolError, RequestSpec, StreamState

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_DONE = b"[DONE]"


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


def error_message(err: Any) -> str:
    """The message text of an `error` value: a string, or an object with `message`."""
    if isinstance(err, dict):
        msg = err.get("message")
        if msg:
            return str(msg)
        return orjson.dumps(err).decode()
    return str(err)


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

    def feed(self, payload: bytes, state: StreamState) -> int:
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

        kind = NO_TOKEN
        finished = False
        choices = obj.get("choices")
        if choices:
            for choice in choices:
                delta = choice.get("delta")
                if delta is None:
                    text = choice.get("text")
                    reasoning = None
                else:
                    text = delta.get("content")
                    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                    if not text and delta.get("tool_calls"):
                        kind = CONTENT  # generated tool-call tokens; no visible text
                if text:
                    kind = CONTENT
                    if state.collect_text:
                        state.text.append(text)
                if reasoning:
                    if not kind:
                        kind = REASONING
                    if state.collect_text:
                        state.reasoning.append(reasoning)
                if choice.get("finish_reason"):
                    state.finish_reason = choice["finish_reason"]
                    finished = True
        else:
            err = obj.get("error")
            if err is not None:
                state.error = error_message(err)
            elif obj.get("object") == "error":  # older vLLM: a bare ErrorResponse
                state.error = str(obj.get("message") or "error")

        count = None
        usage = obj.get("usage")
        if usage:
            if usage.get("prompt_tokens") is not None:
                state.usage_in = usage["prompt_tokens"]
            count = usage.get("completion_tokens")
            # a usage-only chunk or usage on the finish chunk is final; else a running count
            if count is not None and (finished or not choices):
                state.usage_out = count
        timings = obj.get("timings")
        if timings:
            state.extra["timings"] = timings
        if kind and not state.cont_broken:
            _count_chunk(state, count)
        return kind


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
    """Model ids from a `/v1/models` reply (`data[].id`; llama-server's `models[]` too)."""
    obj = load_object(body) or {}
    ids = [m["id"] for m in obj.get("data") or [] if isinstance(m, dict) and m.get("id")]
    if not ids:
        for m in obj.get("models") or []:
            if isinstance(m, dict) and (m.get("model") or m.get("name")):
                ids.append(m.get("model") or m.get("name"))
    return ids


COMPLETIONS = OpenAIAdapter("openai-completions", "/v1/completions", chat=False)
CHAT = OpenAIAdapter("openai-chat", "/v1/chat/completions", chat=True)
