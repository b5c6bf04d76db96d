"""llama.cpp llama-server native streaming: POST /completion.

Events `{"content": "...", "stop": false}`; the final event has `"stop": true` with
tokens_predicted, tokens_evaluated, stop_type and timings.
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, RequestSpec, StreamState
from llm_locust.protocols.openai import error_message, load_object, spec_prompt


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
            kind = CONTENT
            if state.collect_text:
                state.text.append(text)
        if obj.get("stop"):
            state.done = True
            state.finish_reason = obj.get("stop_type") or state.finish_reason
            if obj.get("tokens_predicted") is not None:
                state.usage_out = obj["tokens_predicted"]
            if obj.get("tokens_evaluated") is not None:
                state.usage_in = obj["tokens_evaluated"]
            if obj.get("timings"):
                state.extra["timings"] = obj["timings"]
        err = obj.get("error")
        if err is not None:
            state.error = error_message(err)
        return kind
