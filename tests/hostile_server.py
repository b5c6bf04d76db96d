"""A hostile HTTP server for tests/test_hostile_servers.py, run as its own process.

    python tests/hostile_server.py MODE [PATH ...]

It listens on a free 127.0.0.1 port, prints "listening PORT" and serves until killed. Requests to
the PATHs given (every path when none is given) get MODE; every other request gets a well-behaved
OpenAI-style answer (GET /v1/models, a short SSE stream for POST /v1/chat/completions, 400 for a
request body of `{}`, a small Prometheus text for GET /metrics), so that a run against it works
except where the test makes it hostile. Modes:

- endless-body: a 200 JSON reply whose body never ends (64 KiB writes, as fast as it is read);
- endless-headers: a status line, then header lines forever;
- endless-interim: "100 Continue" interim replies forever;
- drip: a 200 reply's bytes, one a second, forever;
- stall: reads the request and never answers (the connection stays open);
- escapes: every text the server supplies carries terminal escapes (ESCAPES: a window title, a
  screen clear, an OSC 8 link, a C1 CSI, a bidi override): the model's id, the version, a streamed
  error event after one token, and an HTTP error body (a request body of `{}`).

Each connection is served by a thread; a flood stops when the client closes.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

MODES = ("endless-body", "endless-headers", "endless-interim", "drip", "stall", "escapes")
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\x9b31m\u202eevil\x7f"
CHUNK = b"a" * 65536


def _head(status: str, ctype: str, length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {ctype}"]
    lines.append(f"Content-Length: {length}" if length is not None else "Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _whole(status: str, ctype: str, body: bytes) -> bytes:
    return _head(status, ctype, len(body)) + body


def _sse() -> bytes:
    events = []
    for word in ("hello", " there", " friend"):
        chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": word}}]}
        events.append(f"data: {json.dumps(chunk)}\n\n")
    done = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    events.append(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n")
    return "".join(events).encode()


def well_behaved(method: str, path: str, body: bytes) -> bytes:
    if method == "GET" and path.startswith("/v1/models"):
        doc = {"object": "list", "data": [{"id": "hostile-model", "object": "model", "owned_by": "test"}]}
        return _whole("200 OK", "application/json", json.dumps(doc).encode())
    if method == "GET" and path.startswith("/metrics"):
        return _whole("200 OK", "text/plain", b"vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n")
    if method == "POST" and body.strip() == b"{}":
        return _whole("400 Bad Request", "application/json", b'{"error": {"message": "empty request"}}')
    if method == "POST":
        return _whole("200 OK", "text/event-stream", _sse())
    return _whole("404 Not Found", "application/json", b'{"error": "not found"}')


def escaping(method: str, path: str, body: bytes) -> bytes:
    """The "escapes" mode's answer: a served API whose every text carries ESCAPES."""
    if method == "GET" and path.startswith("/v1/models"):
        doc = {"object": "list", "data": [{"id": "m" + ESCAPES, "object": "model", "owned_by": ESCAPES}]}
        return _whole("200 OK", "application/json", json.dumps(doc).encode())
    if method == "GET" and path.startswith("/version"):
        return _whole("200 OK", "application/json", json.dumps({"version": "0.1" + ESCAPES}).encode())
    if method == "POST" and body.strip() == b"{}":
        return _whole("400 Bad Request", "application/json", json.dumps({"error": {"message": ESCAPES}}).encode())
    if method == "POST":
        token = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
        error = {"error": {"message": "boom " + ESCAPES, "type": "server_error", "code": 500}}
        events = f"data: {json.dumps(token)}\n\ndata: {json.dumps(error)}\n\ndata: [DONE]\n\n"
        return _whole("200 OK", "text/event-stream", events.encode())
    return _whole("404 Not Found", "application/json", json.dumps({"error": ESCAPES}).encode())


def hostile(conn: socket.socket, mode: str) -> None:
    if mode == "endless-body":
        conn.sendall(_head("200 OK", "application/json", None) + b'{"version": "')
        while True:
            conn.sendall(CHUNK)
    elif mode == "endless-headers":
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        line = b"X-Junk: " + b"j" * 1000 + b"\r\n"
        while True:
            conn.sendall(line * 64)
    elif mode == "endless-interim":
        while True:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 256)
    elif mode == "drip":
        for byte in _head("200 OK", "application/json", None) + b'{"version": "' + CHUNK:
            conn.sendall(bytes([byte]))
            time.sleep(1.0)
    elif mode == "stall":
        while conn.recv(65536):
            pass


def read_request(conn: socket.socket) -> tuple[str, str, bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path = lines[0].split(" ")[:2]
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return method, path, body


def serve(conn: socket.socket, mode: str, paths: list[str]) -> None:
    try:
        while True:
            req = read_request(conn)
            if req is None:
                return
            method, path, body = req
            if mode == "escapes" and (not paths or any(path.split("?")[0] == p for p in paths)):
                conn.sendall(escaping(method, path, body))
                continue
            if not paths or any(path.split("?")[0] == p for p in paths):
                hostile(conn, mode)
                return
            conn.sendall(well_behaved(method, path, body))
    except OSError:
        pass
    finally:
        conn.close()


def main() -> None:
    mode, paths = sys.argv[1], sys.argv[2:]
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {', '.join(MODES)}")
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)
    print(f"listening {srv.getsockname()[1]}", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, mode, paths), daemon=True).start()


if __name__ == "__main__":
    main()
