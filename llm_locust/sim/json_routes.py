"""The routes answered with one JSON document, outside the batching engine (embeddings, rerank,
score): deterministic vectors and scores, and the input's token count (words, as everywhere here)."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

from llm_locust.sim.parse import BadRequest, count_words, int_field

# requests answered with one JSON document, outside the batching engine: a latency of
# iter_base + iter_per_prefill_token * input tokens, deterministic vectors and scores
JSON_ROUTES = {"/v1/embeddings": "embeddings", "/v1/rerank": "rerank", "/rerank": "rerank", "/v1/score": "score"}
EMBED_DIMS = 16


def fake_vector(text: str, dims: int = EMBED_DIMS) -> list[float]:
    """A deterministic unit vector for a text (the same text, the same vector)."""
    h = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=dims).digest()
    v = [b / 127.5 - 1.0 for b in h]
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [round(x / norm, 6) for x in v]


def fake_score(query: str, doc: str) -> float:
    """A deterministic relevance in [0, 1]: the share of the query's words the document holds."""
    q = set(query.lower().split())
    d = set(doc.lower().split())
    return round(len(q & d) / len(q), 6) if q else 0.0


def _texts(x, name: str) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, list) and x and all(isinstance(t, str) for t in x):
        return x
    raise BadRequest(f"'{name}' must be a string or a non-empty list of strings")


def _doc_text(d) -> str:
    if isinstance(d, str):
        return d
    if isinstance(d, dict) and isinstance(d.get("text"), str):
        return d["text"]
    raise BadRequest("'documents' must be strings (or objects with a 'text')")


def json_reply(kind: str, req: dict, model: str) -> tuple[int, bytes]:
    """The reply to one JSON request kind, and its input token count (words, as everywhere here)."""
    if kind == "embeddings":
        texts = _texts(req.get("input"), "input")
        n_in = sum(max(1, count_words(t)) for t in texts)
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(texts)]
        return n_in, orjson.dumps(
            {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": n_in, "total_tokens": n_in}}
        )
    if kind == "rerank":
        query = req.get("query")
        if not isinstance(query, str):
            raise BadRequest("'query' must be a string")
        docs = req.get("documents")
        if not isinstance(docs, list) or not docs:
            raise BadRequest("'documents' must be a non-empty list")
        texts = [_doc_text(d) for d in docs]
        top_n = int_field(req, "top_n", len(texts), 1)
        q = max(1, count_words(query))
        n_in = sum(q + max(1, count_words(t)) for t in texts)
        ranked = sorted(range(len(texts)), key=lambda i: (-fake_score(query, texts[i]), i))[:top_n]
        results: list[dict[str, Any]] = [{"index": i, "relevance_score": fake_score(query, texts[i])} for i in ranked]
        if req.get("return_documents"):
            for r in results:
                r["document"] = {"text": texts[r["index"]]}
        return n_in, orjson.dumps(
            {
                "id": "rerank-sim",
                "model": model,
                "results": results,
                "usage": {"prompt_tokens": n_in, "total_tokens": n_in},
            }
        )
    t1 = req.get("text_1")
    if not isinstance(t1, str):
        raise BadRequest("'text_1' must be a string")
    t2 = _texts(req.get("text_2"), "text_2")
    q = max(1, count_words(t1))
    n_in = sum(q + max(1, count_words(t)) for t in t2)
    data = [{"index": i, "object": "score", "score": fake_score(t1, t)} for i, t in enumerate(t2)]
    return n_in, orjson.dumps(
        {
            "id": "score-sim",
            "object": "list",
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": n_in, "total_tokens": n_in},
        }
    )
