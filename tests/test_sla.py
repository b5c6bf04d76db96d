"""The SLA search (`--ladder sla:rate`, issue 15 item 4): the pure decision logic, the syntax, and
end to end on the simulator against its closed-form capacity.

The analytic answer: with constant arrivals at rate r above the simulator's saturated request
rate mu = slots / ((a + b slots) o) (sim.engine.capacity), every probe starting from an empty
server (the search waits for a probe's requests before the next one), the waiting queue grows
as (r - mu) t, so a request sent t seconds into the probe waits (r / mu - 1) t. The last requests
of a probe's window are sent T (the step duration) after it began: the TTFT p99 limit s breaks
once (r / mu - 1) T > s, at r* = mu (1 + s / T). Below mu nothing queues (TTFT is about one
iteration), so r* is where the SLO breaks.
"""

import json
import math
import random
import subprocess
import sys

import pytest

from llm_locust.analysis.sla import bracket, conclude, fixed_ladder_steps, next_level
from llm_locust.settings.ladder_spec import PlanError, Search, parse_ladder
from llm_locust.sim.engine import SimConfig, capacity
from llm_locust.sim.process import SimProcess


def search(limit, kind="rate", lo=1.0, hi=64.0, precision=0.05, noise=None):
    """Run the search against a server whose SLOs hold up to `limit`; the probes' history."""
    history = []
    while (level := next_level(history, kind, lo, hi, precision)) is not None:
        met = level <= limit if noise is None else noise(level)
        history.append((level, met))
        assert len(history) < 40
    return history


# ---- the decision logic ----


def test_brackets_by_doubling_then_bisects_to_the_precision():
    h = search(5.8)
    assert [lv for lv, _ in h] == [1, 2, 4, 8, 6, 5, 5.5, 5.75]
    good, bad = bracket(h)
    assert (good, bad) == (5.75, 6) and (bad - good) / good <= 0.05
    c = conclude(h, "rate", 1, 64, 0.05)
    assert c["answer"] == 5.75 and c["bracket"] == [5.75, 6] and c["probes"] == 8 and c["reached"] == "precision"
    assert "5.75 requests/s" in c["reason"]


def test_the_answer_is_within_the_precision_below_the_limit_for_any_limit():
    rng = random.Random(1)
    for _ in range(500):
        limit = math.exp(rng.uniform(0, math.log(64)))
        precision = rng.choice([0.01, 0.05, 0.1, 0.2])
        h = search(limit, precision=precision)
        c = conclude(h, "rate", 1, 64, precision)
        if limit >= 64:
            continue
        assert c["answer"] <= limit < c["answer"] * (1 + precision) + 1e-9, (limit, h)
        assert c["probes"] <= Search("rate", 1, 64, precision).max_probes()  # doublings + halvings


def test_lowest_load_breaks_and_top_meets():
    assert next_level([], "rate", 2, 64, 0.05) == 2
    assert next_level([(2, False)], "rate", 2, 64, 0.05) is None
    c = conclude([(2, False)], "rate", 2, 64, 0.05)
    assert c["answer"] is None and c["reached"] == "lowest_breaks" and "already breaks an SLO" in c["reason"]
    h = search(1000, hi=10)
    assert [lv for lv, _ in h] == [1, 2, 4, 8, 10]
    c = conclude(h, "rate", 1, 10, 0.05)
    assert c["answer"] == 10 and c["reached"] == "top" and "raise the upper bound" in c["reason"]


def test_concurrency_levels_are_whole_users_and_end_when_adjacent():
    h = search(13.4, kind="concurrency", lo=1, hi=128, precision=0.01)
    levels = [lv for lv, _ in h]
    assert all(float(lv).is_integer() for lv in levels)
    assert levels[:5] == [1, 2, 4, 8, 16]
    c = conclude(h, "concurrency", 1, 128, 0.01)
    assert c["answer"] == 13 and c["bracket"] == [13, 14] and c["reached"] == "adjacent"


def test_a_noisy_good_probe_above_a_bad_one_is_not_believed():
    # 8 broke, then 6 broke: the bracket's bad end is 6 whatever a later probe above it said
    h = [(1, True), (2, True), (4, True), (8, False), (6, False), (5, True), (7, True)]
    assert bracket(h) == (5, 6)
    assert next_level(h, "rate", 1, 64, 0.05) == 5.5


