"""StreamClient against real HTTP servers: the simulator (with faults) and raw canned replies."""

import itertools
import json
import socket
import time

import gevent
import gevent.event
import pytest
from gevent.server import StreamServer
from support import canned_server, sse_reply, stream_client

from llm_locust.metrics.records import Outcome
from llm_locust.protocols.base import RequestSpec
from llm_locust.transport.http import Timeouts

ids = itertools.count()


@pytest.fixture(scope="module")
def sim(sims):
    return sims(slots=8, iter_base=0.002, iter_per_seq=0.0002, token_log=True)  # test_apis's too


def spec(n=12, **kw):
    return RequestSpec(model="sim", prompt="one two three four five", max_tokens=n, force_length=True, **kw)


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_ok_stream_is_timed_token_by_token(sim, api):
    rec = stream_client(sim.url, api).send(spec(12), f"ok-{next(ids)}")
    assert rec.outcome is Outcome.OK, rec.error
    assert rec.status == 200
    assert rec.n_out == 12 and rec.n_out_source == "usage"
    assert rec.n_in == 5 and rec.n_in_source == "usage"
    assert len(rec.chunk_times) == 12 and rec.chunk_tokens == [1] * 12
    assert rec.t_sent < rec.t_headers <= rec.t_first == rec.chunk_times[0] <= rec.chunk_times[-1] <= rec.t_end
    assert all(b >= a for a, b in zip(rec.chunk_times, rec.chunk_times[1:], strict=False))
    assert rec.finish_reason == "length" and rec.text and not rec.length_mismatch


def test_continuous_usage_gives_exact_tokens_per_chunk(sim):
    rec = stream_client(sim.url).send(spec(9, continuous_usage=True), f"cu-{next(ids)}")
    assert rec.ok and rec.n_out == 9 and sum(rec.chunk_tokens) == 9


def test_sequential_requests_reuse_one_connection(sim):
    c = stream_client(sim.url)
    for _ in range(3):
        assert c.send(spec(3), f"ka-{next(ids)}").ok
    assert c.pool._socket_queue.qsize() == 1  # the same keep-alive connection went back each time


@pytest.mark.parametrize(
    "fault, outcome, text, tokens",
    [
        ("http500", Outcome.HTTP_ERROR, "HTTP 500", 0),
        ("http429", Outcome.HTTP_ERROR, "HTTP 429", 0),
        ("stream_error@3", Outcome.STREAM_ERROR, "", 3),
        ("truncate@5", Outcome.TRUNCATED, "", 5),
    ],
)
def test_faults_become_classified_failures(sim, fault, outcome, text, tokens):
    c = stream_client(sim.url, headers={"x-sim-fault": fault})
    rec = c.send(spec(12), f"f-{next(ids)}")
    assert rec.outcome is outcome, rec.error
    assert text in (rec.error or "")
    assert len(rec.chunk_times) == tokens
    assert rec.t_end is not None
    # a reply read to its end leaves a reusable connection; a cut one is closed, never reused
    assert c.pool._socket_queue.qsize() == (0 if outcome is Outcome.TRUNCATED else 1)
    # and the client still works afterwards
    assert stream_client(sim.url).send(spec(2), f"after-{next(ids)}").ok


def test_stall_hits_the_no_progress_timeout(sim):
    c = stream_client(sim.url, headers={"x-sim-fault": "stall@2:5"}, timeouts=Timeouts(2.0, 0.3, 10.0))
    rec = c.send(spec(8), f"stall-{next(ids)}")
    assert rec.outcome is Outcome.TIMEOUT and "no data for 0.3s" in rec.error
    assert len(rec.chunk_times) == 2
    assert 0.3 <= rec.t_end - rec.chunk_times[-1] < 3


def test_slow_headers_hit_the_total_timeout(sim):
    c = stream_client(sim.url, headers={"x-sim-fault": "slow_headers:5"}, timeouts=Timeouts(2.0, 10.0, 0.4))
    rec = c.send(spec(4), f"slow-{next(ids)}")
    assert rec.outcome is Outcome.TIMEOUT and "total timeout" in rec.error
    assert rec.t_headers is None


