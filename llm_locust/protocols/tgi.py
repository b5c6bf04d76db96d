"""Hugging Face TGI native streaming: POST /generate_stream.

One event per generated token (`token.text`, special tokens included); the last event also
carries `generated_text` and, with `details: true`, finish_reason and token counts. axum
writes `data:` without a space and sends no `[DONE]`: the final event is the end marker.
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, RequestSpec, StreamState
from llm_locust.protocols.openai import load_object, set_error, spec_prompt, token_count, wrong_type


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
            if type(token) is not dict:
                raise wrong_type("token", token, "an object")
            text = token.get("text")
            special = token.get("special")
            # every event is one generated token; a special one (EOS) counts even if empty
            if text or special:
                if text and type(text) is not str:
                    raise wrong_type("token.text", text, "a string")
                kind = CONTENT
                if text and not special and state.keep_text:
                    state.text.append(text)
        generated = obj.get("generated_text")
        if generated is not None:
            if type(generated) is not str:
                raise wrong_type("generated_text", generated, "a string")
            state.done = True
            details = obj.get("details")
            if details:
                if type(details) is not dict:
                    raise wrong_type("details", details, "an object")
                state.extra["details"] = details
                reason = details.get("finish_reason")
                if reason is not None and type(reason) is not str:
                    raise wrong_type("details.finish_reason", reason, "a string")
                state.finish_reason = reason
                if details.get("generated_tokens") is not None:
                    state.usage_out = token_count(details["generated_tokens"], "details.generated_tokens")
                if details.get("input_length") is not None:
                    state.usage_in = token_count(details["input_length"], "details.input_length")
        err = obj.get("error")
        if err is not None:
            set_error(state, err)
        return kind
