"""StreamClient against hostile servers: whatever bytes come back, send() returns a classified
record, on time, with bounded memory, and other greenlets keep running.

The server runs in a child process (plain threads, real parallelism, whatever gevent patched in
this one): it reads the request, then answers as the request id says (see SERVER below). A
server that floods us this way would starve a client that reads without yielding: such tests
carry a pytest timeout (SIGALRM reaches a starved main greenlet) so they fail instead of hanging.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import time

import gevent
import orjson
import pytest
from geventhttpclient import HTTPClient

from llm_locust.metrics.records import Outcome
from llm_locust.protocols import get_adapter
from llm_locust.protocols.base import MAX_EVENT_BYTES, MAX_HEAD_BYTES, Limits, RequestSpec, Timeouts
from llm_locust.transport.bodies import SSEReader
from llm_locust.transport.http import StreamClient
from llm_locust.transport.served import fetch_models

SERVER = r"""
import socket, socketserver, sys, threading, time

OK_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"

def flood(sock, first, piece):
    sock.sendall(first)
    try:
        while True:
            sock.sendall(piece)
    except OSError:
        pass

class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        head = b""
        while b"\r\n\r\n" not in head:
            data = sock.recv(65536)
            if not data:
                return
            head += data
        first = head.split(b"\r\n", 1)[0]
        rid = b""
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"x-request-id:"):
                rid = line.split(b":", 1)[1].strip()
        mode, _, arg = rid.partition(b".")
        close = OK_SSE + b"Connection: close\r\n\r\n"
        chunked = OK_SSE + b"Transfer-Encoding: chunked\r\n\r\n"
        if first.startswith(b"GET /v1/models"):  # an endless models list
            flood(
                sock,
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"data": [',
                b'{"id": "m"}, ' * 4096,
            )
        elif mode == b"raw":  # the reply's bytes, hex-encoded in the request id
            sock.sendall(bytes.fromhex(arg.decode()))
            time.sleep(0.5)
        elif mode == b"comments":  # keep-alive comments, as fast as the socket takes them
            flood(sock, close, b":\n\n" * 16384)
        elif mode == b"nonl":  # one SSE line that never ends
            flood(sock, close + b"data: ", b"x" * 65536)
        elif mode == b"ext":  # a chunk extension that never ends: no newline, no body byte
            flood(sock, chunked + b"1;", b"a" * 65536)
        elif mode == b"headflood":  # a header value that never ends
            flood(sock, b"HTTP/1.1 200 OK\r\nX-Big: ", b"a" * 65536)
        elif mode == b"bighead":  # a 1 MB header block, then a good reply
            block = b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 1000) for i in range(1000))
            body = b'data: {"choices": [{"text": "a", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
            sock.sendall(OK_SSE + block + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        elif mode == b"stall":  # one event after `arg` ms, then nothing until the client leaves
            sock.sendall(chunked)
            time.sleep(int(arg) / 1000)
            event = b'data: {"choices": [{"text": "a"}]}\n\n'
            sock.sendall(b"%x\r\n%s\r\n" % (len(event), event))
            sock.settimeout(30)
            try:
                sock.recv(1)
            except OSError:
                pass

class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture(scope="module")
def hostile():
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stdin.close()
        proc.wait(10)


def client(url, api="openai-completions", timeouts=None, limits=None):
    http = HTTPClient.from_url(url, concurrency=20, connection_timeout=2.0, network_timeout=30.0)
    return StreamClient(http, url, get_adapter(api), timeouts or Timeouts(2.0, 10.0, 10.0), limits=limits)


SPEC = RequestSpec(model="m", prompt="hello", max_tokens=4)


def raw_id(reply: bytes) -> str:
    return "raw." + reply.hex()


def sse_reply(body: bytes, extra: bytes = b"", ctype: bytes = b"text/event-stream") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: "
        + ctype
        + b"\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def events(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


GOOD = b'{"choices": [{"text": "a"}]}'


# --- wrong JSON types: a stream error on the record, never an exception out of send() --------


@pytest.mark.parametrize(
    "api, body, text",
    [
        ("openai-chat", events(GOOD, b'{"choices": 5}', b"[DONE]"), "choices is a number (5), not an array"),
        ("openai-chat", events(b'{"choices": "abc"}', b"[DONE]"), "choices is a string"),
        ("openai-chat", events(b'{"choices": [5]}', b"[DONE]"), "choices[] is a number"),
        ("openai-chat", events(b'{"choices": [{"delta": "x"}]}', b"[DONE]"), "delta is a string"),
        ("openai-chat", events(b'{"choices": [{"delta": {"content": 7}}]}', b"[DONE]"), "content is a number"),
        (
            "openai-chat",
            events(b'{"choices": [{"delta": {"content": "a"}, "finish_reason": ["x"]}]}', b"[DONE]"),
            "finish_reason is an array",
        ),
        ("openai-completions", events(GOOD, b'{"choices": [], "usage": "x"}', b"[DONE]"), "usage is a string"),
        (
            "openai-completions",
            events(GOOD, b'{"choices": [], "usage": {"completion_tokens": -5}}', b"[DONE]"),
            "usage.completion_tokens is -5",
        ),
        (
            "openai-completions",
            events(GOOD, b'{"choices": [], "usage": {"completion_tokens": 2.5}}', b"[DONE]"),
            "usage.completion_tokens is a number (2.5)",
        ),
        (
            "openai-completions",
            events(GOOD, b'{"choices": [], "usage": {"completion_tokens": true}}', b"[DONE]"),
            "usage.completion_tokens is a boolean",
        ),
        (
            "openai-completions",
            events(GOOD, b'{"choices": [], "usage": {"completion_tokens": 18446744073709551615}}', b"[DONE]"),
            "not a token count",
        ),
        (
            "openai-completions",
            events(GOOD, b'{"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 1}}', b"[DONE]"),
            "usage.prompt_tokens is -1",
        ),
        ("openai-completions", events(GOOD, b'{"choices": [{"text": "\xff\xfe"}]}', b"[DONE]"), "invalid JSON"),
        ("tgi", b"data:" + b'{"token": [1]}' + b"\n\n", "token is an array"),
        (
            "tgi",
            b'data:{"token": {"text": "a"}, "generated_text": "a", "details": {"generated_tokens": -3}}\n\n',
            "details.generated_tokens is -3",
        ),
        ("llamacpp", events(b'{"content": {"a": 1}}'), "content is an object"),
        ("llamacpp", events(b'{"content": "", "stop": true, "tokens_predicted": "9"}'), "tokens_predicted is a string"),
        ("triton", events(b'{"text_output": 3}'), "text_output is a number"),
    ],
)
def test_wrong_json_types_become_stream_errors(hostile, api, body, text):
    rec = client(hostile, api).send(SPEC, raw_id(sse_reply(body)))
    assert rec.outcome is Outcome.STREAM_ERROR, (rec.outcome, rec.error)
    assert text in rec.error
    assert rec.status == 200 and rec.t_end is not None and rec.n_out >= 0


@pytest.mark.parametrize(
    "api, line, text",
    [
        ("ollama-chat", b'{"message": "x", "done": false}', "message is a string"),
        ("ollama-generate", b'{"response": 1, "done": false}', "response is a number"),
        ("ollama-generate", b'{"response": "", "done": true, "eval_count": -5}', "eval_count is -5"),
    ],
)
def test_ndjson_wrong_types_become_stream_errors(hostile, api, line, text):
    body = b'{"response": "a", "message": {"content": "a"}, "done": false}\n' + line + b"\n"
    rec = client(hostile, api).send(SPEC, raw_id(sse_reply(body, ctype=b"application/x-ndjson")))
    assert rec.outcome is Outcome.STREAM_ERROR, (rec.outcome, rec.error)
    assert text in rec.error


def test_an_adapter_that_raises_anything_still_gives_a_record(hostile):
    """The client's last line of defence: an exception other than ProtocolError from an adapter
    (a gap in its checks) is a stream_error with the exception's text, not a lost request."""
    c = client(hostile)

    class Broken:
        name, framing, end_marker = "broken", "sse", True
        request = staticmethod(get_adapter("openai-completions").request)

        @staticmethod
        def feed(payload, state):
            raise KeyError("boom")

    c.adapter = Broken()
    c.body = SSEReader(c.adapter, c.limits)
    rec = c.send(SPEC, raw_id(sse_reply(events(GOOD, b"[DONE]"))))
    assert rec.outcome is Outcome.STREAM_ERROR and "KeyError" in rec.error and "boom" in rec.error


# --- HTTP oddities: classified, with a clear message ----------------------------------------


def test_gzip_encoded_stream_is_a_clear_stream_error(hostile):
    body = gzip.compress(events(GOOD, b"[DONE]"))
    rec = client(hostile).send(SPEC, raw_id(sse_reply(body, b"Content-Encoding: gzip\r\n")))
    assert rec.outcome is Outcome.STREAM_ERROR
    assert "gzip-encoded" in rec.error and "\x1f" not in rec.error and "\ufffd" not in rec.error


def test_gzip_encoded_error_body_is_named_not_quoted(hostile):
    body = gzip.compress(b'{"error": "overloaded"}')
    reply = b"HTTP/1.1 503 Busy\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    rec = client(hostile).send(SPEC, raw_id(reply))
    assert rec.outcome is Outcome.HTTP_ERROR and rec.status == 503
    assert rec.error == "HTTP 503: (gzip-encoded body)"


def test_binary_body_without_events_is_named_not_quoted(hostile):
    rec = client(hostile).send(SPEC, raw_id(sse_reply(bytes(range(256)) * 4, ctype=b"application/octet-stream")))
    assert rec.outcome is Outcome.STREAM_ERROR
    assert "no stream events" in rec.error and "binary data" in rec.error and "\x00" not in rec.error


@pytest.mark.parametrize("after", [b"", events(GOOD)])
def test_bad_chunk_size_after_good_headers_is_a_stream_error(hostile, after):
    ok = b"%x\r\n%s\r\n" % (len(after), after) if after else b""
    reply = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + ok + b"ZZZ\r\n"
    )
    rec = client(hostile).send(SPEC, raw_id(reply))
    assert rec.outcome is Outcome.STREAM_ERROR, (rec.outcome, rec.error)
    assert rec.error == "invalid HTTP body framing: Invalid character in chunk size"
    assert rec.status == 200 and rec.t_headers is not None
    assert len(rec.chunk_times) == (1 if after else 0)


