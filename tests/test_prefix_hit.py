"""A controlled prefix-cache hit ratio (issue 26 item 5, `--prefix-hit R`): every prompt begins
with the same R x N tokens and has its own rest, the server's cache is flushed before the load and
primed by each user's first request, and the ratio the server's counters report after the warm-up
is checked against R (the prefix_hit gate). On the simulator's prefix cache here; on real
llama-server in tests/test_real_cache_reset.py. A server that misses the ratio fails the gate:
tests/test_outcome.py, in process (outcome.build decides it from the server's counters)."""

from __future__ import annotations

import json

import pytest
from support import run_cli

from llm_locust.sim.process import SimProcess

SYNTH = "requests=50,input=256,output=8"


def _run(url: str, tmp_path, ratio: float, *extra: str):
    results = tmp_path / f"r-{ratio}.json"
    p = run_cli("--host", url, "--api", "openai-completions", "--synthetic", SYNTH, "-u", "4", "-t", "4s",
                "--prefix-hit", str(ratio), "--results", results, *extra, timeout=120)  # fmt: skip
    return p, json.loads(results.read_text())


@pytest.mark.parametrize("ratio", [0.5, 0.25])
def test_the_server_hits_the_ratio_asked_for(tmp_path, ratio):
    """50 records replayed round and round by 4 users (before: a record sent again found its whole
    prompt cached, 91% for a 50% prefix); flushed first (the run's cache_reset), primed, checked."""
    with SimProcess(prefix_cache=True, cache_block=16, fast=True) as sim:
        p, r = _run(sim.url, tmp_path, ratio)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    hit = r["prefix_hit"]
    assert hit["source"] == "counters" and hit["achieved"] == pytest.approx(ratio, abs=0.01), hit
    assert hit["client"] == pytest.approx(ratio, abs=0.01) and hit["within"] is True, hit
    assert r["run"]["cache_reset"]["outcome"] == "ok" and r["warmup"]["sent"] == 4  # flushed, primed by 4 users
    assert r["summary"]["sent"] > 50  # the trace went round: each send still had its own rest
    assert {g["name"]: g["passed"] for g in r["gates"]}["prefix_hit"] is True
    assert f"prefix hit: target {ratio:.0%}, the server's counters" in " ".join(p.stdout.split())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--prefix-hit", "0.5"], "--prefix-hit: shapes the prompts of a synthetic workload"),
        (["--prefix-hit", "0.5", "--synthetic", "requests=9,input=uniform:10:20,output=4"], "needs one input length"),
        (["--prefix-hit", "0.5", "--synthetic", "requests=9,input=64,output=4,prefix_tokens=8"], "drop prefix_tokens"),
        (["--prefix-hit", "0.5", "--synthetic", SYNTH, "--ladder", "concurrency:1,2"], "--prefix-hit: a closed loop"),
        (["--prefix-hit", "0.5", "--synthetic", SYNTH, "--replay"], "--prefix-hit: a closed loop"),
        (["--prefix-hit", "1.5", "--synthetic", SYNTH], "--prefix-hit: Input should be less than or equal to 1"),
    ],
)
def test_a_prefix_hit_that_cannot_apply_is_refused(argv, message):
    p = run_cli(*argv, "-t", "2s", timeout=60)
    assert p.returncode == 2 and message in p.stderr, p.stderr[-2000:]
