"""The same multi-turn workload over two real llama-server replicas (the tiny model, prompt cache
on), routed four ways: round-robin and session affinity on our side (--host R1 --host R2), and
through the real Shepherd Model Gateway, round_robin and consistent_hashing on our session
header (--session-headers x-session-id, smg --routing-key-headers x-session-id).

What must hold:
- affinity (ours and the router's) reaches a higher achieved/ideal cache reuse than round-robin
  (ours and the router's): a session's next turn finds its prefix on the replica that has it;
- TTFT on the affinity runs' hits is lower than on round-robin's misses (the same long later
  turns, prefilled whole);
- our per-request cached tokens are the servers' own: their sum per replica equals the rise of
  that replica's `llamacpp:prompt_tokens_cached_total`, and cached + processed prompt tokens
  equal the prompt tokens we counted.
Open-loop replays (sessions start at their trace times, turns follow replies), twice over the
trace: a run ends by itself with nothing in flight, so the servers' counters and ours must agree
exactly (a request cancelled at a stop would have been counted by the server only).
"""

from __future__ import annotations

import json
import statistics

import pytest
import realservers
from realservers import LlamaReplicas, SmgRouter, prometheus_values
from support import read_jsonl, run_ok

pytestmark = pytest.mark.real_server

CACHED = "llamacpp:prompt_tokens_cached_total"
PROCESSED = "llamacpp:prompt_tokens_total"


@pytest.fixture(scope="module")
def smg():
    return realservers.need_smg()


@pytest.fixture(scope="module")
def replicas(llama_server_bin, tiny_model, smg):
    with LlamaReplicas(tiny_model, n=2, binary=llama_server_bin, alias="tiny", slots=4, ctx=8192) as reps:
        yield reps


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    rows = []
    for c in range(6):
        for k in range(3):
            text = " ".join(f"c{c}t{k}w{i}" for i in range(40))
            rows.append(
                {"timestamp": 0.3 * c, "conversation_id": f"conv{c}", "turn": k, "prompt": text, "output_tokens": 8}
            )
    p = tmp_path_factory.mktemp("agentic") / "conv.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _replay(trace, results, log, hosts, *args):
    """An open-loop replay of `trace` against `hosts` in one process, no server-metrics reads (the
    test reads the servers' counters itself), writing `results` and the record log `log`."""
    run_ok(
        "--trace",
        str(trace),
        "--replay",
        "--workers",
        "0",
        "--results",
        str(results),
        "--record-log",
        str(log),
        "--server-metrics",
        "off",
        *args,
        *(a for h in hosts for a in ("--host", h)),
        timeout=180,
    )


def _run(tmp, hosts, trace, *args):
    results, log = tmp / "results.json", tmp / "records.jsonl"
    _replay(trace, results, log, hosts, "--api", "openai-chat", "--model", "tiny", "--loops", "2", *args)
    rows = read_jsonl(log)
    return json.loads(results.read_text())["summary"], [r for r in rows if r["outcome"] == "ok"]


def _later_turns(ok: list[dict]) -> tuple[list[float], list[float]]:
    """The TTFTs (s) of the turns after a conversation's first, those that found at least half their
    prompt cached and those that did not (a record's source is the trace's line: 3 turns a
    conversation, the first on lines 1, 4, 7, ...)."""
    later = [r for r in ok if int(r["source"].rsplit(":", 1)[1]) % 3 != 1]
    return (
        [r["first"] for r in later if r["n_cached"] >= r["n_in"] / 2],
        [r["first"] for r in later if r["n_cached"] < r["n_in"] / 2],
    )


def _counters(reps):
    return [{k: prometheus_values(u).get(k, 0.0) for k in (CACHED, PROCESSED)} for u in reps.urls]


