"""OpenAI Responses API streaming: POST /v1/responses with `stream: true`.

Typed events, `event: <type>` then `data: {"type": "<type>", ...}` (the data's `type` is what
counts: the `event:` line is not needed):
  - `response.output_text.delta` (and `response.refusal.delta`): visible output, `delta` text;
  - `response.reasoning_text.delta`, `response.reasoning_summary_text.delta`: reasoning, kept
    apart as the chat adapter keeps `reasoning_content`;
  - `response.function_call_arguments.delta` (and `response.custom_tool_call_input.delta`):
    generated tool-call tokens, counted as output, no visible text;
  - `response.completed` / `response.incomplete` / `response.failed`: the final event, with
    `response.usage` {input_tokens, input_tokens_details.cached_tokens, output_tokens,
    output_tokens_details.reasoning_tokens}; a failed response's `response.error.message` is the
    stream's error; llama-server adds a top-level `timings` object (as on its chat route);
  - `error` (`{"type": "error", "code", "message", ...}`): an error inside the 200 stream;
  - everything else (response.created, output_item.added, content_part.added, *.done ...)
    carries no new tokens.
There is no `[DONE]`: the final event is the end marker (a `[DONE]` some proxies add is taken
as one too). Usage details go to `state.extra["details"]` ({"cached_tokens", "reasoning_tokens"}).

Exact length: vLLM and llama-server take `ignore_eos: true` on this route (vLLM has no
`min_tokens` here: it would be ignored with a warning), so force_length sends only that.
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, REASONING, TOOL_CALL, RequestSpec, StreamState
from llm_locust.protocols.openai import event_object, set_error, spec_messages, token_count, wrong_type

# event type -> what its `delta` carries
_TEXT = ("response.output_text.delta", "response.refusal.delta")
_REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_TOOL = ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")
_FINAL = ("response.completed", "response.incomplete", "response.failed")


def input_items(spec: RequestSpec) -> str | list[dict[str, Any]]:
    """The Responses `input`: the prompt as a string, or the messages as input messages
    (chat content parts of type "text" become "input_text" / "output_text")."""
    if spec.messages is None:
        return spec.prompt or ""
    out = []
    for message in spec_messages(spec):
        content = message.get("content")
        if isinstance(content, list):
            part_type = "output_text" if message.get("role") == "assistant" else "input_text"
            content = [
                {"type": part_type, "text": p.get("text", "")} if isinstance(p, dict) and p.get("type") == "text" else p
                for p in content
            ]
            message = {**message, "content": content}
        out.append(message)
    return out


class ResponsesAdapter:
    name = "openai-responses"
    framing = "sse"
    end_marker = True
    path = "/v1/responses"

    def __repr__(self) -> str:
        return f"ResponsesAdapter({self.name!r})"

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        body: dict[str, Any] = {}
        if spec.model is not None:
            body["model"] = spec.model
        body["input"] = input_items(spec)
        if spec.max_tokens is not None:
            body["max_output_tokens"] = spec.max_tokens
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
        if typ in _TEXT:
            delta = obj.get("delta")
            if not delta:
                return NO_TOKEN
            if type(delta) is not str:
                raise wrong_type("delta", delta, "a string")
            if state.keep_text:
                state.text.append(delta)
            return CONTENT
        if typ in _REASONING:
            delta = obj.get("delta")
            if not delta:
                return NO_TOKEN
            if type(delta) is not str:
                raise wrong_type("delta", delta, "a string")
            if state.keep_text:
                state.reasoning.append(delta)
            return REASONING
        if typ in _TOOL:
            delta = obj.get("delta")
            if not delta:
                return NO_TOKEN
            if type(delta) is not str:
                raise wrong_type("delta", delta, "a string")
            return TOOL_CALL
        if typ in _FINAL:
            _final(obj, typ, state)
        elif typ == "error":
            err = obj.get("error")
            set_error(state, err if err is not None else obj)  # OpenAI: message at the top level
        elif typ is not None and type(typ) is not str:
            raise wrong_type("type", typ, "a string")
        elif obj.get("error") is not None:  # an untyped error object (a proxy, an older server)
            set_error(state, obj["error"])
        return NO_TOKEN


def _final(obj: dict[str, Any], typ: str, state: StreamState) -> None:
    state.done = True
    response = obj.get("response")
    if response is None:
        response = {}
    elif type(response) is not dict:
        raise wrong_type("response", response, "an object")
    state.finish_reason = _finish_reason(response, typ)
    usage = response.get("usage")
    if usage:
        _final_usage(usage, state)
    timings = obj.get("timings")
    if timings:
        if type(timings) is not dict:
            raise wrong_type("timings", timings, "an object")
        state.extra["timings"] = timings
    if typ == "response.failed":
        err = response.get("error")
        set_error(state, err if err else "response failed")


def _finish_reason(response: dict[str, Any], typ: str) -> str:
    """Why the response ended: incomplete_details.reason, else its status, else the event's last word."""
    status = response.get("status")
    if status is not None and type(status) is not str:
        raise wrong_type("response.status", status, "a string")
    reason = None
    incomplete = response.get("incomplete_details")
    if incomplete:
        if type(incomplete) is not dict:
            raise wrong_type("response.incomplete_details", incomplete, "an object")
        reason = incomplete.get("reason")
        if reason is not None and type(reason) is not str:
            raise wrong_type("response.incomplete_details.reason", reason, "a string")
    return reason or status or typ.rpartition(".")[2]


def _final_usage(usage: Any, state: StreamState) -> None:
    """The final event's usage: token counts, and its details (cached, reasoning) kept apart."""
    if type(usage) is not dict:
        raise wrong_type("response.usage", usage, "an object")
    if usage.get("output_tokens") is not None:
        state.usage_out = token_count(usage["output_tokens"], "usage.output_tokens")
    if usage.get("input_tokens") is not None:
        state.usage_in = token_count(usage["input_tokens"], "usage.input_tokens")
    details = {}
    for field, key in (("input_tokens_details", "cached_tokens"), ("output_tokens_details", "reasoning_tokens")):
        sub = usage.get(field)
        if sub:
            if type(sub) is not dict:
                raise wrong_type(f"usage.{field}", sub, "an object")
            if sub.get(key) is not None:
                details[key] = token_count(sub[key], f"usage.{field}.{key}")
    if details:
        state.extra["details"] = details
        if "cached_tokens" in details:
            state.usage_cached = details["cached_tokens"]


RESPONSES = ResponsesAdapter()
