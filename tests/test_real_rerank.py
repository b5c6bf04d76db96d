"""The rerank kind against a real llama-server started with --reranking, serving the tiny random
reranker (scripts/make_tiny_gguf.py --rerank: qwen3 arch, a 2-label cls.output rank head, SmolLM2's
tokenizer; provisioned by `scripts/real-servers.sh llama`).

Through JSONClient, a scenario under `llm-locust run`, and `llm-locust run --mix rerank:1.0`:
every request ok, one score per document sent, our item count equal to the documents sent (or
top_n), and our input token count (the server's usage) equal to what the tokenizer and the
server's own /tokenize count for query + document, summed over the documents (llama-server,
without a rerank template in the GGUF, feeds each document as query tokens + document tokens).
The weights are random: the scores mean nothing, only counts, ranges and timing are checked."""

from __future__ import annotations

import csv
import functools
import itertools
import json

import pytest
from realservers import LlamaServer, http_post_json
from support import json_client, run_cli

from llm_locust.metrics.records import Outcome
from llm_locust.protocols.base import RequestSpec, Timeouts

pytestmark = pytest.mark.real_server

ALIAS = "tiny-rerank"
QUERY = "How long does the battery last?"
DOCS = [
    "The warranty covers manufacturing defects for two years from the date of purchase.",
    "Orders ship within three business days; express delivery arrives the next day.",
    "Returns are accepted within thirty days if the item is unused and in its box.",
    "The battery lasts about ten hours of video playback and charges fully in two hours.",
    "Support is open on weekdays from nine to five; the chat answers at any hour.",
    "A lost password can be reset from the sign-in page with the account's email address.",
]
ids = itertools.count()

client_for = functools.partial(json_client, kind="rerank", timeouts=Timeouts(5.0, 60.0, 120.0))


