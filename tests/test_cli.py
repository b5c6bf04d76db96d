"""`llm-locust run` as a user runs it: real processes, the simulator, Locust underneath."""

import json
import subprocess
import sys
import time

import pytest
from support import free_port, run_cli

from llm_locust.sim.process import SimProcess

SECRET = "sk-test-0123456789abcdef-DO-NOT-LOG"


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
            "--host",
            sim.url,
            "-t",
            "3s",
            "-u",
            "2",
            "--results",
            str(results),
            "--record-log",
            str(log),
            "--api-key-env",
            "MY_KEY",
            "--loglevel",
            "DEBUG",
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


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-u", "0"], "-u/--users: Input should be greater than or equal to 1"),
        (["-u", "-3"], "-u/--users: Input should be greater than or equal to 1"),
        (["--replay", "--speed", "0"], "--speed: Input should be greater than 0"),
        (["--ladder", "concurrency:1..4", "--warmup", "1m"], "--warmup: 60 s is not shorter than the step duration"),
        (["--slo", "ttft=500"], "--slo: ttft=500 would be 500 seconds"),
    ],
)
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
    assert "ladder: stepped load, each step's timing and the early stop:" in p.stdout
    assert "[plan: ladder.warmup]" in p.stdout


def test_a_plan_runs_with_its_name_and_a_results_file_runs_it_again(tmp_path):
    """Plan keys the first round dropped reach the run; `run RESULTS.json` repeats the same plan;
    a ladder run is not told that options it never gave will be ignored."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "name: tiny ladder\ndescription: two short steps\n"
        "workload: {synthetic: {requests: 50, input: 32, output: 8, seed: 2}}\n"
        "ladder: {kind: concurrency, steps: [1, 2], duration: 3s, warmup: 1s, stable: {window: 1s, windows: 2}}\n"
        "early_stop: {flat_steps: 0, on_slo: true}\nsim: {slots: 4}\nresults: r.json\nreport: r.html\n"
    )
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", str(plan)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "will be ignored" not in p.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["run"]["name"] == "tiny ladder" and r["plan"]["name"] == "tiny ladder"
    assert r["plan"]["early_stop"]["flat_steps"] == 0 and r["plan"]["early_stop"]["on_slo"] is True
    assert r["plan"]["ladder"]["stable"]["windows"] == 2 and r["plan"]["sim"]["slots"] == 4
    assert "tiny ladder" in (tmp_path / "r.html").read_text()
    assert (tmp_path / "r.workload.jsonl").is_file()  # a plan's synthetic workload lies beside its results
    # again from the results file, written elsewhere: the same effective plan
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "r.json", "--results", "again.json", "--report", "again.html"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
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
    p = run_cli(
        "--host",
        "http://127.0.0.1:9",
        "-t",
        "2s",
        "-u",
        "2",
        "--model",
        "m",
        "--results",
        str(results),
        "--no-preflight",
        "--no-fail-fast",
    )
    assert p.returncode == 1  # the error rate is above --max-error-rate (both sides: test_outcome.py)
    s = json.loads(results.read_text())["summary"]
    assert s["ok"] == 0 and s["outcomes"]["connect_error"] == s["failed"] > 0
    assert "connect_error" in p.stdout


def test_a_dead_host_is_refused_before_any_load_in_one_line(tmp_path):
    """The first round sent 24,466 connection attempts in 5 s at 100% CPU."""
    results = tmp_path / "r.json"
    p = run_cli("--host", "http://127.0.0.1:9", "-t", "30s", "--results", str(results), timeout=60)
    assert p.returncode == 3
    assert "cannot reach http://127.0.0.1:9/v1/models" in p.stderr and "Traceback" not in p.stderr
    assert not results.exists()


@pytest.fixture()
def not_an_llm_server():
    import http.server
    import threading

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    srv.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


def test_a_non_llm_server_and_a_host_ending_in_v1_get_a_hint(not_an_llm_server):
    p = run_cli("--host", not_an_llm_server, "-t", "30s", timeout=60)
    assert p.returncode == 3 and "answered with an HTML page (HTTP 404)" in p.stderr
    p = run_cli("--host", not_an_llm_server + "/v1", "-t", "30s", timeout=60)
    assert p.returncode == 2 and "drop /v1 from --host" in p.stderr


def test_fail_fast_stops_a_run_whose_every_request_fails(tmp_path, not_an_llm_server):
    results = tmp_path / "r.json"
    p = run_cli(
        "--host",
        not_an_llm_server,
        "--no-preflight",
        "-t",
        "60s",
        "--results",
        str(results),
        "--fail-fast-after",
        "10",
        timeout=90,
    )
    assert p.returncode == 3
    assert "stopping early: the first" in p.stderr and "requests all failed (http_error" in p.stderr
    s = json.loads(results.read_text())["summary"]
    assert s["ok"] == 0 and s["failed"] >= 10
    assert s["sent"] == s["ok"] + s["failed"] + s["cancelled"] + s.get("lost", 0)


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
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llm_locust.cli",
                "gpu-sidecar",
                "--fake",
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in p.stderr and "Traceback" not in p.stderr


@pytest.fixture()
def big_event_server():
    """One 4 KiB chat event per reply."""
    import http.server
    import threading

    event = json.dumps({"choices": [{"index": 0, "delta": {"content": "x" * 4096}}]})
    body = f"data: {event}\n\ndata: [DONE]\n\n".encode()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


def test_the_event_size_limit_reaches_the_client(tmp_path, big_event_server):
    def outcomes(*extra):
        results = tmp_path / "r.json"
        p = run_cli(
            "--host",
            big_event_server,
            "--model",
            "m",
            "--no-preflight",
            "--no-fail-fast",
            "-t",
            "2s",
            "-u",
            "1",
            "--max-tokens",
            "1",
            "--results",
            str(results),
            *extra,
        )
        assert p.returncode in (0, 1), p.stderr[-2000:]
        return json.loads(results.read_text())["summary"]["outcomes"]

    assert outcomes()["stream_error"] == 0
    limited = outcomes("--max-event-bytes", "2048")
    assert limited["ok"] == 0 and limited["stream_error"] > 0


def test_web_waits_for_start_on_loopback(tmp_path):
    """The first round bound 0.0.0.0 and started the test at once."""
    import psutil
    import requests

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.cli", "run", "--web", "--web-port", str(port)],
        stdout=open(tmp_path / "out.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        state = None
        while time.monotonic() < deadline and state is None:
            try:
                state = requests.get(f"http://127.0.0.1:{port}/llm/data", timeout=5).json()["state"]
            except (requests.RequestException, ValueError):
                time.sleep(0.2)  # polling until the web UI answers, bounded by the deadline
        assert state == "ready"
        addresses = {
            c.laddr.ip
            for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            for c in p.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        }
        assert addresses == {"127.0.0.1"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages", "sglang-generate"])
def test_the_new_apis_run_end_to_end_against_the_simulator(tmp_path, api):
    results = tmp_path / "r.json"
    p = run_cli("--api", api, "-t", "3s", "-u", "2", "--max-tokens", "16", "--results", str(results))
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(results.read_text())["summary"]
    assert s["ok"] > 0 and s["failed"] == 0
    assert s["length_mismatch"] == 0 and s["length_checked"] == s["ok"]  # 16 tokens each, by the server's count


def test_anthropic_requests_carry_the_key_as_that_api_takes_it(tmp_path):
    import http.server
    import threading

    seen = []
    body = (
        b"event: message_start\n"
        b'data: {"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":0}}}\n\n'
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n'
        b"event: message_delta\n"
        b'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":1}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            seen.append(dict(self.headers))
            raw = b'{"data": [{"id": "m"}]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(dict(self.headers))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = run_cli(
            "--host",
            f"http://127.0.0.1:{srv.server_port}",
            "--api",
            "anthropic-messages",
            "-t",
            "2s",
            "-u",
            "1",
            "--api-key-env",
            "MY_KEY",
            "--max-tokens",
            "1",
            env={"MY_KEY": SECRET},
        )
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr[-2000:]
    posts = [h for h in seen if h.get("Content-Type") == "application/json"]
    assert posts and all(h.get("x-api-key") == SECRET and h.get("anthropic-version") for h in posts)
    assert not any("Authorization" in h for h in posts)
    assert SECRET not in p.stdout + p.stderr


def test_an_api_the_server_does_not_serve_is_named_at_preflight(tmp_path):
    """A server with /v1/models but no /v1/responses (an older vLLM): one line naming the API and
    the endpoint, exit 3, nothing sent."""
    import http.server
    import threading

    posts = []

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code, raw):
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):  # noqa: N802
            self._send(200, b'{"data": [{"id": "m"}]}')

        def do_POST(self):  # noqa: N802
            posts.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self._send(404, b'{"detail": "Not Found"}')

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = run_cli(
            "--host", f"http://127.0.0.1:{srv.server_port}", "--api", "openai-responses", "-t", "30s", timeout=60
        )
    finally:
        srv.shutdown()
    assert p.returncode == 3
    assert "/v1/responses answered 404: the server does not serve the openai-responses API" in p.stderr
    assert posts == [b"{}"]  # the probe only: no load
