"""Helpers for tests against real inference servers (llama.cpp's llama-server).

Plain code, no pytest fixtures (those live in conftest.py). The binaries and models
are provisioned by ``scripts/real-servers.sh llama`` into :func:`cache_dir`; see
docs/real-servers.md.

Works in a gevent-monkey-patched process too: it only uses subprocess, socket,
urllib and time, which gevent patches cooperatively.
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

LLAMA_CPP_PY_VERSION = "0.3.36"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_FILE = "tiny-random-llama.gguf"
PROVISION_HINT = "run `scripts/real-servers.sh llama` (builds llama-server, fetches the models, rebuilds the tokenizer)"

# urllib honours http_proxy & co; never send loopback traffic to a proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def cache_dir() -> Path:
    """``${XDG_CACHE_HOME:-$HOME/.cache}/llm-locust`` (same rule as scripts/real-servers.sh)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-locust"


def _existing(path: Path, *, executable: bool = False) -> Path | None:
    if not path.is_file() or path.stat().st_size == 0:
        return None
    if executable and not os.access(path, os.X_OK):
        return None
    return path


def llama_server_bin() -> Path | None:
    """The cached ``llama-server`` binary, or None if it has not been built."""
    return _existing(cache_dir() / f"llama.cpp-{LLAMA_CPP_PY_VERSION}" / "llama-server", executable=True)


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct Q4_1 GGUF (real weights), or None if absent."""
    return _existing(cache_dir() / "models" / SMOLLM2_FILE)


def tiny_gguf() -> Path | None:
    """Tiny random-weight llama GGUF with SmolLM2's tokenizer, or None if absent."""
    return _existing(cache_dir() / "models" / TINY_FILE)


def smollm2_tokenizer_dir() -> Path | None:
    """HuggingFace tokenizer directory for SmolLM2, rebuilt from the GGUF's metadata by
    ``scripts/real-servers.sh tokenizer`` (tokenizer.json, tokenizer_config.json,
    chat_template.jinja), or None if absent."""
    d = cache_dir() / "tokenizers" / "smollm2"
    return d if _existing(d / "tokenizer.json") is not None else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller must tolerate a rare race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET ``url`` without any proxy; returns (status, body) also for HTTP error statuses."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class LlamaServerError(RuntimeError):
    """llama-server did not start (the message carries the tail of its log)."""


class LlamaServer:
    """Run llama-server on a free loopback port for the duration of a ``with`` block.

    >>> with LlamaServer(tiny_gguf(), slots=2, alias="tiny") as srv:
    ...     http_get(srv.url + "/health")

    ``ctx`` is llama.cpp's ``-c``: the total KV context, which llama-server splits among
    the ``slots`` (``-np``). The server is started with ``--metrics --no-webui``; its
    stdout+stderr go to a temp log file (``.log_path``). ``__enter__`` polls ``/health``
    until it returns 200 or ``startup_timeout`` seconds pass, then raises
    :class:`LlamaServerError` with the log tail. On exit the process is terminated
    (killed after ``stop_timeout``); the log file is removed unless the block raised,
    in which case its tail is attached to the exception as a note.
    """

    def __init__(
        self,
        model: Path | str,
        *,
        slots: int = 4,
        ctx: int = 4096,
        alias: str = "smollm2",
        threads: int = 2,
        extra_args: Sequence[str] = (),
        binary: Path | str | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.model = Path(model)
        self.slots = slots
        self.ctx = ctx
        self.alias = alias
        self.threads = threads
        self.extra_args = tuple(str(a) for a in extra_args)
        self.binary = Path(binary) if binary is not None else None
        self.host = host
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._log_file = None

    # ------------------------------------------------------------------ properties
    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash)."""
        if self.port is None:
            raise RuntimeError("LlamaServer is not running")
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        assert self.binary is not None and self.port is not None
        return [
            str(self.binary),
            "-m", str(self.model),
            "--alias", self.alias,
            "--host", self.host,
            "--port", str(self.port),
            "-t", str(self.threads),
            "-np", str(self.slots),
            "-c", str(self.ctx),
            "--metrics",
            "--no-webui",
            *self.extra_args,
        ]

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LlamaServer":
        if self.proc is not None:
            raise RuntimeError("LlamaServer already started")
        if self.binary is None:
            found = llama_server_bin()
            if found is None:
                raise LlamaServerError(f"llama-server is not built; {PROVISION_HINT}")
            self.binary = found
        if not self.model.is_file():
            raise LlamaServerError(f"model file not found: {self.model}; {PROVISION_HINT}")

        # The port is picked before the server binds it; retry the (rare) lost race.
        for attempt in range(3):
            self.port = free_port(self.host)
            self._spawn()
            try:
                self._wait_healthy()
                return self
            except LlamaServerError as e:
                lost_race = self.proc is not None and self.proc.poll() is not None and (
                    "bind" in self.log_tail(10).lower() or "address already in use" in self.log_tail(10).lower()
                )
                if lost_race and attempt < 2:
                    self.stop(remove_log=True)
                    continue
                self.stop(remove_log=False)  # keep the full log for the person debugging
                raise e
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        fd, name = tempfile.mkstemp(prefix=f"llama-server-{self.alias}-", suffix=".log")
        self.log_path = Path(name)
        self._log_file = os.fdopen(fd, "wb")
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the test runner must not reach it first
        )

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer yet"
        delay = 0.05
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise LlamaServerError(
                    f"llama-server exited with code {rc} during startup\n"
                    f"command: {' '.join(self.command())}\n"
                    f"--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            try:
                status, body = http_get(self.url + "/health", timeout=2.0)
                if status == 200:
                    return
                last = f"HTTP {status}: {body[:200]!r}"
            except (OSError, urllib.error.URLError) as e:  # refused while it is still loading
                last = repr(e)
            if time.monotonic() >= deadline:
                raise LlamaServerError(
                    f"llama-server /health did not return 200 within {self.startup_timeout:.0f}s "
                    f"(last: {last})\ncommand: {' '.join(self.command())}\n"
                    f"--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            time.sleep(delay)  # poll interval, bounded by the deadline above
            delay = min(delay * 2, 0.5)

    def stop(self, *, remove_log: bool = True) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=self.stop_timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if remove_log and self.log_path is not None:
            try:
                self.log_path.unlink()
            except FileNotFoundError:
                pass
            self.log_path = None

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            try:
                exc.add_note(f"--- llama-server log tail ({self.log_path}) ---\n{self.log_tail()}")
            except Exception:
                pass
        self.stop(remove_log=exc is None)
        self.port = None
