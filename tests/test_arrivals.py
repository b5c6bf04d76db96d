"""Arrival shapes (issue 26 item 3): gamma arrivals with a burstiness factor, a rate series over
time, and a cap on requests still before their first token.

The draws are checked against their distributions in-process (seeded: the same numbers every
run); the runs on the simulator check that what was sent has the shape asked for: the record
log's send times, each series step's achieved rate, and the number of requests without a first
token at any moment.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from support import ROOT, read_records, run_cli, run_ok

from llm_locust.settings import derive
from llm_locust.settings.ladder_spec import parse_ladder
from llm_locust.settings.units import PlanError
from llm_locust.workload.arrivals import interval_draw, interval_stats, share_offsets
from llm_locust.workload.synth import SynthSpec, generate

N = 20_000  # draws per distribution check: the CV's sampling error is then ~1-2% (4% at burstiness 0.25)


def _draws(kind: str, rate: float, burstiness: float = 1.0, seed: int = 11, n: int = N) -> list[float]:
    draw = interval_draw(kind, rate, burstiness, random.Random(seed))
    return [draw() for _ in range(n)]


# ---- the draw, against its distribution ----


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 8.0])
def test_gamma_intervals_have_mean_one_over_rate_and_cv_one_over_sqrt_burstiness(burstiness):
    rate = 4.0
    mean, cv = interval_stats(_draws("gamma", rate, burstiness))
    assert mean == pytest.approx(1 / rate, rel=0.03)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


def test_poisson_is_gamma_with_burstiness_one_and_constant_has_no_spread():
    mean, cv = interval_stats(_draws("poisson", 5.0))
    assert mean == pytest.approx(0.2, rel=0.03) and cv == pytest.approx(1.0, rel=0.04)
    mean, cv = interval_stats(_draws("constant", 5.0, n=100))
    assert mean == pytest.approx(0.2, abs=1e-12) and cv == pytest.approx(0.0, abs=1e-9)
    # poisson with a burstiness other than 1 is gamma (vLLM's --burstiness on its Poisson process)
    assert interval_stats(_draws("poisson", 5.0, 0.25))[1] == pytest.approx(2.0, rel=0.06)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 3.0])
def test_gamma_intervals_pass_a_kolmogorov_smirnov_test_against_scipy(burstiness):
    stats = pytest.importorskip("scipy.stats")
    rate = 2.0
    xs = _draws("gamma", rate, burstiness, n=5000)
    expected = stats.gamma(a=burstiness, scale=1 / (rate * burstiness))
    assert stats.kstest(xs, expected.cdf).pvalue > 0.01
    # the test has the power to tell: the same draws are not exponential (unless burstiness is 1)
    if burstiness != 1.0:
        assert stats.kstest(xs, stats.expon(scale=1 / rate).cdf).pvalue < 1e-6


def test_poisson_quantiles_match_the_closed_form():
    """Without scipy: the exponential's quantiles are -ln(1 - q) / rate."""
    rate = 3.0
    xs = sorted(_draws("poisson", rate))
    for q in (0.1, 0.5, 0.9, 0.99):
        assert xs[int(q * len(xs))] == pytest.approx(-math.log(1 - q) / rate, rel=0.05), q


def test_a_seeded_poisson_sequence_is_the_one_drawn_before_gamma_existed():
    """Same seed, same arrivals as the old rate_pass (rng.expovariate): reruns stay comparable."""
    rng = random.Random(7)
    old, t = [], 0.0
    for _ in range(50):
        t += rng.expovariate(2.5)
        old.append(t)
    offsets = share_offsets("poisson", 2.5, seed=7)
    assert [next(offsets) for _ in range(50)] == old


def test_workers_send_every_kth_arrival_of_one_cluster_sequence():
    """K workers together send the cluster's one gamma sequence (K gamma processes of rate/K
    each would merge into a smoother one): each arrival exactly once."""
    whole = share_offsets("gamma", 12.0, burstiness=0.3, seed=5)
    first = [next(whole) for _ in range(300)]
    shares = [share_offsets("gamma", 12.0, burstiness=0.3, seed=5, share=(i, 3)) for i in range(3)]
    merged = sorted(next(s) for s in shares for _ in range(100))
    assert merged == first
    gaps = [b - a for a, b in zip([0.0, *merged], merged, strict=False)]
    assert interval_stats(gaps)[1] == pytest.approx(1 / math.sqrt(0.3), rel=0.2)


def test_synthetic_traces_take_gamma_arrivals_and_keep_their_poisson_ones():
    rows = generate(SynthSpec(requests=8000, rate=10, arrivals="gamma", burstiness=0.5, seed=3))
    ts = [r["timestamp"] for r in rows]
    mean, cv = interval_stats([b - a for a, b in zip(ts, ts[1:], strict=False)])
    assert mean == pytest.approx(0.1, rel=0.05) and cv == pytest.approx(math.sqrt(2), rel=0.08)
    # a Poisson trace is the one the generator always wrote for this seed (lengths drawn between)
    rows = generate(SynthSpec(requests=5, rate=10, seed=3))
    rng = random.Random(3)
    t, want = 0.0, []
    for i in range(5):
        if i:
            t += rng.expovariate(10)
        want.append(round(t, 6))  # fixed lengths (the defaults) draw nothing between
    assert [r["timestamp"] for r in rows] == want
    with pytest.raises(ValueError, match="burstiness: 0.5 shapes random arrivals"):
        generate(SynthSpec(requests=5, rate=10, arrivals="constant", burstiness=0.5))


