"""Sessions through the whole chain: `llm-locust run` (real Locust, real simulated servers with
a prefix cache) over two replicas, routed round-robin and by session affinity; cached tokens per
request from the servers' replies, the ideal reuse, per-endpoint figures and the endpoints'
state; an endpoint that dies mid-run."""

import json
import subprocess

import pytest
from support import cli_process, read_jsonl, read_records, run_ok, start_run

from llm_locust.sim.process import SimProcess


def conversations(path, n=16, turns=4, words=60, later_words=None):
    """n conversations of `turns` turns, the first of `words` words, the later ones of
    `later_words` (default: as many)."""
    rows = []
    for c in range(n):
        for k in range(turns):
            count = words if k == 0 or later_words is None else later_words
            text = " ".join(f"w{c}x{k}x{i}" for i in range(count))
            rows.append(
                {"timestamp": 0.0, "conversation_id": f"conv{c}", "turn": k, "prompt": text, "output_tokens": 8}
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chat_args(trace, results, log, hosts) -> list[str]:
    """A run of `trace` (openai-chat) against `hosts`, writing `results` and the record log `log`."""
    args = ["--trace", str(trace), "--results", str(results), "--record-log", str(log), "--api", "openai-chat"]
    return args + [a for h in hosts for a in ("--host", h)]


def run(tmp, hosts, trace, *args, timeout=180):
    results, log = tmp / "results.json", tmp / "records.jsonl"
    p = run_ok(*chat_args(trace, results, log, hosts), *args, timeout=timeout)
    return json.loads(results.read_text()), read_records(log), p.stdout


SIM = dict(
    slots=16, iter_base=0.002, iter_per_seq=0.0001, iter_per_prefill_token=0.0002, prefix_cache=True, cache_block=4
)


@pytest.fixture
def replicas():
    with SimProcess(**SIM) as a, SimProcess(**SIM) as b:
        yield [a.url, b.url]


def test_affinity_reaches_the_ideal_reuse_and_random_routing_does_not(tmp_path, replicas):
    # two turns: the second repeats the first and its reply; routed at random it lands on the other
    # replica half the time. (Round-robin is no baseline here: with an even number of users in
    # lock-step, a session's next pick comes round to the same replica again.) The second turn's
    # own text is short: a hit then prefills a few tokens where the first turn's miss prefills
    # sixty words' worth (were they the same length, hit and miss would prefill alike).
    trace = conversations(tmp_path / "conv.jsonl", turns=2, later_words=4)
    figs = {}
    for route in ("random", "affinity"):
        d = tmp_path / route
        d.mkdir()
        results, rows, out = run(d, replicas, trace, "--route", route, "-u", "4", "-t", "4s")
        ok = [r for r in rows if r["outcome"] == "ok"]
        assert ok and all(r["n_cached"] is not None for r in ok)  # the servers' own word, per request
        assert all(r["endpoint"] in replicas for r in ok) and {r["endpoint"] for r in ok} == set(replicas)
        cache = results["summary"]["cache"]
        assert cache["cached_tokens"] == sum(r["n_cached"] for r in ok)
        assert cache["ideal_cached_tokens"] == sum(r["ideal_cached"] for r in ok if r["ideal_cached"] is not None)
        by = results["summary"]["by_endpoint"]
        assert set(by) == set(replicas)
        assert sum(g["ok"] for g in by.values()) == len(ok)
        assert "sessions:" in out and all(f"endpoint {u}:" in out for u in replicas)
        if route == "affinity":  # a session's requests all went to one replica
            per = {}
            for r in ok:
                per.setdefault(r["session"], set()).add(r["endpoint"])
            assert all(len(v) == 1 for v in per.values())
        figs[route] = cache
    rr, aff = figs["random"], figs["affinity"]
    assert aff["achieved_vs_ideal"] > 0.9, aff  # every later turn hits its own replica's cache
    assert rr["achieved_vs_ideal"] < aff["achieved_vs_ideal"] - 0.2, (rr, aff)
    # prefill of cached tokens is skipped: hits start sooner than misses
    assert aff["ttft_hit"]["p50"] < aff["ttft_miss"]["p50"], (aff["ttft_hit"], aff["ttft_miss"])


def _served(url):
    """Requests the simulator finished, from its own /metrics."""
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


def test_an_endpoint_that_dies_mid_run_fails_its_own_requests_and_is_shown_down(tmp_path):
    import time

    trace = conversations(tmp_path / "conv.jsonl", n=8, turns=2, words=10)
    results_path, log = tmp_path / "results.json", tmp_path / "records.jsonl"
    with SimProcess(**SIM) as a:
        b = SimProcess(**SIM).start()
        doomed = b.url
        p = start_run(
            *chat_args(trace, results_path, log, [a.url, doomed]),
            "--workers",
            "0",
            "--route",
            "round-robin",
            "-u",
            "2",
            "-t",
            "5s",
            "--no-fail-fast",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while _served(doomed) < 10:  # it served its share for a while ...
                assert p.poll() is None and time.monotonic() < deadline, "the run ended before the endpoint died"
                time.sleep(0.05)
            b.stop()  # ... then dies mid-run
            out, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode in (0, 1), out[-2000:] + err[-2000:]  # 1: the error rate is above the limit
    results = json.loads(results_path.read_text())
    rows = read_jsonl(log)
    mine = [r for r in rows if r["endpoint"] == doomed]
    ok_before = [r for r in mine if r["outcome"] == "ok"]
    failed = [r for r in mine if r["outcome"] not in ("ok", "cancelled")]
    assert len(ok_before) >= 10 and failed  # served, then failed
    last_ok = max(r["wall_sent"] for r in ok_before)
    assert all(r["wall_sent"] >= last_ok - 1 for r in failed)  # the failures came after it died
    by = results["summary"]["by_endpoint"]
    assert by[doomed]["failed"] == len(failed) and by[doomed]["ok"] == len(ok_before)
    assert by[a.url]["failed"] == 0
    alive_after = [r for r in rows if r["endpoint"] == a.url and r["outcome"] == "ok" and r["wall_sent"] > last_ok]
    assert len(alive_after) > 3 * len(failed)  # the other one carried on
    assert results["run"]["endpoints"][doomed]["down"] is True and results["run"]["endpoints"][a.url]["down"] is False
    assert f"endpoint {doomed}:" in out and "DOWN" in out


def _synth(path, spec):
    p = cli_process("trace", "synth", "--agentic", spec, "--out", str(path), "--force", timeout=60)
    assert p.returncode == 0, p.stderr
    return read_jsonl(path)


def test_an_agentic_replay_over_two_workers_sends_every_turn_once_in_order(tmp_path):
    lines = _synth(
        tmp_path / "ag.jsonl",
        "sessions=30,turns=uniform:2:4,subagent_p=0.4,fanout=uniform:1:3,"
        "subagent_turns=uniform:1:3,first_input=uniform:50:150,subagent_input=60,new_tokens=uniform:10:40,"
        "output=4,gap=0.02,rate=40,seed=7",
    )
    with SimProcess(slots=256, iter_base=0.002, iter_per_seq=0.00002, iter_per_prefill_token=0) as sim:
        results, rows, out = run(tmp_path, [sim.url], tmp_path / "ag.jsonl", "--replay", "--workers", "2")
    assert len(rows) == len(lines) and all(r["outcome"] == "ok" for r in rows)
    assert len({r["id"].split("-")[0] for r in rows}) == 2  # both workers sent
    assert sorted(r["source"] for r in rows) == sorted(f"{tmp_path / 'ag.jsonl'}:{i}" for i in range(1, len(lines) + 1))
    sess = results["run"]["sessions"]
    assert sess["started"] == len({x["session"] for x in lines}) and sess["done"] == sess["started"]
    # a subagent's turns lie between the reply of the turn that spawned it and its parent's next turn
    turns: dict[str, list] = {}
    for i, x in enumerate(lines, 1):
        turns.setdefault(x["session"], []).append(i)
    at = {int(r["source"].rsplit(":", 1)[1]): (r["t_sent"], r["t_sent"] + r["end"]) for r in rows}
    checked = 0
    for x in lines:
        if x.get("parent") and x["session"] not in [y["session"] for y in lines[: lines.index(x)]]:
            parent = turns[x["parent"]]
            k = x["spawned_by_turn"]
            spawn_end = at[parent[k - 1]][1]
            mine = [at[i] for i in turns[x["session"]]]
            assert mine[0][0] >= spawn_end
            if k < len(parent):
                assert at[parent[k]][0] >= max(e for _, e in mine)
                checked += 1
    assert checked >= 3
    lag = results["summary"]["latency"]["schedule_lag"]
    print(
        f"schedule lag over {len(rows)} turns with 2 workers: p50 {lag['p50'] * 1e3:.2f} ms, "
        f"p99 {lag['p99'] * 1e3:.2f} ms"
    )


def test_a_ladder_shows_the_servers_cache_hits_and_spec_decode_beside_itl(tmp_path):
    trace = conversations(tmp_path / "conv.jsonl", n=8, turns=3, words=30)
    with SimProcess(**SIM, spec_tokens=3, spec_accept=0.7) as sim:
        results, rows, out = run(
            tmp_path,
            [sim.url],
            trace,
            "--ladder",
            "concurrency:1,2",
            "--step-duration",
            "3s",
            "--warmup",
            "1s",
            "--metrics-interval",
            "0.5s",
            "--workers",
            "0",
        )
    # the step table's headers (within 80 columns it is dealt into blocks, each starting "step")
    head = " ".join(line for line in out.splitlines() if line.startswith("step"))
    assert "cache hit %" in head and "spec acc %/len" in head, head
    steps = results["server_metrics"]["steps"]
    assert all(0 < s["prefix_cache_hit_ratio"] <= 1 for s in steps if "prefix_cache_hit_ratio" in s)
    assert any("spec_acceptance_rate" in s for s in steps)


def test_trace_models_send_each_record_with_its_own_model(tmp_path):
    trace = tmp_path / "m.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {"timestamp": i * 0.01, "input_tokens": 5, "output_tokens": 2, "model": "m-a" if i % 3 else "m-b"}
            )
            + "\n"
            for i in range(30)
        )
    )
    with SimProcess(slots=64, iter_base=0.002, iter_per_seq=0.00002, iter_per_prefill_token=0) as sim:
        results, rows, _ = run(
            tmp_path, [sim.url], trace, "--replay", "--trace-models", "--workers", "0", "--api", "openai-completions"
        )
    src_model = {f"{trace}:{i + 1}": ("m-a" if i % 3 else "m-b") for i in range(30)}
    assert len(rows) == 30 and all(r["model"] == src_model[r["source"]] for r in rows)
    by = results["summary"]["by_model"]
    assert (by["m-a"]["ok"], by["m-b"]["ok"]) == (20, 10)
