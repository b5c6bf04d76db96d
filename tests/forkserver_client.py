"""The pytest side of tests/forkserver.py: start the server once, run calls through it, and give
each call's outcome as subprocess.run would (CompletedProcess, TimeoutExpired)."""

from __future__ import annotations

import atexit
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path


class ForkServer:
    """One server per pytest process; stopped when the process exits (and it exits by itself
    when its parent is gone)."""

    def __init__(self, script: Path) -> None:
        self.dir = tempfile.mkdtemp(prefix="llm-locust-fork-")
        self.path = os.path.join(self.dir, "sock")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), self.path], stdout=subprocess.PIPE, cwd=script.parents[1]
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line == b"ready\n", f"tests/forkserver.py did not start: {line!r}"
        atexit.register(self.stop)
        self.calls = 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def run(
        self, argv: list[str], args: list[str], env: dict, cwd: str, timeout: float, module: str = "llm_locust.cli"
    ):
        """``python -m MODULE ARGS`` in a forked process; `argv`: that command line, as subprocess
        names it in what it returns."""
        self.calls += 1
        out, err = (os.path.join(self.dir, f"{self.calls}.{k}") for k in ("out", "err"))
        req = {"argv": args, "env": env, "cwd": cwd, "out": out, "err": err, "module": module}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(self.path)
            s.sendall(json.dumps(req).encode() + b"\n")
            lines = _Lines(s)
            pid = lines.next()["pid"]
            s.settimeout(timeout)
            try:
                rc = lines.next()["rc"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)  # as subprocess.run does on its timeout
                s.settimeout(30)
                lines.next()  # the kill said: the run is gone
                raise subprocess.TimeoutExpired(argv, timeout, _text(out), _text(err)) from None
        return subprocess.CompletedProcess(argv, rc, _text(out), _text(err))


class _Lines:
    """JSON lines off a socket (a file object over it refuses to read again after a timeout)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def next(self) -> dict:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("tests/forkserver.py closed the call without an answer")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _text(path: str) -> str:
    """A captured output as subprocess.run(text=True) gives it (the locale's encoding, universal
    newlines); the file removed."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return ""
    os.unlink(path)
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")
