"""--refine: the knee with its precision. The bracket of loads the knee lies in, halved by refine
steps until it is within the margin (analysis/refine.py; docs/verdicts.md "The knee's margin").

The simulator's capacity is known in closed form (docs/sim.md): below `slots` running requests a
closed loop of u users without think time gets u / (A + B u) tokens/s, above it the throughput is
flat, so the true knee is the slot count. The pure tests drive the same walk the ladder does
(knee_range, next_level) on that curve; the end-to-end ones run it on the simulator.
"""

from __future__ import annotations

import json

import pytest
from support import run_cli, run_ok
from test_saturation import fake, ladder

from llm_locust.analysis.refine import MARGIN, allowed_width, knee_range, next_level
from llm_locust.analysis.saturation import analyse, format_steps
from llm_locust.sim.engine import SimConfig, capacity
from llm_locust.sim.process import SimProcess

A, B = 0.005, 0.0001  # iteration: 5 ms + 0.1 ms per running sequence
SLOTS = 12
LEVELS = [4, 8, 16, 32]


def model_tps(u: float, slots: int = SLOTS) -> float:
    """Tokens/s of u users on the simulator, no prefill cost (docs/sim.md)."""
    n = min(u, slots)
    return n / (A + B * n)


def tolerance_knee(slots: int = SLOTS, tol: float = 0.05) -> float:
    """The load whose throughput is within `tol` (the flat tolerance) of the plateau's, solved
    from u / (A + B u) = plateau / (1 + tol): from there on, to the slot count, a step up gains
    less than the tolerance, so the rule's knee lies in [tolerance_knee, slots]."""
    t = model_tps(slots) / (1 + tol)
    return t * A / (1 - t * B)


def contains_the_true_knee(kr, slots: int = SLOTS) -> bool:
    """The bracket (low, high] meets [tolerance_knee, slots]."""
    return kr["low"] < slots and kr["high"] >= tolerance_knee(slots)


def walk(levels, tps, *, most=16, kind="concurrency"):
    """The ladder's refinement on a noiseless curve: (coarse range, final range, levels run)."""
    own = ladder(levels, [tps(x) for x in levels], kind=kind)
    verdict = analyse(own, {})
    coarse = knee_range(own, verdict)
    refined = []
    kr = coarse
    while len(refined) < most and (level := next_level(kr)) is not None:
        refined.append(fake(len(own) + len(refined) + 1, level, tps(level), kind=kind))
        kr = knee_range(own, verdict, refined)
    return coarse, kr, [s.offered for s in refined]


def test_the_closed_form_knee_is_the_slot_count():
    cap = capacity(SimConfig(slots=SLOTS, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0.0), 0, 32)
    assert cap["saturation_concurrency"] == SLOTS
    assert model_tps(SLOTS) == pytest.approx(cap["decode_tokens_per_s_saturated"])
    assert 11 < tolerance_knee() < 12  # 11 users are 7.3% below the plateau: the knee is 12


@pytest.mark.parametrize("slots", [5, 12, 20, 27, 45])
def test_refining_halves_the_bracket_to_the_margin_around_the_slot_count(slots):
    coarse, kr, run = walk([1, 2, 4, 8, 16, 32, 64, 128], lambda u: model_tps(u, slots))
    assert coarse["low"] < slots <= coarse["high"] and not coarse["known"]
    assert contains_the_true_knee(kr, slots), (kr, run, tolerance_knee(slots))
    assert kr["known"] and kr["width"] <= allowed_width(kr["high"], "concurrency")
    assert kr["width"] < coarse["width"]
    assert len(run) <= 4  # the bracket halves with each point: 32 users to 2 (the margin at 20+) in 4
    assert all(coarse["low"] < x < coarse["high"] for x in run)


def test_refine_is_bounded_by_its_count():
    coarse, kr, run = walk(LEVELS, model_tps, most=1)
    assert run == [12.0]  # the middle of (8, 16]
    assert (kr["low"], kr["high"], kr["known"]) == (8.0, 12.0, False)
    assert next_level(kr) == 10.0


