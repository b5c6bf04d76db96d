"""The simulator's HTTP/1.1: one connection's requests parsed one at a time (keep-alive and
pipelining), responses framed with Content-Length or chunked transfer encoding. It knows nothing of
the wire formats: a request goes to the app's `handle`, a response comes back as bytes."""

from __future__ import annotations

import asyncio
import sys
from time import perf_counter
from typing import Any

import orjson

REASONS = {
    200: "OK",
    100: "Continue",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}
MAX_HEAD, MAX_BODY = 65536, 64 << 20
END = b"0\r\n\r\n"  # the last chunk of a chunked body


def frame(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


DONE = frame(b"data: [DONE]\n\n")
# what follows the token text inside a token chunk, keyed by chat?; vLLM's final chat chunk gains stop_reason


def error_json(msg: str, typ: str, code: int) -> bytes:
    return orjson.dumps({"error": {"message": msg, "type": typ, "param": None, "code": code}})


class Conn(asyncio.Protocol):
    """One client connection: parses requests, one at a time, and owns the transport."""

    def __init__(self, app: Any):  # the server's App: handle(conn, method, path, headers, body, t)
        self.app = app
        self.buf = bytearray()
        self.transport: asyncio.Transport  # set by connection_made, which asyncio calls before anything else
        self.busy = False  # a response is in progress
        self.closed = False
        self.keep_alive = True
        self.stream: Any = None  # the server's Stream being answered (abort, pump, wait_write)
        self.paused = False  # transport buffer above its high-water mark
        self._looping = False
        self.continued = False  # sent "100 Continue" for the request being read

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buf += data
        if not self.busy:
            self.next_request()

    def connection_lost(self, exc):
        self.closed = True
        if self.stream is not None:
            self.stream.abort("cancelled")

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False
        if self.stream is not None and self.stream.wait_write:
            self.stream.wait_write = False
            self.stream.pump()

    def write(self, data: bytes):
        if not self.closed:
            self.transport.write(data)

    def close(self):
        if not self.closed:
            self.closed = True
            self.transport.close()

    def next_request(self):
        if self._looping:  # a response finished synchronously inside the loop below
            return
        self._looping = True
        try:
            while not self.busy and not self.closed and self.buf:
                req = self._parse()
                if req is None:
                    return
                self.busy = True
                try:
                    self.app.handle(self, *req)
                except Exception as e:  # never let one request take the server down
                    print(f"llm-locust sim: internal error: {e!r}", file=sys.stderr)
                    if self.busy and self.stream is None:
                        self.respond(500, error_json("internal error", "InternalServerError", 500))
                    elif self.busy:
                        self.close()
        finally:
            self._looping = False

    def _parse(self):
        buf = self.buf
        i = buf.find(b"\r\n\r\n")
        if i < 0:
            if len(buf) > MAX_HEAD:
                self._fatal(431, "request head too large")
            return None
        try:
            lines = bytes(buf[:i]).decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            if n < 0 or "transfer-encoding" in headers:
                raise ValueError("only Content-Length request bodies are supported")
        except ValueError as e:
            self._fatal(400, f"malformed request: {e}")
            return None
        if n > MAX_BODY:
            self._fatal(413, "body too large")
            return None
        if len(buf) < i + 4 + n:
            if headers.get("expect", "").lower() == "100-continue" and not self.continued:
                self.continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None
        self.continued = False
        body = bytes(buf[i + 4 : i + 4 + n])
        del buf[: i + 4 + n]
        conn_hdr = headers.get("connection", "").lower()
        self.keep_alive = conn_hdr != "close" and (version == "HTTP/1.1" or conn_hdr == "keep-alive")
        return method, target.split("?", 1)[0], headers, body, perf_counter()

    def _fatal(self, status, msg):
        self.keep_alive = False
        self.busy = True
        self.respond(status, error_json(msg, "BadRequestError", status))

    def head(self, status: int, ctype: bytes, length: int | None, extra: bytes = b"") -> bytes:
        return b"HTTP/1.1 %d %s\r\nserver: llm-locust-sim\r\ncontent-type: %s\r\n%s%s%s\r\n" % (
            status,
            REASONS.get(status, "Error").encode(),
            ctype,
            b"transfer-encoding: chunked\r\n" if length is None else b"content-length: %d\r\n" % length,
            b"" if self.keep_alive else b"connection: close\r\n",
            extra,
        )

    def respond(self, status: int, body: bytes, ctype=b"application/json", extra=b""):
        self.write(self.head(status, ctype, len(body), extra) + body)
        self.done()

    def done(self):
        """The current response is complete: close, or serve the next pipelined request."""
        self.stream = None
        self.busy = False
        if not self.keep_alive:
            self.close()
        elif self.buf:
            self.next_request()
