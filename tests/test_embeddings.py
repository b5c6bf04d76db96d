"""Request kinds with a whole-JSON reply (issue 13): embeddings, rerank, vLLM's score.

The adapters' parsing of good and bad replies (pure), the client's non-streaming path against the
simulator and canned replies, and the RAG example under `llm-locust run`."""

from __future__ import annotations

import csv
import functools
import itertools
import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from gevent.server import StreamServer
from support import canned_server, json_client

from llm_locust.metrics.records import Outcome
from llm_locust.protocols import JSON_API_NAMES, get_json_adapter
from llm_locust.protocols.base import Limits, ProtocolError, RequestSpec, Timeouts
from llm_locust.protocols.embeddings import EMBEDDINGS, RERANK, SCORE

REPO = Path(__file__).resolve().parents[1]
ids = itertools.count()

client_for = functools.partial(json_client, concurrency=4)


def emb_spec(texts, **kw):
    return RequestSpec(model="m", extra_body={"input": texts, **kw})


def rr_spec(docs, top_n=None):
    body = {"query": "q", "documents": docs}
    if top_n is not None:
        body["top_n"] = top_n
    return RequestSpec(model="m", extra_body=body)


def emb_reply(vectors, usage=7, **extra) -> bytes:
    return orjson.dumps(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": usage, "total_tokens": usage},
            **extra,
        }
    )


# ---- parsing ---------------------------------------------------------------------------------


def test_the_kinds_are_registered_apart_from_the_streaming_apis():
    from llm_locust.protocols import API_NAMES

    assert set(JSON_API_NAMES) == {"openai-embeddings", "rerank", "vllm-score"}
    assert not set(JSON_API_NAMES) & set(API_NAMES)
    assert get_json_adapter("rerank") is RERANK


def test_request_bodies_are_the_openai_and_cohere_forms():
    path, body = EMBEDDINGS.request(emb_spec(["a", "b"]))
    assert path == "/v1/embeddings" and orjson.loads(body) == {"model": "m", "input": ["a", "b"]}
    path, body = RERANK.request(rr_spec(["x", "y"], top_n=1))
    assert path == "/v1/rerank" and orjson.loads(body) == {
        "model": "m",
        "query": "q",
        "documents": ["x", "y"],
        "top_n": 1,
    }
    path, body = SCORE.request(RequestSpec(extra_body={"text_1": "a", "text_2": ["b", "c"]}))
    assert path == "/v1/score" and orjson.loads(body) == {"text_1": "a", "text_2": ["b", "c"]}


def test_a_good_embeddings_reply_in_input_order():
    body = orjson.dumps(
        {
            "data": [{"index": 1, "embedding": [0.5, 1]}, {"index": 0, "embedding": [0.25, -1.0]}],
            "usage": {"prompt_tokens": 9, "total_tokens": 9},
        }
    )
    r = EMBEDDINGS.parse(body, emb_spec(["a", "b"]), keep_text=True)
    assert r.items == 2 and r.usage_in == 9 and r.embeddings == [[0.25, -1.0], [0.5, 1]]
    assert EMBEDDINGS.parse(body, emb_spec(["a", "b"])).embeddings == []  # kept only when asked
    # no usage: no count; total_tokens when prompt_tokens is absent
    assert EMBEDDINGS.parse(orjson.dumps({"data": [{"embedding": [1.0]}]}), emb_spec("a")).usage_in is None
    assert (
        EMBEDDINGS.parse(
            orjson.dumps({"data": [{"embedding": [1.0]}], "usage": {"total_tokens": 3}}), emb_spec("a")
        ).usage_in
        == 3
    )
    b64 = orjson.dumps({"data": [{"index": 0, "embedding": "AAAAAA=="}]})
    assert EMBEDDINGS.parse(b64, emb_spec(["a"], encoding_format="base64"), keep_text=True).embeddings == ["AAAAAA=="]