@pytest.fixture(scope="module")
def ranker(llama_server_bin, tiny_rerank_model):
    # 2,048 tokens a slot: query + one document must fit a slot (llama-server answers 400 past it)
    with LlamaServer(
        tiny_rerank_model, binary=llama_server_bin, alias=ALIAS, slots=4, ctx=8192, extra_args=["--reranking"]
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def count(ranker, smollm2_tokenizer):
    """Tokens of a text as the tokenizer dir counts them, checked against the server's /tokenize."""
    from llm_locust.workload.tokenizer import load_tokenizer

    tok = load_tokenizer(smollm2_tokenizer)

    def n(text: str) -> int:
        ours = tok.count(text, add_special_tokens=True)
        status, body = http_post_json(ranker.url + "/tokenize", {"content": text})
        assert status == 200, body[:300]
        assert ours == len(json.loads(body)["tokens"]), text
        return ours

    return n


def expected_tokens(count, query, docs) -> int:
    return sum(count(query) + count(d) for d in docs)


def test_rerank_through_the_client(ranker, count):
    """Reranks of 1, 6 and 18 documents and a top_n one: one score per document in (0, 1) (a
    softmax over the head's two labels), the server's usage equal to the tokens of query +
    document over the documents, and top_n's two the best two of the full ranking."""
    c = client_for(ranker.url)
    full = None
    figures = []
    for docs in (DOCS[:1], DOCS, DOCS * 3):
        rec = c.send(RequestSpec(model=ALIAS, extra_body={"query": QUERY, "documents": docs}), f"rr{next(ids)}")
        assert rec.outcome is Outcome.OK, rec.error
        reply = c.body.replies.pop(rec.request_id)
        assert len(reply.scores) == len(docs) and all(0.0 < s < 1.0 for s in reply.scores)
        assert rec.extra == {"items": len(docs)} and reply.items == len(docs)
        assert rec.n_in_source == "usage" and rec.n_in == expected_tokens(count, QUERY, docs)
        assert rec.n_out == 0 and rec.t_first is None and rec.status == 200
        assert rec.t_sent < rec.t_headers <= rec.t_end
        if docs is DOCS:
            full = reply.scores
        if len(docs) == 3 * len(DOCS):  # a document's score does not depend on the others sent with it
            assert reply.scores[:6] == pytest.approx(full, rel=1e-3)
            assert reply.scores[12:] == pytest.approx(full, rel=1e-3)
        figures.append((len(docs), rec.n_in, round(rec.e2e * 1000, 1)))
    # top_n: two results, the best two of the full ranking; usage still counts every document
    rec = c.send(RequestSpec(model=ALIAS, extra_body={"query": QUERY, "documents": DOCS, "top_n": 2}), f"rr{next(ids)}")
    assert rec.outcome is Outcome.OK, rec.error
    reply = c.body.replies.pop(rec.request_id)
    assert rec.extra == {"items": 2} and len(reply.scores) == len(DOCS)
    best_two = sorted(range(len(DOCS)), key=lambda i: -full[i])[:2]
    assert sorted(i for i, s in enumerate(reply.scores) if s is not None) == sorted(best_two)
    assert rec.n_in == expected_tokens(count, QUERY, DOCS)
    print(f"llama-server rerank (docs, n_in == usage, e2e ms): {figures}; top_n=2 -> {best_two}")


def read_log(path, users):
    """The run's completed records; the only others allowed are those the stop cancelled in
    flight (at most one per user)."""
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    stopped = [r for r in recs if r["outcome"] == "cancelled" and r["error"] == "test stopped while in flight"]
    assert len(stopped) <= users, stopped
    done = [r for r in recs if r not in stopped]
    assert done and all(r["api"] == "rerank" and r["outcome"] == "ok" for r in done), [
        (r["outcome"], r["error"]) for r in done if r["outcome"] != "ok"
    ][:5]
    return done


def test_rerank_scenario_under_llm_locust_run(ranker, count, tmp_path):
    """A locustfile calling self.llm.rerank(query, docs) with two users for 4 s: every request
    ok, six items each, and n_in the tokens of query + each document."""
    lf = tmp_path / "ranker.py"
    lf.write_text(
        "from locust import task\nfrom llm_locust.users import LLMUser\n\n"
        f"QUERY = {QUERY!r}\nDOCS = {DOCS!r}\n\n"
        "class Ranker(LLMUser):\n"
        "    @task\n"
        "    def go(self):\n"
        "        r = self.llm.rerank(QUERY, DOCS, name='rerank')\n"
        "        assert r.ok and len(r.scores) == len(DOCS), r\n"
    )
    p = run_cli(
        "-f",
        str(lf),
        "--host",
        ranker.url,
        "--model",
        ALIAS,
        "-u",
        "2",
        "-t",
        "8s",
        "--csv",
        str(tmp_path / "c"),
        "--results",
        str(tmp_path / "r.json"),
        "--record-log",
        str(tmp_path / "log.jsonl"),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    with open(tmp_path / "c_stats.csv") as f:
        table = {r["Name"]: r for r in csv.DictReader(f)}
    assert int(table["rerank"]["Request Count"]) > 0 and table["rerank"]["Failure Count"] == "0", table
    assert not [name for name in table if name.startswith("scenario error")]
    recs = read_log(tmp_path / "log.jsonl", 2)
    want = expected_tokens(count, QUERY, DOCS)
    assert all(r["server"] == {"items": len(DOCS)} and r["n_in"] == want and r["n_out"] == 0 for r in recs)
    s = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert s["failed"] == 0 and s["ok"] == len(recs)  # the cancelled are not failures
    assert s["kinds"]["rerank"]["ok"] == len(recs) and s["kinds"]["rerank"]["items"] == len(DOCS) * len(recs)
    e2e = sorted(r["end"] for r in recs)
    print(
        f"scenario: {len(recs)} reranks of {len(DOCS)} docs, n_in {want} each == usage; "
        f"e2e p50 {e2e[len(e2e) // 2] * 1000:.1f} ms"
    )


def test_mix_rerank_under_llm_locust_run(ranker, tmp_path):
    """--mix rerank:1.0: every request of the workload becomes a rerank of its text's first 200
    characters over the text cut in four (at most four documents)."""
    p = run_cli(
        "--host",
        ranker.url,
        "--model",
        ALIAS,
        "--mix",
        "rerank:1.0",
        "-u",
        "2",
        "-t",
        "8s",
        # prompts of known bounds: the bundled sample's reach a thousand tokens and more
        "--synthetic",
        "requests=200,input=uniform:50:400,output=8",
        "--results",
        str(tmp_path / "r.json"),
        "--record-log",
        str(tmp_path / "log.jsonl"),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    recs = read_log(tmp_path / "log.jsonl", 2)
    assert all(1 <= r["server"]["items"] <= 4 and r["n_in"] > 0 for r in recs)
    s = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert s["failed"] == 0 and s["kinds"]["rerank"]["ok"] == len(recs)
    assert s["kinds"]["rerank"]["items"] == sum(r["server"]["items"] for r in recs)
    print(f"--mix rerank:1.0: {len(recs)} reranks, {s['kinds']['rerank']['items']} documents, all ok")
