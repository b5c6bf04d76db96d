"""What many test modules need, written once: free ports, the CLI in a process of its own (run,
checked, in the background; forked from one that imported it: tests/forkserver.py) and what a
run wrote (its record log), a Locust master with its worker processes (`Cluster`), polling an
exporter, clients for a URL, canned HTTP replies, and data from ``../shared`` that must not go
missing in CI.

Plain functions, no fixtures (those live in conftest.py); tests/ is on sys.path, so a test
module says ``from support import run_cli, stream_client``. Real inference servers have their own
module (realservers.py).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the repository
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = ROOT.parent / "shared"  # the project's shared data beside the repository (CI has it)
STREAMING_LOCUSTFILE = ROOT / "locustfiles" / "streaming.py"


def in_ci() -> bool:
    """CI is set: a test that needs a real part must fail, not skip, when the part is missing."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(what: str) -> None:
    """Skip locally, fail under CI: a test that CI skips without saying so cannot fail."""
    if in_ci():
        pytest.fail(f"CI is set, so this test must run, but {what}", pytrace=False)
    pytest.skip(what)


def shared_file(relative: str) -> Path:
    """A file of ``../shared`` (e.g. ``traces/azure2023_conv.csv``): skipped locally when absent,
    a failure under CI."""
    path = SHARED / relative
    if not path.exists():
        missing(f"{path} is missing (the project's shared data beside the repository)")
    return path


def need_binary(binary: str, install: str = "apt-get install -y prometheus") -> str:
    """The path of a program a test needs: skip locally when it is missing, fail in CI."""
    import shutil

    path = shutil.which(binary)
    if path is None:
        missing(f"{binary} not found ({install})")
    assert path is not None
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller must tolerate a rare race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def cli_argv(*args) -> list[str]:
    """The command line of ``llm-locust ARGS`` run by this Python (paths and numbers as strings)."""
    return [sys.executable, "-m", "llm_locust.cli", *map(str, args)]


def cli_process(*args, env: dict | None = None, timeout: float = 120, cwd: Path | str | None = None, **kw):
    """``llm-locust ARGS`` in a process of its own, in the repository unless `cwd` says otherwise;
    its output captured as text (a subprocess.CompletedProcess). The process is forked from one
    that has imported the CLI already (tests/forkserver.py: ~1.3 s of CPU saved a run), unless
    `kw` asks for more than subprocess.run's basics or LLM_LOCUST_TEST_FORK=0."""
    full_env = {**os.environ, **(env or {})}
    if kw or os.environ.get(FORK_ENV, "1") == "0":
        return subprocess.run(
            cli_argv(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=full_env, **kw
        )
    return _forkserver().run(cli_argv(*args), [str(a) for a in args], full_env, str(cwd or ROOT), timeout)


FORK_ENV = "LLM_LOCUST_TEST_FORK"  # "0": every CLI call a fresh interpreter (subprocess.run)
_FORKSERVER: list = []  # this pytest process's server, started at its first call


def _forkserver():
    if not _FORKSERVER:
        import forkserver_client

        _FORKSERVER.append(forkserver_client.ForkServer(ROOT / "tests" / "forkserver.py"))
    return _FORKSERVER[0]


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path | str | None = None, **kw):
    """``llm-locust run ARGS`` in a subprocess (see cli_process)."""
    return cli_process("run", *args, env=env, timeout=timeout, cwd=cwd, **kw)


def run_ok(*args: str, rc: tuple[int, ...] = (0,), timeout: float = 120, **kw):
    """``llm-locust run ARGS`` (run_cli) that must end with an exit status in `rc`: the assertion
    shows the status and the last 3,000 characters of its stdout and of its stderr. Written once
    for the many tests that run, check the status, then read what the run wrote."""
    p = run_cli(*args, timeout=timeout, **kw)
    assert p.returncode in rc, f"llm-locust run exited with {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def start_run(*args: str, **popen) -> subprocess.Popen:
    """``llm-locust run ARGS`` in the background, in the repository unless `popen` says otherwise
    (`popen`: Popen's stdout, stderr, text ...), for a test that acts while the run goes: scrapes
    its exporter, stops a server under it. The caller waits for it."""
    popen.setdefault("cwd", ROOT)
    return subprocess.Popen(cli_argv("run", *args), **popen)


