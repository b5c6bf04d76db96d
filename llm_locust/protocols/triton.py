"""Triton Inference Server generate extension (TensorRT-LLM): POST /v2/models/{m}/generate_stream.

Each event carries `text_output`; there is no usage and no `[DONE]`, so a body that ends
cleanly is a complete stream (end_marker False).
"""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, RequestSpec, StreamState
from llm_locust.protocols.openai import load_object, set_error, spec_prompt, wrong_type


class TritonAdapter:
    name = "triton"
    framing = "sse"
    end_marker = False

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        body: dict[str, Any] = {"text_input": spec_prompt(spec)}
        if spec.max_tokens is not None:
            body["max_tokens"] = spec.max_tokens
        body["stream"] = True
        if spec.force_length and spec.max_tokens is not None:
            body["min_length"] = spec.max_tokens  # the TensorRT-LLM ensemble's input name
        body.update(spec.extra_body)
        return f"/v2/models/{spec.model or 'ensemble'}/generate_stream", orjson.dumps(body)

    def feed(self, payload: bytes, state: StreamState) -> int:
        obj = load_object(payload)
        if obj is None:
            return NO_TOKEN
        err = obj.get("error")
        if err is not None:
            set_error(state, err)
            return NO_TOKEN
        text = obj.get("text_output")
        if not text:
            return NO_TOKEN
        if type(text) is not str:
            raise wrong_type("text_output", text, "a string")
        if state.keep_text:
            state.text.append(text)
        return CONTENT
