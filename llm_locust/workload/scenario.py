"""Scenarios written in Python: `self.llm` on every LLMUser.

    class RagUser(LLMUser):
        @task
        def ask(self):
            r = self.llm.chat([{"role": "user", "content": "hi"}], max_tokens=64, keep_text=True, name="ask")
            if r.ok:
                self.llm.chat([... r.text ...], name="follow-up")

Each call is one request, timed and accounted like any other (Locust's table under `name`, the
metrics hub, the exporter, the ladder's steps, the record log), and returns an `LLMResult`. The
reply's text is kept only when asked (`keep_text=True`): the hot path stays as fast as the trace
replay's. Every call goes to the run's host, with the run's key, timeouts and limits; `api`
defaults per method (chat: openai-chat, complete: openai-completions, ...).

`embed`, `rerank` and `score` send requests whose reply is one JSON document (/v1/embeddings,
/v1/rerank, vLLM's /v1/score): timed to the whole reply (E2E; no TTFT), input tokens from the
server's usage, no output tokens; `result.items` is the number of embeddings or scores returned.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols import API_NAMES, JSON_API_NAMES, get_adapter, get_json_adapter
from llm_locust.protocols.base import RequestSpec


@dataclass
class LLMResult:
    """What one call got: the reply (text and tool calls when kept), its usage and its timings."""

    ok: bool
    outcome: str
    error: str | None
    text: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int = 0
    ttft: float | None = None  # seconds to the first output token (tool-call tokens included)
    e2e: float | None = None
    finish_reason: str | None = None
    record: RequestRecord | None = field(default=None, repr=False)
    # embed / rerank / score: the items returned (embeddings, or documents scored)
    items: int | None = None
    # rerank / score: one score per document (text pair), in the order sent; None for a document
    # the server did not return (rerank's top_n)
    scores: list[float | None] | None = None
    # embed: one vector per input, in input order; only with keep_text=True
    embeddings: list[Any] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, rec: RequestRecord, reply: Any = None) -> LLMResult:
        r = cls(
            ok=rec.ok,
            outcome=rec.outcome.value,
            error=rec.error,
            text=rec.text,
            tool_calls=list((rec.extra or {}).get("tool_calls") or []),
            input_tokens=rec.n_in,
            output_tokens=rec.n_out,
            ttft=rec.ttft,
            e2e=rec.e2e,
            finish_reason=rec.finish_reason,
            record=rec,
        )
        if reply is not None:
            r.items = reply.items
            r.scores = reply.scores or None
            r.embeddings = reply.embeddings or None
        return r

    def ranked(self) -> list[int]:
        """rerank / score: the indices of the documents scored, best first."""
        scored = [(s, i) for i, s in enumerate(self.scores or ()) if s is not None]
        return [i for _s, i in sorted(scored, key=lambda p: (-p[0], p[1]))]


class LLMClient:
    """The calls a scenario makes; one per user (`self.llm`)."""

    def __init__(self, user) -> None:
        self.user = user
        self._clients: dict[str, Any] = {}
        self._ids = itertools.count()

    def _stream(self, api: str):
        client = self._clients.get(api)
        if client is None:
            if api not in API_NAMES:
                raise ValueError(f"unknown API {api!r}; one of {', '.join(API_NAMES)}")
            client = self._clients[api] = self.user.stream_client(get_adapter(api))
        return client

    def _json(self, kind: str):
        client = self._clients.get(kind)
        if client is None:
            client = self._clients[kind] = self.user.json_client(get_json_adapter(kind))
        return client

    def send(self, api: str, spec: RequestSpec, *, name: str | None = None, keep_text: bool = False) -> LLMResult:
        """One request of any API (or non-streaming kind: openai-embeddings, rerank, vllm-score),
        accounted under `name` (default: the API's name)."""
        user = self.user
        if spec.model is None:
            spec.model = user.ctx.model
        if api in JSON_API_NAMES:
            client = self._json(api)
            rec = user.send(spec, name=name, keep_text=keep_text, stream=client)
            return LLMResult.of(rec, client.body.replies.pop(rec.request_id, None))  # a JSONReader's
        rec = user.send(spec, name=name, keep_text=keep_text, stream=self._stream(api))
        return LLMResult.of(rec)

    def embed(
        self,
        texts: str | list[str],
        *,
        model: str | None = None,
        name: str | None = None,
        keep_text: bool = False,
        **params: Any,
    ) -> LLMResult:
        """POST /v1/embeddings (OpenAI form): one embedding per text; the vectors come back in
        `result.embeddings` only with keep_text=True (`result.items` counts them always)."""
        spec = RequestSpec(
            model=model, extra_body={"input": [texts] if isinstance(texts, str) else list(texts), **params}
        )
        return self.send("openai-embeddings", spec, name=name, keep_text=keep_text)

    def rerank(
        self,
        query: str,
        documents: list[str],
        *,
        top_n: int | None = None,
        model: str | None = None,
        name: str | None = None,
        **params: Any,
    ) -> LLMResult:
        """POST /v1/rerank (the Cohere/Jina form vLLM and llama-server serve): `result.scores` has
        one relevance score per document, in the order sent (None past top_n); `result.ranked()`
        the document indices, best first."""
        body: dict[str, Any] = {"query": query, "documents": list(documents)}
        if top_n is not None:
            body["top_n"] = top_n
        body.update(params)
        return self.send("rerank", RequestSpec(model=model, extra_body=body), name=name)

    def score(
        self, text_1: str, text_2: str | list[str], *, model: str | None = None, name: str | None = None, **params: Any
    ) -> LLMResult:
        """vLLM's POST /v1/score: text_1 scored against each of text_2; `result.scores` in order."""
        spec = RequestSpec(model=model, extra_body={"text_1": text_1, "text_2": text_2, **params})
        return self.send("vllm-score", spec, name=name)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        model: str | None = None,
        name: str | None = None,
        keep_text: bool = False,
        exact: bool = False,
        tools: list | None = None,
        tool_choice: Any = None,
        response_format: dict | None = None,
        api: str = "openai-chat",
        **params: Any,
    ) -> LLMResult:
        """A streamed chat completion. `tools` / `tool_choice` / `response_format` go to the server as
        the OpenAI API takes them; the model's tool calls come back in `result.tool_calls` (with
        keep_text). `exact=True` asks for exactly max_tokens (ignore_eos / min_tokens)."""
        extra = dict(params)
        for key, value in (("tools", tools), ("tool_choice", tool_choice), ("response_format", response_format)):
            if value is not None:
                extra[key] = value
        spec = RequestSpec(model=model, messages=messages, max_tokens=max_tokens, force_length=exact, extra_body=extra)
        return self.send(api, spec, name=name, keep_text=keep_text)

    def complete(
        self,
        prompt: str,
        *,
        max_tokens: int | None = None,
        model: str | None = None,
        name: str | None = None,
        keep_text: bool = False,
        exact: bool = False,
        api: str = "openai-completions",
        **params: Any,
    ) -> LLMResult:
        """A streamed text completion."""
        spec = RequestSpec(
            model=model, prompt=prompt, max_tokens=max_tokens, force_length=exact, extra_body=dict(params)
        )
        return self.send(api, spec, name=name, keep_text=keep_text)

    def responses(
        self,
        input: str | list,
        *,
        max_tokens: int | None = None,
        model: str | None = None,
        name: str | None = None,
        keep_text: bool = False,
        **params: Any,
    ) -> LLMResult:
        """The OpenAI Responses API, streamed (`input`: text or a list of messages)."""
        spec = RequestSpec(model=model, max_tokens=max_tokens, extra_body=dict(params))
        if isinstance(input, str):
            spec.prompt = input
        else:
            spec.messages = input
        return self.send("openai-responses", spec, name=name, keep_text=keep_text)

    def messages(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int = 256,
        model: str | None = None,
        name: str | None = None,
        keep_text: bool = False,
        **params: Any,
    ) -> LLMResult:
        """Anthropic's Messages API, streamed (`max_tokens` is required by that API)."""
        spec = RequestSpec(model=model, messages=messages, max_tokens=max_tokens, extra_body=dict(params))
        return self.send("anthropic-messages", spec, name=name, keep_text=keep_text)
