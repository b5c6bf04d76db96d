"""tests/forkserver.py: the CLI runs of the tests are processes forked from one that imported the
CLI already. Each must still be what `python -m llm_locust.cli` in a subprocess would be: its own
process, its arguments, environment, working directory and outputs, its exit status, a timeout
that kills it, and gevent's loop of its own with a clock read now (a stale one made Locust's
--run-time end a run at once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forkserver_client import ForkServer
from support import ROOT, cli_process

from llm_locust.sim.process import SimProcess

pytestmark = pytest.mark.slow  # it starts processes

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def server():
    srv = ForkServer(TESTS / "forkserver.py")
    yield srv
    srv.stop()


def _probe(server: ForkServer, *args: str, env: dict | None = None, cwd: Path = ROOT, timeout: float = 60):
    full = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
    return server.run(["probe", *args], list(args), full, str(cwd), timeout, module="forkserver_probe")


def test_a_forked_run_is_its_own_process_with_its_own_arguments_environment_and_outputs(server, tmp_path):
    time.sleep(0.5)  # the server idle a while: a clock left as the server last read it shows
    a = _probe(server, "sleep", "0.3", "3", env={"PROBE_A": "1"}, cwd=tmp_path)
    b = _probe(server, "0", env={"PROBE_B": "2"})
    assert (a.returncode, b.returncode) == (3, 0)
    fa, fb = json.loads(a.stdout), json.loads(b.stdout)
    assert a.stderr == b.stderr == "on stderr\n"
    assert fa["pid"] != fb["pid"] and server.proc.pid not in (fa["pid"], fb["pid"], os.getpid())
    assert fa["argv"] == ["sleep", "0.3", "3"] and fb["argv"] == ["0"]
    assert fa["env"] == {"PROBE_A": "1", "PROBE_B": None} and fb["env"] == {"PROBE_A": None, "PROBE_B": "2"}
    assert fa["cwd"] == fa["path0"] == str(tmp_path) and fb["cwd"] == str(ROOT)  # as `python -m` in that folder
    assert fa["preloaded"]  # what the server imported is not imported again
    # the loop's clock read at the fork, not at the server's start (>= 0.5 s ago): 0.4 s leaves room
    # for the probe's own import on a loaded machine
    assert abs(fa["loop_lag"]) < 0.4 and abs(fb["loop_lag"]) < 0.4, (fa, fb)
    assert fa["slept"] >= 0.3


def test_a_timeout_kills_the_run_and_says_so_as_subprocess_does(server):
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        _probe(server, "sleep", "60", timeout=1)
    assert time.monotonic() - t0 < 30
    assert e.value.timeout == 1 and e.value.cmd == ["probe", "sleep", "60"]
    # and the server goes on
    assert _probe(server, "5").returncode == 5


def test_the_cli_through_the_server_runs_for_its_run_time_and_writes_where_it_is_told(tmp_path):
    """The real CLI, through the test suite's server (support.cli_process): a 2 s run lasts 2 s
    (not ended at once by a stale loop clock), writes its results relative to its working
    directory and exits 0; a usage error exits 2 with the message on stderr."""
    bad = cli_process("run", "--ladder", "concurrency:8..2", "--host", "http://127.0.0.1:9")
    assert bad.returncode == 2 and "start 8 > stop 2" in bad.stderr and not bad.stdout
    time.sleep(2.5)  # the server idle past the run's 2 s: a clock left stale would end the run at once
    with SimProcess() as sim:  # a server given: no simulator started first, whose wait reads the clock
        t0 = time.monotonic()
        argv = ("--host", sim.url, "--model", "m", "--no-preflight", "-t", "2s", "-u", "2", "--results", "r.json")
        p = cli_process("run", *argv, cwd=tmp_path)  # no preflight: no wait reads the clock first
        took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["summary"]["ok"] > 0 and took >= 2.0
    # a stale clock ended such a run after 75 ms; started_at is taken in test_start's listeners,
    # which run after Locust's run-time timer has started: 1.77 s of 2 s in a fresh-clone run's
    # slow tier (four shards on 2 cores)
    assert doc["run"]["ended_at"] - doc["run"]["started_at"] >= 1.0, doc["run"]


def test_the_server_leaves_when_its_pytest_process_does(tmp_path):
    """A server whose parent is gone exits by itself: none is left behind by a killed pytest."""
    script = tmp_path / "parent.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "from forkserver_client import ForkServer\n"
        "from pathlib import Path\n"
        f"s = ForkServer(Path({str(TESTS / 'forkserver.py')!r}))\n"
        "print(s.proc.pid, flush=True)\n"
        "import os; os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") and _state(pid) != "Z":
        time.sleep(0.1)  # poll, bounded: the server checks for its parent every 0.5 s
    assert not os.path.exists(f"/proc/{pid}") or _state(pid) == "Z", f"server {pid} still running"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