def test_unreachable_host_is_a_connect_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    rec = stream_client(f"http://127.0.0.1:{port}").send(spec(), "refused")
    assert rec.outcome is Outcome.CONNECT_ERROR and "connect" in rec.error


def test_wrong_api_flavour_is_an_http_error(sim):
    rec = stream_client(sim.url, api="tgi").send(spec(), f"tgi-{next(ids)}")
    assert rec.outcome is Outcome.HTTP_ERROR and rec.status == 404


@pytest.mark.timing  # the median arrival delay within 5 ms
def test_client_timestamps_match_the_servers_send_times(sim):
    c = stream_client(sim.url)
    recs = {}
    for _ in range(5):
        rid = f"gt-{next(ids)}"
        recs[rid] = c.send(spec(20), rid)
    truth = {}
    with open(sim.token_log) as f:
        for line in f:
            d = json.loads(line)
            truth[d["id"]] = d
    errors = []
    for rid, rec in recs.items():
        t = truth[rid]["t_tokens"]
        assert len(t) == len(rec.chunk_times) == 20
        errors += [c - s for c, s in zip(rec.chunk_times, t, strict=True)]
    errors.sort()
    assert errors[0] >= 0  # a token is never seen before the server wrote it
    # median arrival delay well under one token interval (lower bound of what a batching read would cost)
    assert errors[len(errors) // 2] < 0.005


# ---- replies no well-behaved server sends -------------------------------------------------


def http_reply(body: bytes, ctype=b"text/event-stream") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body


@pytest.mark.parametrize(
    "reply, outcome, text",
    [
        (
            http_reply(b"<html>hello</html>", b"text/html"),
            Outcome.STREAM_ERROR,
            "no stream events in reply (content-type text/html)",
        ),
        (
            http_reply(b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: {not json\n\n'),
            Outcome.STREAM_ERROR,
            "invalid JSON",
        ),
        (http_reply(b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'), Outcome.TRUNCATED, "end marker"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 500\r\n\r\ndata: {}",
            Outcome.TRUNCATED,
            "closed",
        ),
        (b"garbage\r\n\r\n", Outcome.HTTP_ERROR, "invalid HTTP reply"),
        (b"", Outcome.CONNECT_ERROR, "connection closed"),
    ],
)
def test_malformed_replies_are_classified(reply, outcome, text):
    server = canned_server(reply)
    try:
        rec = stream_client(f"http://127.0.0.1:{server.server_port}").send(spec(), "bad")
    finally:
        server.stop()
    assert rec.outcome is outcome, rec.error
    assert text in rec.error


_BODY = (
    b'data: {"choices": [{"text": "a"}]}\n\n'
    b'data: {"choices": [{"text": "b", "finish_reason": "length"}]}\n\n'
    b"data: [DONE]\n\n"
)
_REPLY = sse_reply(_BODY)


def test_a_kept_alive_connection_the_server_closed_while_idle_is_not_used():
    """The server answers one request per connection and closes it (as servers do at their
    keep-alive limit): the next request goes out on a new connection, once."""
    received = []
    closed = gevent.event.Event()

    def handle(sock, _addr):
        received.append(sock.recv(65536))
        sock.sendall(_REPLY)
        sock.close()
        closed.set()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        c = stream_client(f"http://127.0.0.1:{server.server_port}", api="openai-completions")
        first = c.send(spec(2), "ka-1")
        assert closed.wait(10)  # the first connection is closed before the second request
        second = c.send(spec(2), "ka-2")
    finally:
        server.stop()
    assert first.outcome is Outcome.OK and second.outcome is Outcome.OK, second.error
    assert second.n_out == 2 and len(received) == 2


def test_a_request_the_server_read_before_closing_is_never_sent_again():
    """The first round re-sent it (up to 3 times): the client counted 10,102 sent, the server
    received 20,201. A request written to a connection may have been read: it fails, once, and
    later requests to that host open their own connections (as a real llama-server needs: it now
    and then closes a kept-alive connection after reading the next request)."""
    from llm_locust.transport import http as client_module

    received = []
    connections = []

    def handle(sock, _addr):
        connections.append(sock)
        received.append(sock.recv(65536))
        sock.sendall(_REPLY)
        if len(connections) > 1:
            return  # later connections: one request, one reply
        data = sock.recv(65536)  # the second request on the first connection: read it, close, no reply
        if data:
            received.append(data)
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        c = stream_client(url, api="openai-completions")
        first = c.send(spec(2), "ka-1")
        second = c.send(spec(2), "ka-2")
        third = c.send(spec(2), "ka-3")
        fourth = c.send(spec(2), "ka-4")
    finally:
        server.stop()
        client_module.NO_REUSE.discard(f"127.0.0.1:{server.server_port}")
    assert first.outcome is Outcome.OK and third.outcome is Outcome.OK and fourth.outcome is Outcome.OK
    assert second.outcome is Outcome.CONNECT_ERROR and "without answering" in second.error
    assert len(received) == 4  # one each: none was sent twice
    assert len(connections) == 3  # after the drop: a fresh connection per request


def test_a_body_ended_by_closing_the_connection_is_complete():
    body = (
        b'data: {"choices": [{"text": "a"}]}\n\n'
        b'data: {"choices": [{"text": "b", "finish_reason": "length"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    server = canned_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + body)
    try:
        rec = stream_client(f"http://127.0.0.1:{server.server_port}", api="openai-completions").send(
            spec(2), "close-delimited"
        )
    finally:
        server.stop()
    assert rec.outcome is Outcome.OK, rec.error
    assert rec.n_out == 2 and rec.finish_reason == "length"


class _RecordingRaw:
    """A socket's raw (non-blocking) object that records the buffer size of every read."""

    def __init__(self, raw):
        self.raw = raw
        self.sizes = []

    def recvmsg(self, size, *args):
        self.sizes.append(size)
        return self.raw.recvmsg(size, *args)

    def __getattr__(self, name):
        return getattr(self.raw, name)


class _Socket:
    """A gevent socket whose raw reads are recorded (the reader reads through `_sock`)."""

    def __init__(self, sock):
        self.sock = sock
        self._sock = _RecordingRaw(sock._sock)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def test_reads_grow_while_a_server_sends_faster_than_they_empty_the_socket():
    """A read that fills READ_SIZE asks for BULK_READ_SIZE next (a 376 KB SGLang stream in 1-2 reads,
    not 6); reads that find a little (a paced server) keep the small buffer. Every byte arrives once."""
    from gevent import socket as gsocket

    from llm_locust.transport import reads as client_mod

    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    writer = gsocket.create_connection(listener.getsockname())
    conn, _ = listener.accept()
    try:
        sock = _Socket(conn)
        read = client_mod.socket_reader(sock, client_mod.time.perf_counter(), client_mod.Watch(conn, 10.0))
        # paced: a token at a time, each read after its write
        for _ in range(5):
            writer.sendall(b"data: x\n\n")
            assert read()[0] == b"data: x\n\n"
        assert sock._sock.sizes and set(sock._sock.sizes) == {client_mod.READ_SIZE}
        # a burst: 3 MB written at once (from another greenlet: the socket buffers hold less)
        blob = bytes(range(256)) * (3 * 4096)
        sender = gevent.spawn(writer.sendall, blob)
        got, sizes_before = [], len(sock._sock.sizes)
        while sum(map(len, got)) < len(blob):
            got.append(read()[0])
        sender.get(timeout=10)
        assert b"".join(got) == blob
        burst = sock._sock.sizes[sizes_before:]
        assert burst[0] == client_mod.READ_SIZE and client_mod.BULK_READ_SIZE in burst
        assert max(map(len, got)) > client_mod.READ_SIZE
    finally:
        for s in (writer, conn, listener):
            s.close()


def test_a_bulk_read_is_sized_to_what_the_caller_gets_through_in_its_budget():
    """A full 64 KiB read gone through in 0.2 ms (SGLang's events) earns the 512 KiB buffer; one
    that took 8 ms (a flood of comment-only events, decoded one line at a time) keeps 64 KiB, so
    one read never holds the other greenlets far past YIELD_AFTER; in between, in proportion."""
    from llm_locust.transport.reads import BULK_READ_SIZE, READ_BUDGET, READ_SIZE, YIELD_AFTER, next_read_size

    assert READ_BUDGET < YIELD_AFTER
    assert next_read_size(READ_SIZE, 0.0002) == BULK_READ_SIZE
    assert next_read_size(READ_SIZE, 0.0) == BULK_READ_SIZE
    assert next_read_size(READ_SIZE, 0.008) == READ_SIZE
    assert next_read_size(READ_SIZE, READ_BUDGET / 3) == 3 * READ_SIZE
    assert next_read_size(BULK_READ_SIZE, READ_BUDGET * 2) == BULK_READ_SIZE // 2


def _silent_server() -> StreamServer:
    """A started server that reads a request, answers nothing and keeps the connection open."""

    def hold(sock, _addr):
        sock.recv(65536)
        gevent.sleep(5)

    server = StreamServer(("127.0.0.1", 0), hold)
    server.start()
    return server


def _connect_after(monkeypatch, client, seconds: float) -> None:
    """The client's connections take `seconds` more to open (a slow connect, or a stuck one)."""
    get_socket = client.pool.get_socket

    def slow_connect():
        gevent.sleep(seconds)
        return get_socket()

    monkeypatch.setattr(client.pool, "get_socket", slow_connect)


def test_a_cancel_after_a_delay_counts_from_the_send_not_from_the_connect(monkeypatch):
    """--cancel SHARE:after=WHEN aborts WHEN after the send (docs/load-shapes.md). The timer was
    started before the connection was taken, so a slow connect (here 0.3 s) ate into the delay and
    the request ended 0.1 s after it was sent, not 0.4 s."""
    server = _silent_server()
    try:
        client = stream_client(f"http://127.0.0.1:{server.server_port}", "openai-completions")
        _connect_after(monkeypatch, client, 0.3)
        client.cancel = type("Plan", (), {"draw": staticmethod(lambda: (0.4, 0))})()
        rec = client.send(spec(), "r1")
    finally:
        server.stop(timeout=0)
    assert rec.outcome is Outcome.CLIENT_CANCELLED, (rec.outcome, rec.error)
    assert 0.4 <= rec.t_end - rec.t_sent < 1.0, rec.t_end - rec.t_sent


def test_the_request_timeout_counts_from_the_send_and_still_bounds_a_stuck_connect(monkeypatch):
    """--request-timeout: the whole request from its send, as E2E is (docs/metrics.md). The timer
    was started before the connection was taken and never again, so a slow connect ate into it:
    the CI run of 2026-12-03 saw a 2 s timeout end a request 1.996 s after its send. It still
    starts before the connect: a connect (or a wait for a pooled connection) that never ends is
    cut by it too."""
    server = _silent_server()
    try:
        client = stream_client(
            f"http://127.0.0.1:{server.server_port}", "openai-completions", timeouts=Timeouts(10.0, 10.0, 0.5)
        )
        _connect_after(monkeypatch, client, 0.3)
        rec = client.send(spec(), "r1")
        _connect_after(monkeypatch, client, 5.0)
        t0 = time.perf_counter()
        stuck = client.send(spec(), "r2")
        stuck_s = time.perf_counter() - t0
    finally:
        server.stop(timeout=0)
    assert rec.outcome is Outcome.TIMEOUT and rec.error == "total timeout 0.5s", (rec.outcome, rec.error)
    assert 0.5 <= rec.t_end - rec.t_sent < 1.0, rec.t_end - rec.t_sent
    assert stuck.outcome is Outcome.TIMEOUT and 0.5 <= stuck_s < 1.5, (stuck.outcome, stuck_s)
