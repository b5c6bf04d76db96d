"""Hugging Face TGI native streaming: POST /generate_stream.

One event per generated token (`token.text`, special tokens included); the last event also
carries `generated_text` and, with `details: true`, finish_reason and token counts. axum
writes `data:` without a space and sends no `[DONE]`: the final event is the end marker.
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, RequestSpec, StreamState
from llm_locust.protocols.openai import error_message, load_object, spec_prompt


class TGIAdapter:
    name = "tgi"
    framing = "sse"
    end_marker = True

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        # TGI has neither ignore_eos nor min_tokens: force_length cannot be honoured here;
        # the length check reports the requests that stopped early.
        params: dict[str, Any] = {"details": True}
        if spec.max_tokens is not None:
            params["max_new_tokens"] = spec.max_tokens
        body: dict[str, Any] = {"inputs": spec_prompt(spec), "parameters": params}
        body.update(spec.extra_body)
        return "/generate_stream", orjson.dumps(body)

    def feed(self, payload: bytes, state: StreamState) -> int:
        obj = load_object(payload)
        if obj is None:
            return NO_TOKEN
        kind = NO_TOKEN
        token = obj.get("token")
        if token:
            text = token.get("text")
            special = token.get("special")
            # every event is one generated token; a special one (EOS) counts even if empty
            if text or special:
                kind = CONTENT
                if text and not special and state.collect_text:
                    state.text.append(text)
        if obj.get("generated_text") is not None:
            state.done = True
            details = obj.get("details")
            if details:
                state.extra["details"] = details
                state.finish_reason = details.get("finish_reason")
                if details.get("generated_tokens") is not None:
                    state.usage_out = details["generated_tokens"]
                if details.get("input_length") is not None:
                    state.usage_in = details["input_length"]
        err = obj.get("error")
        if err is not None:
            state.error = error_message(err)
        return kind