@pytest.mark.parametrize(
    "body, spec, text",
    [
        (b"<html>busy</html>", emb_spec(["a"]), "not valid JSON"),
        (b"[1, 2]", emb_spec(["a"]), "not a JSON object but list"),
        (b'{"object": "list"}', emb_spec(["a"]), "no 'data' list (missing)"),
        (b'{"data": {"embedding": [1]}}', emb_spec(["a"]), "no 'data' list (dict)"),
        (emb_reply([[1.0]]), emb_spec(["a", "b"]), "1 embeddings for 2 inputs"),
        (emb_reply([[1.0], [2.0], [3.0]]), emb_spec(["a", "b"]), "3 embeddings for 2 inputs"),
        (emb_reply(["0.1 0.2"]), emb_spec(["a"]), "not a non-empty list of numbers"),
        (emb_reply([[]]), emb_spec(["a"]), "not a non-empty list of numbers"),
        (emb_reply([[0.1, "0.2"]]), emb_spec(["a"]), "holds a non-number: '0.2'"),
        (emb_reply([[0.1, True]]), emb_spec(["a"]), "holds a non-number: True"),
        (emb_reply([[0.1, [0.2]]]), emb_spec(["a"]), "holds a non-number"),
        (emb_reply([[0.1, 0.2], [0.3]]), emb_spec(["a", "b"]), "has 1 dimensions, data[0] 2"),
        (emb_reply([[1.0]], usage=-1), emb_spec(["a"]), "usage.prompt_tokens is not a plausible token count"),
        (emb_reply([[1.0]], usage="7"), emb_spec(["a"]), "usage.prompt_tokens is not a plausible token count"),
        (orjson.dumps({"data": [{"embedding": [1.0]}], "usage": [7]}), emb_spec(["a"]), "'usage' is not an object"),
        (orjson.dumps({"data": ["x"]}), emb_spec(["a"]), "data[0] is not an object: str"),
        (
            orjson.dumps({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]}),
            emb_spec(["a", "b"]),
            "index 0 repeated",
        ),
        (orjson.dumps({"data": [{"index": 5, "embedding": [1.0]}]}), emb_spec(["a"]), "not an index of the 1 sent: 5"),
        (
            orjson.dumps({"data": [{"index": 0, "embedding": [1.0]}]}),
            emb_spec(["a"], encoding_format="base64"),
            "not base64 text",
        ),
    ],
)
def test_bad_embeddings_replies_are_protocol_errors(body, spec, text):
    with pytest.raises(ProtocolError) as e:
        EMBEDDINGS.parse(body, spec)
    assert text in str(e.value)


def rr_reply(results, usage=11) -> bytes:
    return orjson.dumps({"results": results, "usage": {"total_tokens": usage}})


def test_a_good_rerank_reply_gives_scores_in_document_order():
    r = RERANK.parse(
        rr_reply(
            [
                {"index": 2, "relevance_score": 0.9},
                {"index": 0, "relevance_score": 0.5},
                {"index": 1, "relevance_score": -2},
            ]
        ),
        rr_spec(["a", "b", "c"]),
    )
    assert r.items == 3 and r.usage_in == 11 and r.scores == [0.5, -2.0, 0.9]
    # top_n: the documents not returned have no score; a server that ignores top_n is not wrong
    r = RERANK.parse(rr_reply([{"index": 1, "relevance_score": 0.7}]), rr_spec(["a", "b", "c"], top_n=1))
    assert r.items == 1 and r.scores == [None, 0.7, None]
    r = RERANK.parse(
        rr_reply([{"index": i, "relevance_score": 0.1} for i in range(3)]), rr_spec(["a", "b", "c"], top_n=1)
    )
    assert r.items == 3


