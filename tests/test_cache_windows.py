"""Issue 24 item 5: the server's prefix-cache counters per ladder step agree with the client's usage.

A counter is read every --metrics-interval seconds; a step's window starts and ends between two
reads. The windows used to take the increase between the first and the last read inside them,
losing what the counter gained at both edges (all of it in a step with one read inside), so a
llama-server ladder showed "cache hit %" 0.0 per step beside 7,962 cached tokens over the run. The
increase is now read at the window's edges, interpolated between the reads around them
(analysis/server_metrics.py counter_increase). Checked in process, on the simulator with prefix
caching and on a real llama-server, each against the client's own per-step count (usage's
cached_tokens of the requests the step sent).
"""

from __future__ import annotations

import json

import pytest
from support import run_cli

from llm_locust.analysis.server_metrics import Sample, ServerSeries
from llm_locust.sim.process import SimProcess

# --- in process ----------------------------------------------------------------------------


def _reads(every: float = 2.0, rate: float = 10.0, n: int = 6, hit_share: float = 0.5) -> ServerSeries:
    """vLLM-named counters read every `every` s, prompts at `rate` tokens/s, `hit_share` cached."""
    samples = []
    for k in range(n):
        t = k * every
        q = rate * t
        samples.append(Sample(t, {"prefix_cache_queries_total": q, "prefix_cache_hits_total": hit_share * q}))
    return ServerSeries("u", "vllm", samples)


def test_a_windows_counters_are_read_at_its_edges_between_reads():
    s = _reads()  # reads at 0, 2, 4, 6, 8, 10 s; 10 prompt tokens a second, half of them cached
    w = s.window(1.0, 7.0)  # edges between reads: 6 s of counting, 3 reads inside
    assert w["samples"] == 3
    assert w["prefix_cache_queries_total"]["increase"] == pytest.approx(60)  # the old code: 40 (2 s to 6 s)
    assert w["prefix_cache_hits_total"]["increase"] == pytest.approx(30)
    assert (w["t_from"], w["t_to"]) == (1.0, 7.0)
    one = s.window(3.0, 4.5)  # one read inside: the old code had no increase at all
    assert one["prefix_cache_hits_total"]["increase"] == pytest.approx(7.5)
    assert one["prefix_cache_hit_ratio"] == pytest.approx(0.5)
    none = s.window(2.5, 3.5)  # between two reads: still the counter's share of the gain
    assert none["samples"] == 0 and none["prefix_cache_queries_total"]["increase"] == pytest.approx(10)
    assert "running" not in none  # gauges are only what was read inside
    assert "prefix_cache_hits_total" not in s.window(20.0, 30.0)  # after the last read: unknown
    cut = s.window(-5.0, 1.0)  # before the first read nothing is known: cut to the reads' span
    assert cut["prefix_cache_queries_total"] == {"increase": pytest.approx(10), "per_s": pytest.approx(10)}
    assert (cut["t_from"], cut["t_to"]) == (0.0, 1.0)


def test_the_steps_windows_add_up_to_the_runs():
    s = _reads(every=1.7, n=40)
    edges = [0.3, 4.1, 9.9, 15.2, 22.0, 31.0, 40.0]
    parts = [s.window(a, b)["prefix_cache_hits_total"]["increase"] for a, b in zip(edges, edges[1:], strict=False)]
    assert sum(parts) == pytest.approx(s.window(edges[0], edges[-1])["prefix_cache_hits_total"]["increase"])


def test_a_counter_that_went_back_is_left_for_the_reader_to_flag():
    from llm_locust.analysis.server_metrics import counter_increase

    # a GPU lost between the reads at 2 and 4 s: the sum fell 100 -> 30; the energy figures flag
    # a negative increase (energy_counter_reset) rather than take a guess
    assert counter_increase([(0.0, 50.0), (2.0, 100.0), (4.0, 30.0), (6.0, 40.0)], 0.0, 6.0)["increase"] == -10
    assert counter_increase([], 0, 1) is None
    assert counter_increase([(5.0, 1.0)], 5.0, 5.0) == {"increase": 0.0, "per_s": None}  # one read: nothing gained


