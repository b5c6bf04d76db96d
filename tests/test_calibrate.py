"""`llm-locust calibrate`: a bounded search against the built-in simulator for the token rate one
process holds; --write keeps it where `--workers auto` reads it (issue 37 item 2;
docs/load-shapes.md "Worker processes")."""

import json
import os
import signal
import subprocess
import time

import pytest
from support import ROOT, cli_argv, cli_process

from llm_locust import calibrate
from llm_locust.analysis import calibration
from llm_locust.settings.workers import calibration_path, ceiling


def _row(streams, rate, err_ms, verdict="valid", code=0, failed=0):
    summary = {"ok": 10, "failed": failed, "output_tokens_per_s": rate, "client": {"verdict": verdict, "valid": True}}
    return calibration.judge_step(streams, summary, [err_ms / 1000] * 10, code)


def test_a_step_holds_only_when_valid_answered_and_its_ttft_error_is_within_the_limit():
    assert _row(25, 2_400, 0.1)["held"]
    assert "TTFT error p99 6.50 ms over 1 ms" in _row(50, 4_800, 6.5)["why"]
    assert "suspect" in _row(50, 4_800, 0.1, verdict="suspect")["why"]
    assert _row(50, 4_800, 0.1, code=1)["why"] == "the run exited 1"
    assert _row(50, 4_800, 0.1, failed=2)["why"] == "2 request(s) failed"
    assert _row(50, 1_000, 0.1)["short"]  # held, but read a fifth of what it asked


def test_the_ceiling_is_the_last_step_that_held_and_says_how():
    value, how = calibration.ceiling([_row(25, 2_432, 0.1), _row(50, 4_900, 0.2), _row(100, 9_000, 4.0)])
    assert value == 4_900 and how.startswith("50 streams held (4,900 tokens/s); 100 did not: TTFT error p99")
    value, how = calibration.ceiling([_row(25, 2_400, 0.1), _row(50, 2_500, 0.1)])
    assert value == 2_500 and how.startswith("at least: 50 streams read 2,500 of 5,000")
    assert calibration.ceiling([_row(25, 2_400, 3.0)])[0] is None


def test_ttft_errors_join_the_record_log_with_the_simulators_token_log():
    ours = [
        {"id": "a", "outcome": "ok", "t_sent": 10.0, "chunks": [0.0525, 0.06]},
        {"id": "b", "outcome": "failed", "t_sent": 10.0, "chunks": [0.05]},
        {"id": "c", "outcome": "ok", "t_sent": 10.0, "chunks": [0.05]},  # not in the server's log
    ]
    sim = [{"id": "a", "outcome": "ok", "t_tokens": [10.05, 10.06]}, {"id": "b", "outcome": "ok", "t_tokens": [10.05]}]
    (err,) = calibration.ttft_errors(ours, sim)
    assert err == pytest.approx(0.0025)


def test_a_written_calibration_is_what_workers_auto_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    rows = [_row(25, 2_432, 0.1)]
    assert calibrate._write(calibrate._target(), 2_400, "25 streams held", rows) == 0
    assert ceiling() == (2_400, f"calibrated, {calibration_path()}")
    assert json.loads(calibration_path().read_text())["steps"] == rows


def test_calibrate_quick_measures_prints_the_ceiling_and_writes_nothing(tmp_path):
    p = cli_process("calibrate", "--quick", env={"XDG_CONFIG_HOME": str(tmp_path)}, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "streams  asked tok/s  read tok/s" in p.stdout
    held = [line for line in p.stdout.splitlines() if line.startswith("calibrate: one process holds ~")]
    assert len(held) == 1, p.stdout
    assert "not written" in p.stdout and not (tmp_path / "llm-locust").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--quick", "--write"], "--quick measures nothing worth keeping"),
        (["--budget", "-1"], "more than 0"),
        (["--budget", "nan"], "more than 0"),
        (["--budget", "soon"], "not a number"),
        (["--what"], "unrecognized arguments"),
    ],
)
def test_bad_usage_is_refused_before_anything_runs(tmp_path, args, said):
    p = cli_process("calibrate", *args, env={"XDG_CONFIG_HOME": str(tmp_path)}, timeout=60)
    assert p.returncode == 2 and said in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "calibrate: one process against" not in p.stdout  # no step started


@pytest.mark.parametrize("kind", ["link", "folder"])
def test_a_config_file_that_is_not_a_regular_file_is_refused_before_any_load(tmp_path, kind):
    target = tmp_path / "llm-locust" / "calibration.json"
    target.parent.mkdir()
    real = tmp_path / "real.json"
    real.write_text("keep")
    if kind == "link":
        target.symlink_to(real)
    else:
        target.mkdir()
    p = cli_process("calibrate", "--write", env={"XDG_CONFIG_HOME": str(tmp_path)}, timeout=60)
    assert p.returncode == 2 and "not a regular file" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "calibrate: one process against" not in p.stdout and real.read_text() == "keep"


def test_a_signal_stops_the_search_and_nothing_is_written(tmp_path):
    """SIGTERM while a step runs: the step is stopped, no further one starts, nothing is written
    even with --write, exit 143."""
    proc = subprocess.Popen(
        cli_argv("calibrate", "--write"),
        cwd=ROOT,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        seen = []
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            seen.append(line)
            if " streams for " in line or time.monotonic() > deadline:
                break
        assert any(" streams for " in s for s in seen), "".join(seen[-20:])
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, rest[-3000:]
    assert "interrupted by SIGTERM: nothing written" in rest
    assert rest.count(" streams for ") == 0  # no further step started
    assert not (tmp_path / "llm-locust" / "calibration.json").exists()