@pytest.mark.parametrize(
    "body, spec, text",
    [
        (b"", rr_spec(["a"]), "not valid JSON"),
        (b'{"data": []}', rr_spec(["a"]), "no 'results' list"),
        (
            rr_reply([{"index": 0, "relevance_score": 0.1}]),
            rr_spec(["a", "b"]),
            "1 rerank results for 2 documents (expected 2)",
        ),
        (
            rr_reply([{"index": i, "relevance_score": 0.1} for i in range(3)]),
            rr_spec(["a", "b", "c", "d"], top_n=2),
            "3 rerank results for 4 documents (expected 2 or 4)",
        ),
        (rr_reply([{"relevance_score": 0.1}]), rr_spec(["a"]), "results[0] has no 'index'"),
        (rr_reply([{"index": "0", "relevance_score": 0.1}]), rr_spec(["a"]), "results[0].index is not an index"),
        (
            rr_reply([{"index": 1, "relevance_score": 0.1}]),
            rr_spec(["a"]),
            "results[0].index is not an index of the 1 sent: 1",
        ),
        (
            rr_reply([{"index": 0, "relevance_score": "high"}]),
            rr_spec(["a"]),
            "relevance_score is not a number: 'high'",
        ),
        (rr_reply([{"index": 0, "relevance_score": None}]), rr_spec(["a"]), "relevance_score is not a number: None"),
        (
            rr_reply([{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 1}]),
            rr_spec(["a", "b"]),
            "repeated",
        ),
        (rr_reply([0.5]), rr_spec(["a"]), "results[0] is not an object"),
    ],
)
def test_bad_rerank_replies_are_protocol_errors(body, spec, text):
    with pytest.raises(ProtocolError) as e:
        RERANK.parse(body, spec)
    assert text in str(e.value)


def test_score_replies():
    spec = RequestSpec(extra_body={"text_1": "q", "text_2": ["a", "b"]})
    body = orjson.dumps(
        {"data": [{"index": 0, "score": 0.25}, {"index": 1, "score": 1}], "usage": {"prompt_tokens": 6}}
    )
    r = SCORE.parse(body, spec)
    assert r.items == 2 and r.scores == [0.25, 1.0] and r.usage_in == 6
    with pytest.raises(ProtocolError, match="1 scores for 2 text pairs"):
        SCORE.parse(orjson.dumps({"data": [{"index": 0, "score": 0.25}]}), spec)
    with pytest.raises(ProtocolError, match="data.1..score is not a number"):
        SCORE.parse(orjson.dumps({"data": [{"index": 0, "score": 0.25}, {"index": 1, "score": [1]}]}), spec)


# ---- the client against the simulator and canned replies -----------------------------------


@pytest.fixture(scope="module")
def sim(sims):
    return sims(slots=4)


def test_embeddings_from_the_simulator(sim):
    c = client_for(sim.url)
    texts = ["one two three", "four five", "six"]
    rec = c.send(emb_spec(texts), f"e{next(ids)}", keep_text=True)
    assert rec.ok, rec.error
    assert rec.status == 200 and rec.n_in == 6 and rec.n_in_source == "usage" and rec.n_out == 0
    assert rec.extra == {"items": 3} and rec.chunk_times == [] and rec.t_first is None
    assert rec.t_sent < rec.t_headers <= rec.t_end and rec.e2e > 0
    reply = c.body.replies.pop(rec.request_id)
    assert len(reply.embeddings) == 3 and all(len(v) == 16 for v in reply.embeddings)
    # deterministic: the same text, the same vector; and the connection is kept alive
    rec2 = c.send(emb_spec(["six"]), f"e{next(ids)}", keep_text=True)
    assert c.body.replies.pop(rec2.request_id).embeddings[0] == reply.embeddings[2]
    assert len(c._kept_alive) == 1


def test_latency_grows_with_the_input(sim):
    c = client_for(sim.url)
    short = min(c.send(emb_spec(["a"]), f"e{next(ids)}").e2e for _ in range(3))
    long = min(c.send(emb_spec([" ".join(["w"] * 2000)] * 4), f"e{next(ids)}").e2e for _ in range(3))
    assert long > short + 0.1  # 8000 tokens at 20 us each


