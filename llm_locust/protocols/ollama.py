"""Ollama native streaming, newline-delimited JSON: POST /api/generate and /api/chat.

The final object has `done: true` with eval_count (output tokens), prompt_eval_count and
done_reason; it may still carry the last piece of text.
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, REASONING, RequestSpec, StreamState
from llm_locust.protocols.openai import load_object, set_error, spec_messages, spec_prompt, token_count, wrong_type


class OllamaAdapter:
    framing = "ndjson"
    end_marker = True

    def __init__(self, name: str, path: str, chat: bool) -> None:
        self.name = name
        self.path = path
        self.chat = chat

    def __repr__(self) -> str:
        return f"OllamaAdapter({self.name!r})"

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        # Ollama has no ignore_eos/min_tokens option: force_length cannot be honoured here.
        body: dict[str, Any] = {}
        if spec.model is not None:
            body["model"] = spec.model
        if self.chat:
            body["messages"] = spec_messages(spec)
        else:
            body["prompt"] = spec_prompt(spec)
        body["stream"] = True
        if spec.max_tokens is not None:
            body["options"] = {"num_predict": spec.max_tokens}
        body.update(spec.extra_body)
        return self.path, orjson.dumps(body)

    def feed(self, payload: bytes, state: StreamState) -> int:  # noqa: C901 (per-event hot path: one pass over one event, no call per field)
        obj = load_object(payload)
        if obj is None:
            return NO_TOKEN
        if self.chat:
            message = obj.get("message")
            if message:
                if type(message) is not dict:
                    raise wrong_type("message", message, "an object")
                text = message.get("content")
                thinking = message.get("thinking")
            else:
                text = thinking = None
        else:
            text = obj.get("response")
            thinking = obj.get("thinking")
        kind = NO_TOKEN
        if text:
            if type(text) is not str:
                raise wrong_type("content" if self.chat else "response", text, "a string")
            kind = CONTENT
            if state.keep_text:
                state.text.append(text)
        if thinking:
            if type(thinking) is not str:
                raise wrong_type("thinking", thinking, "a string")
            kind = kind or REASONING
            if state.keep_text:
                state.reasoning.append(thinking)
        if obj.get("done"):
            state.done = True
            reason = obj.get("done_reason")
            if reason:
                if type(reason) is not str:
                    raise wrong_type("done_reason", reason, "a string")
                state.finish_reason = reason
            if obj.get("eval_count") is not None:
                state.usage_out = token_count(obj["eval_count"], "eval_count")
            if obj.get("prompt_eval_count") is not None:
                state.usage_in = token_count(obj["prompt_eval_count"], "prompt_eval_count")
        err = obj.get("error")
        if err is not None:
            set_error(state, err)
        return kind


GENERATE = OllamaAdapter("ollama-generate", "/api/generate", chat=False)
CHAT = OllamaAdapter("ollama-chat", "/api/chat", chat=True)
