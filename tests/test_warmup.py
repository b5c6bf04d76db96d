"""Warm-up in a closed loop and a replay (issue 26 item 1): what is sent in the run's first part
(--run-warmup: wall time; a replay: trace time from its agreed start) and each user's first
requests (--warmup-requests) are sent, answered and counted apart, in results `warmup` and the
summary's warm-up line, and left out of every figure of the run. A ladder keeps its per-step
warm-up (--warmup); the two are refused together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import ROOT, read_records, run_cli, run_ok

from llm_locust.metrics.records import WARMUP_STEP


def _split(log: Path) -> tuple[list[dict], list[dict]]:
    """(warm-up records, the run's records) of a record log and its workers' files."""
    recs = read_records(log)
    return [r for r in recs if r["step"] == WARMUP_STEP], [r for r in recs if r["step"] != WARMUP_STEP]


def _adds_up(fig: dict) -> None:
    assert fig["sent"] == fig["ok"] + fig["failed"] + fig["cancelled"] + fig["lost"], fig


def test_each_users_first_requests_are_warm_up_and_out_of_every_figure(tmp_path, sims):
    sim = sims(slots=16, fast=True)
    log, results = tmp_path / "rec.jsonl", tmp_path / "r.json"
    p = run_ok(
        "--host", sim.url, "-u", "3", "-t", "4s", "--warmup-requests", "2", "--record-log", str(log),
        "--results", str(results), "--report", str(tmp_path / "r.html"), timeout=120,
    )  # fmt: skip
    r = json.loads(results.read_text())
    warm, run = _split(log)
    w, s = r["warmup"], r["summary"]
    assert len(warm) == w["sent"] == 6, w  # 3 users x their first 2, over however many workers
    assert len(run) == s["sent"] and s["sent"] > 0
    _adds_up(w)
    _adds_up(s)
    assert s["latency"]["ttft"]["count"] == sum(1 for x in run if x["outcome"] == "ok" and x["first"] is not None)
    assert w["latency"]["ttft"]["count"] == sum(1 for x in warm if x["outcome"] == "ok" and x["first"] is not None)
    assert s["tokens_out"] == sum(x["n_out"] or 0 for x in run if x["outcome"] == "ok")  # not the warm-up's
    assert [x["step"] for x in r["steps"]] == [0]  # no step row for the warm-up
    text = " ".join(p.stdout.split())
    assert "warm-up: each user's first 2 requests: sent 6, ok 6, failed 0, cancelled 0" in text, p.stdout[-2000:]
    assert "warm-up (not in these figures)" in (tmp_path / "r.html").read_text()


def test_the_first_seconds_of_a_closed_loop_are_warm_up(tmp_path, sims):
    sim = sims(slots=16, fast=True)
    log, results = tmp_path / "rec.jsonl", tmp_path / "r.json"
    p = run_ok("--host", sim.url, "-u", "2", "-t", "5s", "--run-warmup", "2s", "--record-log", str(log),
               "--results", str(results), timeout=120)  # fmt: skip
    r = json.loads(results.read_text())
    warm, run = _split(log)
    assert warm and run and len(warm) == r["warmup"]["sent"] and len(run) == r["summary"]["sent"]
    # everything warm-up was sent before anything measured, and the warm-up lasted its 2 s
    assert max(x["wall_sent"] for x in warm) < min(x["wall_sent"] for x in run)
    assert min(x["wall_sent"] for x in run) - min(x["wall_sent"] for x in warm) == pytest.approx(2.0, abs=0.5)
    assert r["warmup"]["rule"] == "what was sent in its first 2 s"
    assert "warm-up: what was sent in its first 2 s: sent" in " ".join(p.stdout.split())


def test_a_replays_warm_up_is_trace_time_from_its_start(tmp_path):
    """32 records a quarter second apart, --run-warmup 2s at --speed 2: the records due in the
    first 2 s of trace time (the first 8) are the warm-up, exactly, whatever the start's delay."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 0.25, "input_tokens": 20, "output_tokens": 4}) + "\n"
                             for i in range(32)))  # fmt: skip
    log, results = tmp_path / "rec.jsonl", tmp_path / "r.json"
    run_ok("--trace", str(trace), "--replay", "--speed", "2", "--run-warmup", "2s", "--record-log", str(log),
           "--results", str(results), timeout=120)  # fmt: skip
    warm, run = _split(log)
    line = lambda x: int(x["source"].rsplit(":", 1)[1])  # noqa: E731 - the trace line a record was sent for
    assert sorted(map(line, warm)) == list(range(1, 9))
    assert sorted(map(line, run)) == list(range(9, 33))
    r = json.loads(results.read_text())
    assert (r["warmup"]["sent"], r["summary"]["sent"]) == (8, 24)
    assert r["warmup"]["rule"] == "what was sent in its first 2 s of trace time"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ladder", "concurrency:1,2", "--run-warmup", "5s"], "--run-warmup: a ladder warms up at the start of each"),
        (["--ladder", "concurrency:1,2", "--warmup-requests", "2"], "--warmup-requests: a ladder warms up at the"),
        (["--replay", "--warmup-requests", "2"], "--warmup-requests: a replay's warm-up is trace time"),
        (["--run-warmup", "3600"], "3600 would be 3600 seconds: write the unit"),
    ],
)
def test_a_warm_up_that_cannot_apply_is_refused_before_anything_starts(argv, message):
    p = run_cli(*argv, "-t", "2s", timeout=60)
    assert p.returncode == 2 and message in p.stderr, p.stderr[-2000:]
    assert "started the simulated server" not in p.stdout


def test_the_sample_plan_reads():
    from llm_locust.settings import derive

    s = derive.resolve(derive.load_plan(ROOT / "plans" / "warmup.yaml"))
    assert (s.run_warmup, s.warmup_requests, s.users) == (10.0, 1, 8)
