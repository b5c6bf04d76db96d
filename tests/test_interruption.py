"""SIGINT and SIGTERM at any moment of a real `llm-locust run` (the built-in simulator): the
preflight, the ramp-up, a ladder's step, the shutdown (a second signal), a closed loop and the web
UI. Each leaves a summary and results marked interrupted (the signal, the phase, the cut step out of
the verdict), the report, no traceback, every request accounted, and exits 130 / 143."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gevent
import gevent.event
import pytest
from gevent.server import StreamServer
from support import ROOT

DEADLINE_S = 60.0  # every run here ends well within it (the runs are bounded by their own -t or ladder too)


class Run:
    """`llm-locust run ARGS` in its own session (a terminal's Ctrl-C reaches its whole group), its
    stderr read line by line, so a test waits for what the run says rather than for time."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llm_locust.cli", "run", *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.err: list[str] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._seen:
                self.err.append(line)
                self._seen.notify_all()

    def wait_for(self, text: str, timeout: float = 30.0, pattern: bool = False) -> None:
        """Until stderr has a line with `text` in it (a regular expression when `pattern`)."""
        deadline = time.monotonic() + timeout
        found = (lambda line: re.search(text, line)) if pattern else (lambda line: text in line)
        with self._seen:
            while not any(found(line) for line in self.err):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"{text!r} not said within {timeout} s:\n{''.join(self.err)[-3000:]}")
                self._seen.wait(min(left, 0.5))

    def signal(self, sig: int, group: bool = True) -> None:
        (os.killpg if group else os.kill)(self.proc.pid, sig)

    def finish(self) -> tuple[int, str, str, float]:
        """(exit code, stdout, stderr, seconds): stderr is the reader's alone (communicate()
        would read it too, and take lines from it)."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        self.proc.wait(timeout=DEADLINE_S)
        self._reader.join(10)
        return self.proc.returncode, out, "".join(self.err), time.monotonic() - self.t0


def check(tmp_path: Path, rc: int, out: str, err: str, sig: str, code: int) -> dict:
    """What every interrupted run must leave."""
    assert rc == code, (rc, err[-3000:])
    assert "Traceback" not in err and "Traceback" not in out, err[-3000:]
    assert f"INTERRUPTED by {sig}" in out and "FAIL" not in out
    assert f"llm-locust: exit {code}: interrupted by {sig}" in err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["run"]["interrupted"]["signal"] == sig and r["gates"] == []
    s = r["summary"]
    assert s["sent"] == s["ok"] + s["failed"] + s["cancelled"] + s["lost"], s  # nothing lost
    assert (tmp_path / "r.html").stat().st_size > 1000
    return r


LADDER = ("--ladder", "concurrency:1,2,4", "--step-duration", "4s", "--warmup", "0s", "--results", "r.json")
OUT = ("--report", "r.html")


@pytest.mark.parametrize("sig, group, code", [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)])
def test_a_signal_mid_step_cuts_the_step_out_of_the_verdict(tmp_path, sig, group, code):
    """Ctrl-C (SIGINT to the group) or `kill` (SIGTERM to the process; before, a ladder's SIGTERM
    wrote nothing at all): the cut step is in the results, flagged, and not in the saturation."""
    run = Run(tmp_path, *LADDER, *OUT)
    run.wait_for("ladder step 2/3")
    run.signal(sig, group)
    rc, out, err, took = run.finish()
    r = check(tmp_path, rc, out, err, sig.name, code)
    lad = r["ladder"]
    assert lad["cut_step"] == 2 and lad["stop_reason"] == "interrupted"
    assert r["run"]["interrupted"]["phase"].startswith("step 2 of 3")
    assert [s["step"] for s in lad["steps"] if s.get("cut")] == [2]
    assert "step 2 (concurrency 2) was cut by the interruption" in out
    sat = lad["saturation"]
    assert sat is not None and "too few steps for a knee: 1" in " ".join(sat["reasons"])  # step 1 alone judged
    assert took < 30


def test_a_second_signal_while_stopping_is_said_and_ignored(tmp_path):
    run = Run(tmp_path, *LADDER, *OUT)
    run.wait_for("ladder step 2/3")
    run.signal(signal.SIGINT)
    run.wait_for("stopping the run")
    run.signal(signal.SIGINT)
    rc, out, err, _ = run.finish()
    check(tmp_path, rc, out, err, "SIGINT", 130)
    assert "SIGINT again: already stopping" in err
    assert out.count("INTERRUPTED by SIGINT") == 1  # one end of the run, not two


def test_a_closed_loop_stopped_in_its_ramp_up_says_so(tmp_path):
    run = Run(tmp_path, "-u", "20", "-r", "2", "-t", "60s", "--results", "r.json", *OUT)
    run.wait_for("Ramping to 20 users")
    run.signal(signal.SIGTERM, group=False)
    rc, out, err, took = run.finish()
    r = check(tmp_path, rc, out, err, "SIGTERM", 143)
    assert r["run"]["interrupted"]["phase"] == "ramp-up"
    assert r["run"]["load"]["run_time"] == 60 and r["summary"]["duration_s"] < 30 and took < 40


def test_a_closed_loop_stopped_while_running(tmp_path):
    run = Run(tmp_path, "-u", "2", "-t", "60s", "--progress-interval", "1s", "--results", "r.json", *OUT)
    run.wait_for(r"done [1-9]\d*, in flight [1-9]", pattern=True)  # requests answered, others in flight
    run.signal(signal.SIGINT)
    rc, out, err, took = run.finish()
    r = check(tmp_path, rc, out, err, "SIGINT", 130)
    assert r["run"]["interrupted"]["phase"] == "running" and took < 40
    # the terminal's Ctrl-C reached the whole group: the simulator the run started is in a session
    # of its own, so it answers until the run has read its last /metrics and stopped it (before: it
    # died at once, and the server's figures of the run's end were "Connection refused"), and it is
    # gone after the run
    s = r["summary"]
    assert s["failed"] == 0 and s["ok"] > 0, s
    assert r["server_metrics"]["source"].get("error") is None, r["server_metrics"]["source"]
    url = re.search(r"started the simulated server at (http://\S+)", out).group(1)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=2).close()


def test_a_signal_during_the_preflight_ends_at_once_with_nothing_sent(tmp_path):
    """The target accepts and never answers: the preflight waits; Ctrl-C ends the run there."""
    accepted = []
    release = gevent.event.Event()

    def stall(sock, _addr):
        accepted.append(sock)
        release.wait(60)  # held open, never answered, until the test ends

    server = StreamServer(("127.0.0.1", 0), stall)
    server.start()
    try:
        run = Run(tmp_path, "--host", f"http://127.0.0.1:{server.server_port}", "-t", "5s", "--results", "r.json")
        waited = time.monotonic()
        while not accepted:  # served by this process's gevent loop: give it the turns
            assert time.monotonic() - waited < 30, "".join(run.err)
            gevent.sleep(0.05)
        run.signal(signal.SIGINT)
        rc, out, err, took = run.finish()
    finally:
        release.set()
        server.stop()
    assert rc == 130, err
    assert "interrupted by SIGINT during the preflight: nothing was sent, no results written" in err
    assert "Traceback" not in err and not (tmp_path / "r.json").exists()


def test_the_web_ui_started_run_stops_on_sigterm(tmp_path):
    port = _free_port()
    run = Run(
        tmp_path, "--web", "--autostart", "--web-port", str(port), "-u", "2", "-t", "60s", "--results", "r.json", *OUT
    )
    run.wait_for("All users spawned")
    run.signal(signal.SIGTERM, group=False)
    rc, out, err, took = run.finish()
    check(tmp_path, rc, out, err, "SIGTERM", 143)
    assert took < 40


def _free_port() -> int:
    from support import free_port

    return free_port()


def test_a_run_killed_outright_leaves_no_simulator_behind(tmp_path):
    """SIGKILL gives the run no chance to stop the simulator it started in a session of its own:
    the kernel's parent-death signal ends it."""
    run = Run(tmp_path, "-u", "1", "-t", "60s", "--results", "r.json")
    deadline = time.monotonic() + 30
    while "started the simulated server at" not in (line := run.proc.stdout.readline()):
        assert line and time.monotonic() < deadline, "the run did not start its simulator"
    port = int(line.strip().rsplit(":", 1)[1])
    socket.create_connection(("127.0.0.1", port), timeout=5).close()  # it answers now
    run.signal(signal.SIGKILL, group=False)
    run.proc.wait(10)
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            break  # gone
        assert time.monotonic() < deadline, f"the simulator on port {port} outlived the killed run"
        time.sleep(0.1)  # polling a port that is to close
