"""Request kinds whose reply is one JSON document, not a stream: embeddings, rerank, score.

Pure: `request(spec)` gives the path and body, `parse(body, spec)` reads a whole reply into a
`Reply` or raises ProtocolError with a readable message (not JSON, a wrong shape, a wrong number
of embeddings or scores, a field of the wrong type). The client (transport.http.JSONClient) does
the HTTP; the scenario API (workload.scenario: embed, rerank, score) builds the specs.

The kind-specific request fields travel in `RequestSpec.extra_body` (`input`; `query` and
`documents`; `text_1` and `text_2`), so a spec goes through LLMUser.send like any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import orjson

from llm_locust.protocols.base import MAX_TOKEN_COUNT, ProtocolError, RequestSpec


@dataclass(slots=True)
class Reply:
    """What a non-streaming reply said: the number of items (embeddings returned, documents
    scored), the server's prompt token count, and the items themselves."""

    items: int
    usage_in: int | None = None
    embeddings: list[Any] = field(default_factory=list)  # per input, in input order (list of floats, or base64 text)
    scores: list[float | None] = field(default_factory=list)  # per document, in document order (None: not returned)


def _loads(body: bytes) -> dict:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ProtocolError(f"reply is not valid JSON ({e}): {_head(body)}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"reply is not a JSON object but {type(obj).__name__}: {_head(body)}")
    return obj


def _head(body: bytes) -> str:
    """The reply's first bytes as text fit for an error message (control characters escaped)."""
    if not body:
        return "<empty body>"
    text = body[:200].decode("utf-8", "replace")
    text = "".join(c if c >= " " else repr(c)[1:-1] for c in text)
    return text if len(body) <= 200 else text + "..."


def _number(x: Any) -> TypeGuard[int | float]:
    return (type(x) is float and math.isfinite(x)) or type(x) is int


def _usage(obj: dict) -> int | None:
    """usage.prompt_tokens (else usage.total_tokens: no output tokens here); None when absent."""
    usage = obj.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise ProtocolError(f"'usage' is not an object: {type(usage).__name__}")
    for key in ("prompt_tokens", "total_tokens"):
        n = usage.get(key)
        if n is None:
            continue
        if type(n) is not int or not 0 <= n <= MAX_TOKEN_COUNT:
            raise ProtocolError(f"usage.{key} is not a plausible token count: {n!r}")
        return n
    return None


def _list(obj: dict, key: str) -> list:
    value = obj.get(key)
    if not isinstance(value, list):
        got = "missing" if value is None else type(value).__name__
        raise ProtocolError(f"reply has no '{key}' list ({got}); keys: {', '.join(map(str, list(obj)[:8]))}")
    return value


def _index(item: dict, i: int, n: int, seen: set[int], what: str) -> int:
    idx = item.get("index", i)
    if type(idx) is not int or not 0 <= idx < n:
        raise ProtocolError(f"{what}[{i}].index is not an index of the {n} sent: {idx!r}")
    if idx in seen:
        raise ProtocolError(f"{what}[{i}].index {idx} repeated")
    seen.add(idx)
    return idx


class _JSONAdapter:
    """A request kind whose reply is one JSON body: the request is the model and the call's body."""

    framing = "json"
    end_marker = False
    path = ""

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        body: dict[str, Any] = {}
        if spec.model:
            body["model"] = spec.model
        body.update(spec.extra_body)
        return self.path, orjson.dumps(body)


class EmbeddingsAdapter(_JSONAdapter):
    """OpenAI's POST /v1/embeddings (vLLM, llama-server --embeddings, TEI, Ollama's /v1)."""

    name = "openai-embeddings"
    path = "/v1/embeddings"

    @staticmethod
    def expected(spec: RequestSpec) -> int:
        x = spec.extra_body.get("input")
        return 1 if isinstance(x, str) or (isinstance(x, list) and x and type(x[0]) is int) else len(x or ())

    def parse(self, body: bytes, spec: RequestSpec, keep_text: bool = False) -> Reply:
        obj = _loads(body)
        data = _list(obj, "data")
        n = self.expected(spec)
        if len(data) != n:
            raise ProtocolError(f"{len(data)} embeddings for {n} inputs")
        b64 = spec.extra_body.get("encoding_format") == "base64"
        out: list[Any] = [None] * n
        seen: set[int] = set()
        dims = None
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise ProtocolError(f"data[{i}] is not an object: {type(item).__name__}")
            idx = _index(item, i, n, seen, "data")
            vec = item.get("embedding")
            if b64:
                if not isinstance(vec, str) or not vec:
                    raise ProtocolError(f"data[{i}].embedding is not base64 text: {type(vec).__name__}")
            else:
                if not isinstance(vec, list) or not vec:
                    raise ProtocolError(f"data[{i}].embedding is not a non-empty list of numbers: {_brief(vec)}")
                if not all(map(_number, vec)):
                    bad = next(x for x in vec if not _number(x))
                    raise ProtocolError(f"data[{i}].embedding holds a non-number: {bad!r}")
                if dims is None:
                    dims = len(vec)
                elif len(vec) != dims:
                    raise ProtocolError(f"data[{i}].embedding has {len(vec)} dimensions, data[0] {dims}")
            out[idx] = vec
        return Reply(items=n, usage_in=_usage(obj), embeddings=out if keep_text else [])


class RerankAdapter(_JSONAdapter):
    """The Cohere/Jina rerank form vLLM (/v1/rerank, /rerank) and llama-server (--reranking) serve:
    `query`, `documents`, optional `top_n`; reply `results[]` of `index` and `relevance_score`."""

    name = "rerank"
    path = "/v1/rerank"

    def parse(self, body: bytes, spec: RequestSpec, keep_text: bool = False) -> Reply:
        obj = _loads(body)
        results = _list(obj, "results")
        n = len(spec.extra_body.get("documents") or ())
        top_n = spec.extra_body.get("top_n")
        # a server that ignores top_n (returns every document) is not wrong
        allowed = {n, min(top_n, n)} if isinstance(top_n, int) and top_n > 0 else {n}
        if len(results) not in allowed:
            want = " or ".join(str(a) for a in sorted(allowed))
            raise ProtocolError(f"{len(results)} rerank results for {n} documents (expected {want})")
        scores: list[float | None] = [None] * n
        seen: set[int] = set()
        for i, item in enumerate(results):
            if not isinstance(item, dict):
                raise ProtocolError(f"results[{i}] is not an object: {type(item).__name__}")
            if "index" not in item:
                raise ProtocolError(f"results[{i}] has no 'index'")
            idx = _index(item, i, n, seen, "results")
            score = item.get("relevance_score")
            if not _number(score):
                raise ProtocolError(f"results[{i}].relevance_score is not a number: {score!r}")
            scores[idx] = float(score)
        return Reply(items=len(results), usage_in=_usage(obj), scores=scores)


class ScoreAdapter(_JSONAdapter):
    """vLLM's POST /v1/score: `text_1` (one text) against `text_2` (a text or a list); reply
    `data[]` of `index` and `score`, one per pair."""

    name = "vllm-score"
    path = "/v1/score"

    def parse(self, body: bytes, spec: RequestSpec, keep_text: bool = False) -> Reply:
        obj = _loads(body)
        data = _list(obj, "data")
        t1, t2 = spec.extra_body.get("text_1"), spec.extra_body.get("text_2")
        n = max(len(t1) if isinstance(t1, list) else 1, len(t2) if isinstance(t2, list) else 1)
        if len(data) != n:
            raise ProtocolError(f"{len(data)} scores for {n} text pairs")
        scores: list[float | None] = [None] * n
        seen: set[int] = set()
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise ProtocolError(f"data[{i}] is not an object: {type(item).__name__}")
            idx = _index(item, i, n, seen, "data")
            score = item.get("score")
            if not _number(score):
                raise ProtocolError(f"data[{i}].score is not a number: {score!r}")
            scores[idx] = float(score)
        return Reply(items=n, usage_in=_usage(obj), scores=scores)


def _brief(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


EMBEDDINGS = EmbeddingsAdapter()
RERANK = RerankAdapter()
SCORE = ScoreAdapter()
# request kinds with a whole-JSON reply, by name (not streaming APIs: not in API_NAMES)
JSON_ADAPTERS = {a.name: a for a in (EMBEDDINGS, RERANK, SCORE)}
