"""Anthropic Messages API streaming: POST /v1/messages with `stream: true`.

Served by Anthropic, llama-server and vLLM alike. Every request carries `x-api-key` (when there
is a key) and `anthropic-version: 2023-06-01` (the adapter's `headers(api_key)`); `max_tokens`
is required. Events (`event: <type>` then `data: {"type": "<type>", ...}`; the data's `type`
is what counts):
  - `message_start`: `message.usage` with `input_tokens` (the prompt tokens NOT read from the
    cache), `cache_read_input_tokens`, `cache_creation_input_tokens`: the prompt is their sum;
  - `content_block_start` / `content_block_stop`: no tokens;
  - `content_block_delta`: `delta.type` `text_delta` (`text`: visible output),
    `thinking_delta` (`thinking`: reasoning), `input_json_delta` (`partial_json`: tool-use
    tokens, counted as output, no visible text); `signature_delta`, `citations_delta`: none;
  - `message_delta`: `delta.stop_reason` and `usage.output_tokens` (cumulative: the last is
    the total; vLLM also repeats the input counts here, which then replace message_start's);
  - `message_stop`: the end marker; `ping`: keep-alive;
  - `error` (`{"type": "error", "error": {"type", "message"}}`): an error inside the stream.
Cache reads go to `state.usage_cached` (and `state.extra["details"]["cached_tokens"]`), from
message_start, or from message_delta when it repeats them (a zero there does not undo a count).

Exact length: llama-server takes `ignore_eos: true` here; vLLM's Messages route drops unknown
fields (its length check reports requests that stopped early), Anthropic refuses none silently.
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
from llm_locust.protocols.openai import event_object, set_error, spec_messages, token_count, wrong_type
from llm_locust.protocols.token_reads import text_template

ANTHROPIC_VERSION = "2023-06-01"
# max_tokens is required by the Messages API; sent when the spec gives none
DEFAULT_MAX_TOKENS = 4096


def split_system(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Anthropic takes system text apart (`system`) and user/assistant turns in `messages`;
    chat content parts of type "text" pass as they are (the same shape)."""
    system = []
    turns = []
    for message in messages:
        if message.get("role") in ("system", "developer"):
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if content:
                system.append(str(content))
        else:
            turns.append(message)
    return ("\n".join(system) if system else None), turns


class AnthropicAdapter:
    name = "anthropic-messages"
    framing = "sse"
    end_marker = True
    path = "/v1/messages"
    # a text delta on the wire: its event line, then its data (protocols.token_reads)
    token_event_head = b"event: content_block_delta\ndata: "

    def __repr__(self) -> str:
        return f"AnthropicAdapter({self.name!r})"

    def headers(self, api_key: str | None) -> dict[str, str]:
        head = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            head["x-api-key"] = api_key
        return head

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        body: dict[str, Any] = {}
        if spec.model is not None:
            body["model"] = spec.model
        system, turns = split_system(spec_messages(spec))
        if system is not None:
            body["system"] = system
        body["messages"] = turns
        body["max_tokens"] = spec.max_tokens if spec.max_tokens is not None else DEFAULT_MAX_TOKENS
        body["stream"] = True
        if spec.force_length:
            body["ignore_eos"] = True
        body.update(spec.extra_body)
        return self.path, orjson.dumps(body)

    def feed(self, payload: bytes, state: StreamState) -> int:  # noqa: C901 (per-event hot path: one pass over one event, no call per field)
        obj = event_object(payload, state)
        if obj is None:
            return NO_TOKEN
        typ = obj.get("type")
        if typ == "content_block_delta":
            delta = obj.get("delta")
            if type(delta) is not dict:
                raise wrong_type("delta", delta, "an object")
            dtype = delta.get("type")
            if dtype == "text_delta":
                text = delta.get("text")
                if not text:
                    return NO_TOKEN
                if type(text) is not str:
                    raise wrong_type("delta.text", text, "a string")
                if state.keep_text:
                    state.text.append(text)
                return CONTENT
            if dtype == "thinking_delta":
                text = delta.get("thinking")
                if not text:
                    return NO_TOKEN
                if type(text) is not str:
                    raise wrong_type("delta.thinking", text, "a string")
                if state.keep_text:
                    state.reasoning.append(text)
                return REASONING
            if dtype == "input_json_delta":
                text = delta.get("partial_json")
                if not text:
                    return NO_TOKEN
                if type(text) is not str:
                    raise wrong_type("delta.partial_json", text, "a string")
                return TOOL_CALL
            if dtype is not None and type(dtype) is not str:
                raise wrong_type("delta.type", dtype, "a string")
            return NO_TOKEN  # signature_delta, citations_delta, unknown kinds
        if typ == "message_delta":
            delta = obj.get("delta")
            if delta:
                if type(delta) is not dict:
                    raise wrong_type("delta", delta, "an object")
                reason = delta.get("stop_reason")
                if reason:
                    if type(reason) is not str:
                        raise wrong_type("delta.stop_reason", reason, "a string")
                    state.finish_reason = reason
            usage = obj.get("usage")
            if usage:
                _usage(usage, state, final=True)
        elif typ == "message_start":
            message = obj.get("message")
            if message:
                if type(message) is not dict:
                    raise wrong_type("message", message, "an object")
                usage = message.get("usage")
                if usage:
                    _usage(usage, state, final=False)
        elif typ == "message_stop":
            state.done = True
        elif typ == "error":
            err = obj.get("error")
            set_error(state, err if err is not None else obj)
        elif typ is not None and type(typ) is not str:
            raise wrong_type("type", typ, "a string")
        elif typ is None and obj.get("error") is not None:  # an untyped error object
            set_error(state, obj["error"])
        return NO_TOKEN

    def token_template(self, payload: bytes, state: StreamState) -> tuple[bytes, bytes] | None:
        """The bytes before and after the text of the text delta just fed (`payload`), for
        reading the stream's later text deltas without parsing them (protocols.token_reads);
        None when the text is kept. A text delta changes nothing in the state but the count of
        tokens, whatever its (non-empty) text, so the same bytes around another text are one
        more token and nothing else."""
        if state.keep_text:
            return None
        return text_template(payload, b'"text":"')


def _usage(usage: Any, state: StreamState, final: bool) -> None:
    """A usage object: prompt = input_tokens + cache reads + cache writes (when input_tokens is
    there); the output count only from message_delta (message_start's is a placeholder)."""
    if type(usage) is not dict:
        raise wrong_type("usage", usage, "an object")
    if final and usage.get("output_tokens") is not None:
        state.usage_out = token_count(usage["output_tokens"], "usage.output_tokens")
    cached = usage.get("cache_read_input_tokens")
    if cached is not None:
        cached = token_count(cached, "usage.cache_read_input_tokens")
        # a message_delta's zero does not undo message_start's count
        if not (final and cached == 0 and state.usage_cached):
            state.extra["details"] = {"cached_tokens": cached}
            state.usage_cached = cached
    if usage.get("input_tokens") is None:
        return
    total = token_count(usage["input_tokens"], "usage.input_tokens")
    if cached is not None:
        total += cached
    created = usage.get("cache_creation_input_tokens")
    if created is not None:
        total += token_count(created, "usage.cache_creation_input_tokens")
    if total > MAX_TOKEN_COUNT:
        raise ProtocolError(f"usage input tokens add up to {total}, not a token count (0..{MAX_TOKEN_COUNT})")
    if final and total == 0 and state.usage_in:
        return  # a message_delta's zero does not undo message_start's count
    state.usage_in = total


ANTHROPIC = AnthropicAdapter()
