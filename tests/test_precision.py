"""Stop when precise (--precision, docs/load-shapes.md "Stop when precise").

The targets' parser and judge, then real runs against the simulator: an easy target ends a closed
loop, an open-loop replay and each step of a ladder well before their time; an impossible one
runs to -t and is marked not met in the results and the summary; in a 2-worker run the master
stops on the merged figures, more requests than any one worker had.
"""

import json
import random

import pytest
from support import read_records, run_cli, run_ok

from llm_locust.analysis.precision_targets import FIGURES, STOP_MIN_BATCHES, check, judge, metrics_of, parse_targets
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.blocks import Blocks
from llm_locust.report.precision import target_lines
from llm_locust.sim.process import SimProcess

FAST_SIM = {"slots": 32, "iter_base": 0.003, "iter_per_seq": 0.0001, "iter_per_prefill_token": 0}


# ---- the parser ----


def test_targets_read_from_text_and_from_a_plans_mapping():
    assert parse_targets("ttft.p99=2%, itl.mean=0.01,output_tokens_per_s=5%") == {
        "ttft.p99": 0.02,
        "itl.mean": 0.01,
        "output_tokens_per_s": 0.05,
    }
    assert parse_targets({"e2e.p50": "10%", "requests_per_s": 0.1}) == {"e2e.p50": 0.1, "requests_per_s": 0.1}
    assert parse_targets("") == {} and parse_targets(None) == {}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("ttft.p98=2%", "unknown figure 'ttft.p98' (did you mean 'ttft.p99'?)"),
        ("latency.p99=2%", "unknown figure 'latency.p99'"),
        ("ttft.p99=abc", "ttft.p99=abc: expected a percentage (2%) or a fraction (0.02)"),
        ("ttft.p99=0%", "ttft.p99=0%: a target must be above 0 and below 100%"),
        ("ttft.p99=-1%", "a target must be above 0 and below 100%"),
        ("ttft.p99=100%", "ttft.p99=100%: a target must be above 0 and below 100%"),
        ("ttft.p99=2", "a bare number is a fraction: write 2%"),
        ("ttft.p99=nan", "a target must be above 0 and below 100%"),
        ("ttft.p99", "bad target 'ttft.p99': expected FIGURE=PERCENT"),
        ("ttft.p99=", "bad target"),
    ],
)
def test_bad_targets_are_refused_naming_the_part(text, words):
    with pytest.raises(ValueError) as e:
        parse_targets(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def _blocks(n: int = 300, seconds: float = 10.0) -> tuple[Blocks, float, float]:
    rng = random.Random(7)
    b = Blocks()
    t0 = 1_000_000.0
    for _ in range(n):
        end = t0 + rng.uniform(0, seconds)
        lat = {m: int(rng.uniform(40_000, 60_000)) for m in ("ttft", "tpot", "e2e")}
        b.add_ok(end, lat, 16, good=True)
        b.add_life(end, end - lat["e2e"] / 1e6, end, 16, "good")
        itl = int(rng.uniform(4_000, 6_000))
        b.add_itl(end, {itl: 15}, 15 * itl)
    return b, t0, t0 + seconds


def test_every_figure_a_target_names_is_one_the_intervals_hold():
    """The vocabulary is the results' `intervals`' own: each figure is judged, none is missing."""
    b, start, end = _blocks()
    check = judge(b.intervals(start, end), dict.fromkeys(FIGURES, 0.5), 400, 10.0)
    assert set(check["figures"]) == set(FIGURES)
    for name, f in check["figures"].items():
        if name.endswith(".p99"):  # 300 samples: too few for a p99's interval
            continue
        assert f["rel"] is not None and f["rel"] > 0, name


def test_a_target_is_met_by_a_narrow_enough_interval_from_enough_blocks():
    b, start, end = _blocks()
    iv = b.intervals(start, end)
    assert iv is not None and iv["blocks"] >= STOP_MIN_BATCHES
    rel = iv["latency"]["tpot"]["mean"]["rel"]
    assert rel is not None
    assert judge(iv, {"tpot.mean": rel * 1.01}, 400, 10.0)["met"]
    tight = judge(iv, {"tpot.mean": rel * 0.99, "ttft.mean": 0.5}, 400, 10.0)
    assert not tight["met"] and tight["figures"]["ttft.mean"]["met"] and not tight["figures"]["tpot.mean"]["met"]
    # a p99 of 300 samples has no interval: never met, with the reason
    p99 = judge(iv, {"ttft.p99": 0.99}, 400, 10.0)["figures"]["ttft.p99"]
    assert not p99["met"] and p99["rel"] is None and "insufficient" in p99["reason"]
    # narrow, but from fewer blocks than a stop needs (5 <= k < 10): not met yet
    few = dict(iv, blocks=STOP_MIN_BATCHES - 1)
    f = judge(few, {"tpot.mean": 0.5}, 400, 10.0)
    assert not f["met"] and "10 time blocks" in f["figures"]["tpot.mean"]["reason"]
    assert not judge(None, {"tpot.mean": 0.5}, 0, 0.0)["met"]


def test_a_check_judges_the_figures_the_results_compute():
    """A check computes only the metrics its targets name (analysis/precision_targets.py), yet each
    figure's interval is the one the results' `intervals` hold for the same window."""
    agg = Aggregate()
    agg.blocks, agg.first_sent, agg.last_end = _blocks()
    full = agg.blocks.intervals(agg.first_sent, agg.last_end)
    assert full is not None
    targets = {"tpot.p50": 0.5, "itl.mean": 0.5, "output_tokens_per_s": 0.5}
    assert metrics_of(targets) == ("itl", "tpot")
    c = check(agg, targets, 10.0)
    assert c["figures"]["tpot.p50"]["rel"] == full["latency"]["tpot"]["p50"]["rel"]
    # an ITL percentile counts its requests (the TPOT histograms) even where no target names TPOT
    alone = check(agg, {"itl.p90": 0.5}, 10.0)["figures"]["itl.p90"]
    assert alone["rel"] == full["latency"]["itl"]["p90"]["rel"] is not None
    assert c["figures"]["itl.mean"]["rel"] == full["latency"]["itl"]["mean"]["rel"]
    assert c["figures"]["output_tokens_per_s"]["rel"] == full["rates"]["output_tokens_per_s"]["rel"]
    assert c["requests"] == 300 and c["blocks"] == full["blocks"] and c["until"] == agg.last_end
    # cut where a master's workers' figures are all in: fewer requests, a shorter window
    cut = check(agg, targets, 10.0, until=agg.first_sent + 5.0)
    assert 100 < cut["requests"] < 200 and cut["until"] == agg.first_sent + 5.0


def test_the_summary_marks_targets_met_and_not_met():
    fig = {"target": 0.02, "rel": 0.031, "met": False}
    run = {"targets": {"ttft.p99": 0.02}, "met": False, "checks": [
        {"step": None, "met": False, "stopped": False, "seconds": 60.0, "requests": 900, "blocks": 20, "until": None,
         "figures": {"ttft.p99": fig}},
    ]}  # fmt: skip
    text = "\n".join(target_lines(run))
    assert "precision targets NOT MET" in text and "NOT MET by the end (-t)" in text
    assert "ttft.p99 ± 3.1% (target 2%)" in text
    steps = {"targets": {"ttft.p99": 0.02}, "met": False, "checks": [
        {"step": 1, "met": True, "stopped": True, "seconds": 8.0, "requests": 500, "blocks": 10, "until": None,
         "figures": {"ttft.p99": {"target": 0.02, "rel": 0.019, "met": True}}},
        {"step": 2, "met": False, "stopped": False, "seconds": 30.0, "requests": 700, "blocks": 20, "until": None,
         "figures": {"ttft.p99": fig}},
    ]}  # fmt: skip
    text = "\n".join(target_lines(steps))
    assert "precision targets NOT MET in step 2:" in text
    assert "step 1: met after 8.0 s, the step stopped early" in text and "step 2: NOT MET" in text
    assert target_lines(None) == []


# ---- the command line and plans ----


def test_a_bad_target_is_refused_before_any_load_in_one_line(tmp_path):
    p = run_cli("--host", "http://127.0.0.1:9", "--precision", "ttft.p98=2%", "-t", "5s", timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--precision: unknown figure 'ttft.p98' (did you mean 'ttft.p99'?)" in p.stderr
    plan = tmp_path / "plan.yaml"
    plan.write_text("load:\n  run_time: 5s\nprecision:\n  ttft.p99: 0%\n")
    p = run_cli(str(plan), "--host", "http://127.0.0.1:9", timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "plan.yaml" in p.stderr and "ttft.p99=0%: a target must be above 0 and below 100%" in p.stderr


def test_targets_no_run_could_meet_are_refused_before_any_load():
    """A goodput rate without an SLO is 0 (never precise); a burst's steps last as written."""
    p = run_cli("--host", "http://127.0.0.1:9", "--precision", "goodput_requests_per_s=5%", "-t", "5s", timeout=60)
    assert p.returncode == 2 and "goodput_requests_per_s counts the requests that met every SLO" in p.stderr
    p = run_cli(
        *("--host", "http://127.0.0.1:9", "--precision", "ttft.p50=5%", "--ladder", "burst:rate=2,x=2,for=5s"),
        timeout=60,
    )
    assert p.returncode == 2 and "a burst's or a rate series' steps last exactly as written" in p.stderr


# ---- runs against the simulator ----


def _run(tmp_path, *args, workers: int = 0, timeout: float = 180):
    results = tmp_path / "results.json"
    extra = ["--workers", str(workers)] if workers else ["--workers", "0"]
    p = run_ok(*args, "--max-tokens", "16", "--results", str(results), *extra, timeout=timeout)
    doc = json.loads(results.read_text())
    return doc, p.stdout + p.stderr


def _seconds(doc) -> float:
    return doc["run"]["ended_at"] - doc["run"]["started_at"]


def test_an_easy_target_ends_a_closed_loop_well_before_its_time(tmp_path):
    with SimProcess(**FAST_SIM) as sim:
        doc, out = _run(
            tmp_path,
            *("--host", sim.url, "-u", "4", "-t", "60s", "--precision", "tpot.mean=5%,e2e.p50=20%"),
            *("--report", str(tmp_path / "report.html")),
        )
    p = doc["precision"]
    assert p["targets"] == {"tpot.mean": 0.05, "e2e.p50": 0.2} and p["met"], p
    (check,) = p["checks"]
    assert check["stopped"] and check["step"] is None and check["blocks"] >= STOP_MIN_BATCHES
    assert all(f["met"] and f["rel"] <= f["target"] for f in check["figures"].values()), check
    assert _seconds(doc) < 30, _seconds(doc)  # not the 60 s of -t
    assert "llm-locust: precise after" in out and "precision targets met:" in out
    assert "the run stopped early" in out
    # the results' own interval agrees: the figures were this precise when it stopped
    assert doc["summary"]["intervals"]["latency"]["tpot"]["mean"]["rel"] <= 0.05 * 1.5
    assert doc["plan"]["precision"] == {"tpot.mean": 0.05, "e2e.p50": 0.2}
    page = (tmp_path / "report.html").read_text()
    assert "precision targets (--precision)" in page and "met after" in page and "tpot.mean ± " in page


def test_an_impossible_target_runs_to_its_time_and_is_marked_not_met(tmp_path):
    with SimProcess(**FAST_SIM) as sim:
        doc, out = _run(tmp_path, "--host", sim.url, "-u", "2", "-t", "4s", "--precision", "ttft.p99=0.1%,tpot.mean=5%")
    p = doc["precision"]
    assert not p["met"]
    (check,) = p["checks"]
    assert not check["stopped"] and not check["met"]
    assert not check["figures"]["ttft.p99"]["met"] and check["figures"]["tpot.mean"]["met"], check
    assert _seconds(doc) >= 3.5
    assert "precise after" not in out
    assert "precision targets NOT MET:" in out and "NOT MET by the end (-t)" in out and "ttft.p99" in out


def test_an_open_loop_replay_stops_when_precise(tmp_path):
    with SimProcess(**FAST_SIM) as sim:
        doc, out = _run(
            tmp_path,
            "--host",
            sim.url,
            "--synthetic",
            "requests=3000,input=32,output=16,rate=40",
            "--replay",
            "-t",
            "60s",
            "--precision",
            "tpot.mean=5%,requests_per_s=20%",
        )
    assert doc["run"]["load"]["mode"] == "replay"
    assert doc["precision"]["met"] and doc["precision"]["checks"][0]["stopped"], doc["precision"]
    assert _seconds(doc) < 30 and doc["summary"]["sent"] < 3000


@pytest.mark.parametrize("workers", [0, 2])
def test_each_ladder_step_ends_when_precise(tmp_path, workers):
    """A rate ladder (open loop) whose steps may last 60 s each: every one ends once precise, on
    one process and on a master judging its two workers' merged figures."""
    with SimProcess(**FAST_SIM) as sim:
        doc, out = _run(
            tmp_path,
            "--host",
            sim.url,
            "--ladder",
            "rate:20,40",
            "--arrivals",
            "constant",
            "--warmup",
            "1",
            "--step-duration",
            "60s",
            "--no-early-stop",
            "--precision",
            "tpot.mean=5%",
            workers=workers,
        )
    windows = doc["ladder"]["windows"]
    assert [w["step"] for w in windows] == [1, 2]
    for w in windows:
        assert w["ended"] - w["measured_from"] < 25, w  # not the 59 s of its measurement
    p = doc["precision"]
    assert p["met"] and [c["step"] for c in p["checks"]] == [1, 2], p
    assert all(c["stopped"] and c["met"] for c in p["checks"]), p
    assert "precision targets met in every step:" in out and "step 2: met after" in out


def test_a_ladder_step_not_precise_by_its_end_is_marked(tmp_path):
    with SimProcess(**FAST_SIM) as sim:
        doc, out = _run(
            tmp_path,
            "--host",
            sim.url,
            "--ladder",
            "concurrency:2",
            "--warmup",
            "0.5",
            "--step-duration",
            "3s",
            "--precision",
            "ttft.p99=0.1%",
        )
    (check,) = doc["precision"]["checks"]
    assert check["step"] == 1 and not check["met"] and not check["stopped"]
    assert not doc["precision"]["met"] and "precision targets NOT MET in step 1:" in out


def test_two_workers_stop_on_the_masters_merged_figures(tmp_path):
    """The master decides, from both workers' merged time blocks: the stop's intervals come from
    more ok requests than either worker had finished by then, and no more than both together."""
    log = tmp_path / "records.jsonl"
    with SimProcess(**FAST_SIM) as sim:
        doc, out = _run(
            tmp_path,
            "--host",
            sim.url,
            "-u",
            "8",
            "-t",
            "60s",
            "--precision",
            "tpot.mean=3%",
            "--record-log",
            str(log),
            workers=2,
        )
    assert doc["run"]["runner"] == "MasterRunner"
    (check,) = doc["precision"]["checks"]
    assert check["stopped"] and check["met"], check
    assert _seconds(doc) < 40, _seconds(doc)
    decided = doc["run"]["started_at"] + check["seconds"]
    until = check["until"]  # where both workers' figures were in: the oldest of their last reports
    assert until is not None and until <= decided
    by_worker: dict[str, int] = {}  # each worker's ok requests ended by then
    by_decision: dict[str, int] = {}  # and by the decision (the master cannot have had more)
    for name in ("0", "1"):
        ends = [r["wall_sent"] + r["end"] for r in read_records(log, f".worker{name}") if r["outcome"] == "ok"]
        by_worker[name] = sum(1 for e in ends if e <= until)
        by_decision[name] = sum(1 for e in ends if e <= decided)
    assert min(by_worker.values()) > 0, by_worker
    assert max(by_worker.values()) < check["requests"] <= sum(by_decision.values()), (check, by_worker, by_decision)
    assert out.count("precise after") == 1  # said once, by the master
