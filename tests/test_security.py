"""Who can control a run: the web UI and the master's port listen on this machine by default, the
start form sets load figures only, and --web-login guards every route (ours and /metrics too).
Real Locust processes with their real web UI, against the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
from support import free_port

LOCUSTFILE = Path(__file__).resolve().parents[1] / "llm_locust" / "locustfiles" / "closed.py"


def wait_for(what, fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, requests.RequestException) as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def listening(pid: int) -> dict[int, str]:
    """{port: address} of the TCP sockets the process listens on."""
    out = {}
    for c in psutil.Process(pid).net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN:
            out[c.laddr.port] = c.laddr.ip
    return out


@pytest.fixture()
def sim(sims):
    return sims(slots=2)


def start_locust(tmp_path, host, *options, env=None):
    log = open(tmp_path / "locust.log", "a")
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", host, *options],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_web_ui_and_worker_port_listen_on_loopback_unless_told(tmp_path, sim):
    web, master = free_port(), free_port()
    proc = start_locust(tmp_path, sim.url, "--master", "--web-port", str(web), "--master-bind-port", str(master))
    try:
        ports = wait_for("both ports", lambda: (lambda p: p if web in p and master in p else None)(listening(proc.pid)))
        assert ports[web] == "127.0.0.1" and ports[master] == "127.0.0.1"
    finally:
        stop(proc)
    web = free_port()
    proc = start_locust(tmp_path, sim.url, "--web-port", str(web), "--web-host", "0.0.0.0")
    try:
        assert wait_for("the web port", lambda: listening(proc.pid).get(web)) == "0.0.0.0"  # asked for: given
    finally:
        stop(proc)


def test_the_start_form_sets_load_figures_only(tmp_path, sim):
    web = free_port()
    proc = start_locust(tmp_path, sim.url, "--web-port", str(web))
    base = f"http://127.0.0.1:{web}"
    try:
        wait_for("the web UI", lambda: requests.get(base + "/llm/data", timeout=5).ok)
        for field, value in (
            ("api_key_env", "HOME"),
            ("trace", "/etc/passwd"),
            ("record_log", str(tmp_path / "x")),
            ("results", str(tmp_path / "r.json")),
        ):
            r = requests.post(base + "/swarm", data={"user_count": "1", "spawn_rate": "1", field: value}, timeout=10)
            assert r.status_code == 403 and field in r.json()["message"], (field, r.text)
        assert requests.get(base + "/llm/data", timeout=5).json()["state"] == "ready"  # nothing started
        assert not (tmp_path / "x").exists()
        r = requests.post(
            base + "/swarm", data={"user_count": "1", "spawn_rate": "1", "host": sim.url, "run_time": "2s"}, timeout=10
        )
        assert r.status_code == 200 and r.json()["success"] is True
    finally:
        stop(proc)


def test_web_login_guards_every_route_with_the_bundled_locustfiles(tmp_path, sim):
    web = free_port()
    proc = start_locust(
        tmp_path,
        sim.url,
        "--web-port",
        str(web),
        "--web-login",
        env={"LLM_LOCUST_WEB_PASSWORD": "pw-123", "LLM_LOCUST_WEB_USER": "ops"},
    )
    base = f"http://127.0.0.1:{web}"
    try:
        wait_for("the login page", lambda: requests.get(base + "/login", timeout=5).status_code == 200)
        anon = requests.Session()
        for route in ("/", "/llm", "/llm/data", "/metrics", "/stats/requests", "/logs"):
            r = anon.get(base + route, timeout=5, allow_redirects=False)
            assert r.status_code in (302, 401), (route, r.status_code)
            assert "secret key" not in r.text.lower()
        r = anon.post(base + "/swarm", data={"user_count": "1", "spawn_rate": "1"}, timeout=5, allow_redirects=False)
        assert r.status_code in (302, 401)
        bad = requests.Session()
        bad.post(base + "/llm/login", data={"username": "ops", "password": "nope"}, timeout=5)
        assert bad.get(base + "/llm/data", timeout=5, allow_redirects=False).status_code in (302, 401)
        ok = requests.Session()
        ok.post(base + "/llm/login", data={"username": "ops", "password": "pw-123"}, timeout=5)
        assert ok.get(base + "/llm/data", timeout=5, allow_redirects=False).status_code == 200
        assert ok.get(base + "/metrics", timeout=5, allow_redirects=False).status_code == 200
    finally:
        stop(proc)


SECRET = "sk-echo-0123456789abcdef-NEVER-SHOWN"


@pytest.fixture()
def echo_server():
    """A server that echoes the Authorization header in its error replies (a 401 body)."""
    import http.server
    import json as _json
    import threading

    class Echo(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code, body):
            raw = _json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):  # noqa: N802
            self._send(200, {"data": [{"id": "m"}]})

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(401, {"error": {"message": f"invalid key: {self.headers.get('Authorization')}"}})

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


def test_a_key_the_server_echoes_is_masked_in_every_output(tmp_path, echo_server):
    out = tmp_path
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "--host",
            echo_server,
            "-t",
            "3s",
            "-u",
            "2",
            "--api-key-env",
            "MY_KEY",
            "--results",
            str(out / "r.json"),
            "--report",
            str(out / "r.html"),
            "--record-log",
            str(out / "log.jsonl"),
            "--csv",
            str(out / "c"),
            "--html",
            str(out / "l.html"),
            "--loglevel",
            "DEBUG",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MY_KEY": SECRET},
    )
    texts = {"stdout": p.stdout, "stderr": p.stderr}
    for f in out.iterdir():
        if f.is_file():
            texts[f.name] = f.read_text(errors="replace")
    assert "log.jsonl" in texts and "c_failures.csv" in texts and "l.html" in texts and "r.html" in texts
    assert "invalid key: Bearer ***" in texts["log.jsonl"]  # the echo happened, and was masked
    assert "Bearer ***" in texts["c_failures.csv"]
    leaks = [name for name, text in texts.items() if SECRET in text]
    assert leaks == []


def test_credentials_in_the_host_url_are_refused_without_echoing_them():
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", f"http://user:{SECRET}@127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "credentials in the URL" in p.stderr
    assert SECRET not in p.stdout + p.stderr


def test_web_routes_mask_an_echoed_key(tmp_path, echo_server):
    web = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--host",
            echo_server,
            "--web-port",
            str(web),
            "--autostart",
            "-u",
            "1",
            "-r",
            "1",
            "--api-key-env",
            "MY_KEY",
        ],
        stdout=open(tmp_path / "locust.log", "w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "MY_KEY": SECRET},
    )
    base = f"http://127.0.0.1:{web}"
    try:
        wait_for("a failure row", lambda: "***" in requests.get(base + "/stats/failures/csv", timeout=5).text)
        for route in ("/stats/requests", "/stats/failures/csv", "/llm/data", "/exceptions", "/logs", "/metrics"):
            text = requests.get(base + route, timeout=5).text
            assert SECRET not in text, route
    finally:
        stop(proc)
    assert SECRET not in (tmp_path / "locust.log").read_text()
