"""What many test modules need, written once: free ports, the CLI in a subprocess, clients for a
URL, canned HTTP replies, and data from ``../shared`` that must not go missing in CI.

Plain functions, no fixtures (those live in conftest.py); tests/ is on sys.path, so a test
module says ``from support import run_cli, stream_client``. Real inference servers have their own
module (realservers.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the repository
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = ROOT.parent / "shared"  # the project's shared data beside the repository (CI has it)


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


def cli_process(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path | str | None = None, **kw):
    """``llm-locust ARGS`` in a subprocess of this Python, in the repository unless `cwd` says
    otherwise; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env={**os.environ, **(env or {})},
        **kw,
    )


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path | str | None = None, **kw):
    """``llm-locust run ARGS`` in a subprocess (see cli_process)."""
    return cli_process("run", *args, env=env, timeout=timeout, cwd=cwd, **kw)


def read_jsonl(path: Path | str) -> list[dict]:
    """Every line of a JSONL file (a record log, a token log) as a dict."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


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
):
    """The runtime's streaming client for `url` and `api`: 2 s to connect, 5 s without progress and
    10 s in all unless `timeouts` says otherwise; `api_key` adds the API's own auth headers."""
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_adapter
    from llm_locust.runtime.client import StreamClient, Timeouts

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
    return StreamClient(http, url, adapter, timeouts or Timeouts(2.0, 5.0, 10.0), head, keep_text)


def json_client(url: str, kind: str = "openai-embeddings", *, timeouts=None, limits=None, concurrency: int = 4):
    """The runtime's client for one-reply JSON APIs (embeddings, rerank, score)."""
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_json_adapter
    from llm_locust.runtime.client import JSONClient, Timeouts

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
