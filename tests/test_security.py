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

from llm_locust.sim.process import SimProcess

LOCUSTFILE = Path(__file__).resolve().parents[1] / "llm_locust" / "locustfiles" / "closed.py"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
def sim():
    with SimProcess(slots=2) as s:
        yield s


def start_locust(tmp_path, host, *options, env=None):
    log = open(tmp_path / "locust.log", "a")
    return subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", host, *options],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


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
        for field, value in (("api_key_env", "HOME"), ("trace", "/etc/passwd"), ("record_log", str(tmp_path / "x")),
                             ("results", str(tmp_path / "r.json"))):
            r = requests.post(base + "/swarm", data={"user_count": "1", "spawn_rate": "1", field: value}, timeout=10)
            assert r.status_code == 403 and field in r.json()["message"], (field, r.text)
        assert requests.get(base + "/llm/data", timeout=5).json()["state"] == "ready"  # nothing started
        assert not (tmp_path / "x").exists()
        r = requests.post(base + "/swarm", data={"user_count": "1", "spawn_rate": "1", "host": sim.url, "run_time": "2s"},
                          timeout=10)
        assert r.status_code == 200 and r.json()["success"] is True
    finally:
        stop(proc)


def test_web_login_guards_every_route_with_the_bundled_locustfiles(tmp_path, sim):
    web = free_port()
    proc = start_locust(tmp_path, sim.url, "--web-port", str(web), "--web-login",
                        env={"LLM_LOCUST_WEB_PASSWORD": "pw-123", "LLM_LOCUST_WEB_USER": "ops"})
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
