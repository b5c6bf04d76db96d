"""The rate as a curve of time (issue 39 item 4; workload/rate_curve.py, docs/load-shapes.md "Rate
curves"): the grammar (no eval), the closed-form integrals, arrivals by time rescaling, and a
2-minute run whose sends per 5 s window follow the curve's integral."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import cli_process, read_records, run_cli, run_ok

from llm_locust.workload.rate_curve import (
    CurveError,
    curve_times,
    expected_counts,
    parse_rate_curve,
    window_counts,
)


@pytest.mark.parametrize(
    "text, written",
    [
        ("8", "8"),
        ("sine:mean=8,amp=4,period=1m", "sine:mean=8,amp=4,period=60s"),
        (" sine: amp=4 , mean=8, period=60 ,phase=1.5", "sine:mean=8,amp=4,period=60s,phase=1.5"),
        ("ramp:from=1,to=10,over=60s", "ramp:from=1,to=10,over=60s"),
        ("ramp:to=0,from=5,over=500ms", "ramp:from=5,to=0,over=0.5s"),
    ],
)
def test_each_form_reads_and_writes_one_way(text, written):
    assert parse_rate_curve(text).text == written
    assert parse_rate_curve(written).text == written


@pytest.mark.parametrize(
    "text, words",
    [
        ("sine:mean=8,amp=9,period=60s", "amp 9 must be within 0..mean (8)"),
        ("sine:mean=8,amp=4", "sine: missing period"),
        ("sine:mean=8,amp=4,period=60s,amp=3", "amp given twice"),
        ("sine:mean=8,amp=4,period=0s", "period: expected a duration above 0"),
        ("sine:mean=__import__('os').getpid(),amp=0,period=1", "mean: expected a number"),
        ("ramp:from=-1,to=3,over=10s", "from: -1 requests/s is outside"),
        ("ramp:from=1,to=3,over=10s,wobble=2", "unknown item 'wobble=2'"),
        ("exp:base=2", "unknown rate curve 'exp'"),
        ("nan", "rate: expected a finite number"),
        ("2**30", "rate: expected a number"),
        ("file:", "file: give a path"),
    ],
)
def test_a_bad_curve_says_what_is_wrong(text, words):
    with pytest.raises(CurveError, match=None) as e:
        parse_rate_curve(text)
    assert words in str(e.value)


def test_the_integrals_are_the_curves_areas():
    """Closed forms against a numeric integral (midpoint rule, 1 ms steps)."""
    for text in ("sine:mean=8,amp=4,period=60s,phase=0.7", "ramp:from=1,to=10,over=60s", "ramp:from=9,to=0,over=30s"):
        c = parse_rate_curve(text)
        for t in (0.5, 17.25, 59.9, 75.0):
            steps = round(t * 1000)
            area = sum(c.rate((k + 0.5) * t / steps) for k in range(steps)) * t / steps
            assert c.integral(t) == pytest.approx(area, rel=1e-5, abs=1e-6), (text, t)
    down = parse_rate_curve("ramp:from=9,to=0,over=30s")
    assert down.bounded == pytest.approx(135.0)  # the ramp's area: arrivals stop at 135
    assert len(curve_times(down, 1000, "constant", 1.0, random.Random(1))) == 136


def test_a_file_curve_is_linear_between_its_rows_and_names_a_bad_line(tmp_path):
    good = tmp_path / "rates.csv"
    good.write_text("# t,rate\n0,2\n10,12  # rising\n20,12\n")
    c = parse_rate_curve(f"file:{good}")
    assert c.rate(5) == pytest.approx(7.0) and c.rate(100) == 12
    assert c.integral(10) == pytest.approx(70.0) and c.integral(30) == pytest.approx(70 + 120 + 120)
    bad = tmp_path / "bad.csv"
    bad.write_text("0,2\n5,3\n4,1\n")
    with pytest.raises(CurveError) as e:
        parse_rate_curve(f"file:{bad}")
    assert f"{bad}:3: times must start at 0 or later and increase" in str(e.value)
    bad.write_text("0,2\n5,lots\n")
    with pytest.raises(CurveError) as e:
        parse_rate_curve(f"file:{bad}")
    assert f"{bad}:2: rate: expected a number" in str(e.value)
    with pytest.raises(CurveError) as e:
        parse_rate_curve(f"file:{tmp_path}")
    assert "not a regular file" in str(e.value)


@settings(max_examples=60, deadline=None)
@given(
    mean=st.floats(0.5, 50),
    amp_share=st.floats(0, 1),
    period=st.floats(5, 300),
    width=st.floats(1, 30),
)
def test_constant_arrivals_put_the_curves_integral_in_every_window_within_one(mean, amp_share, period, width):
    """A constant process rescaled by the curve: each window holds its integral, within one arrival."""
    c = parse_rate_curve(f"sine:mean={mean},amp={mean * amp_share},period={period}s")
    times = curve_times(c, 400, "constant", 1.0, random.Random(0))
    until = times[-1]
    counts, expected = window_counts(times, width, until), expected_counts(c, width, until)
    assert all(abs(n - e) <= 1.0 + 1e-6 for n, e in zip(counts[:-1], expected[:-1], strict=True))


def test_poisson_arrivals_on_a_curve_are_poisson_in_each_phase():
    """Many periods of a sine: per phase window the count's mean is the integral and its variance
    the mean (an inhomogeneous Poisson process), not the constant process's near 0."""
    c = parse_rate_curve("sine:mean=8,amp=4,period=20s")
    times = curve_times(c, 40_000, "poisson", 1.0, random.Random(3))
    periods = int(times[-1] // 20)
    counts = window_counts(times, 5, periods * 20)
    for k, want in enumerate(expected_counts(c, 5, 20)):
        phase = counts[k::4]
        half = 3 * math.sqrt(want / len(phase))  # 3 standard errors of the mean
        assert abs(statistics.mean(phase) - want) < half
        assert 0.75 * want < statistics.variance(phase) < 1.3 * want


def test_rate_needs_a_synthetic_workload_and_is_given_once(tmp_path):
    cases = [
        ([], "a rate curve shapes a synthetic workload's arrivals: give --synthetic too"),
        (["--synthetic", "requests=10,rate=4"], "give the rate once"),
        (["--synthetic", "requests=10", "--ladder", "rate:1,2"], "a ladder sets its own load per step"),
        (["--synthetic", "requests=10", "--rate", "sine:mean=1,amp=2,period=9s"], "amp 2 must be within 0..mean (1)"),
    ]
    for more, words in cases:
        rate = [] if "--rate" in more else ["--rate", "sine:mean=8,amp=4,period=60s"]
        p = run_cli(*rate, *more, "-t", "5s", "--results", tmp_path / "r.json", timeout=60)
        assert p.returncode == 2, (more, p.stdout[-500:], p.stderr[-500:])
        assert words in " ".join(p.stderr.split()) and "Traceback" not in p.stderr
    assert not (tmp_path / "r.json").exists()


def test_trace_synth_writes_a_curves_arrivals_and_its_recipe(tmp_path):
    out = tmp_path / "t.jsonl"
    p = cli_process(
        "trace", "synth", "--requests", "300", "--rate", "ramp:from=1,to=9,over=30s", "--arrivals", "constant",
        "--out", out, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    times = [json.loads(line)["timestamp"] for line in out.read_text().splitlines()]
    c = parse_rate_curve("ramp:from=1,to=9,over=30s")
    counts, expected = window_counts(times, 5, 30), expected_counts(c, 5, 30)
    assert all(abs(n - e) <= 1.0 for n, e in zip(counts, expected, strict=True)), (counts, expected)
    assert json.loads((tmp_path / "t.jsonl.spec.json").read_text())["rate_curve"] == "ramp:from=1,to=9,over=30s"
    p = cli_process("trace", "synth", "--rate", "sine:mean=1", "--out", tmp_path / "u.jsonl", timeout=60)
    assert p.returncode == 2 and "sine: missing amp, period" in p.stderr


@pytest.mark.timing
def test_a_two_minute_run_sends_what_the_sine_asks_per_5s_window(tmp_path):
    """--rate sine:mean=8,amp=4,period=60s for 2 minutes against the simulator: the sends per 5 s
    window (from the record log, counted from the first send: trace time 0) within 10% of the
    curve's integral over the window (constant arrivals on the curve's time scale: Poisson ones
    would vary by sqrt(n), 15-22% a window at these rates)."""
    curve = "sine:mean=8,amp=4,period=60s"
    log = tmp_path / "rec.jsonl"
    argv = ["--synthetic", "requests=2000,input=32,output=4,arrivals=constant", "--rate", curve, "-t", "125s"]
    run_ok(*argv, "--results", tmp_path / "r.json", "--record-log", log, timeout=300)
    sent = [r["wall_sent"] for r in read_records(log)]
    t0 = min(sent)
    counts = window_counts([t - t0 for t in sent], 5.0, 120.0)
    expected = expected_counts(parse_rate_curve(curve), 5.0, 120.0)
    off = [(k, n, round(e, 1)) for k, (n, e) in enumerate(zip(counts, expected, strict=True)) if abs(n - e) > 0.1 * e]
    assert not off, off
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["run"]["load"]["mode"] == "replay"  # a curve is an open loop
