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
    assert p.returncode == 2
    assert "--api: unknown API 'nope'" in p.stderr and "openai-chat" in p.stderr


@pytest.mark.parametrize("argv, message", [
    (["-u", "0"], "-u/--users: Input should be greater than or equal to 1"),
    (["-u", "-3"], "-u/--users: Input should be greater than or equal to 1"),
    (["--replay", "--speed", "0"], "--speed: Input should be greater than 0"),
    (["--ladder", "concurrency:1..4", "--warmup", "1m"], "--warmup: 60 s is not shorter than the step duration"),
    (["--slo", "ttft=500"], "--slo: ttft=500 would be 500 seconds"),
])
def test_bad_values_are_refused_before_anything_starts(argv, message):
    """Exit 2, the option the user typed named, and neither the simulator nor Locust started."""
    p = run_cli(*argv, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr
    assert "started the simulated server" not in p.stdout and "Traceback" not in p.stderr
    assert "Starting Locust" not in p.stderr


def test_help_shows_every_llm_locust_option_grouped():
    from llm_locust.settings.model import options

    p = run_cli("--help", timeout=60)
    assert p.returncode == 0
    for name, (_, opt) in options().items():
        assert opt.flag_for(name) in p.stdout, name
    assert "load shape: how much, when, for how long:" in p.stdout and "[plan: ladder.warmup]" in p.stdout


def test_a_plan_runs_with_its_name_and_a_results_file_runs_it_again(tmp_path):
    """Plan keys the first round dropped reach the run; `run RESULTS.json` repeats the same plan;
    a ladder run is not told that options it never gave will be ignored."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "name: tiny ladder\ndescription: two short steps\n"
        "workload: {synthetic: {requests: 50, input: 32, output: 8, seed: 2}}\n"
        "ladder: {kind: concurrency, steps: [1, 2], duration: 3s, warmup: 1s, stable: {window: 1s, windows: 2}}\n"
        "early_stop: {flat_steps: 0, on_slo: true}\nsim: {slots: 4}\nresults: r.json\nreport: r.html\n")
    p = subprocess.run([sys.executable, "-m", "llm_locust.cli", "run", str(plan)], capture_output=True, text=True,
                       timeout=180, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "will be ignored" not in p.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["run"]["name"] == "tiny ladder" and r["plan"]["name"] == "tiny ladder"
    assert r["plan"]["early_stop"]["flat_steps"] == 0 and r["plan"]["early_stop"]["on_slo"] is True
    assert r["plan"]["ladder"]["stable"]["windows"] == 2 and r["plan"]["sim"]["slots"] == 4
    assert "tiny ladder" in (tmp_path / "r.html").read_text()
    # again from the results file, written elsewhere: the same effective plan
    p = subprocess.run([sys.executable, "-m", "llm_locust.cli", "run", "r.json", "--results", "again.json",
                        "--report", "again.html"], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    again = json.loads((tmp_path / "again.json").read_text())["plan"]
    first = r["plan"]
    for key in ("results", "report"):
        first.pop(key), again.pop(key)
    first["workload"].pop("trace", None), again["workload"].pop("trace", None)
    assert again == first


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "--trace: no such file or folder"),
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


def test_an_output_path_that_cannot_be_written_is_refused_before_any_load(tmp_path):
    """The first round ran the whole test, then lost the results with a traceback and exit 0."""
    with SimProcess(slots=2, token_log=str(tmp_path / "t.jsonl")) as sim:
        p = run_cli("--host", sim.url, "-t", "30s", "--results", "/proc/nope/x.json", timeout=60)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "cannot write /proc/nope/x.json" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "t.jsonl").exists() or (tmp_path / "t.jsonl").read_text() == ""  # nothing was sent


def test_version_and_trace_help():
    main = [sys.executable, "-m", "llm_locust.cli"]
    p = subprocess.run(main + ["--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("llm-locust ") and "locust" in p.stdout
    p = subprocess.run(main + ["trace", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "record" in p.stdout and "synth" in p.stdout and "expected" not in p.stderr


def test_gpu_sidecar_on_a_busy_port_says_so_in_one_line():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run([sys.executable, "-m", "llm_locust.cli", "gpu-sidecar", "--fake", "1", "--host", "127.0.0.1",
                            "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in p.stderr and "Traceback" not in p.stderr
