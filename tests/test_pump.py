"""The token pump (transport/pump.py): paced streams' token reads taken by one greenlet, many streams
a wake-up. Against the paced simulator and hand-made servers over real sockets: a stream read
there must end exactly as one read by its own greenlet (counts, times, outcomes, errors), and
every way a request can end while its socket is in the pump (the no-progress watchdog, the total
timeout, a kill, a reset, a close) must end it as before and take the socket out of the pump."""

from __future__ import annotations

import functools
import itertools
import json
import socket
import struct
import time

import gevent
import gevent.event
import orjson
import pytest
from gevent.server import StreamServer
from support import stream_client
from test_token_reads import count_token_reads

from llm_locust.metrics.records import Outcome
from llm_locust.protocols.base import RequestSpec
from llm_locust.sim.process import SimProcess
from llm_locust.transport.http import Timeouts
from llm_locust.transport.pump import PUMP

ids = itertools.count()

client_for = functools.partial(stream_client, keep_text=False, concurrency=64)


@pytest.fixture(scope="module")
def sim(sims):
    return sims(slots=64, iter_base=0.005, iter_per_seq=0.0, iter_per_prefill_token=0.0, token_log=True)


@pytest.fixture
def pumped(monkeypatch):
    """Counts the reads the pump took as token reads (clients take token reads through the pump
    unless made with pump=False)."""
    taken = count_token_reads(monkeypatch)
    yield taken
    assert PUMP._streams == {}  # every socket left the pump, however its request ended


def spec(n=12):
    return RequestSpec(model="sim", prompt="one two three four five", max_tokens=n, force_length=True)


