"""What the load really was (issue 39 item 6): the prompt cache's state before the load, and a
closed loop's users against the requests it held in flight with its think time
(analysis/load_facts.py; docs/metrics.md "What the load was")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import run_ok

from llm_locust.analysis.load_facts import cache_state, load_line
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
    line = load_line("closed", 1000, 2.0, 130.0)
    assert line == (
        "load: 1000 users with 2 s think time held 130.0 requests in flight (mean over the run), 13% of the users"
    )
    assert "with no think time" in load_line("closed", 8, 0.0, 7.9)
    assert load_line("replay", 8, 0.0, 3.0) is None and load_line("closed", None, 0.0, 3.0) is None


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
    line = said.split("load: 8 users with 1 s think time")[1]
    held = float(line.split(" held ")[1].split()[0])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert held == pytest.approx(doc["summary"]["concurrency"], abs=0.051) and 0 < held < 8
    assert doc["run"]["cache_state"]["state"] == "fresh"