def stream_record(
    i: int = 0,
    *,
    tokens: int = 20,
    ttft: float = 0.1,
    gap: float = 0.01,
    together: tuple[int, ...] = (),
    ok: bool = True,
    api: str = "openai-completions",
    **fields,
):
    """A request record built in process (metrics/records.py RequestRecord), for the tests that feed
    an Aggregate, a hub or the end of a run without a server: request `i` sent at 100 + i s, its
    first of `tokens` tokens after `ttft` s, then one every `gap` s (those at the indexes in
    `together` read with the one before: a gap of 0), its end 1 ms after the last. A failed one
    (`ok=False`) is an HTTP 500 with no token. `fields` set any other field (step, clock, extra ...)."""
    from llm_locust.metrics.records import Outcome, RequestRecord

    t0 = 100.0 + i
    times: list[float] = []
    for k in range(tokens if ok else 0):
        times.append(t0 + ttft if k == 0 else times[-1] + (0.0 if k in together else gap))
    rec = RequestRecord(
        request_id=str(i),
        api=api,
        t_sched=t0,
        t_sent=t0,
        wall_sent=1_800_000_000.0 + t0,
        t_first=times[0] if times else None,
        t_end=(times[-1] if times else t0) + 0.001,
        chunk_times=times,
        chunk_tokens=[1] * len(times),
        n_out=len(times),
        n_out_source="usage",
        outcome=Outcome.OK if ok else Outcome.HTTP_ERROR,
        status=200 if ok else 500,
        error=None if ok else "HTTP 500",
    )
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def read_jsonl(path: Path | str) -> list[dict]:
    """Every line of a JSONL file (a record log, a token log, a trace; gzipped when its name ends
    in .gz) as a dict, blank lines skipped."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_records(log: Path | str, files: str = "*") -> list[dict]:
    """The records a run wrote to its record log LOG: those of every file ``LOG*`` in name order
    (LOG itself, and LOG.workerN for each worker process of a run with workers);
    ``files=".worker*"``: the workers' files only."""
    return [r for path in sorted(glob.glob(f"{log}{files}")) for r in read_jsonl(path)]


def scrape_until(
    port: int | str, predicate: Callable[[str], bool], timeout: float, every: float, read_timeout: float = 2.0
) -> tuple[bool, str]:
    """Read http://127.0.0.1:PORT/metrics every `every` s until `predicate(text)` holds or `timeout`
    s have passed: (whether it held, the last text read, "" if none). For an exporter whose figures
    come in as a run goes (a master's, from its workers' reports); the caller says what a timeout
    means."""
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=read_timeout) as r:
                text = r.read().decode()
        except OSError:
            pass  # not serving yet
        else:
            if predicate(text):
                return True, text
        time.sleep(every)  # polling an HTTP endpoint, bounded by the deadline
    return False, text


