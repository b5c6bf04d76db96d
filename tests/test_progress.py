"""The progress line of a headless run (runtime/progress.py): what it says, how often, and off."""

from __future__ import annotations

import re

from support import run_cli

from llm_locust.metrics.aggregate import Aggregate
from llm_locust.runtime.progress import clock, line

PROGRESS = re.compile(
    r"^progress (\d+):(\d\d)/(\S+) \| (?:step \S+ \([a-z]+ [\d.]+\) \| )?sent (\d+), done (\d+), in flight (\d+) "
    r"\| (\d+) tok/s \| (\d+) failed$"
)


def test_the_line_names_time_step_counts_rate_and_failures():
    agg = Aggregate()
    agg.add_sent(12)
    assert line(65.0, 600.0, "step 2/4 (concurrency 8)", agg, 812.4) == (
        "progress 1:05/10:00 | step 2/4 (concurrency 8) | sent 12, done 0, in flight 12 | 812 tok/s | 0 failed"
    )
    assert line(5.0, None, None, agg, 0.0).startswith("progress 0:05/? | sent 12")
    assert clock(3725) == "1:02:05"


def test_a_headless_run_prints_progress_at_its_interval_and_none_when_off(sims):
    host = sims(slots=8).url
    p = run_cli("--host", host, "-u", "2", "-t", "5s", "--progress-interval", "1s")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [m for ln in p.stderr.splitlines() if (m := PROGRESS.match(ln))]
    assert len(lines) >= 3, p.stderr[-3000:]
    elapsed = [int(m.group(1)) * 60 + int(m.group(2)) for m in lines]
    assert elapsed == sorted(elapsed) and all(m.group(3) == "0:05" for m in lines)
    assert int(lines[-1].group(4)) > 0  # requests sent by then
    quiet = run_cli("--host", host, "-u", "2", "-t", "3s", "--progress-interval", "0")
    assert quiet.returncode == 0 and "progress " not in quiet.stderr
