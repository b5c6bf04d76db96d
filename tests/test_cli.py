"""`llm-locust run` as a user runs it: real processes, the simulator, Locust underneath."""

import json
import os
import subprocess
import sys

import pytest

from llm_locust.sim.process import SimProcess

SECRET = "sk-test-0123456789abcdef-DO-NOT-LOG"


def run_cli(*args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_main_job_without_host_runs_against_the_simulator(tmp_path):
    results = tmp_path / "r.json"
    p = run_cli("-t", "4s", "--results", str(results))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "started the simulated server" in p.stdout
    assert "llm-locust summary" in p.stdout and "output tokens/s" in p.stdout
    r = json.loads(results.read_text())
    assert r["schema"] == "llm-locust/results" and r["version"] == 2
    s = r["summary"]
    assert s["ok"] > 0 and s["failed"] == 0
    assert s["sent"] == s["ok"] + s["failed"] + s["cancelled"]
    assert s["output_tokens_per_s"] > 0
    assert s["length_mismatch"] == 0 and s["length_checked"] == s["ok"]
    assert r["run"]["settings"]["trace"].endswith("sample_trace.jsonl")
    assert r["environment"]["locust"]


def test_api_key_is_sent_but_never_logged_or_stored(tmp_path):
    results = tmp_path / "r.json"
    log = tmp_path / "records.jsonl"
    with SimProcess(slots=4, token_log=str(tmp_path / "t.jsonl")) as sim:
        p = run_cli(
            "--host", sim.url, "-t", "3s", "-u", "2", "--results", str(results), "--record-log", str(log),
            "--api-key-env", "MY_KEY", "--loglevel", "DEBUG",
            env={"MY_KEY": SECRET},
        )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(results.read_text())["run"]["settings"]["api_key_set"] is True
    for text in (p.stdout, p.stderr, results.read_text(), log.read_text()):
        assert SECRET not in text


def test_unknown_api_flavour_is_refused_with_the_choices():
    p = run_cli("--api", "nope", "-t", "2s")
    assert p.returncode != 0
    assert "invalid choice: 'nope'" in p.stderr and "openai-chat" in p.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such trace file"),
        ('{"input_tokens": 5, "output_tokens": 3}\n{"input_tokens": oops}\n', "bad.jsonl:2: invalid JSON"),
        ("", "empty trace"),
    ],
)
def test_bad_trace_is_refused_before_any_load(tmp_path, content, message):
    trace = tmp_path / "bad.jsonl"
    if content is not None:
        trace.write_text(content)
    with SimProcess(slots=2, token_log=str(tmp_path / "t.jsonl")) as sim:
        p = run_cli("--host", sim.url, "--trace", str(trace), "-t", "2s")
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "t.jsonl").exists() or (tmp_path / "t.jsonl").read_text() == ""  # nothing was sent


def test_server_down_gives_counted_connect_errors(tmp_path):
    results = tmp_path / "r.json"
    p = run_cli("--host", "http://127.0.0.1:9", "-t", "2s", "-u", "2", "--model", "m", "--results", str(results))
    assert p.returncode == 1  # Locust's exit code when requests failed
    s = json.loads(results.read_text())["summary"]
    assert s["ok"] == 0 and s["outcomes"]["connect_error"] == s["failed"] > 0
    assert "connect_error" in p.stdout