def test_rerank_and_score_from_the_simulator(sim):
    c = client_for(sim.url, "rerank")
    docs = ["the cat sat", "dogs bark loudly", "a cat and a dog"]
    rec = c.send(RequestSpec(model="m", extra_body={"query": "cat dog", "documents": docs}), f"r{next(ids)}")
    assert rec.ok, rec.error
    assert rec.extra == {"items": 3} and rec.n_in == 2 * 3 + 3 + 3 + 5
    assert c.body.replies.pop(rec.request_id).scores == [0.5, 0.0, 1.0]
    rec = c.send(
        RequestSpec(model="m", extra_body={"query": "cat dog", "documents": docs, "top_n": 1}), f"r{next(ids)}"
    )
    assert rec.ok and rec.extra == {"items": 1} and c.body.replies.pop(rec.request_id).scores == [None, None, 1.0]
    s = client_for(sim.url, "vllm-score")
    rec = s.send(RequestSpec(extra_body={"text_1": "cat", "text_2": ["cat", "dog"]}), f"s{next(ids)}")
    assert rec.ok, rec.error
    assert s.body.replies.pop(rec.request_id).scores == [1.0, 0.0] and rec.n_in == 4


def test_server_refusals_are_http_errors(sim):
    rec = client_for(sim.url, "rerank").send(RequestSpec(extra_body={"query": 3, "documents": ["a"]}), "bad")
    assert rec.outcome is Outcome.HTTP_ERROR and rec.status == 400 and "'query' must be a string" in rec.error
    c = client_for(sim.url)
    c._head_lines += "X-Sim-Fault: http500\r\n"
    rec = c.send(emb_spec(["a"]), "f500")
    assert rec.outcome is Outcome.HTTP_ERROR and rec.status == 500 and "simulated http500" in rec.error


