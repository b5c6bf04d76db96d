"""llama.cpp llama-server native streaming: POST /completion.

Events `{"content": "...", "stop": false}`; the final event has `"stop": true` with
tokens_predicted, tokens_evaluated, stop_type and timings (whose `cache_n`, the prompt tokens
reused from the slot's cache, is the stream's cached count; `tokens_cached` is the slot's whole
cache, output included, so it is not read).
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, RequestSpec, StreamState
from llm_locust.protocols.openai import cache_timings, load_object, set_error, spec_prompt, token_count, wrong_type


class LlamaCppAdapter:
    name = "llamacpp"
    framing = "sse"
    end_marker = True

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        body: dict[str, Any] = {"prompt": spec_prompt(spec)}
        if spec.max_tokens is not None:
            body["n_predict"] = spec.max_tokens
        body["stream"] = True
        if spec.force_length:
            body["ignore_eos"] = True
        body.update(spec.extra_body)
        return "/completion", orjson.dumps(body)

    def feed(self, payload: bytes, state: StreamState) -> int:
        obj = load_object(payload)
        if obj is None:
            return NO_TOKEN
        kind = NO_TOKEN
        text = obj.get("content")
        if text:
            if type(text) is not str:
                raise wrong_type("content", text, "a string")
            kind = CONTENT
            if state.keep_text:
                state.text.append(text)
        if obj.get("stop"):
            state.done = True
            reason = obj.get("stop_type")
            if reason:
                if type(reason) is not str:
                    raise wrong_type("stop_type", reason, "a string")
                state.finish_reason = reason
            if obj.get("tokens_predicted") is not None:
                state.usage_out = token_count(obj["tokens_predicted"], "tokens_predicted")
            if obj.get("tokens_evaluated") is not None:
                state.usage_in = token_count(obj["tokens_evaluated"], "tokens_evaluated")
            timings = obj.get("timings")
            if timings:
                if type(timings) is not dict:
                    raise wrong_type("timings", timings, "an object")
                state.extra["timings"] = timings
                cache_timings(timings, state)
        err = obj.get("error")
        if err is not None:
            set_error(state, err)
        return kind
