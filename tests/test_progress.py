"""The progress line of a headless run (loop/progress.py): what it says, how often, and off."""

from __future__ import annotations

import re

from support import run_cli

from llm_locust.loop.progress import Snapshot, clock, line, plain
from llm_locust.metrics.aggregate import Aggregate

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


def test_past_its_plan_the_line_says_what_it_waits_for_not_a_smaller_total():
    """Issue 35: a replay's progress read `1:20/0:21`, as if the total were wrong. The total is the
    schedule's span (the last record due at trace span / speed); past it the line says by how much
    and what the run waits for."""

    def at(elapsed: float, total: float | None, in_flight: int) -> str:
        return plain(Snapshot(elapsed, total, None, None, 400, 400 - in_flight, in_flight, 400, 0.0, 0))

    assert at(20.4, 21.0, 50).startswith("progress 0:20/0:21 | sent 400 of 400")
    assert at(21.9, 21.0, 50).startswith("progress 0:21/0:21 |")  # the same second: not over
    assert at(80.2, 21.0, 28).startswith(
        "progress 1:20 (0:21 planned, over by 0:59, waiting for 28 in flight) | sent 400 of 400, done 372"
    )
    assert at(23.0, 21.0, 0).startswith("progress 0:23 (0:21 planned, over by 0:02, stopping) |")
    assert at(0.5, 0.9, 3).startswith("progress 0:00/0:01 |")  # a plan under a second is not 0:00
    assert at(95.0, None, 3).startswith("progress 1:35/? |")


def test_a_replay_whose_replies_outlast_its_schedule_says_so(sims):
    """A 10 s trace window at 20x: every record is due within a second, and two slow slots take
    seconds to answer them; the line never shows an elapsed time above its total."""
    host = sims(slots=2, iter_base=0.02).url
    p = run_cli(
        "--host", host, "--replay", "--speed", "20", "--duration", "10s", "--max-tokens", "20",
        "--progress-interval", "1s", timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("progress ")]
    waits = re.compile(r"progress \S+ \((\S+) planned, over by \S+, waiting for (\d+) in flight\)")
    over = [m for ln in lines if (m := waits.match(ln))]
    assert over and all(int(m.group(2)) > 0 for m in over), lines
    for ln in lines:
        m = re.match(r"progress (\d+):(\d\d)/(\d+):(\d\d) ", ln)
        if m:
            a, b, c, d = map(int, m.groups())
            assert a * 60 + b <= c * 60 + d, ln


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


def test_on_a_terminal_the_live_panel_shows_and_goes_and_logs_print_above_it(tmp_path, sims):
    """stderr on a pseudo-terminal: the live panel (its rows) is drawn while the run goes, log lines
    are printed whole, and the summary follows on stdout; the run ends as it would."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    from support import ROOT

    host = sims(slots=8).url
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", host, "-u", "2", "-t", "4s"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + 90  # bounded: a fresh-clone run hung here on a read that never ended
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            screen += chunk
        elif proc.poll() is not None:  # gone, and nothing more to read (a descendant may hold the pty)
            break
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    text = screen.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "requests" in text and "tokens/s" in text and "in flight" in text  # the panel's rows
    assert "All users spawned" in text  # a log line, printed whole above the panel
    assert "progress 0:" not in text  # not the plain line
    assert b"llm-locust summary" in out