def http_reply(body: bytes, ctype=b"application/json", length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n\r\n" % n + body


@pytest.mark.parametrize(
    "reply, outcome, text",
    [
        (http_reply(b"<html>hi</html>", b"text/html"), Outcome.STREAM_ERROR, "not valid JSON"),
        (http_reply(b"<html>hi</html>", b"text/html"), Outcome.STREAM_ERROR, "(content-type text/html)"),
        (http_reply(emb_reply([[1.0]])), Outcome.STREAM_ERROR, "1 embeddings for 2 inputs"),
        (http_reply(emb_reply([[1.0], ["x"]])), Outcome.STREAM_ERROR, "holds a non-number"),
        (http_reply(b'{"data": [', length=500), Outcome.TRUNCATED, "connection closed before the end of the body"),
        (http_reply(emb_reply([[0.5] * 2000, [0.5] * 2000])), Outcome.STREAM_ERROR, "reply over 4096 bytes"),
        (
            b'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 31\r\n\r\n{"error": {"message": "busy"}}',
            Outcome.HTTP_ERROR,
            "HTTP 503: busy",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + emb_reply([[1.0], [2.0]]), Outcome.OK, ""),
    ],
)
def test_bad_replies_are_classified(reply, outcome, text):
    server = canned_server(reply)
    try:
        c = client_for(f"http://127.0.0.1:{server.server_port}", limits=Limits(body_bytes=4096))
        rec = c.send(emb_spec(["a", "b"]), f"c{next(ids)}")
    finally:
        server.stop()
    assert rec.outcome is outcome, rec.error
    assert text in (rec.error or "")
    assert rec.n_out == 0 and rec.t_end is not None


def test_a_slow_reply_hits_the_total_timeout():
    import gevent

    def handle(sock, _addr):
        sock.recv(65536)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
        gevent.sleep(3)
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        rec = client_for(f"http://127.0.0.1:{server.server_port}", timeouts=Timeouts(2.0, 5.0, 0.5)).send(
            emb_spec(["a"]), "slow"
        )
    finally:
        server.stop()
    assert rec.outcome is Outcome.TIMEOUT, rec.error


# ---- the RAG example -----------------------------------------------------------------------


def test_the_rag_example_under_llm_locust_run(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "-f",
            str(REPO / "locustfiles" / "rag.py"),
            "-u",
            "2",
            "-t",
            "3s",
            "--csv",
            str(tmp_path / "c"),
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
    with open(tmp_path / "c_stats.csv") as f:
        table = {r["Name"]: r for r in csv.DictReader(f)}
    for row in ("embed", "rerank", "chat"):
        assert int(table[row]["Request Count"]) > 0 and table[row]["Failure Count"] == "0", table[row]
    recs = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    embeds = [r for r in recs if r["api"] == "openai-embeddings" and r["outcome"] == "ok"]
    reranks = [r for r in recs if r["api"] == "rerank" and r["outcome"] == "ok"]
    assert embeds and all(r["server"] == {"items": 1} and r["n_in"] > 0 and r["n_out"] == 0 for r in embeds)
    assert reranks and all(r["server"] == {"items": 6} for r in reranks)
    s = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert s["ok"] > 0 and s["failed"] == 0


# ---- a real llama-server ---------------------------------------------------------------------


@pytest.mark.real_server
def test_a_real_llama_server_embeds_and_our_token_count_is_its_usage(
    llama_server_bin, smollm2_model, smollm2_tokenizer
):
    """llama-server --embeddings (mean pooling) through the client: a well-formed reply of one
    vector per input, and the input tokens it reports are the tokenizer's count of the inputs."""
    import realservers

    from llm_locust.workload.tokenizer import load_tokenizer

    tok = load_tokenizer(smollm2_tokenizer)
    texts = ["The warranty covers manufacturing defects.", "How long does the battery last?", "Hello"]
    with realservers.LlamaServer(
        smollm2_model, binary=llama_server_bin, slots=2, ctx=2048, extra_args=["--embeddings", "--pooling", "mean"]
    ) as srv:
        c = client_for(srv.url, timeouts=Timeouts(5.0, 30.0, 60.0))
        rec = c.send(RequestSpec(model="smollm2", extra_body={"input": texts}), "real-emb", keep_text=True)
    assert rec.ok, rec.error
    reply = c.body.replies.pop(rec.request_id)
    assert rec.extra == {"items": 3} and len(reply.embeddings) == 3
    assert len({len(v) for v in reply.embeddings}) == 1 and len(reply.embeddings[0]) > 8
    # per input, the tokenizer's count with its special tokens (SmolLM2 adds none: 14 tokens)
    assert rec.n_in == sum(tok.count(t, add_special_tokens=True) for t in texts) == 14


# ---- preflight under --mix -------------------------------------------------------------------


def test_preflight_asks_the_endpoints_the_mix_uses():
    """A pooling-only server (vLLM --runner pooling: /v1/embeddings, /v1/rerank, /v1/score, no
    /v1/chat/completions): --mix giving it every request passes the preflight; leaving a share to
    the --api's chat, or mixing in a kind it lacks, stops with the endpoint named."""
    from llm_locust.transport import preflight

    assert preflight.endpoint_apis("openai-chat", {}) == ["openai-chat"]
    assert preflight.endpoint_apis("openai-chat", {"embeddings": 0.2, "rerank": 0.1}) == [
        "openai-chat",
        "openai-embeddings",
        "rerank",
    ]
    assert preflight.endpoint_apis("openai-chat", {"embeddings": 0.5, "score": 0.25, "rerank": 0.25}) == [
        "openai-embeddings",
        "vllm-score",
        "rerank",
    ]

    served = {"/v1/embeddings", "/v1/score"}

    def handle(sock, _addr):
        head = sock.recv(65536).split(b"\r\n", 1)[0].decode()
        method, path = head.split()[:2]
        if method == "GET":
            body, status = b'{"data": [{"id": "m"}]}', "200 OK"
        elif path in served:
            body, status = b'{"error": "bad request"}', "400 Bad Request"
        else:
            body, status = b'{"detail": "Not Found"}', "404 Not Found"
        sock.sendall(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        host = f"http://127.0.0.1:{server.server_port}"

        def check(mix):
            return preflight.check(host, "openai-chat", {}, 2.0, endpoints=preflight.endpoint_apis("openai-chat", mix))

        assert check({"embeddings": 0.75, "score": 0.25}) is None
        problem = check({"embeddings": 0.5})
        assert problem.code == 3 and "/v1/chat/completions answered 404" in problem.message
        problem = check({"embeddings": 0.5, "rerank": 0.5})
        assert problem.code == 3 and "/v1/rerank answered 404" in problem.message and "rerank API" in problem.message
    finally:
        server.stop()