# ---- the settings: the series grammar and what is refused ----


def test_a_rate_series_gives_each_step_its_own_length():
    ld = parse_ladder("rate:2@60s,8@30s,2@1m", warmup=10)
    assert ld.levels == (2, 8, 2) and ld.durations == (60, 30, 60) and ld.profile
    assert [ld.step_timing(i) for i in (1, 2, 3)] == [(60, 10), (30, 0), (60, 0)]  # warm-up in the first only
    assert ld.planned_time() == (150, 150)
    assert ld.spec() == "rate:2@60s,8@30s,2@60s" and parse_ladder(ld.spec()) == parse_ladder("rate:2@60s,8@30s,2@60s")
    assert ld.to_dict()["durations"] == [60, 30, 60]


@pytest.mark.parametrize(
    "text, words",
    [
        ("rate:2@60s,8", "'8' has no length: every step of a series is R@T"),
        ("concurrency:2@60s,4@60s", "steps with their own length (@) are for a rate series"),
        ("rate:1..4@5s", "a range (A..B) cannot take lengths"),
        ("rate:2@0s", "every step's length must be > 0"),
        ("rate:0@5s", "every level must be > 0"),
        ("rate:2@7200", "write the unit"),
    ],
)
def test_bad_rate_series_say_what_is_wrong(text, words):
    with pytest.raises(PlanError) as e:
        parse_ladder(text)
    assert words in " ".join(e.value.problems)


def _cli(*argv: str):
    ns, rest = derive.run_parser().parse_known_args(list(argv))
    assert rest == []
    return derive.resolve(None, derive.cli_values(ns))


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--ladder", "rate:1,2", "--arrivals", "constant", "--burstiness", "0.5"],
            "--burstiness: 0.5 shapes random arrivals: drop --burstiness, or use --arrivals gamma",
        ),
        (["--ladder", "concurrency:1,2", "--burstiness", "0.5"], "--burstiness: shapes a rate ladder's arrivals"),
        (["--burstiness", "0"], "--burstiness: Input should be greater than or equal to 0.01"),
        (["--max-prefill", "2"], "--max-prefill: caps an open loop's sends"),
        (["--ladder", "rate:2@5s,4@5s", "--warmup", "5s"], "--warmup: 5 s is not shorter than the series' first step"),
        (["--ladder", "rate:2@5s,4@5s", "--warmup", "1s", "--step-requests", "9"], "drop --step-requests"),
    ],
)
def test_arrival_options_that_cannot_apply_are_refused_naming_the_option(argv, message):
    with pytest.raises(PlanError) as e:
        _cli(*argv)
    assert message in " ".join(e.value.problems)


def test_arrival_options_reach_the_settings_and_the_rerun():
    s = _cli("--ladder", "rate:2@5s,8@3s", "--burstiness", "0.5", "--warmup", "1s")
    assert (s.ladder, s.arrivals_burstiness, s.arrivals) == ("rate:2@5s,8@3s", 0.5, "poisson")
    assert s.public()["ladder"]["burstiness"] == 0.5
    s = _cli("--replay", "--max-prefill", "4")
    assert s.max_prefill == 4 and s.public()["replay"]["max_prefill"] == 4
    assert derive.resolve(derive.plan_values(derive.to_plan(s), source="results")).max_prefill == 4


def test_the_sample_plan_loads_with_its_series_gamma_arrivals_and_prefill_cap():
    s = derive.resolve(derive.load_plan(ROOT / "plans" / "arrival-shapes.yaml"))
    assert (s.ladder, s.arrivals, s.arrivals_burstiness, s.max_prefill) == ("rate:2@60s,8@30s,2@60s", "gamma", 0.5, 8)
    assert parse_ladder(s.ladder, warmup=s.warmup).planned_time() == (150, 150)


def test_a_rate_series_survives_the_effective_plan():
    s = _cli("--ladder", "rate:2@5s,8@3s", "--warmup", "1s")
    assert derive.resolve(derive.plan_values(derive.to_plan(s), source="results")).ladder == "rate:2@5s,8@3s"


# ---- on the simulator: what was sent has the shape asked for ----

FAST_SIM = {"slots": 64, "iter_base": 0.002, "iter_per_seq": 0.0, "iter_per_prefill_token": 0.0}