def test_one_megabyte_header_block_is_a_clear_error(hostile):
    t0 = time.perf_counter()
    rec = client(hostile).send(SPEC, "bighead")
    assert rec.outcome is Outcome.HTTP_ERROR
    assert rec.error == f"invalid HTTP reply: header block over {MAX_HEAD_BYTES} bytes"
    assert time.perf_counter() - t0 < 2


@pytest.mark.timeout(30)
def test_endless_header_is_cut_at_the_head_limit(hostile):
    t0 = time.perf_counter()
    rec = client(hostile).send(SPEC, "headflood")
    assert rec.outcome is Outcome.HTTP_ERROR and "header block over" in rec.error
    assert time.perf_counter() - t0 < 2


@pytest.mark.timeout(30)
def test_endless_line_is_cut_at_the_event_limit(hostile):
    t0 = time.perf_counter()
    rec = client(hostile).send(SPEC, "nonl")
    assert rec.outcome is Outcome.STREAM_ERROR
    assert rec.error == f"an SSE event longer than {MAX_EVENT_BYTES} bytes (the limit for one stream event)"
    assert time.perf_counter() - t0 < 5


@pytest.mark.timeout(30)
def test_event_limit_is_the_clients_to_set(hostile):
    rec = client(hostile, limits=Limits(event_bytes=100_000)).send(SPEC, "nonl")
    assert rec.outcome is Outcome.STREAM_ERROR and "longer than 100000 bytes" in rec.error


