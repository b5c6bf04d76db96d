"""The embeddings, score and rerank kinds against vLLM's CPU build serving SmolLM2 as an embedding
model (`--runner pooling --convert embed`: vLLM's embed adapter on the causal LM, the last token's
hidden state, normalised; provisioned by `scripts/real-servers.sh vllm`).

Through JSONClient and a short `llm-locust run --mix embeddings:0.5,score:0.25,rerank:0.25`:
every request ok, one vector per input, one score per document, our input-token count (the
server's usage) equal to what the tokenizer dir and vLLM's /tokenize count, and vLLM 0.32's
score for an embedding model being the cosine of the two texts' embeddings (the same numbers on
/v1/score and /v1/rerank). Off with LLM_LOCUST_VLLM_POOLING=0."""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import subprocess
import sys

import pytest
from realservers import http_post_json
from support import json_client

from llm_locust.metrics.records import Outcome
from llm_locust.protocols.base import RequestSpec, Timeouts

# Runs by default, CI included: the file took 65 s here (vLLM's start-up 46 s) with other jobs at a
# load average of ~3-4 on the 2 cores, up to 110 s at 5-8 (docs/real-servers.md); =0 turns it off.
VLLM_POOLING_SWITCH = "LLM_LOCUST_VLLM_POOLING"
pytestmark = [
    pytest.mark.real_server,
    pytest.mark.skipif(
        os.environ.get(VLLM_POOLING_SWITCH, "1") == "0", reason=f"vLLM pooling part off ({VLLM_POOLING_SWITCH}=0)"
    ),
]

VLLM_SERVER_KWARGS = {"extra_args": ["--runner", "pooling", "--convert", "embed"]}
MODEL = "smollm2"
TEXTS = ["The warranty covers manufacturing defects.", "How long does the battery last?", "Hello"]
QUERY = "How long does the battery last?"
DOCS = [
    "The battery lasts about ten hours of video playback.",
    "Orders ship within three business days.",
    "Returns are accepted within thirty days.",
]
ids = itertools.count()

client_for = functools.partial(json_client, timeouts=Timeouts(5.0, 60.0, 120.0))


@pytest.fixture(scope="module")
def count(vllm_server, smollm2_tokenizer):
    """Tokens of a text as the tokenizer dir counts them, checked against vLLM's /tokenize."""
    from llm_locust.workload.tokenizer import load_tokenizer

    tok = load_tokenizer(smollm2_tokenizer)

    def n(text: str) -> int:
        ours = tok.count(text, add_special_tokens=True)
        status, body = http_post_json(vllm_server.url + "/tokenize", {"model": MODEL, "prompt": text})
        assert status == 200, body[:300]
        assert ours == json.loads(body)["count"], text
        return ours

    return n


def send(client, body, collect=False):
    rec = client.send(RequestSpec(model=MODEL, extra_body=body), f"vp{next(ids)}", keep_text=collect)
    assert rec.outcome is Outcome.OK, rec.error
    assert rec.status == 200 and rec.n_out == 0 and rec.t_first is None
    assert rec.t_sent < rec.t_headers <= rec.t_end
    assert rec.n_in_source == "usage"
    return rec, client.body.replies.pop(rec.request_id)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_embeddings_score_and_rerank_through_the_client(vllm_server, count):
    emb = client_for(vllm_server.url, "openai-embeddings")
    rec, reply = send(emb, {"input": TEXTS}, collect=True)
    # one vector per input, SmolLM2's hidden size, normalised by the embed pooler
    assert rec.extra == {"items": len(TEXTS)} and len(reply.embeddings) == len(TEXTS)
    assert {len(v) for v in reply.embeddings} == {576}
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-2 for v in reply.embeddings)
    assert rec.n_in == sum(count(t) for t in TEXTS)
    figures = {"embeddings": (len(TEXTS), rec.n_in, round(rec.e2e * 1000, 1))}

    _, q = send(emb, {"input": [QUERY]}, collect=True)
    rec, d = send(emb, {"input": DOCS}, collect=True)
    cos = [cosine(q.embeddings[0], v) for v in d.embeddings]

    # score: text_1 against each text_2; for an embedding model vLLM 0.32 answers the cosine of
    # the two embeddings, and counts text_1 once plus every text_2 (14 tokens for 5 + 5 + 4)
    rec, reply = send(client_for(vllm_server.url, "vllm-score"), {"text_1": QUERY, "text_2": DOCS})
    assert rec.extra == {"items": len(DOCS)} and len(reply.scores) == len(DOCS)
    assert reply.scores == pytest.approx(cos, abs=2e-3)
    want = count(QUERY) + sum(count(t) for t in DOCS)
    assert rec.n_in == want
    figures["score"] = (len(DOCS), rec.n_in, round(rec.e2e * 1000, 1))

    # rerank (Cohere/Jina form) over the same pairs: the same scores, the same count
    rr = client_for(vllm_server.url, "rerank")
    rec, ranked = send(rr, {"query": QUERY, "documents": DOCS})
    assert rec.extra == {"items": len(DOCS)} and ranked.scores == pytest.approx(reply.scores, abs=1e-4)
    assert rec.n_in == want
    figures["rerank"] = (len(DOCS), rec.n_in, round(rec.e2e * 1000, 1))
    rec, top = send(rr, {"query": QUERY, "documents": DOCS, "top_n": 1})
    assert rec.extra == {"items": 1} and sum(s is not None for s in top.scores) == 1
    assert top.scores.index(max(s for s in top.scores if s is not None)) == cos.index(max(cos))
    print(f"vLLM pooling (started in {vllm_server.startup_s:.1f} s) (items, n_in == usage, e2e ms): {figures}")


def test_a_mixed_run_of_the_pooling_kinds(vllm_server, tmp_path):
    """`llm-locust run --mix embeddings:0.5,score:0.25,rerank:0.25` (no chat: the model is an
    embedding model here, and the preflight asks only the mix's endpoints): every request ok,
    items and input tokens in every record."""
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "--host",
            vllm_server.url,
            "--model",
            MODEL,
            "--mix",
            "embeddings:0.5,score:0.25,rerank:0.25",
            "-u",
            "2",
            "-t",
            "10s",
            # short prompts: the bundled sample's run to ~1,000 tokens, seconds each here
            "--synthetic",
            "requests=200,input=uniform:30:90,output=8",
            "--results",
            str(tmp_path / "r.json"),
            "--record-log",
            str(tmp_path / "log.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    stopped = [r for r in recs if r["outcome"] == "cancelled" and r["error"] == "test stopped while in flight"]
    assert len(stopped) <= 2
    done = [r for r in recs if r not in stopped]
    assert done and all(r["outcome"] == "ok" for r in done), [
        (r["api"], r["error"]) for r in done if r["outcome"] != "ok"
    ][:5]
    assert {r["api"] for r in done} <= {"openai-embeddings", "vllm-score", "rerank"}
    for r in done:
        assert r["n_in"] > 0 and r["n_out"] == 0
        assert (
            r["server"]["items"] == 1
            if r["api"] in ("openai-embeddings", "vllm-score")
            else 1 <= r["server"]["items"] <= 4
        )
    s = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert s["failed"] == 0 and s["ok"] == len(done)
    per_kind = {api: k["ok"] for api, k in s["kinds"].items()}
    print(f"--mix run: {len(done)} ok {per_kind}")
