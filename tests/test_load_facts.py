"""What the load really was (issue 39 item 6): the prompt cache's state before the load, and a
closed loop's users against the requests it held in flight with its think time
(analysis/load_facts.py; docs/metrics.md "What the load was")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import run_ok

from llm_locust.analysis.load_facts import cache_state, load_facts, load_line
from llm_locust.sim.process import SimProcess

OK_RESET = {"outcome": "ok", "when": "before the run"}


@pytest.mark.parametrize(
    "reset, sim, first, state",
    [
        (None, False, [5.0, 128], "warm"),
        (OK_RESET, False, [5.0, 128], "warm"),  # the reset did not empty it: what was served says so
        (OK_RESET, False, [5.0, 0], "reset"),
        ({"outcome": "refused"}, False, [5.0, 0], "unknown"),
        (None, True, [5.0, 0], "fresh"),
        (None, True, None, "fresh"),
        (None, False, [5.0, 0], "unknown"),
        (None, False, None, "unknown"),
    ],
)
def test_the_cache_state_by_its_first_rule_that_holds(reset, sim, first, state):
    got = cache_state(reset, sim, first)
    assert got["state"] == state and got["why"]
    if state == "warm":
        assert "128 cached prompt tokens" in got["why"]
        assert ("despite the reset" in got["why"]) == (reset is not None)


def test_the_load_line_sets_users_against_requests_in_flight():
    spans = [(100 + k, 1, 130.0 if k != 7 else 400.0, 50, 0) for k in range(60)]
    facts = load_facts("closed", 1000, 2.0, 130.0, spans)
    assert facts["in_flight_p99"] == 130.0 and facts["sent_per_s"] == 50.0  # p99 of 60 seconds: the 59th
    assert load_line(facts) == (
        "load: 1000 users with 2 s think time held 130.0 requests in flight (mean over the run; p99 of its "
        "seconds 130.0), 13% of the users"
    )
    spans[8] = (108, 1, 400.0, 50, 0)
    assert load_facts("closed", 1000, 2.0, 130.0, spans)["in_flight_p99"] == 400.0
    assert "with no think time" in load_line(load_facts("closed", 8, 0.0, 7.9, spans))
    open_loop = load_facts("replay", None, 0.0, 3.0, [(0, 1, 3.0, 8, 1), (1, 1, 3.0, 0, 0), (2, 1, 3.0, 8, 0)])
    assert open_loop["sent_per_s"] == 8.0 and open_loop["on_schedule"] == pytest.approx(15 / 16, abs=1e-4)
    assert load_line(open_loop).startswith("load: an open loop sent 8.00 requests/s, 93.8% on schedule")
    assert load_line(load_facts("ladder", 8, 0.0, 3.0, spans)) is None
    # a run starts and ends inside a second: 3 and 4 sends there at 10/s are part-seconds, not a
    # slower rate (7.4/s counted whole; a 5 s replay at 10/s read 7.5 and failed this file's run)
    edges = [(0, 1, 1.0, 3, 0), (1, 1, 1.0, 10, 0), (2, 1, 1.0, 10, 0), (3, 1, 1.0, 10, 0), (4, 1, 1.0, 4, 0)]
    assert load_facts("replay", None, 0.0, 1.0, edges)["sent_per_s"] == 10.0
    folded = [(0, 10, 10.0, 95, 0), (10, 1, 1.0, 10, 0), (11, 1, 1.0, 2, 0)]  # a folded row: 10 seconds alike
    assert load_facts("replay", None, 0.0, 1.0, folded)["sent_per_s"] == pytest.approx((107 - 9.5 - 2) / 10)
    assert load_line(load_facts("closed", None, 0.0, 3.0, spans)) is None


def _run(url, path, *more):
    argv = ["--host", url, "-u", "4", "-t", "4s"]  # the bundled sample: the same prompts each run
    return run_ok(*argv, "--results", path, *more, timeout=120)


def _said(p) -> str:
    """The summary's words, unwrapped (it is fitted to the terminal's width)."""
    return " ".join(p.stdout.split())


def _state(path):
    return json.loads(path.read_text())["run"]["cache_state"]["state"]


def test_a_warm_cache_is_said_and_compare_notes_a_mismatch(tmp_path):
    """Against one simulator with a prefix cache: the first run finds it empty of its prompts
    (unknown: 0 cached tokens says nothing of the rest), the same workload again finds it warm, a
    run that resets it first says reset. Each summary says it; compare notes the mismatch."""
    with SimProcess(slots=8, prefix_cache=True, fast=True) as sim:
        first, again, reset = tmp_path / "first.json", tmp_path / "again.json", tmp_path / "reset.json"
        p = _run(sim.url, first)
        assert _state(first) == "unknown"
        assert "prompt cache before the load: unknown (no reset; the first request was served no cached" in _said(p)
        p = _run(sim.url, again)
        assert _state(again) == "warm" and "prompt cache before the load: warm (the run's first request" in _said(p)
        _run(sim.url, reset, "--reset-cache", "repeat")
        assert _state(reset) == "reset"
    c = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "compare", str(reset), str(again)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert c.returncode == 0, c.stderr
    said = " ".join((c.stdout + c.stderr).split())
    assert "different prompt cache state before the load" in said and "reset: reset; again: warm" in said
    c = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "compare", str(again), str(again)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "prompt cache state" not in c.stdout + c.stderr


def test_a_closed_loop_with_think_time_says_what_it_held_in_flight(tmp_path):
    """8 users who think 1 s between a reply and the next request: the summary sets the users
    against the requests in flight, beside the think time (before: users and mean in flight on
    separate lines, the think time nowhere)."""
    p = run_ok("-u", "8", "-t", "5s", "--think-time", "1", "--results", tmp_path / "r.json", timeout=120)
    said = _said(p)
    assert "load: 8 users with 1 s think time held " in said
    held = float(said.split("load: 8 users with 1 s think time held ")[1].split()[0])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert held == pytest.approx(doc["summary"]["concurrency"], abs=0.051) and 0 < held < 8
    facts = doc["run"]["load_facts"]
    assert facts["think_time"] == 1.0 and facts["users"] == 8 and held <= facts["in_flight_p99"] <= 8
    assert f"p99 of its seconds {facts['in_flight_p99']:.1f})" in said
    assert doc["run"]["cache_state"]["state"] == "fresh"


def test_an_open_loop_says_its_sends_per_second_and_how_many_kept_their_schedule(tmp_path):
    """A replay at 10 requests/s (constant arrivals): the summary's load line gives the sends per
    second and the share sent within 50 ms of their due time; the results keep both."""
    synthetic = "requests=60,input=32,output=4,rate=10,arrivals=constant"
    p = run_ok("--synthetic", synthetic, "--replay", "-t", "5s", "--results", tmp_path / "r.json", timeout=120)
    facts = json.loads((tmp_path / "r.json").read_text())["run"]["load_facts"]
    assert facts["mode"] == "replay" and 8.0 <= facts["sent_per_s"] <= 11.0, facts
    assert facts["on_schedule"] > 0.9
    assert f"load: an open loop sent {facts['sent_per_s']:.2f} requests/s, {facts['on_schedule']:.1%} on schedule" in (
        _said(p)
    )