def _run(tmp_path, host: str, ladder: str, *extra: str, timeout: float = 240) -> tuple[dict, list[dict]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    results, log = tmp_path / "results.json", tmp_path / "records.jsonl"
    run_ok(
        "--host",
        host,
        "--ladder",
        ladder,
        "--no-early-stop",
        "--seed",
        "3",
        "--results",
        str(results),
        "--record-log",
        str(log),
        "--request-timeout",
        "30s",
        *extra,
        timeout=timeout,
    )
    return json.loads(results.read_text()), read_records(log)


def _gaps(times: list[float]) -> list[float]:
    times = sorted(times)
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_a_rate_ladder_with_burstiness_sends_gamma_arrivals(tmp_path, sims):
    """rate 20/s, burstiness 0.25: the gaps between the sends have CV ~2 (Poisson: 1), the very
    sequence share_offsets draws for the run's seed, and the rate asked for."""
    sim = sims(**FAST_SIM)
    results, recs = _run(
        tmp_path, sim.url, "rate:20", "--burstiness", "0.25", "--step-duration", "12s", "--warmup", "1s",
        "--max-tokens", "4",
    )  # fmt: skip
    assert results["ladder"]["ladder"]["burstiness"] == 0.25
    sent = sorted(r["t_sent"] for r in recs)
    scheduled = sorted(r["t_sent"] + r["sched"] for r in recs)
    gaps = _gaps(sent)
    assert len(gaps) > 150
    mean, cv = interval_stats(gaps)
    want = share_offsets("gamma", 20.0, burstiness=0.25, seed=3 * 1_000_003)
    drawn = [next(want) for _ in range(len(scheduled))]
    _, cv_drawn = interval_stats(_gaps(drawn))
    print(f"\nsends: {len(sent)}, mean gap {mean * 1000:.1f} ms, CV {cv:.2f} (drawn {cv_drawn:.2f}, theory 2)")
    assert cv == pytest.approx(cv_drawn, rel=0.1)  # the sends follow the draw (send lag is ms)
    assert 1.5 < cv < 2.6  # and the draw its distribution, loosely (n ~ 240: sampling error ~15%)
    # the schedule is the drawn one, from the pass's start
    assert [s - scheduled[0] for s in scheduled[:40]] == pytest.approx([d - drawn[0] for d in drawn[:40]], abs=1e-6)


def test_a_rate_series_runs_each_step_at_its_rate_for_its_length(tmp_path, sims):
    sim = sims(**FAST_SIM)
    results, _ = _run(
        tmp_path, sim.url, "rate:5@5s,20@4s,5@5s", "--arrivals", "constant", "--warmup", "1s", "--max-tokens", "4"
    )
    ladder = results["ladder"]
    steps = ladder["steps"]
    assert [s["offered"] for s in steps] == [5, 20, 5]
    for s in steps:
        assert s["requests_per_s"] == pytest.approx(s["offered"], rel=0.2), s
    lengths = [w["ended"] - w["started"] for w in ladder["windows"]]
    assert lengths == pytest.approx([5, 4, 5], abs=1.2)  # the shape ticks about once a second
    assert ladder["saturation"] is None and "ladder complete" in ladder["stop_reason"]


def _most_before_first_token(recs: list[dict]) -> int:
    """The most requests at one moment between their send and their first token (or their end,
    for one that never had one), from the record log's times."""
    events = []
    for r in recs:
        stop = r["first"] if r["first"] is not None else r["end"]
        events += [(r["t_sent"], 1), (r["t_sent"] + stop, -1)]
    most = now = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # a first token before a send at the same time
        now += d
        most = max(most, now)
    return most


def test_max_prefill_caps_the_requests_before_their_first_token(tmp_path, sims):
    """A slow prefill (0.5 ms a prompt token, 200-token prompts: 0.1 s each) under bursty
    arrivals (6 requests/s, burstiness 0.25): without a cap a burst leaves many requests waiting
    for their first token at once; with --max-prefill 2 never more than 2 (the sends wait
    instead), and the results say how many sends waited and how long."""
    sim = sims(slots=16, iter_base=0.002, iter_per_seq=0.0, iter_per_prefill_token=0.0005)
    common = ("--synthetic", "requests=200,input=200,output=4,seed=1", "--max-tokens", "4", "--step-duration", "6s")
    common += ("--warmup", "1s", "--burstiness", "0.25")
    results, recs = _run(tmp_path / "cap", sim.url, "rate:6", *common, "--max-prefill", "2")
    capped = _most_before_first_token(recs)
    figures = results["run"]["server"]["prefill_cap"]
    _, free_recs = _run(tmp_path / "free", sim.url, "rate:6", *common)
    free = _most_before_first_token(free_recs)
    print(f"\nmost before the first token: {capped} capped at 2, {free} without; {figures}")
    assert len(recs) > 10 and all(r["outcome"] == "ok" for r in recs + free_recs)
    assert capped <= 2
    assert free > 4
    assert figures["cap"] == 2 and figures["waited"] > 0 and figures["wait_s"] > 0


def test_bad_arrival_options_are_refused_before_any_load():
    p = run_cli("--host", "http://127.0.0.1:9", "--max-prefill", "2", "-u", "1", timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--max-prefill: caps an open loop's sends" in p.stderr