class Cluster:
    """A Locust master (``python -m locust --master --headless``) and its worker processes, started
    apart as on several hosts, against the repository's streaming locustfile unless told. Written
    once for the tests that act on one of them mid-run (kill, stop or pause a worker, start one
    late): each needs the same ports, processes, polling and clean-up.

    `master_args` are the test's own (``--expect-workers``, ``-u``, ``-t``, ``--host``,
    ``--results`` ...); the master also gets its bind port, ``--only-summary`` and an exporter on a
    free port, which `wait_until` and `wait_reported` poll. `workers` start at once (their output
    discarded); `add_worker` starts another. Used as a context manager: on leaving, every worker is
    killed and waited for (30 s each), and so is a master still running (a test that failed)::

        with Cluster("--expect-workers", "2", "-u", "4", ..., workers=2) as c:
            c.wait_reported(2)
            c.workers[0].kill()
            rc, out = c.finish()
    """

    def __init__(self, *master_args: str, workers: int = 2, locustfile: Path | str = STREAMING_LOCUSTFILE):
        self.locustfile = str(locustfile)
        self.master_port, self.exporter_port = str(free_port()), str(free_port())
        self.master = subprocess.Popen(
            [
                *(sys.executable, "-m", "locust", "-f", self.locustfile, "--master", "--headless", *master_args),
                *("--master-bind-port", self.master_port, "--only-summary", "--prometheus-port", self.exporter_port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.workers: list[subprocess.Popen] = []
        for _ in range(workers):
            self.add_worker()

    def add_worker(self) -> subprocess.Popen:
        """One more worker process for this master (its output discarded)."""
        worker = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", self.locustfile, "--worker", "--master-port", self.master_port],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.workers.append(worker)
        return worker

    def wait_until(self, predicate: Callable[[str], bool], timeout: float = 40) -> tuple[bool, str]:
        """Poll the master's exporter every 0.3 s until `predicate(its text)` holds (see scrape_until)."""
        return scrape_until(self.exporter_port, predicate, timeout=timeout, every=0.3)

    def wait_reported(self, n: int, timeout: float = 40) -> None:
        """Until `n` workers have each reported finished requests to the master (its exporter's
        llm_locust_worker_finished_requests); an AssertionError after `timeout` s."""

        def reported(text: str) -> bool:
            pattern = r"^llm_locust_worker_finished_requests\{[^}]*\} (\S+)$"
            done = [float(v) for v in re.findall(pattern, text, re.M)]
            return len(done) == n and min(done) > 0

        held, text = self.wait_until(reported, timeout)
        if not held:
            raise AssertionError(f"workers never reported:\n{text[-1500:]}")

    def finish(self, timeout: float = 90) -> tuple[int, str]:
        """Wait for the master to end: (its exit status, its output: stdout and stderr together)."""
        out, _ = self.master.communicate(timeout=timeout)
        return self.master.returncode, out

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        for worker in self.workers:
            worker.kill()
            worker.wait(timeout=30)
        if self.master.poll() is None:
            self.master.kill()
            self.master.wait(timeout=30)


def stream_client(
    url: str,
    api: str = "openai-chat",
    *,
    headers: dict | None = None,
    timeouts=None,
    keep_text: bool = True,
    concurrency: int = 20,
    api_key: str | None = None,
    network_timeout: float = 5.0,
    token_reads: bool = True,
    pump: bool = True,
):
    """The runtime's streaming client for `url` and `api`: 2 s to connect, 5 s without progress and
    10 s in all unless `timeouts` says otherwise; `api_key` adds the API's own auth headers;
    `token_reads` and `pump` choose its body reader (transport/bodies.py)."""
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_adapter
    from llm_locust.transport.http import StreamClient, Timeouts

    adapter = get_adapter(api)
    head = None
    if api_key is not None:
        from llm_locust.protocols import request_headers

        head = request_headers(adapter, api_key)
    if headers:
        head = {**(head or {}), **headers}
    connect = timeouts.connect if timeouts else 2.0
    http = HTTPClient.from_url(
        url, concurrency=concurrency, connection_timeout=connect, network_timeout=network_timeout
    )
    return StreamClient(
        http, url, adapter, timeouts or Timeouts(2.0, 5.0, 10.0), head, keep_text, token_reads=token_reads, pump=pump
    )


def json_client(url: str, kind: str = "openai-embeddings", *, timeouts=None, limits=None, concurrency: int = 4):
    """The runtime's client for one-reply JSON APIs (embeddings, rerank, score)."""
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_json_adapter
    from llm_locust.transport.http import JSONClient, Timeouts

    timeouts = timeouts or Timeouts(2.0, 5.0, 10.0)
    http = HTTPClient.from_url(
        url, concurrency=concurrency, connection_timeout=timeouts.connect, network_timeout=timeouts.no_progress
    )
    return JSONClient(http, url, get_json_adapter(kind), timeouts, limits=limits)


def sse_reply(body: bytes, extra: bytes = b"", ctype: bytes = b"text/event-stream") -> bytes:
    """A whole HTTP/1.1 200 reply carrying `body` with its Content-Length (`extra`: more header
    lines, each ending in CRLF)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\n" + extra
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def canned_server(reply: bytes):
    """A loopback server (gevent, in this process) that answers every connection with the same
    bytes, then closes it: for replies no well-behaved server sends, and for byte-exact captures
    fed through the real client. Started on a free port (`server.server_port`); the caller stops it."""
    from gevent.server import StreamServer

    def handle(sock, _addr):
        sock.recv(65536)
        sock.sendall(reply)
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


class Background:
    """``llm-locust run ARGS`` in a session of its own (a terminal's Ctrl-C reaches its whole group:
    ``signal(SIGINT, group=True)``), its stdout and stderr read line by line, so a test waits for
    what the run says rather than for time, and sees every process it started (``descendants``)."""

    def __init__(self, cwd: Path | str, *args: str) -> None:
        import threading

        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cli_argv("run", *args),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: dict[str, list[str]] = {"out": [], "err": []}
        self._seen = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(stream, name), daemon=True)
            for stream, name in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))
        ]
        for r in self._readers:
            r.start()
        self.pids: set[int] = set()

    def _read(self, stream, name: str) -> None:
        for line in stream:
            with self._seen:
                self.lines[name].append(line)
                self._seen.notify_all()

    def text(self) -> str:
        return "".join(self.lines["out"]) + "".join(self.lines["err"])

    def wait_for(self, text: str, count: int = 1, timeout: float = 60.0) -> None:
        """Until stdout and stderr together have `count` lines with `text` in them."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while sum(text in line for lines in self.lines.values() for line in lines) < count:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(
                        f"{text!r} not said {count} time(s) within {timeout} s:\n{self.text()[-4000:]}"
                    )
                self._seen.wait(min(left, 0.5))

    def descendants(self) -> set[int]:
        """The PIDs of every process under the run now (also kept in `pids`)."""
        import psutil

        now = {p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)}
        self.pids |= now
        return now

    def signal(self, sig: int, group: bool = False) -> None:
        (os.killpg if group else os.kill)(self.proc.pid, sig)

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once the run has ended."""
        self.proc.wait(timeout=timeout)
        for r in self._readers:
            r.join(10)
        return self.proc.returncode, "".join(self.lines["out"]), "".join(self.lines["err"])


def live(pids: set[int]) -> list[int]:
    """The PIDs of `pids` still running (a zombie, ended but not yet reaped, is not running)."""
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            out.append(pid)
    return out