def test_syntax():
    ld = parse_ladder("sla:rate:1..64:5%", warmup=1, duration=4)
    assert ld.kind == "rate" and ld.search.lo == 1 and ld.search.hi == 64 and ld.search.precision == 0.05
    assert ld.spec() == "rate:sla:1..64:5%" and parse_ladder(ld.spec()).search == ld.search  # the settings' normal form
    assert ld.to_dict()["search"] == {"kind": "rate", "lo": 1, "hi": 64, "precision": 0.05}
    assert parse_ladder("sla:concurrency").search.spec() == "sla:concurrency:1..256:5%"
    assert parse_ladder("sla:rate:0.1").search.precision == 0.1
    assert (
        parse_ladder("sla:rate:2..8:10%").planned_time()[0]
        == parse_ladder("sla:rate:2..8:10%").search.max_probes() * 40
    )
    for bad, words in (
        ("sla:speed", "not supported"),
        ("sla:rate:0..8", "lower bound"),
        ("sla:rate:8..2", "upper bound"),
        ("sla:rate:1..8:150%", "precision"),
        ("sla:concurrency:1.5..8", "whole users"),
        ("sla:", "KIND"),
    ):
        with pytest.raises(PlanError, match=words):
            parse_ladder(bad)


# ---- end to end on the simulator ----

A, B, OUT = 0.02, 0.001, 16  # iteration 20 ms + 1 ms per running sequence; 16 output tokens
SLO_TTFT, STEP, PRECISION = 0.3, 4.0, 0.05


def run(tmp_path, host, ladder, *extra, expect_rc=0, timeout=240):
    results = tmp_path / "results.json"
    cmd = [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        host,
        "--ladder",
        ladder,
        "--workers",
        "0",
        "--warmup",
        "1",
        "--step-duration",
        f"{STEP:g}",
        "--max-tokens",
        str(OUT),
        "--arrivals",
        "constant",
        "--results",
        str(results),
        *extra,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == expect_rc, p.stdout[-3000:] + p.stderr[-3000:]
    return (json.loads(results.read_text()) if results.exists() else None), p


@pytest.mark.parametrize("slots,lo", [(2, 2), (8, 4)])
def test_rate_search_finds_the_simulators_slo_limit(tmp_path, slots, lo):
    cap = capacity(SimConfig(slots=slots, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0.0), output_tokens=OUT)
    mu = cap["requests_per_s"]  # 5.7 and 17.9 requests/s
    analytic = mu * (1 + SLO_TTFT / STEP)
    with SimProcess(slots=slots, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0) as sim:
        results, p = run(
            tmp_path, sim.url, f"sla:rate:{lo}..64:{PRECISION:.0%}", "--slo", f"ttft={SLO_TTFT * 1000:g}ms"
        )
    sla = results["ladder"]["sla"]
    answer = sla["answer"]
    err = (answer - analytic) / analytic
    fixed = fixed_ladder_steps(lo, analytic, PRECISION)  # a 5% geometric ladder from lo, stopped at its first break
    steps = results["ladder"]["steps"]
    print(
        f"\nslots {slots}: capacity {mu:.2f} req/s, analytic SLO limit {analytic:.2f}, found {answer} "
        f"({err:+.1%}) in {sla['probes']} probes, {sla['seconds']:.0f} s; fixed 5% ladder: {fixed} steps, "
        f"{fixed * STEP:.0f} s; probes {[s['offered'] for s in steps]}"
    )
    assert sla["reached"] == "precision" and sla["kind"] == "rate" and sla["precision"] == PRECISION
    good, bad = sla["bracket"]
    assert (bad - good) / good <= PRECISION
    assert abs(err) <= PRECISION + 0.05, (answer, analytic)  # 5% noise margin: Python client, shared cores
    assert sla["probes"] == len(steps) < fixed / 2
    assert [s["offered"] for s in steps][:2] == [lo, 2 * lo]  # the probes are the ladder's steps
    assert results["ladder"]["stop_reason"].startswith("SLA search: highest load meeting every SLO")
    assert f"SLA search (rate, precision 5.0%): {answer:g} requests/s" in p.stdout


def test_no_slo_is_a_clear_error_before_any_load(tmp_path):
    _, p = run(tmp_path, "http://127.0.0.1:9", "sla:rate:1..8", "--no-preflight", expect_rc=2, timeout=60)
    assert "give at least one --slo" in p.stderr and "Traceback" not in p.stderr


def test_lowest_load_breaking_exits_non_zero_and_says_so(tmp_path):
    with SimProcess(slots=2, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0) as sim:
        results, p = run(tmp_path, sim.url, "sla:rate:2..64", "--slo", "e2e_p99=50ms", expect_rc=1)
    sla = results["ladder"]["sla"]
    assert sla["answer"] is None and sla["reached"] == "lowest_breaks" and sla["probes"] == 1
    reason = results["ladder"]["stop_reason"]
    assert "the lowest load, 2 requests/s, already breaks an SLO" in reason and "e2e p99" in reason
    assert "no load meets every SLO" in p.stdout
