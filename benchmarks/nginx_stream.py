"""Fixed, complete 256-token streams served by nginx, one per streaming API, for client-ingest benchmarks.

nginx serves static files whose bytes are complete streams of n_tokens (256) output tokens, each
at the path its API is posted to, shaped like what the real servers send (byte shapes from the
captures in tests/fixtures/captures/ and /work/shared/captures/):
  - openai-completions, POST /v1/completions (vLLM): 256 token chunks (the last with
    finish_reason "length"), a usage chunk (`"choices":[]`, usage.completion_tokens = 256) and
    `data: [DONE]`;
  - openai-chat, POST /v1/chat/completions (vLLM): a role chunk (`delta: {role, content: ""}`),
    256 chat.completion.chunk deltas with `delta.content` (the last with finish_reason
    "length"), a usage chunk (`"choices":[]`) and `data: [DONE]`;
  - openai-responses, POST /v1/responses (vLLM): `event: <type>` + `data: {...}` events with
    sequence_number: response.created, response.in_progress, output_item.added,
    content_part.added, 256 response.output_text.delta, output_text.done, content_part.done,
    output_item.done and response.completed (status "incomplete", incomplete_details
    max_output_tokens, usage.output_tokens = 256); no [DONE];
  - anthropic-messages, POST /v1/messages (vLLM): message_start (usage.input_tokens),
    content_block_start, 256 content_block_delta text_delta events, content_block_stop,
    message_delta (stop_reason max_tokens, usage.output_tokens = 256), message_stop;
  - sglang-generate, POST /generate (SGLang native): per token `data: {"text": <cumulative
    text>, "output_ids": [<cumulative ids>], "meta_info": {... "completion_tokens": k ...}}`
    (finish_reason null, then {"type": "length", "length": 256} on the last), then
    `data: [DONE]`. Cumulative text and ids make this body grow with the square of the length.
The static module answers POST with 405; `error_page 405 =200 $uri;` turns that into an
internal GET of the same file with status 200, so a POST gets the stream (the request body is
read and discarded). Each body has a Content-Length and arrives as fast as the client can read
it: the server costs almost nothing, so the client's CPU is what limits the rate.

    with NginxStream() as srv:
        ... srv.url ...   # e.g. http://127.0.0.1:41234 ; POST /v1/completions, /v1/messages ...
        srv.body          # the /v1/completions body; srv.bodies[api] = (path, body) for each API

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
    head = {
        "id": "cmpl-5b1e3c0f4a9d4e2b8c7a6f5e4d3c2b1a",
        "object": "text_completion",
        "created": 1760000000,
        "model": MODEL,
    }
    out = []
    for i in range(n_tokens):
        last = i == n_tokens - 1
        choice = {
            "index": 0,
            "text": WORDS[i % len(WORDS)],
            "logprobs": None,
            "finish_reason": "length" if last else None,
            "stop_reason": None,
            "prompt_token_ids": None,
            "token_ids": None,
        }
        out.append(b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n")
    usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_tokens, "completion_tokens": n_tokens}
    out.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def sse_event(obj: dict) -> bytes:
    """One named SSE event as vLLM writes them: `event: <type>` then `data: <json>`."""
    return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def chat_stream_bytes(n_tokens: int = N_TOKENS, n_prompt: int = 128) -> bytes:
    """vLLM /v1/chat/completions: a role chunk, n_tokens content deltas, a usage chunk, [DONE]."""
    head = {"id": "chatcmpl-9fd463751652ef1f", "object": "chat.completion.chunk", "created": 1760000000, "model": MODEL}
    role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    out = [
        b"data: " + orjson.dumps({**head, "choices": [role], "prompt_token_ids": None, "prompt_text": None}) + b"\n\n"
    ]
    for i in range(n_tokens):
        choice = {"index": 0, "delta": {"content": WORDS[i % len(WORDS)]}, "logprobs": None}
        if i == n_tokens - 1:
            choice.update(finish_reason="length", stop_reason=None, token_ids=None)
        else:
            choice.update(finish_reason=None, token_ids=None)
        out.append(b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n")
    usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_tokens, "completion_tokens": n_tokens}
    out.append(
        b"data: "
        + orjson.dumps({**head, "choices": [], "usage": usage, "system_fingerprint": "vllm-0.32.0-3fbe13ef"})
        + b"\n\n"
    )
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def responses_stream_bytes(n_tokens: int = N_TOKENS, n_prompt: int = 128) -> bytes:
    """vLLM /v1/responses: created, in_progress, item/part added, n_tokens output_text.delta
    events, the *.done events, response.completed with usage (status incomplete at
    max_output_tokens, as vLLM reports it); no [DONE]."""
    item_id = "msg_998811f95e7744f6"
    response = {
        "id": "resp_a98369f8aade5f32",
        "created_at": 1760000000,
        "incomplete_details": None,
        "instructions": None,
        "metadata": None,
        "model": MODEL,
        "object": "response",
        "output": [],
        "parallel_tool_calls": True,
        "temperature": 0.0,
        "tool_choice": "none",
        "tools": [],
        "top_p": 1.0,
        "background": False,
        "max_output_tokens": n_tokens,
        "max_tool_calls": None,
        "previous_response_id": None,
        "prompt": None,
        "reasoning": None,
        "service_tier": "auto",
        "status": "in_progress",
        "text": None,
        "top_logprobs": None,
        "truncation": "disabled",
        "usage": None,
        "user": None,
    }
    text = "".join(WORDS[i % len(WORDS)] for i in range(n_tokens))
    events: list[dict] = [
        {"response": response, "type": "response.created"},
        {"response": response, "type": "response.in_progress"},
        {
            "item": {"id": item_id, "content": [], "role": "assistant", "status": "in_progress", "type": "message"},
            "output_index": 0,
            "type": "response.output_item.added",
        },
        {
            "content_index": 0,
            "item_id": item_id,
            "output_index": 0,
            "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []},
            "type": "response.content_part.added",
        },
    ]
    for i in range(n_tokens):
        events.append(
            {
                "content_index": 0,
                "delta": WORDS[i % len(WORDS)],
                "item_id": item_id,
                "logprobs": [],
                "output_index": 0,
                "type": "response.output_text.delta",
            }
        )
    part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
    item = {"id": item_id, "content": [part], "role": "assistant", "status": "completed", "type": "message"}
    usage = {
        "input_tokens": n_prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": n_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": n_prompt + n_tokens,
    }
    final = {
        **response,
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [item],
        "status": "incomplete",
        "usage": usage,
    }
    events += [
        {
            "content_index": 0,
            "item_id": item_id,
            "logprobs": [],
            "output_index": 0,
            "text": text,
            "type": "response.output_text.done",
        },
        {"content_index": 0, "item_id": item_id, "output_index": 0, "part": part, "type": "response.content_part.done"},
        {"item": item, "output_index": 0, "type": "response.output_item.done"},
        {"response": final, "type": "response.completed"},
    ]
    out = []
    for seq, ev in enumerate(events):  # vLLM puts sequence_number just before type
        typ = ev.pop("type")
        out.append(sse_event({**ev, "sequence_number": seq, "type": typ}))
    return b"".join(out)


def messages_stream_bytes(n_tokens: int = N_TOKENS, n_prompt: int = 128) -> bytes:
    """vLLM /v1/messages (Anthropic): message_start, content_block_start, n_tokens text_delta
    events, content_block_stop, message_delta (usage.output_tokens), message_stop."""
    message = {
        "id": "chatcmpl-a5ea0b22501f84bc",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": n_prompt, "output_tokens": 0},
    }
    out = [
        sse_event({"type": "message_start", "message": message}),
        sse_event({"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0}),
    ]
    for i in range(n_tokens):
        out.append(
            sse_event(
                {
                    "type": "content_block_delta",
                    "delta": {"type": "text_delta", "text": WORDS[i % len(WORDS)]},
                    "index": 0,
                }
            )
        )
    out += [
        sse_event({"type": "content_block_stop", "index": 0}),
        sse_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {"input_tokens": n_prompt, "output_tokens": n_tokens},
            }
        ),
        sse_event({"type": "message_stop"}),
    ]
    return b"".join(out)


def sglang_stream_bytes(n_tokens: int = N_TOKENS, n_prompt: int = 128) -> bytes:
    """SGLang /generate stream: one event per token with the cumulative text and output_ids and
    meta_info.completion_tokens = k; the last with finish_reason {"type": "length"}; [DONE]."""
    out = []
    text = ""
    ids: list[int] = []
    for i in range(n_tokens):
        text += WORDS[i % len(WORDS)]
        ids.append(1000 + i % len(WORDS))
        last = i == n_tokens - 1
        meta = {
            "id": "4f9c1e0b6a5d4c3e8f7a2b1c0d9e8f7a",
            "finish_reason": {"type": "length", "length": n_tokens} if last else None,
            "prompt_tokens": n_prompt,
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": i + 1,
            "cached_tokens": 0,
            "e2e_latency": round(0.0123 * (i + 1), 4),
        }
        out.append(b"data: " + orjson.dumps({"text": text, "output_ids": ids, "meta_info": meta}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


# API name -> (the path its adapter posts to, the body builder)
STREAMS = {
    "openai-completions": ("/v1/completions", stream_bytes),
    "openai-chat": ("/v1/chat/completions", chat_stream_bytes),
    "openai-responses": ("/v1/responses", responses_stream_bytes),
    "anthropic-messages": ("/v1/messages", messages_stream_bytes),
    "sglang-generate": ("/generate", sglang_stream_bytes),
}


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
    """nginx serving each API's fixed stream at POST {url}<its path> (and GET); see STREAMS."""

    def __init__(self, n_tokens: int = N_TOKENS, workers: int = 1, port: int = 0) -> None:
        self.n_tokens = n_tokens
        self.workers = workers
        self.port = port
        self.dir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.bodies = {api: (path, build(n_tokens)) for api, (path, build) in STREAMS.items()}
        self.body = self.bodies["openai-completions"][1]

    def start(self) -> NginxStream:
        binary = nginx_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
        os.chmod(self.dir, 0o755)  # workers may run as another user
        www = self.dir / "www"
        for path, body in self.bodies.values():  # one static file at each API's path
            target = www / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
        self.port = self.port or free_port()
        conf = self.dir / "nginx.conf"
        conf.write_text(
            CONFIG.format(
                user="user root;" if os.geteuid() == 0 else "", workers=self.workers, dir=self.dir, port=self.port
            )
        )
        self.proc = subprocess.Popen(
            [binary, "-p", str(self.dir), "-c", str(conf), "-e", str(self.dir / "error.log"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
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
        """One POST per path, to be sure the 405 trick works with this nginx."""
        body = b'{"prompt":"x","stream":true}'
        for path, expected in self.bodies.values():
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(
                    b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (path.encode(), len(body), body)
                )
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200") or rest != expected or b"text/event-stream" not in head:
                raise RuntimeError(f"nginx does not serve the stream for POST {path}: {head[:300]!r}")

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

    def __enter__(self) -> NginxStream:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # quick manual check: serve until Ctrl-C
    with NginxStream() as srv:
        for api, (path, body) in srv.bodies.items():
            print(f"{api}: {len(body)} bytes ({srv.n_tokens} tokens) at POST {srv.url}{path}", flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
