"""TraceRecord -> RequestSpec: what to send for one record of a workload. Pure.

Token-count records get a synthesised prompt of that length (with prefix blocks when the
trace has hash ids); records with text keep it. The output length is the trace's, capped or
overridden by the settings, and forced where the API allows (ignore_eos / min_tokens).
"""

from __future__ import annotations

from typing import Any

from llm_locust.protocols.base import RequestSpec
from llm_locust.workload.records import TraceRecord

DEFAULT_MAX_TOKENS = 128


class SpecBuilder:
    def __init__(self, settings, prompts, chat: bool) -> None:
        """`prompts`: a PromptBuilder (llm_locust.workload.prompts); `chat`: the API takes messages."""
        self.settings = settings
        self.prompts = prompts
        self.chat = chat

    def max_tokens(self, rec: TraceRecord) -> int:
        s = self.settings
        n = s.max_tokens or rec.output_tokens or DEFAULT_MAX_TOKENS
        if s.max_tokens_cap:
            n = min(n, s.max_tokens_cap)
        return max(1, n)

    def spec(self, rec: TraceRecord, model: str | None, history: list[dict[str, Any]] | None = None) -> RequestSpec:
        """The request for `rec`; `history`: earlier turns of its conversation (chat messages)."""
        prompt, messages = rec.prompt, rec.messages
        if prompt is None and messages is None:
            built = self.prompts.build(
                rec.input_tokens or 1,
                hash_ids=getattr(rec, "hash_ids", None),
                block_size=getattr(rec, "block_size", None),
                key=rec.source or None,  # same record -> same text, on whichever worker sends it
            )
            prompt, messages = built.text, built.messages
        if history:
            if messages is None:
                messages = [{"role": "user", "content": prompt or ""}]
            messages = history + messages
            prompt = None
        s = self.settings
        return RequestSpec(
            model=model or None,
            prompt=prompt,
            messages=messages,
            max_tokens=self.max_tokens(rec),
            force_length=s.force_length,
            continuous_usage=s.continuous_usage,
        )
