"""Prefix popularity laws (issue 39 item 3; workload/prefix_dist.py, docs/prompts.md "Prefix
popularity"): the laws' probabilities, their closed-form ideal hit share, the synthetic
workload's draws, and on the simulator the ideal hit ratio against the server's counters."""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter

import pytest
from support import cli_process, run_cli, run_ok

from llm_locust.sim.process import SimProcess
from llm_locust.workload.prefix_dist import parse_prefix_dist
from llm_locust.workload.synth import SynthSpec, generate


def test_zipf_and_bimodal_probabilities():
    z = parse_prefix_dist("zipf:1:4")
    assert z.text == "zipf:1:4" and z.probs == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25])
    assert parse_prefix_dist("zipf:0:5").probs == pytest.approx([0.2] * 5)  # S = 0: uniform
    assert parse_prefix_dist("zipf:1.1").pool == 100
    b = parse_prefix_dist("bimodal:2:0.9:12")
    assert b.text == "bimodal:2:0.9:12" and b.probs == pytest.approx([0.45, 0.45] + [0.01] * 10)
    assert sum(parse_prefix_dist("bimodal:5:0.8").probs) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "text, words",
    [
        ("zipf", "unknown law 'zipf'"),
        ("zipf:x", "S: expected a number"),
        ("zipf:-1", "S: -1 is outside 0..10"),
        ("zipf:1:0", "POOL: 0 is outside 1..1000000"),
        ("zipf:1:2.5", "POOL: expected a whole number"),
        ("bimodal:5", "unknown law"),
        ("bimodal:5:1.5", "SHARE: 1.5 is outside 0..1"),
        ("bimodal:200:0.5", "HOT 200 must be below POOL 100"),
        ("pareto:1", "unknown law 'pareto:1'"),
    ],
)
def test_a_bad_law_says_what_is_wrong(text, words):
    with pytest.raises(ValueError) as e:
        parse_prefix_dist(text)
    assert words in str(e.value)


def test_draws_follow_the_law_and_the_closed_form_hits_match_simulation():
    law = parse_prefix_dist("zipf:1.1:50")
    draw = law.sampler(random.Random(1))
    n = 50_000
    counts = Counter(draw() for _ in range(n))
    for k in (0, 1, 4, 49):
        p = law.probs[k]
        assert abs(counts[k] / n - p) < 4 * (p * (1 - p) / n) ** 0.5, k
    # the ideal hits of n prompts: n - E[distinct prefixes], against 300 simulated sequences
    for text, prompts in (("zipf:1.1:100", 200), ("bimodal:5:0.8:100", 200), ("zipf:0.5:2000", 400)):
        law = parse_prefix_dist(text)
        sims = []
        for seed in range(300):
            draw = law.sampler(random.Random(seed))
            sims.append(prompts - len({draw() for _ in range(prompts)}))
        mean, se = statistics.mean(sims), statistics.stdev(sims) / len(sims) ** 0.5
        assert abs(law.expected_hits(prompts) - mean) < 4 * se, (text, law.expected_hits(prompts), mean)


def test_the_synthetic_workload_draws_its_prefixes_and_keeps_its_lengths():
    spec = SynthSpec(requests=2000, input="uniform:300:700", output="8", prefix_tokens=256, seed=4)
    plain = generate(spec)
    rows = generate(spec, prefix_dist=parse_prefix_dist("bimodal:3:0.75:40"))
    assert [r["input_tokens"] for r in rows] == [r["input_tokens"] for r in plain]  # the law draws apart
    firsts = Counter(r["hash_ids"][0] for r in rows)
    assert set(firsts) <= set(range(40)) and abs(sum(firsts[k] for k in range(3)) / 2000 - 0.75) < 0.04
    own = [h for r in rows for h in r["hash_ids"][1:]]
    assert min(own) >= 40 and len(own) == len(set(own))  # own blocks: never a pool id, never shared
    with pytest.raises(ValueError, match="needs prefix_tokens=N"):
        generate(SynthSpec(requests=5), prefix_dist=parse_prefix_dist("zipf:1"))


def _trace_ideal(path, prefix_tokens):
    """The ideal hit ratio of the written trace, sent once in order: a prompt's prefix is a hit
    when an earlier prompt had it (the rule, computed here apart from the run's own)."""
    seen, hit, total = set(), 0, 0
    for line in open(path):
        row = json.loads(line)
        first = row["hash_ids"][0]
        hit += prefix_tokens if first in seen else 0
        total += row["input_tokens"]
        seen.add(first)
    return hit / total


@pytest.mark.parametrize("law", ["zipf:1.1", "bimodal:5:0.8"])
def test_on_the_simulator_the_ideal_and_the_servers_hit_ratios_agree(tmp_path, law):
    """An open loop sends each of 300 prompts once against the simulator's prefix cache, emptied
    first: the server's hit ratio within 5 points of the run's ideal, and that ideal within 2
    points of the written trace's own (the prompt text is built to the server's count within a
    few tokens)."""
    results = tmp_path / "r.json"
    with SimProcess(slots=16, prefix_cache=True, fast=True) as sim:
        synthetic = "requests=300,input=600,output=4,prefix_tokens=512,seed=3,rate=40"
        p = run_ok(
            "--host", sim.url, "--replay", "-t", "12s", "--synthetic", synthetic, "--prefix-dist", law,
            "--reset-cache", "repeat", "--results", results, timeout=120,
        )  # fmt: skip
    assert f"prefix law {parse_prefix_dist(law).text}: 300 prompts over 100 prefixes" in " ".join(p.stdout.split())
    doc = json.loads(results.read_text())
    assert doc["summary"]["ok"] == 300
    cache = doc["summary"]["cache"]
    assert cache["ideal_hit_ratio"] is not None and cache["ideal_hit_ratio"] > 0.5
    assert abs(cache["hit_ratio"] - cache["ideal_hit_ratio"]) < 0.05, cache
    trace_share = _trace_ideal(tmp_path / "r.workload.jsonl", 512)
    assert abs(cache["ideal_cached_tokens"] / 300 / 600 - trace_share) < 0.02
    recipe = json.loads((tmp_path / "r.workload.jsonl.spec.json").read_text())
    assert recipe["prefix_dist"] == parse_prefix_dist(law).text


def test_a_prefix_law_needs_prefix_blocks_and_trace_synth_takes_it(tmp_path):
    p = run_cli("--synthetic", "requests=10", "--prefix-dist", "zipf:1", "-t", "2s", timeout=60)
    assert p.returncode == 2 and "give --synthetic ...,prefix_tokens=N" in " ".join(p.stderr.split())
    p = run_cli("--synthetic", "requests=10,prefix_tokens=8", "--prefix-dist", "zipf:-2", "-t", "2s", timeout=60)
    assert p.returncode == 2 and "S: -2 is outside 0..10" in p.stderr and "Traceback" not in p.stderr
    out = tmp_path / "t.jsonl"
    p = cli_process(
        "trace", "synth", "--requests", "50", "--prefix-tokens", "64", "--prefix-dist", "zipf:1.2:10",
        "--out", out, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "prefix law zipf:1.2:10: 50 prompts over 10 prefixes" in p.stdout
    assert {json.loads(line)["hash_ids"][0] for line in out.read_text().splitlines()} <= set(range(10))