def test_a_rate_ladder_refines_to_the_margin():
    """Open loop: throughput follows the offered rate up to capacity (100 req/s x 10 tokens)."""
    cap = 37.0
    coarse, kr, run = walk([5, 10, 20, 40, 80], lambda r: 10 * min(r, cap), kind="rate")
    assert (coarse["low"], coarse["high"]) == (20.0, 40.0)
    assert kr["low"] < cap <= kr["high"] and kr["width"] <= MARGIN * kr["high"]
    assert 1 <= len(run) <= 4


def test_no_knee_or_a_knee_below_the_ladder_is_not_refined():
    flat = ladder(LEVELS, [1000, 1010, 1005, 1000])
    kr = knee_range(flat, analyse(flat, {}))
    assert kr["low"] is None and kr["high"] == 4 and next_level(kr) is None
    rising = ladder(LEVELS, [100, 200, 400, 800])
    assert knee_range(rising, analyse(rising, {})) is None


def test_a_latency_knee_well_below_the_throughput_knee_is_stated_not_refined():
    xs = [1, 2, 4, 8, 16, 32]
    steps = ladder(xs, [100, 200, 400, 800, 1600, 1610], ttfts=[0.01, 0.01, 0.011, 0.1, 1.0, 2.0])
    v = analyse(steps, {})
    assert v.knee_by == "latency" and v.saturation["offered"] == 4
    kr = knee_range(steps, v)
    assert (kr["low"], kr["high"], kr["refinable"]) == (4.0, 8.0, False)
    assert next_level(kr) is None


def _with_rate_interval(step, rel):
    step.intervals = {"rates": {"output_tokens_per_s": {"low": 0, "high": 0, "rel": rel}}}
    return step


def test_a_decision_within_noise_is_stated():
    """11 -> 12 users gains 7.3%, against the 5% threshold: with +-10% intervals on each step's
    throughput that is noise; with +-0.5% it is not."""
    for rel, noisy in ((0.10, True), (0.005, False)):
        own = [_with_rate_interval(s, rel) for s in ladder(LEVELS, [model_tps(x) for x in LEVELS])]
        v = analyse(own, {})
        refined = [_with_rate_interval(fake(5 + i, x, model_tps(x)), rel) for i, x in enumerate([12, 10, 11])]
        kr = knee_range(own, v, refined)
        assert (kr["low"], kr["high"]) == (11.0, 12.0)
        assert bool(kr["within_noise"]) is noisy, kr
    no_intervals = knee_range(ladder(LEVELS, [model_tps(x) for x in LEVELS]), v)
    assert no_intervals["within_noise"] is None  # no interval: noise not judged


# ---- end to end, on the simulator ----


def run_ladder(tmp_path, host, *extra, name="results.json", out=None):
    results = tmp_path / name
    p = run_ok(
        "--host",
        host,
        "--ladder",
        "concurrency:" + ",".join(map(str, LEVELS)),
        "--warmup",
        "1",
        "--step-duration",
        "3",
        "--max-tokens",
        "32",
        "--no-early-stop",
        "--results",
        str(results),
        *extra,
        timeout=300,
    )
    if out is not None:
        out.append(" ".join(p.stdout.split()))  # the summary, its wrapped lines joined
    return json.loads(results.read_text())["ladder"]