@pytest.mark.timeout(30)
def test_endless_chunk_extension_is_cut(hostile):
    rec = client(hostile).send(SPEC, "ext")
    assert rec.outcome is Outcome.STREAM_ERROR
    assert rec.error == f"invalid HTTP body framing: over {MAX_HEAD_BYTES} bytes without body data"


# --- timeouts fire on time under any byte stream, and the loop is never starved -------------


def ticker(gaps: list[float]):
    """A greenlet that wants to run every 10 ms; the gaps it saw tell how long it was starved."""
    last = time.perf_counter()
    while True:
        gevent.sleep(0.01)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "mode, limits",
    [
        ("comments", None),  # complete keep-alive events, faster than the client parses them
        ("ext", Limits(head_bytes=1 << 40)),  # no newline at all, nothing kept (limits off)
    ],
)
def test_total_timeout_fires_on_time_under_a_flood(hostile, mode, limits):
    gaps: list[float] = []
    tick = gevent.spawn(ticker, gaps)
    try:
        rec = client(hostile, timeouts=Timeouts(2.0, 10.0, 2.0), limits=limits).send(SPEC, mode)
    finally:
        tick.kill()
    assert rec.outcome is Outcome.TIMEOUT, (rec.outcome, rec.error)
    assert rec.error == "total timeout 2s"
    assert 2.0 <= rec.t_end - rec.t_sent <= 2.2
    assert len(gaps) > 50 and max(gaps) < 0.1, max(gaps)  # other greenlets ran all along


