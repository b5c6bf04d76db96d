"""--mlflow URI: a run logged to a real MLflow tracking server, read back with MLflow's own client.

The server is `mlflow server` (SQLite backend, artifacts proxied to a folder under the test's
tmp), from the cache venv of `scripts/real-servers.sh mlflow` (realservers.MlflowServer); the
client is the `mlflow` extra (mlflow-skinny) in the test env. A tracking server that is down,
silent or dripping must cost the run seconds, never its exit code or its files; credentials in the
URI are never written or shown.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import uuid
from pathlib import Path

import psutil
import pytest
import realservers
from support import free_port, missing, run_ok, start_run

from llm_locust.report import mlflow_log
from llm_locust.sim.process import SimProcess


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    realservers.need_mlflow()
    with realservers.MlflowServer(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


def _client(url: str):
    pytest.importorskip("mlflow", reason="the mlflow extra: pip install -e '.[test]'")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url)


def _the_run(client, experiment: str, run_name: str):
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"experiment {experiment!r} not found"
    runs = client.search_runs([exp.experiment_id], filter_string=f"attributes.run_name = '{run_name}'")
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return runs[0]


def _history(client, run_id: str, name: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, name))


def _ladder(tmp_path: Path, host: str, *extra: str):
    out = {k: tmp_path / n for k, n in (("results", "r.json"), ("report", "r.html"), ("record_log", "rec.jsonl"))}
    p = run_ok(
        "--host",
        host,
        "--ladder",
        "concurrency:1,2",
        "--no-early-stop",
        "--warmup",
        "0.5",
        "--step-duration",
        "2",
        "--max-tokens",
        "16",
        "--results",
        out["results"],
        "--report",
        out["report"],
        "--record-log",
        out["record_log"],
        *extra,
        timeout=180,
    )
    return p, out


def test_a_ladder_is_logged_with_its_plan_figures_per_step_tags_and_files(tmp_path, mlflow_server):
    client = _client(mlflow_server.url)
    experiment, run_name = f"ladder-{uuid.uuid4().hex[:8]}", "two-steps"
    with SimProcess(slots=8) as sim:
        p, out = _ladder(
            tmp_path,
            sim.url,
            "--mlflow",
            mlflow_server.url,
            "--mlflow-experiment",
            experiment,
            "--mlflow-run-name",
            run_name,
        )
    results = json.loads(out["results"].read_text())
    run = _the_run(client, experiment, run_name)
    assert f"logged to MLflow at {mlflow_server.url}, experiment {experiment!r}, run {run.info.run_id}" in p.stdout
    assert run.info.status == "FINISHED"
    assert run.info.start_time == int(results["run"]["started_at"] * 1000)
    # the effective plan, flattened
    params = run.data.params
    assert params["ladder.kind"] == "concurrency" and params["ladder.steps"] == "[1, 2]", params
    plan = results["plan"]
    assert params["max_tokens"] == "16" and params["host"] == sim.url and params["record_log"] == plan["record_log"]
    assert params["ladder.duration"] == json.dumps(plan["ladder"]["duration"]) and plan["ladder"]["duration"] == 2
    assert params["early_stop.enabled"] == "false" and params["mlflow.experiment"] == experiment
    assert len(params) > 50  # every plan key, not a chosen few
    # tags to find the run by
    env = results["environment"]
    tags = run.data.tags
    assert tags["llm_locust.server"] == sim.url and tags["llm_locust.mode"] == "ladder"
    assert tags["llm_locust.model"] == tags["llm_locust.engine"] == "llm-locust-sim"
    assert tags["llm_locust.trace_sha256"] == env["trace"]["sha256"] and len(env["trace"]["sha256"]) == 64
    # headline figures, as the results file says them
    summary = results["summary"]
    assert run.data.metrics["output_tokens_per_s"] == pytest.approx(summary["output_tokens_per_s"], rel=1e-12)
    assert run.data.metrics["ttft_p99_s"] == pytest.approx(summary["latency"]["ttft"]["p99"], rel=1e-12)
    assert run.data.metrics["sent"] == summary["sent"] > 0
    # each ladder step at its MLflow step (the ladder's step number, as in the report's table)
    steps = results["ladder"]["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    assert _history(client, run.info.run_id, "step/offered") == [(1, 1.0), (2, 2.0)]
    for name, figure in (("step/output_tokens_per_s", lambda s: s["output_tokens_per_s"]),
                         ("step/requests_per_s", lambda s: s["requests_per_s"]),
                         ("step/ttft_p50_s", lambda s: s["latency"]["ttft"]["p50"]),
                         ("step/itl_p99_s", lambda s: s["latency"]["itl"]["p99"])):  # fmt: skip
        got = _history(client, run.info.run_id, name)
        assert [k for k, _ in got] == [1, 2], (name, got)
        assert [v for _, v in got] == pytest.approx([figure(s) for s in steps], rel=1e-12), name
    # the files, byte for byte
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert names == {"r.json", "r.html", "rec.jsonl"}, names
    fetched = Path(client.download_artifacts(run.info.run_id, "r.json", str(tmp_path / "dl")))
    assert fetched.read_bytes() == out["results"].read_bytes()
    stored = mlflow_server.artifacts.rglob("rec.jsonl")
    assert [f.read_bytes() for f in stored] == [out["record_log"].read_bytes()]


def test_a_run_without_results_or_report_files_still_sends_both(tmp_path, mlflow_server):
    client = _client(mlflow_server.url)
    name = f"closed-{uuid.uuid4().hex[:8]}"
    with SimProcess(slots=8) as sim:
        p = run_ok(
            "--host", sim.url, "-u", "2", "-t", "3s", "--max-tokens", "8", "--name", name,
            "--mlflow", mlflow_server.url, timeout=120,
        )  # fmt: skip
    run = _the_run(client, mlflow_log.DEFAULT_EXPERIMENT, name)  # the run's --name names it
    assert "logged to MLflow" in p.stdout
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"results.json", "report.html"}
    doc = json.loads(Path(client.download_artifacts(run.info.run_id, "results.json", str(tmp_path))).read_text())
    assert doc["schema"] == "llm-locust/results" and doc["plan"]["name"] == name
    assert run.data.metrics["ok"] == doc["summary"]["ok"] > 0
    assert run.data.tags["llm_locust.mode"] == "closed"
    assert not [k for k in run.data.metrics if k.startswith(mlflow_log.STEP_PREFIX)]  # no ladder, no steps


def test_a_password_in_the_uri_reaches_no_parameter_tag_or_artifact(tmp_path, mlflow_server):
    """--mlflow http://alice:PW@HOST: the client authenticates with it (the server ignores it), and
    PW is in no parameter, tag or artifact (the results file, and the report drawn from memory in
    the uploading process), nor in stdout or stderr (old code: the artifacts carried it in clear)."""
    client = _client(mlflow_server.url)
    password, name = "mlflow-pw-33d1", f"secret-{uuid.uuid4().hex[:8]}"
    uri = mlflow_server.url.replace("http://", f"http://alice:{password}@")
    results = tmp_path / "r.json"
    with SimProcess(slots=8) as sim:
        p = run_ok(
            "--host", sim.url, "-u", "2", "-t", "2s", "--max-tokens", "8", "--name", name,
            "--results", results, "--mlflow", uri, timeout=120,
        )  # fmt: skip
    masked = mlflow_server.url.replace("http://", "http://***@")
    assert f"logged to MLflow at {masked}, experiment" in p.stdout, p.stderr[-2000:]
    run = _the_run(client, mlflow_log.DEFAULT_EXPERIMENT, name)
    assert run.data.params["mlflow.uri"] == masked
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"r.json", "report.html"}
    fetched = [
        Path(client.download_artifacts(run.info.run_id, a, str(tmp_path / "dl"))) for a in ("r.json", "report.html")
    ]
    texts = {"stdout": p.stdout, "stderr": p.stderr, "params": json.dumps(run.data.params),
             "tags": json.dumps(run.data.tags), **{f.name: f.read_text() for f in fetched}}  # fmt: skip
    assert [k for k, text in texts.items() if password in text] == []
    assert "Reproduce this run" in texts["report.html"] and masked in texts["r.json"]


def _closed_run(tmp_path: Path, host: str, uri: str, *extra: str, env: dict | None = None, timeout: float = 180):
    """A short closed-loop run logging to `uri`; (process, results path, seconds from the last
    file written, the report, to the process's end: the MLflow part)."""
    results, report = tmp_path / "r.json", tmp_path / "r.html"
    p = run_ok(
        "--host", host, "-u", "2", "-t", "2s", "--max-tokens", "8",
        "--results", results, "--report", report, "--mlflow", uri, *extra, env=env, timeout=timeout,
    )  # fmt: skip
    after = time.time() - max(results.stat().st_mtime, report.stat().st_mtime)
    assert report.is_file() and json.loads(results.read_text())["summary"]["ok"] > 0
    return p, results, after


@pytest.mark.timing  # a bound in wall seconds: alone, not beside the slow tier's shards
def test_a_tracking_server_that_is_down_costs_seconds_not_the_run(tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with SimProcess(slots=8) as sim:
        p, results, after = _closed_run(tmp_path, sim.url, uri)
    lines = [line for line in p.stderr.splitlines() if "MLflow" in line]
    assert lines == [
        f"llm-locust: MLflow logging to {uri} failed (Connection refused); the run's figures and files stand "
        f"as they are (files: {results}, {tmp_path / 'r.html'})"
    ], p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    # MLflow's defaults (7 retries, backoff factor 2) would wait minutes; ours: 3 tries, ~2 s apart
    assert after < 15, after


@pytest.mark.timing  # a bound in wall seconds: alone, not beside the slow tier's shards
def test_a_silent_tracking_server_is_given_up_on_after_its_timeout(tmp_path):
    """A server that accepts connections and never answers: the user's MLFLOW_HTTP_REQUEST_TIMEOUT
    (2 s here) wins over ours; 3 tries of it, then one line."""
    with socket.socket() as silent, SimProcess(slots=8) as sim:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel completes the handshakes; nobody reads
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        p, _, after = _closed_run(tmp_path, sim.url, uri, env={"MLFLOW_HTTP_REQUEST_TIMEOUT": "2"})
    assert f"llm-locust: MLflow logging to {uri} failed (Read timed out)" in p.stderr, p.stderr[-2000:]
    assert 6 <= after < 25, after  # 3 x 2 s, plus backoff; not 3 x 10 s, nor MLflow's 8 x 120 s


DRIP_EVERY_S = 4.0  # under MLflow's read timeout (10 s): no single read ever times out


@contextlib.contextmanager
def _dripping_server():
    """A tracking server that reads each request and answers one byte every DRIP_EVERY_S seconds,
    forever (the reply never ends): yields its URI. Its threads end when the test's exits."""
    done = threading.Event()
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)

    def drip(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b"{" * 10_000
                for byte in reply:
                    conn.sendall(bytes([byte]))
                    if done.wait(DRIP_EVERY_S):
                        return
            except OSError:
                return

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        done.set()
        srv.close()


def _need_client() -> None:
    try:
        import mlflow  # noqa: F401
    except ImportError:
        missing("the mlflow client (the `mlflow` extra: pip install -e '.[test]')")


@pytest.mark.timing
def test_a_dripping_tracking_server_is_abandoned_at_the_deadline(tmp_path):
    """One byte every 4 s: each read gets its byte before MLflow's read timeout, so the old code
    waited forever after "results written" (199 s and counting when it was found). The deadline is
    over the whole upload: the run ends within it, its files and exit code its own."""
    _need_client()
    with _dripping_server() as uri, SimProcess(slots=8) as sim:
        p, results, after = _closed_run(tmp_path, sim.url, uri, "--mlflow-timeout", "5s", timeout=90)
    assert after < 5 + 5, after
    lines = [line for line in p.stderr.splitlines() if "MLflow" in line]
    assert lines == [
        f"llm-locust: MLflow logging to {uri} abandoned (unfinished after --mlflow-timeout 5s); the run's figures "
        f"and files stand as they are (files: {results}, {tmp_path / 'r.html'})"
    ], p.stderr[-2000:]
    assert json.loads(results.read_text())["run"].get("interrupted") is None


@pytest.mark.timing
def test_a_signal_during_the_upload_ends_it_at_once(tmp_path):
    """SIGTERM while the run uploads to a tracker that drips: the old code said "stopping the run"
    and went on waiting. Now the upload is abandoned at once; the files written stay, the exit
    code is the run's (it had ended: 0)."""
    _need_client()
    results = tmp_path / "r.json"
    with _dripping_server() as uri, SimProcess(slots=8) as sim:
        argv = ("--host", sim.url, "-u", "2", "-t", "2s", "--max-tokens", "8", "--results", results)
        proc = start_run(*argv, "--mlflow", uri, "--mlflow-timeout", "120s", stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            seen = next((line for line in proc.stdout if "results written" in line), "")  # the upload is next
            assert seen, "the run ended without writing its results"
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
            ended = time.monotonic() - signalled
            err = proc.stderr.read()
        finally:
            proc.kill()
            proc.communicate()
    assert rc == 0, err[-2000:]
    assert ended < 10, ended  # a poll every 0.2 s, the child killed, the process's own end
    assert f"llm-locust: MLflow logging to {uri} abandoned (a signal to the run)" in err, err[-2000:]
    assert json.loads(results.read_text())["summary"]["ok"] > 0


def _uploader(pid: int, within: float = 60) -> psutil.Process:
    """The run's uploading child process (python -m llm_locust.report.mlflow_log), once started."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "llm_locust.report.mlflow_log" in child.cmdline():
                    return child
        time.sleep(0.1)
    raise AssertionError(f"no uploading process under {pid} within {within} s")


def test_the_upload_ends_itself_when_the_run_is_killed(tmp_path):
    """SIGKILL of the run while it uploads: the uploading process, orphaned, still ends at its
    deadline (plus 2 s), not with the drip's end (never)."""
    _need_client()
    with _dripping_server() as uri, SimProcess(slots=8) as sim:
        argv = ("--host", sim.url, "-u", "2", "-t", "2s", "--max-tokens", "8", "--results", tmp_path / "r.json")
        proc = start_run(*argv, "--mlflow", uri, "--mlflow-timeout", "3s", stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            child = _uploader(proc.pid)
            proc.kill()
            proc.wait(timeout=30)
            gone, alive = psutil.wait_procs([child], timeout=3 + 2 + 15)
        finally:
            proc.kill()
            proc.wait()
    assert [c.pid for c in alive] == [] and [c.pid for c in gone] == [child.pid]


# ------------------------------------------------------------------------------------ the mapping
def test_the_plan_is_flattened_to_parameters():
    plan = {
        "ladder": {"kind": "rate", "steps": [1, 2.5], "warmup": 0.5},
        "slos": {},
        "checks": {"preflight": True, "fail_fast_after": 20},
        "name": "n",
        "model": "",
        "long": "x" * 7000,
        "mlflow": {"uri": "https://me:s3cret@mlflow.example.org", "experiment": ""},
    }
    params = mlflow_log.payload({"plan": plan}).params
    assert params == {
        "ladder.kind": "rate",
        "ladder.steps": "[1, 2.5]",
        "ladder.warmup": "0.5",
        "slos": "{}",
        "checks.preflight": "true",
        "checks.fail_fast_after": "20",
        "name": "n",
        "model": "",
        "long": params["long"],
        "mlflow.uri": "https://***@mlflow.example.org",
        "mlflow.experiment": "",
    }
    assert len(params["long"]) == mlflow_log.MAX_PARAM_VALUE and params["long"].endswith("...(truncated)")


def _figures(rate: float, ttft: float, **more) -> dict:
    return {
        "output_tokens_per_s": rate,
        "requests_per_s": rate / 10,
        "goodput_requests_per_s": None,
        "latency": {"ttft": {"count": 3, "p50": ttft, "p99": 2 * ttft, "mean": ttft}, "itl": {"count": 0}},
        **more,
    }


def test_figures_are_named_metrics_and_ladder_steps_are_mlflow_steps():
    results = {
        "run": {"started_at": 100.0, "ended_at": 130.5},
        "summary": _figures(300.0, 0.02, sent=40, error_rate=0.0, cancelled=True),
        "ladder": {
            "steps": [
                _figures(100.0, 0.01, step=1, offered=4, window_end=110.0),
                _figures(200.0, 0.03, step=2, offered=8, window_end=120.0, failed=float("nan")),
            ],
            "saturation": {"saturation": {"offered": 8}},
        },
    }
    rows = {(name, step): (value, ts) for name, value, step, ts in mlflow_log.run_metrics(results)}
    assert rows[("output_tokens_per_s", 0)] == (300.0, 130500)
    assert rows[("ttft_p50_s", 0)] == (0.02, 130500) and rows[("ttft_p99_s", 0)] == (0.04, 130500)
    assert rows[("sent", 0)] == (40.0, 130500) and rows[("saturation_offered", 0)] == (8.0, 130500)
    assert rows[("step/offered", 1)] == (4.0, 110000) and rows[("step/offered", 2)] == (8.0, 120000)
    assert rows[("step/output_tokens_per_s", 2)] == (200.0, 120000)
    assert rows[("step/ttft_p99_s", 1)] == (0.02, 110000)
    # absent, null, non-finite and boolean figures are left out, not logged as 0
    names = {name for name, _ in rows}
    assert not names & {
        "goodput_requests_per_s",
        "itl_p50_s",
        "cancelled",
        "step/failed",
        "step/goodput_requests_per_s",
    }


def test_tags_name_the_server_model_engine_and_trace():
    results = {
        "environment": {
            "llm_locust": "0.1.0",
            "server": {"url": "http://10.0.0.9:8000", "kind": "vllm", "model": "m", "version": "0.9.1"},
            "trace": {"sha256": "ab" * 32},
        },
        "run": {"load": {"mode": "replay"}, "interrupted": {"signal": "SIGINT"}},
        "validity": {"flags": ["errors", "no_data"]},
        "gates": [{"name": "answered", "passed": True}, {"name": "error_rate", "passed": False}],
        "plan": {"description": "nightly"},
    }
    p = mlflow_log.payload(results)
    assert p.tags == {
        "llm_locust.server": "http://10.0.0.9:8000",
        "llm_locust.model": "m",
        "llm_locust.engine": "vllm",
        "llm_locust.engine_version": "0.9.1",
        "llm_locust.trace_sha256": "ab" * 32,
        "llm_locust.mode": "replay",
        "llm_locust.version": "0.1.0",
        "llm_locust.flags": "errors,no_data",
        "llm_locust.gates": "failed",
        "mlflow.note.content": "nightly",
    }
    assert p.status == "KILLED"  # an interrupted run is not a finished one


def _settings(tmp_path: Path, uri: str) -> types.SimpleNamespace:
    results, report = tmp_path / "r.json", tmp_path / "r.html"
    results.write_text("{}")
    report.write_text("<html></html>")
    return types.SimpleNamespace(
        mlflow=uri, mlflow_experiment="", mlflow_run_name="", name="", results=str(results), report=str(report),
        record_log="",
    )  # fmt: skip


def test_without_the_client_the_run_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what `import mlflow` meets when it is not installed
    line = mlflow_log.log_run(_settings(tmp_path, "http://u:pw@127.0.0.1:9"), {"plan": {}})
    assert line == (
        "MLflow logging to http://***@127.0.0.1:9 skipped: the mlflow client is not installed "
        "(pip install 'llm-locust[mlflow]'); the run's files stand as they are"
    )


def test_the_failure_line_names_the_cause_in_a_few_words():
    wrapped = RuntimeError(
        "API request to http://127.0.0.1:1/api/2.0/mlflow/experiments/get-by-name failed with exception "
        "HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: /x (Caused by "
        "NewConnectionError(\"HTTPConnection(host='127.0.0.1', port=1): Failed to establish a new connection: "
        '[Errno 111] Connection refused"))'
    )
    assert mlflow_log._why(wrapped) == "Connection refused"
    assert mlflow_log._why(ValueError("INVALID_PARAMETER_VALUE: bad\nmore")) == (
        "ValueError: INVALID_PARAMETER_VALUE: bad more"
    )


def test_mlflow_without_its_client_is_refused_before_anything_starts(tmp_path):
    """Before, a run without the client installed found out at its end, after all its load."""
    code = "import sys; sys.modules['mlflow'] = None; from llm_locust.cli import main; sys.exit(main())"
    argv = ["run", "--mlflow", "http://127.0.0.1:9", "-t", "2s", "--results", str(tmp_path / "r.json")]
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2, (p.stdout[-1000:], p.stderr[-2000:])
    assert "--mlflow: the MLflow client is not installed: pip install 'llm-locust[mlflow]'" in p.stderr
    assert "started the simulated server" not in p.stdout and not (tmp_path / "r.json").exists()