@pytest.mark.timing  # the median token delay within 4 ms
def test_many_concurrent_streams_are_read_in_the_pump_and_timed_like_the_server(tmp_path, pumped):
    """40 streams at 25 tokens/s, while a busy greenlet holds the process 30 ms of every 33: a token
    waits in its socket up to 30 ms before the pump reads it, and must still be timed by its
    arrival (the kernel's receive time), within a few ms of the server's write."""
    log = tmp_path / "tokens.jsonl"
    with SimProcess(slots=64, iter_base=0.04, iter_per_seq=0.0, iter_per_prefill_token=0.0, token_log=str(log)) as sim:
        c = client_for(sim.url, "openai-completions")
        rids = [f"many-{next(ids)}" for _ in range(40)]
        jobs = [gevent.spawn(c.send, spec(30), rid) for rid in rids]
        held = []

        def hog():
            while not all(j.dead for j in jobs):
                t0 = time.perf_counter()
                while time.perf_counter() < t0 + 0.03:
                    pass
                held.append(time.perf_counter() - t0)
                gevent.sleep(0.003)

        hogging = gevent.spawn(hog)
        gevent.joinall(jobs, raise_error=True)
        hogging.join(5)
    recs = {rid: j.value for rid, j in zip(rids, jobs, strict=True)}
    assert pumped[0] > 40 * 20  # most token reads were the pump's
    truth = {}
    with open(log) as f:
        for line in f:
            d = json.loads(line)
            truth[d["id"]] = d["t_tokens"]
    delays = []
    for rid, rec in recs.items():
        assert rec.outcome is Outcome.OK, rec.error
        assert rec.n_out == 30 and len(rec.chunk_times) == 30 and rec.n_out_source == "usage"
        assert rec.finish_reason == "length" and rec.t_first == rec.chunk_times[0] <= rec.chunk_times[-1] <= rec.t_end
        assert all(b >= a for a, b in zip(rec.chunk_times, rec.chunk_times[1:], strict=False))
        delays += [t - s for t, s in zip(rec.chunk_times, truth[rid], strict=True)]
    delays.sort()
    assert len(held) > 10
    assert delays[0] >= 0  # never before the server wrote it
    assert delays[len(delays) // 2] < 0.004, delays[len(delays) // 2]  # its arrival, not when the busy pump read it
    assert c.pool._socket_queue.qsize() > 0  # connections read to their end went back to the pool


@pytest.mark.parametrize(
    "fault, outcome, text, tokens",
    [("stream_error@30", Outcome.STREAM_ERROR, "", 30), ("truncate@30", Outcome.TRUNCATED, "", 30)],
)
def test_faults_mid_stream_end_as_they_do_without_the_pump(sim, pumped, monkeypatch, fault, outcome, text, tokens):
    out = {}
    for pump in (True, False):
        c = client_for(sim.url, headers={"x-sim-fault": fault}, pump=pump)
        rec = c.send(spec(40), f"f-{next(ids)}")
        out[pump] = (rec.outcome, rec.error, len(rec.chunk_times), c.pool._socket_queue.qsize())
    assert out[True] == out[False]
    assert out[True][0] is outcome and out[True][2] == tokens
    assert pumped[0] > 10


def test_a_stall_in_the_pump_hits_the_no_progress_timeout(sim, pumped):
    c = client_for(sim.url, headers={"x-sim-fault": "stall@20:5"}, timeouts=Timeouts(2.0, 0.3, 10.0))
    rec = c.send(spec(30), f"stall-{next(ids)}")
    assert rec.outcome is Outcome.TIMEOUT and "no data for 0.3s" in rec.error, rec.error
    assert len(rec.chunk_times) == 20 and pumped[0] > 5
    assert 0.3 <= rec.t_end - rec.chunk_times[-1] < 3
    # and the pump goes on serving other streams
    assert client_for(sim.url).send(spec(20), f"after-{next(ids)}").ok


def paced_server(tokens: int | None, gap: float, closing: str = "") -> StreamServer:
    """Answers with a chunked completions stream, a token every `gap` s (endless when tokens is
    None): each in its own write, so that the client reads them one by one. closing: "reset"
    ends with a RST, "close" with a FIN, after `tokens`."""

    def handle(sock, _addr):
        sock.recv(65536)
        sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        gevent.sleep(gap)  # the head on its own, as a server sends it before the first token
        for k in itertools.count():
            if tokens is not None and k >= tokens:
                break
            data = (
                b"data: "
                + orjson.dumps(
                    {
                        "id": "c",
                        "object": "text_completion",
                        "model": "m",
                        "choices": [{"index": 0, "text": f" w{k}", "finish_reason": None}],
                    }
                )
                + b"\n\n"
            )
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            except OSError:
                return
            gevent.sleep(gap)
        if closing == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def test_the_total_timeout_ends_a_request_waiting_in_the_pump(pumped):
    server = paced_server(None, 0.01)
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        c = client_for(url, "openai-completions", timeouts=Timeouts(2.0, 5.0, 0.6))
        rec = c.send(spec(1000), "total")
    finally:
        server.stop()
    assert rec.outcome is Outcome.TIMEOUT and "total timeout" in rec.error
    assert pumped[0] > 5 and len(rec.chunk_times) > 5
    assert c.pool._socket_queue.qsize() == 0  # the cut connection was closed, not kept


@pytest.mark.parametrize("closing, outcome", [("close", Outcome.TRUNCATED), ("reset", Outcome.TRUNCATED)])
def test_a_close_or_reset_in_the_pump_is_classified_as_without_it(pumped, monkeypatch, closing, outcome):
    out = {}
    server = paced_server(25, 0.005, closing)
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        for pump in (True, False):
            rec = client_for(url, "openai-completions", pump=pump).send(spec(100), f"{closing}-{pump}")
            out[pump] = (rec.outcome, rec.error.split(":")[0], len(rec.chunk_times))
    finally:
        server.stop()
    assert out[True] == out[False] and out[True][0] is outcome and out[True][2] == 25
    assert pumped[0] > 5


def test_a_killed_request_leaves_the_pump_and_counts_as_cancelled(pumped):
    server = paced_server(None, 0.01)
    cancelled = []
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        c = client_for(url, "openai-completions")
        in_pump = gevent.event.Event()
        real_read = PUMP.read

        def read(*args):
            in_pump.set()
            return real_read(*args)

        PUMP.read = read
        try:
            job = gevent.spawn(c.send, spec(1000), "killed", on_cancel=cancelled.append)
            assert in_pump.wait(5)
            job.kill(block=True, timeout=5)
        finally:
            del PUMP.read
    finally:
        server.stop()
    assert job.dead and len(cancelled) == 1 and cancelled[0].outcome is Outcome.CANCELLED
    assert len(cancelled[0].chunk_times) >= 1


def test_a_pump_that_stops_hands_its_streams_back_at_once(pumped):
    """Should the pump's greenlet ever end (killed, or an error of its own), a stream waiting in
    it must not wait for reads nobody takes (before: until its no-progress timeout, 5 s here, then
    counted as a timeout): it ends at once, truncated, saying why; the next stream gets a new pump."""
    server = paced_server(None, 0.01)
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        c = client_for(url, "openai-completions", timeouts=Timeouts(2.0, 5.0, 10.0))
        in_pump = gevent.event.Event()
        real_read = PUMP.read

        def read(*args):
            in_pump.set()
            return real_read(*args)

        PUMP.read = read
        try:
            job = gevent.spawn(c.send, spec(1000), "pump-stops")
            assert in_pump.wait(5)
            gevent.sleep(0.05)  # a few token reads in the pump
            t0 = time.perf_counter()
            PUMP._greenlet.kill(block=True, timeout=5)
            job.join(5)
        finally:
            del PUMP.read
        rec = job.value
        assert rec is not None and time.perf_counter() - t0 < 1, "the stream waited in a stopped pump"
        assert rec.outcome is Outcome.TRUNCATED and "the token pump stopped (GreenletExit)" in rec.error, rec.error
        assert len(rec.chunk_times) > 3
        after = client_for(url, "openai-completions", timeouts=Timeouts(2.0, 5.0, 0.5)).send(spec(1000), "after")
        assert after.outcome is Outcome.TIMEOUT and "total timeout" in after.error
        assert len(after.chunk_times) > 10  # read on by a new pump, not stuck in the stopped one
    finally:
        server.stop()