@pytest.mark.timeout(30)
def test_no_progress_timeout_fires_within_a_tenth_of_its_value(hostile):
    """Five requests stall at moments 50 ms apart, so whatever the watchdog's phase one of them
    stalls just after a check: with checks every limit/4 (the old 250 ms) it would fire ~200 ms
    late; every min(limit/10, 100 ms) keeps all within 100 ms (+ scheduling slack)."""
    limit = 1.0
    c = client(hostile, timeouts=Timeouts(2.0, limit, 10.0))
    jobs = [gevent.spawn(c.send, SPEC, f"stall.{50 * k}") for k in range(5)]
    gevent.joinall(jobs, raise_error=True)
    late = []
    for job in jobs:
        rec = job.value
        assert rec.outcome is Outcome.TIMEOUT and rec.error == f"no data for {limit:g}s", rec.error
        assert len(rec.chunk_times) == 1
        late.append(rec.t_end - rec.chunk_times[-1] - limit)
    assert min(late) >= 0 and max(late) < 0.15, late


@pytest.mark.timeout(60)
def test_endless_models_list_is_bounded(hostile):
    t0 = time.perf_counter()
    assert fetch_models(hostile, {}, Timeouts(2.0, 10.0, 10.0), Limits(body_bytes=1_000_000)) == []
    assert time.perf_counter() - t0 < 5


def test_models_list_with_wrong_types_is_read_safely():
    from llm_locust.protocols.openai import parse_models

    assert parse_models(b'{"data": 5}') == []
    assert parse_models(b'{"data": "abc", "models": {"a": 1}}') == []
    assert parse_models(b'{"data": [{"id": 5}, {"id": "m"}, 3]}') == ["m"]
    assert parse_models(b'{"models": [{"name": ["x"]}, {"model": "q"}]}') == ["q"]


def test_error_text_in_stream_is_bounded_and_the_first_kept():
    from llm_locust.protocols import StreamState

    adapter = get_adapter("openai-chat")
    state = StreamState()
    adapter.feed(orjson.dumps({"error": {"message": "x" * 100_000}}), state)
    adapter.feed(b'{"error": "second"}', state)
    assert state.error.startswith("xxx") and len(state.error) <= 500