@pytest.mark.timing  # it compares TTFT medians of ~35 ms: alone, not beside the other real shard (CI 2026-12-07)
def test_affinity_beats_round_robin_and_cached_tokens_are_the_servers(tmp_path, replicas, trace):
    figs, later = {}, {}
    runs = {
        "ours round-robin": (replicas.urls, ("--route", "round-robin"), None),
        "ours affinity": (replicas.urls, ("--route", "affinity"), None),
        "smg round_robin": (None, ("--session-headers", "x-session-id"), "round_robin"),
        "smg consistent_hashing": (None, ("--session-headers", "x-session-id"), "consistent_hashing"),
    }
    for name, (hosts, args, policy) in runs.items():
        d = tmp_path / name.replace(" ", "_")
        d.mkdir()
        before = _counters(replicas)
        if policy is None:
            summary, ok = _run(d, hosts, trace, *args)
        else:
            with SmgRouter(replicas.urls, policy=policy, routing_key_headers=["x-session-id"]) as router:
                summary, ok = _run(d, [router.url], trace, *args)
        after = _counters(replicas)
        rise = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before, strict=True)]
        assert len(ok) == 36, (name, len(ok))  # 6 sessions x 3 turns, twice
        assert all(r["n_cached"] is not None for r in ok), name  # llama-server says it on every reply
        # our cached tokens are the servers' own, replica by replica when we routed, else in sum
        if hosts:
            for url, r in zip(replicas.urls, rise, strict=True):
                assert sum(x["n_cached"] for x in ok if x["endpoint"] == url) == r[CACHED], (name, url)
        assert sum(x["n_cached"] for x in ok) == sum(r[CACHED] for r in rise), name
        assert sum(x["n_in"] for x in ok) == sum(r[CACHED] + r[PROCESSED] for r in rise), name
        cache = summary["cache"]
        figs[name] = cache
        later[name] = _later_turns(ok)
        assert cache["miss_requests"] > 0 and cache["ttft_miss"]["count"] > 0, name
        print(
            f"{name}: achieved/ideal {cache['achieved_vs_ideal']:.3f}, hit ratio {cache['hit_ratio']:.3f}, "
            f"TTFT p50 hit {cache['ttft_hit']['p50'] if cache['hit_requests'] else None} "
            f"miss {cache['ttft_miss']['p50']} ({len(ok)} requests)"
        )
    for aff, rr in (("ours affinity", "ours round-robin"), ("smg consistent_hashing", "smg round_robin")):
        a, r = figs[aff], figs[rr]
        assert a["achieved_vs_ideal"] > 0.9, (aff, a)
        assert a["achieved_vs_ideal"] > r["achieved_vs_ideal"] + 0.2, (aff, a, rr, r)
        # later turns are longer than first ones, so hits and misses are compared turn for turn:
        # the affinity run's later turns that hit against the round-robin run's later turns that
        # missed (the p50 of all misses mixed in the short first turns: 32.8 ms of hits against
        # 31.8 ms of misses in one run, where the same turns read 33.1 ms against 46.4 ms)
        hits, misses = later[aff][0], later[rr][1]
        assert len(hits) >= 12 and len(misses) >= 6, (aff, later[aff], rr, later[rr])
        assert statistics.median(hits) < statistics.median(misses), (aff, hits, rr, misses)


def test_a_weighted_model_split_over_two_servers_of_two_models(tmp_path, llama_server_bin, tiny_model):
    """Two llama-server processes as two models (aliases model-a, model-b), --model
    model-a:0.7,model-b:0.3 over both: each request goes to the server that lists its model
    (/v1/models), the split is within the binomial bound, and each server's own count of
    generated tokens is exactly its model's requests times the forced output length."""
    n, out = 60, 2
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": i * 0.01, "input_tokens": 20, "output_tokens": out}) + "\n" for i in range(n))
    )
    with (
        realservers.LlamaServer(tiny_model, binary=llama_server_bin, alias="model-a", threads=1) as a,
        realservers.LlamaServer(tiny_model, binary=llama_server_bin, alias="model-b", threads=1) as b,
    ):
        before = [prometheus_values(u).get("llamacpp:tokens_predicted_total", 0.0) for u in (a.url, b.url)]
        results, log = tmp_path / "r.json", tmp_path / "rl.jsonl"
        _replay(
            trace, results, log, [a.url, b.url], "--api", "openai-completions", "--model", "model-a:0.7,model-b:0.3"
        )
        after = [prometheus_values(u).get("llamacpp:tokens_predicted_total", 0.0) for u in (a.url, b.url)]
        urls = {"model-a": a.url, "model-b": b.url}
    rows = read_jsonl(log)
    assert len(rows) == n and all(r["outcome"] == "ok" for r in rows)
    assert all(r["endpoint"] == urls[r["model"]] for r in rows)  # a model's requests go where it is served
    by_model = json.loads(results.read_text())["summary"]["by_model"]
    n_a = by_model["model-a"]["ok"]
    assert n_a + by_model["model-b"]["ok"] == n
    assert abs(n_a - 0.7 * n) <= 4 * (n * 0.7 * 0.3) ** 0.5, n_a  # binomial: within 4 standard deviations
    assert [x - y for x, y in zip(after, before, strict=True)] == [n_a * out, (n - n_a) * out]
