"""Who can control a run: the web UI and the master's port listen on this machine by default (a
warning when told otherwise without a login), only the web UI's own page may change a run's state
(no other page, no other target), the start form sets load figures only, --web-login guards every
route (ours and /metrics too) and its generated password stays out of logs; secrets (the key,
credentials in metrics URLs) are masked in every output. Real Locust processes with their real web
UI, against the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
from support import free_port, run_cli

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
    log = (tmp_path / "locust.log").read_text()
    # open to the network without a login: said once, on stderr (the loopback run before said nothing)
    assert log.count("the web UI listens on 0.0.0.0 without a login") == 1, log[-3000:]
    assert "add --web-login" in log


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


# ---- only the web UI's own page changes a run, and never its target ----

KEY = "sk-capture-0123456789-MUST-NOT-TRAVEL"


@pytest.fixture()
def capture_server():
    """A server that records every request it gets (a page's own host: the key must never reach it)."""
    import http.server
    import threading

    seen: list[dict] = []

    class Capture(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self):
            n = int(self.headers.get("Content-Length") or 0)
            seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers)})
            self.rfile.read(n)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = _any  # noqa: N815

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}", seen
    srv.shutdown()


def start_web_run(tmp_path, how: str, host: str, web: int, env: dict):
    """`llm-locust run --web` or plain `locust -f` with our closed-loop locustfile, web UI on `web`."""
    if how == "locust":
        return start_locust(tmp_path, host, "--web-port", str(web), env=env)
    log = open(tmp_path / "locust.log", "a")
    return subprocess.Popen(
        [sys.executable, "-m", "llm_locust.cli", "run", "--web", "--web-keep-open", "--web-port", str(web)]
        + ["--host", host, "-u", "1"],  # open after the Stop: the test reads its state
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("how", ["llm-locust", "locust"])
def test_no_other_page_can_start_aim_or_stop_a_run(tmp_path, sim, capture_server, how):
    """What a page the user opens elsewhere can make a browser send: refused (403), nothing starts,
    and the key never reaches the page's own server; the web UI's own page still starts and stops
    runs (old code: 200, and ~3,000 requests with the key reached the capture server)."""
    capture, seen = capture_server
    web = free_port()
    base = f"http://127.0.0.1:{web}"
    proc = start_web_run(tmp_path, how, sim.url, web, {"OPENAI_API_KEY": KEY})
    start = {"user_count": "2", "spawn_rate": "2"}
    evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    try:
        wait_for("the web UI", lambda: requests.get(base + "/llm/data", timeout=5).ok)
        attempts = [
            ("/swarm", {**start, "host": capture}, evil),  # aim the run, with the key, at the page's host
            ("/swarm", start, evil),  # or just start it
            ("/swarm", start, {"Origin": "null"}),  # a sandboxed page, or a no-referrer form
            ("/swarm", start, {"Referer": "http://evil.example/page"}),  # an old browser: no Origin
            ("/swarm", start, {"Origin": f"http://127.0.0.1:{web + 1}", "Sec-Fetch-Site": "same-site"}),
            # DNS rebinding: the page's own name resolves to this machine; same-origin for the browser
            ("/swarm", start, {"Host": f"evil.example:{web}", "Origin": f"http://evil.example:{web}"}),
            ("/stop", {}, evil),
            ("/stats/reset", {}, evil),
            # the web UI's own page, but another target: the form cannot change it
            ("/swarm", {**start, "host": capture}, {"Origin": base, "Sec-Fetch-Site": "same-origin"}),
        ]
        for path, data, headers in attempts:
            r = requests.post(base + path, data=data, headers=headers, timeout=10)
            assert r.status_code == 403, (path, headers, r.status_code, r.text)
            assert r.json()["success"] is False
        r = requests.post(
            base + "/user",
            json={"user_class_name": "ClosedLoopUser", "host": capture},
            headers={"Origin": base},
            timeout=10,
        )
        assert r.status_code == 403 and "target" in r.json()["message"], r.text
        assert requests.get(base + "/llm/data", timeout=5).json()["state"] == "ready"  # nothing started

        own = {"Origin": base, "Sec-Fetch-Site": "same-origin"}  # what the web UI's page sends
        r = requests.post(base + "/swarm", data={**start, "host": sim.url}, headers=own, timeout=10)
        assert r.status_code == 200 and r.json()["success"] is True, r.text
        wait_for("requests to the target", lambda: requests.get(base + "/llm/data", timeout=5).json()["totals"]["ok"])
        r = requests.post(base + "/stop", headers=own, timeout=10)
        assert r.status_code == 200, r.text
        wait_for("the stop", lambda: requests.get(base + "/llm/data", timeout=5).json()["state"] == "stopped")
    finally:
        stop(proc)
    assert seen == []  # not one request, so never the key
    log = (tmp_path / "locust.log").read_text()
    assert "refused POST /swarm: a cross-site request" in log and KEY not in log


def test_the_origin_rule():
    """The rule behind the test above, case by case (runtime/webui/guard.py origin_problem)."""
    from llm_locust.runtime.webui.guard import origin_problem

    names = frozenset({"localhost", "box"})

    def ok(method="POST", **headers):
        return origin_problem(method, {k.replace("_", "-"): v for k, v in headers.items()}, names) is None

    assert ok("GET", Origin="http://evil.example", Host="evil.example")  # reads change nothing
    assert ok(Host="127.0.0.1:8089")  # curl, a script: no browser headers
    assert ok(Host="127.0.0.1:8089", Origin="http://127.0.0.1:8089", Sec_Fetch_Site="same-origin")
    assert ok(Host="localhost:8089", Origin="http://localhost:8089")
    assert ok(Host="[::1]:8089", Origin="http://[::1]:8089")
    assert ok(Host="box", Origin="http://box:80")  # the scheme's default port
    assert ok(Host="10.1.2.3:8089", Referer="http://10.1.2.3:8089/llm")  # no Origin: the Referer's
    assert ok(Host="localhost:9000", Origin="http://localhost:9000")  # an SSH tunnel to another port
    assert not ok(Host="127.0.0.1:8089", Origin="http://evil.example")
    assert not ok(Host="127.0.0.1:8089", Origin="http://127.0.0.1:8089", Sec_Fetch_Site="cross-site")
    assert not ok(Host="127.0.0.1:8089", Origin="null")
    assert not ok(Host="127.0.0.1:8089", Origin="http://127.0.0.1:8090")
    assert not ok(Host="evil.example:8089", Origin="http://evil.example:8089")  # DNS rebinding
    assert not ok(Host="evil.example:8089")


def test_a_proxy_of_its_own_name_is_trusted_when_named():
    from llm_locust.runtime.webui.guard import origin_problem, trusted_origins

    headers = {"Host": "locust.example.com", "Origin": "https://locust.example.com", "Sec-Fetch-Site": "same-origin"}
    assert "add its origin to --web-origins" in origin_problem("POST", headers, frozenset())
    trusted = trusted_origins("https://locust.example.com, http://other:9000")
    assert origin_problem("POST", headers, frozenset(), trusted) is None
    assert origin_problem("POST", {**headers, "Host": "127.0.0.1:8089"}, frozenset(), trusted) is None  # Host rewritten


def test_a_generated_web_password_stays_out_of_the_log(tmp_path, sim):
    """Without LLM_LOCUST_WEB_PASSWORD and with stderr not a terminal (CI), the password goes to a
    0600 file whose path is printed; the log never holds it (old code printed it on stderr)."""
    import re
    import stat

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    web = free_port()
    env = {"XDG_RUNTIME_DIR": str(run_dir), "LLM_LOCUST_WEB_PASSWORD": "", "LLM_LOCUST_WEB_USER": "ops"}
    proc = start_locust(tmp_path, sim.url, "--web-port", str(web), "--web-login", env=env)
    base = f"http://127.0.0.1:{web}"
    try:
        wait_for("the login page", lambda: requests.get(base + "/login", timeout=5).status_code == 200)
        log = (tmp_path / "locust.log").read_text()
        m = re.search(r"web UI login: user 'ops', password in (\S+) \(readable by you only", log)
        assert m, log[-2000:]
        path = Path(m.group(1))
        assert path.parent == run_dir / "llm-locust"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        password = re.search(r"^password (\S+)$", path.read_text(), re.M).group(1)
        assert password not in log
        login = {"username": "ops", "password": password}
        r = requests.post(base + "/llm/login", data=login, headers={"Origin": "http://evil.example"}, timeout=5)
        assert r.status_code == 403  # login is a state change too: another page cannot log the browser in
        s = requests.Session()
        s.post(base + "/llm/login", data=login, headers={"Origin": base}, timeout=5)
        assert s.get(base + "/llm/data", timeout=5, allow_redirects=False).status_code == 200
    finally:
        stop(proc)
    assert not path.exists()  # removed when the process ended
    assert password not in (tmp_path / "locust.log").read_text()


# ---- credentials in the metrics URLs ----

METRICS_USER, METRICS_PW, METRICS_TOKEN, GPU_TOKEN = (
    "scraper",
    "pw-metrics-0123456789",
    "tok-metrics-abcdef",
    "gpu-tok-98765",
)


@pytest.fixture()
def guarded_metrics(sim):
    """A /metrics behind Basic auth and a query token (it relays the simulator's): 401 without both."""
    import base64
    import http.server
    import threading
    import urllib.request

    seen = []
    want = "Basic " + base64.b64encode(f"{METRICS_USER}:{METRICS_PW}".encode()).decode()

    class Guarded(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            ok = self.headers.get("Authorization") == want and f"token={METRICS_TOKEN}" in self.path
            seen.append(ok)
            body = urllib.request.urlopen(sim.url + "/metrics", timeout=5).read() if ok else b"no"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Guarded)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://{METRICS_USER}:{METRICS_PW}@127.0.0.1:{srv.server_port}/metrics?token={METRICS_TOKEN}", seen
    srv.shutdown()


def test_the_credentials_a_url_carries():
    from llm_locust.safe.masking import Secrets, url_secrets

    assert url_secrets("http://127.0.0.1:8000/metrics?format=text") == []
    assert url_secrets("http://u:p%40ss-word@h/metrics") == ["u:p%40ss-word", "u:p@ss-word", "p%40ss-word", "p@ss-word"]
    assert url_secrets("https://TOKEN-abc@h/m") == ["TOKEN-abc"]
    assert url_secrets("http://h/m?access_token=t0k%2Fen&x=1&X-Amz-Signature=abcd") == [
        "t0k/en",
        "t0k%2Fen",
        "abcd",
    ]
    mask = Secrets()
    for secret in url_secrets("http://scraper:pw-123456@h:9/metrics?token=tok-98765"):
        mask.add(secret)
    assert (
        mask.mask("read http://scraper:pw-123456@h:9/metrics?token=tok-98765")
        == "read http://***@h:9/metrics?token=***"
    )


def test_credentials_in_metrics_urls_are_used_and_masked_in_every_output(tmp_path, sim, guarded_metrics):
    """--server-metrics with user:password and a token, --gpu-metrics (unreachable) with a token: the
    scrapes authenticate, and neither credential is in the log, stdout, the results, the report or
    the record log (old code: unmasked in the log, three places of the results and the report; the
    credentials were not even sent)."""
    url, seen = guarded_metrics
    gpu = f"http://127.0.0.1:{free_port()}/metrics?access_token={GPU_TOKEN}"
    out = tmp_path
    p = run_cli(
        *("--host", sim.url, "-t", "3s", "-u", "2", "--max-tokens", "8", "--metrics-interval", "0.5"),
        *("--server-metrics", url, "--gpu-metrics", gpu),
        *("--results", str(out / "r.json"), "--report", str(out / "r.html"), "--record-log", str(out / "log.jsonl")),
        "--loglevel",
        "DEBUG",
    )
    assert p.returncode == 0, p.stderr[-3000:]
    texts = {"stdout": p.stdout, "stderr": p.stderr}
    texts.update({f.name: f.read_text(errors="replace") for f in out.iterdir() if f.is_file()})
    assert {"r.json", "r.html", "log.jsonl"} <= set(texts)
    leaks = [(name, s) for name, text in texts.items() for s in (METRICS_PW, METRICS_TOKEN, GPU_TOKEN) if s in text]
    assert leaks == []
    assert any(seen) and all(seen), seen  # every scrape sent both credentials
    import json

    doc = json.loads(texts["r.json"])
    port = url.split("@")[1].split("/")[0]
    assert doc["server_metrics"]["source"]["url"] == f"http://***@{port}/metrics?token=***"
    assert doc["server_metrics"]["source"]["samples"] > 0 and doc["server_metrics"]["source"]["failed"] == 0
    assert "access_token=***" in doc["gpu_metrics"]["source"]["url"]
    assert "no GPU metrics" in p.stderr or "access_token=***" in p.stderr  # the unreachable one was named, masked


MLFLOW_PW, MLFLOW_TOKEN = "mlflow-pw-5a7c", "mlflow-tok-91e3"


def test_every_file_is_written_through_the_mask(tmp_path, monkeypatch):
    """report.files.write_atomic is the one writer of the files a run hands around (results, report,
    combined results, JUnit, compare, export): what it writes is masked, text and bytes alike, with
    the credentials a URL setting carries registered when the settings are read (old code: the
    settings registered nothing, and write_atomic wrote what it was given)."""
    from llm_locust.report.files import write_atomic
    from llm_locust.report.results import write_results
    from llm_locust.safe import masking
    from llm_locust.settings import derive

    monkeypatch.setattr(masking, "SECRETS", masking.Secrets())  # this test's registrations only
    uri = f"http://alice:{MLFLOW_PW}@127.0.0.1:9/?token={MLFLOW_TOKEN}&x=1"
    parser = derive.run_parser()
    derive.resolve(None, derive.cli_values(parser.parse_known_args(["--mlflow", uri])[0]))
    write_atomic(tmp_path / "a.html", f"<pre>{uri}</pre>")
    write_atomic(tmp_path / "b.txt", uri.encode())
    write_results(tmp_path / "r.json", {"run": {"command": ["llm-locust", "run", "--mlflow", uri]}})
    masked = "http://***@127.0.0.1:9/?token=***&x=1"
    assert (tmp_path / "a.html").read_text() == f"<pre>{masked}</pre>"
    assert (tmp_path / "b.txt").read_text() == masked
    assert f'"{masked}"' in (tmp_path / "r.json").read_text()


def test_a_url_is_shown_without_its_credentials_whatever_their_length():
    """The one-line form of a URL (MLflow's lines): userinfo and credential-named query values
    masked even when too short to register (old code: `?token=` was shown as it came)."""
    from llm_locust.safe.masking import redact_url

    assert (
        redact_url("http://u:p@h:5/x?token=T&a=1&X-Amz-Signature=s#f")
        == "http://***@h:5/x?token=***&a=1&X-Amz-Signature=***#f"
    )
    assert redact_url("failed at https://k@h/?api_key=zz (Connection refused)") == (
        "failed at https://***@h/?api_key=*** (Connection refused)"
    )
    assert redact_url("http://127.0.0.1:5000/?page=2") == "http://127.0.0.1:5000/?page=2"


def test_credentials_in_the_mlflow_uri_stay_out_of_every_output(tmp_path, sim):
    """--mlflow with user:password and ?token= against a tracking server that is down: neither is in
    the results (run.command, plan.mlflow.uri), the report's reproduce command, the record log,
    stdout or stderr; the failure line shows the URI masked (old code: all in clear but the failure
    line's password)."""
    try:
        import mlflow  # noqa: F401 - the run refuses --mlflow without its client
    except ImportError:
        from support import missing

        missing("the mlflow client (the `mlflow` extra: pip install -e '.[test]')")
    port = free_port()
    uri = f"http://alice:{MLFLOW_PW}@127.0.0.1:{port}/?token={MLFLOW_TOKEN}"
    out = tmp_path
    p = run_cli(
        *("--host", sim.url, "-t", "2s", "-u", "2", "--max-tokens", "8", "--mlflow", uri, "--mlflow-timeout", "20s"),
        *("--results", str(out / "r.json"), "--report", str(out / "r.html"), "--record-log", str(out / "log.jsonl")),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    texts = {"stdout": p.stdout, "stderr": p.stderr}
    texts.update({f.name: f.read_text(errors="replace") for f in out.iterdir() if f.is_file()})
    assert {"r.json", "r.html", "log.jsonl"} <= set(texts)
    leaks = [(name, s) for name, text in texts.items() for s in (MLFLOW_PW, MLFLOW_TOKEN) if s in text]
    assert leaks == []
    import json

    masked = f"http://***@127.0.0.1:{port}/?token=***"
    doc = json.loads(texts["r.json"])
    assert doc["plan"]["mlflow"]["uri"] == masked
    command = doc["run"]["command"]
    assert command[command.index("--mlflow") + 1] in (masked, "***")  # masked, not dropped
    assert "--mlflow" in texts["r.html"]  # the reproduce command, as the results say it
    assert f"llm-locust: MLflow logging to {masked} failed (Connection refused)" in p.stderr, p.stderr[-2000:]
