"""Run the simulator as a subprocess (for tests, benchmarks and the CLI)."""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys


def to_args(options: dict) -> list[str]:
    """slots=4 -> --slots 4; fast=True -> --fast; False/None dropped; lists repeat the flag;
    fault={"http500": 0.1} -> --fault http500=0.1."""
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, dict):
            args += [x for k, v in value.items() for x in (flag, f"{k}={v}")]
        elif isinstance(value, (list, tuple)):
            args += [x for v in value for x in (flag, str(v))]
        else:
            args += [flag, str(value)]
    return args


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies (Linux's
    PR_SET_PDEATHSIG), so a simulator in a session of its own is not left behind by a run killed
    with SIGKILL. Elsewhere nothing: the run's own stop still ends it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class SimProcess:
    """`with SimProcess(slots=4, iter_base=0.01) as sim: ... sim.url ...`

    Starts `python -m llm_locust.sim --port 0 ...`, waits for the URL line it prints first, and
    stops it (SIGTERM, then SIGKILL) on exit. Keyword options are CLI flags (see to_args).
    `own_session`: in a session of its own, so that a terminal's Ctrl-C (SIGINT to the foreground
    group) reaches only the run, which reads the server's last /metrics before it stops it.
    """

    def __init__(
        self,
        *,
        startup_timeout: float = 30.0,
        python: str | None = None,
        stderr=None,
        own_session: bool = False,
        **options,
    ):
        options.setdefault("port", 0)
        self.options = options
        self.own_session = own_session
        self.cmd = [python or sys.executable, "-m", "llm_locust.sim", *to_args(options)]
        self.startup_timeout = startup_timeout
        self.stderr = stderr
        self.proc: subprocess.Popen | None = None
        self.url = self.host = ""
        self.port = 0

    def start(self) -> SimProcess:
        if self.proc is not None:  # `with SimProcess(...).start()` started a second one and leaked the first
            raise RuntimeError("simulator already started")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(
            self.cmd,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            start_new_session=self.own_session,
            preexec_fn=_die_with_parent if self.own_session else None,
        )
        stdout = self.proc.stdout
        assert stdout is not None  # stdout=PIPE
        with selectors.DefaultSelector() as sel:  # wait for the first line, with a deadline
            sel.register(stdout, selectors.EVENT_READ)
            ready = sel.select(self.startup_timeout)
        line = stdout.readline().decode().strip() if ready else ""
        if "http://" not in line:
            self.stop()
            raise RuntimeError(f"simulator did not start ({self.cmd}): {line!r}")
        self.url = line[line.index("http://") :]
        hostport = self.url[len("http://") :]
        self.host, _, port = hostport.rpartition(":")
        self.port = int(port)
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:  # always, with stdout=PIPE
            self.proc.stdout.close()
        return self.proc.returncode

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("simulator not started")
        return self.proc.pid

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