def test_refine_narrows_the_knee_around_the_simulators_slot_count(tmp_path):
    with SimProcess(slots=SLOTS, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0) as sim:
        plain = run_ladder(tmp_path, sim.url, "--refine", "0", name="plain.json")
        summary: list[str] = []
        report = tmp_path / "refined.html"
        refined = run_ladder(
            tmp_path, sim.url, "--refine", "4", "--report", str(report), name="refined.json", out=summary
        )
    # --refine 0: the ladder's steps only, as before; the knee between two of its levels
    assert [s["offered"] for s in plain["steps"]] == LEVELS and "refine" not in plain
    before = plain["saturation"]["knee_range"]
    assert before["low"] <= SLOTS <= before["high"] and before["points"] == []
    # --refine 4: points inside the bracket, until the knee is known within one user
    kr = refined["saturation"]["knee_range"]
    extra = refined["steps"][len(LEVELS) :]
    assert [s["offered"] for s in refined["steps"][: len(LEVELS)]] == LEVELS
    assert 1 <= len(extra) <= 4 and refined["refine"]["steps"] == len(extra)
    assert all(before["low"] < s["offered"] < before["high"] for s in extra)
    assert contains_the_true_knee(kr), (kr, tolerance_knee())
    assert kr["width"] < before["width"] and kr["known"], kr
    assert refined["saturation"]["saturation"]["offered"] == kr["high"]
    assert refined["refine"]["ended"] == "knee known"
    # the summary and the report give the knee with its margin
    line = f"knee between {kr['low']:g} and {kr['high']:g} users (within the margin"
    assert line in summary[0] and kr["text"].startswith(line)
    assert f"Knee between {kr['low']:g} and {kr['high']:g} users" in report.read_text()
    print(f"\nknee: {before['text']} -> {kr['text']}")


def test_refine_is_bounded_by_its_count_and_by_the_run_time(tmp_path, capsys):
    with SimProcess(slots=SLOTS, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0) as sim:
        one = run_ladder(tmp_path, sim.url, "--refine", "1", name="one.json")
        timed = run_ladder(tmp_path, sim.url, "--refine", "8", "-t", "19s", name="timed.json")
    assert len(one["steps"]) == len(LEVELS) + 1 and one["refine"]["ended"] == "--refine 1 spent"
    kr = one["saturation"]["knee_range"]
    assert not kr["known"] and "wider than the margin" in kr["text"]
    # -t 19s: four 3 s steps, then only the refine steps that end by then (the knee needs three)
    w = timed["windows"]
    assert len(w) < len(LEVELS) + 3 and timed["refine"]["ended"].startswith("no time left under -t 19s")
    assert all(x["ended"] <= w[0]["started"] + 19 for x in w), w


def test_bad_refine_values_are_refused_before_any_load(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("ladder:\n  kind: concurrency\n  steps: [1, 2, 4]\n  refine: many\n")
    for args, words in (
        (["--ladder", "concurrency:1,2,4", "--refine", "-1"], "--refine: Input should be greater than or equal to 0"),
        (["--ladder", "concurrency:1,2,4", "--refine", "99"], "--refine: Input should be less than or equal to 16"),
        (["--refine", "2"], "--refine: refines the knee of a ladder: give --ladder"),
        (["--ladder", "burst:rate=4,x=3,for=5s", "--refine", "2"], "a burst or a rate series has no knee"),
        ([str(plan)], "ladder.refine"),
    ):
        plan_first = args[:1] if args[0].endswith(".yaml") else []  # a plan is the first argument
        p = run_cli(*plan_first, "--host", "http://127.0.0.1:9", *args[len(plan_first) :], timeout=60, cwd=tmp_path)
        assert p.returncode == 2, (args, p.stderr[-1500:])
        assert words in p.stderr and "Traceback" not in p.stderr, (args, p.stderr[-1500:])


def test_the_step_table_gives_each_steps_throughput_interval():
    steps = ladder(LEVELS, [model_tps(x) for x in LEVELS])
    plain = format_steps(steps)
    assert "tok/s ±" not in plain  # no step has an interval: the table as it was
    _with_rate_interval(steps[0], 0.031)
    _with_rate_interval(steps[2], 0.2)
    lines = format_steps(steps).splitlines()
    head = lines[0]
    col = head.index("tok/s ±")
    cells = [row[col : col + len("tok/s ±")].strip() for row in lines[2:6]]
    assert cells == ["±3.1%", "-", "±20.0%", "-"], lines[:6]
