"""A fixed vLLM-style /v1/completions SSE stream served by nginx, for client-ingest benchmarks.

nginx serves a static file whose bytes are a complete 256-token OpenAI completions stream:
256 token chunks shaped like vLLM's (the last with finish_reason "length"), a usage chunk
(`"choices":[]`, usage.completion_tokens = 256) and `data: [DONE]`. The static module answers
POST with 405; `error_page 405 =200 $uri;` turns that into an internal GET of the same file with
status 200, so a POST gets the stream (the request body is read and discarded). The body has a
Content-Length and arrives as fast as the client can read it: the server costs almost nothing,
so the client's CPU is what limits the rate.

    with NginxStream() as srv:
        ... srv.url ...   # e.g. http://127.0.0.1:41234 ; POST /v1/completions

nginx runs in the foreground (`daemon off`) as our child process, with its own prefix, config,
pid and log files in a temp dir, one worker process, keep-alive on. It is installed with apt
(`nginx-light`) when missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import orjson

N_TOKENS = 256
MODEL = "bench-model"
WORDS = [" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", ","]


def stream_bytes(n_tokens: int = N_TOKENS, n_prompt: int = 128) -> bytes:
    """The SSE body: n_tokens vLLM-like token chunks, a usage chunk, [DONE]."""
    head = {"id": "cmpl-5b1e3c0f4a9d4e2b8c7a6f5e4d3c2b1a", "object": "text_completion",
            "created": 1760000000, "model": MODEL}
    out = []
    for i in range(n_tokens):
        last = i == n_tokens - 1
        choice = {"index": 0, "text": WORDS[i % len(WORDS)], "logprobs": None,
                  "finish_reason": "length" if last else None, "stop_reason": None,
                  "prompt_token_ids": None, "token_ids": None}
        out.append(b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n")
    usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_tokens, "completion_tokens": n_tokens}
    out.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def nginx_binary() -> str:
    """Path of nginx; installs Debian's nginx-light when it is missing."""
    path = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if path:
        return path
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "nginx-light"]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=True)
        subprocess.run(cmd, env=env, capture_output=True, check=True)
    path = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(path):
        raise RuntimeError("nginx not found after installing nginx-light")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONFIG = """\
{user}
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    types {{ }}
    default_type text/event-stream;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {dir}/www;
        location / {{
            error_page 405 =200 $uri;
        }}
    }}
}}
"""


class NginxStream:
    """nginx serving the fixed stream at POST {url}/v1/completions (and GET)."""

    def __init__(self, n_tokens: int = N_TOKENS, workers: int = 1, port: int = 0) -> None:
        self.n_tokens = n_tokens
        self.workers = workers
        self.port = port
        self.dir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.body = stream_bytes(n_tokens)

    def start(self) -> "NginxStream":
        binary = nginx_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
        os.chmod(self.dir, 0o755)  # workers may run as another user
        www = self.dir / "www" / "v1"
        www.mkdir(parents=True)
        (www / "completions").write_bytes(self.body)
        self.port = self.port or free_port()
        conf = self.dir / "nginx.conf"
        conf.write_text(CONFIG.format(user="user root;" if os.geteuid() == 0 else "",
                                      workers=self.workers, dir=self.dir, port=self.port))
        self.proc = subprocess.Popen(
            [binary, "-p", str(self.dir), "-c", str(conf), "-e", str(self.dir / "error.log"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")
                raise RuntimeError(f"nginx exited ({self.proc.returncode}): {err.strip()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("nginx did not start listening within 10 s") from None
                time.sleep(0.05)
        self._check()
        return self

    def _check(self) -> None:
        """One POST, to be sure the 405 trick works with this nginx."""
        body = b'{"prompt":"x","stream":true}'
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or rest != self.body or b"text/event-stream" not in head:
            raise RuntimeError(f"nginx does not serve the stream for POST: {head[:300]!r}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: master waits for its workers
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> "NginxStream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # quick manual check: serve until Ctrl-C
    with NginxStream() as srv:
        print(f"serving {len(srv.body)} bytes ({srv.n_tokens} tokens) at POST {srv.url}/v1/completions", flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