# --- real processes: the simulator with a prefix cache, a real llama-server -----------------

PREFIX = " ".join(f"w{i}" for i in range(120))  # shared by every prompt: the cache's hits


def _trace(path, n: int = 2000) -> str:
    with open(path, "w") as f:
        for i in range(n):
            prompt = f"{PREFIX} question {i % 4} about topic {i % 4}"
            f.write(json.dumps({"prompt": prompt, "output_tokens": 12}) + "\n")
    return str(path)


def _ladder(url: str, tmp_path, *extra: str) -> dict:
    """Three steps, each a 2 s measurement window after a 4 s warm-up, the counters read every 3 s
    (each read moved by up to 0.75 s): a window gets one read inside or none, rarely two. The
    server has fewer slots than the fewest users (4, 5, 6), so its slots never idle and it works
    at one rate throughout: the prompts' rate is the same on both sides of every edge (an edge
    read by interpolation is then right on average; where the rate changes it is off by up to a
    read interval's difference, which reads taken at the edges themselves remove). The warm-up is
    longer than a read interval, so the read before the first window is under load too."""
    results = tmp_path / "r.json"
    p = run_cli(
        "--host",
        url,
        "--api",
        "openai-completions",
        "--trace",
        _trace(tmp_path / "t.jsonl"),
        "--ladder",
        "concurrency:4,5,6",
        "--warmup",
        "4s",
        "--step-duration",
        "6s",
        "--no-early-stop",
        "--metrics-interval",
        "3s",
        "--results",
        str(results),
        *extra,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return json.loads(results.read_text())


def _assert_steps_agree(r: dict, rel: float) -> None:
    """Per step, the server's cached-token increase is the client's count of the step's requests
    (usage cached_tokens), within `rel`: the same prompts, counted as the server processed them
    (the requests in flight at each edge differ, and an edge read between two reads is the
    counter's mean rate between them: the machine's other work moves the server's rate within an
    interval), and the same hit share ("cache hit %"). The old windows had no increase at all with
    fewer than two reads inside: no hit share for the step."""
    windows, steps = r["server_metrics"]["steps"], r["ladder"]["steps"]
    assert len(windows) == len(steps) == 3
    for w, st in zip(windows, steps, strict=True):
        client = st["cache"]
        where = f"step {st['step']}: server {w}, client {client}"
        assert client["cached_tokens"] > 1000, where
        assert w["prefix_cache_hit_ratio"] == pytest.approx(client["hit_ratio"], abs=0.05), where
        assert w["prefix_cache_hits_total"]["increase"] == pytest.approx(client["cached_tokens"], rel=rel), where
    run = r["server_metrics"]["run"]["prefix_cache_hits_total"]["increase"]
    assert sum(w["prefix_cache_hits_total"]["increase"] for w in windows) < run  # warm-ups are outside the steps


def test_the_simulators_cache_counters_per_step_agree_with_the_client(tmp_path):
    with SimProcess(slots=2, iter_base=0.004, iter_per_seq=0.0, prefix_cache=True, cache_block=8) as sim:
        r = _ladder(sim.url, tmp_path)
    assert r["server_metrics"]["source"]["server"] in ("vllm", "llm-locust-sim")
    _assert_steps_agree(r, rel=0.25)


@pytest.mark.real_server
def test_llama_servers_cache_counters_per_step_agree_with_the_client(tmp_path, llama_server_bin, tiny_model):
    from realservers import LlamaServer

    with LlamaServer(tiny_model, slots=1, ctx=4096, alias="tiny", threads=1) as srv:
        r = _ladder(srv.url, tmp_path, "--model", "tiny")
    assert r["server_metrics"]["source"]["server"] == "llama.cpp"
    _assert_steps_agree(r, rel=0.5)
