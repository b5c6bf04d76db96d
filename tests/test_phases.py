"""Request phases (docs/metrics.md, "Request phases"): connect (and whether the connection was
new), send, wait for the headers, headers to the first token, receive. Measured against a real
server in this process that holds each step back by a known delay; their sum is TTFT; they merge
across workers; and a real run carries them into its results, summary, report and exporter."""

from __future__ import annotations

import json
import re
import ssl
import subprocess

import gevent
import gevent.ssl
import msgpack
import orjson
import pytest
from gevent.server import StreamServer
from support import cli_process, free_port, need_binary, read_records, scrape_until, start_run, stream_client

from llm_locust.metrics.aggregate import PHASES, Aggregate, figures
from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols.base import RequestSpec, Timeouts
from llm_locust.report.summary import format_summary

TOKENS = 4
SPEC = RequestSpec(model="m", prompt="hi", max_tokens=TOKENS)


def _event(k: int) -> bytes:
    choice = {"index": 0, "text": f" w{k}", "finish_reason": "length" if k == TOKENS - 1 else None}
    data = b"data: " + orjson.dumps({"id": "c", "object": "text_completion", "model": "m", "choices": [choice]})
    return b"%x\r\n%s\n\n\r\n" % (len(data) + 2, data)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"%x\r\n%s\r\n0\r\n\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")


class DelayServer:
    """A keep-alive completions server that holds back each step of a request: the TLS handshake
    (`handshake[n]` s after the n-th connection is accepted; the last value for the ones after),
    the response head (`head` s after the whole request is in), the first token (`first` s after
    the head), the rest (`rest` s after it)."""

    def __init__(self, tls=None, handshake=(0.0,), head=0.0, first=0.0, rest=0.0) -> None:
        self.handshake = list(handshake)
        self.delays = (head, first, rest)
        self.accepted = 0
        self.context = None
        if tls:
            self.context = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(*tls)
        self.server = StreamServer(("127.0.0.1", 0), self.handle)
        self.server.start()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_port}"

    def handle(self, sock, _addr) -> None:
        head, first, rest = self.delays
        handshake = self.handshake[min(self.accepted, len(self.handshake) - 1)]
        self.accepted += 1
        try:
            if self.context is not None:
                gevent.sleep(handshake)  # the client's handshake waits for our hello
                sock = self.context.wrap_socket(sock, server_side=True)
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    more = sock.recv(65536)
                    if not more:
                        return
                    buf += more
                top, buf = buf.split(b"\r\n\r\n", 1)
                length = int(re.search(rb"(?i)content-length: (\d+)", top).group(1))
                while len(buf) < length:
                    buf += sock.recv(65536)
                buf = buf[length:]
                gevent.sleep(head)
                sock.sendall(HEAD)
                gevent.sleep(first)
                sock.sendall(_event(0))
                gevent.sleep(rest)
                sock.sendall(b"".join(_event(k) for k in range(1, TOKENS)) + END)
        except OSError:
            pass

    def stop(self) -> None:
        self.server.stop(timeout=1)


def _tls_client(url: str, cert: str):
    """The runtime's StreamClient over gevent's TLS sockets, trusting `cert`."""
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_adapter
    from llm_locust.transport.http import StreamClient

    http = HTTPClient.from_url(
        url,
        concurrency=2,
        connection_timeout=2.0,
        ssl_options={"ca_certs": cert},
        ssl_context_factory=lambda: gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT),
    )
    return StreamClient(http, url, get_adapter("openai-completions"), Timeouts(2.0, 5.0, 10.0))


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl, an EC key: a fast handshake)."""
    openssl = need_binary("openssl", "apt-get install -y openssl")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return str(cert), str(key)


# ------------------------------------------------------------------ the record and the aggregate


def _record(i: int, t0: float, written: float, head: float, first: float, end: float, new: bool) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        api="openai-completions",
        t_sched=t0,
        t_sent=t0,
        wall_sent=1_000_000.0 + t0,
        t_written=t0 + written,
        t_headers=t0 + head,
        t_first=t0 + first,
        t_end=t0 + end,
        chunk_times=[t0 + first, t0 + end],
        chunk_tokens=[1, 1],
        n_out=2,
        connect=0.004 if new else 0.0,
        new_connection=new,
    )


def test_a_requests_phases_add_up_to_its_ttft_and_e2e_even_when_its_stamps_cross():
    ok = _record(0, 100.0, 0.001, 0.030, 0.050, 0.250, True)
    assert ok.phases() == pytest.approx((0.004, 0.001, 0.029, 0.020, 0.200))
    # a kernel receive stamp before the write's return (the server answered as the bytes went out):
    # the write is taken as done when the head came, so the parts still add up to TTFT
    crossed = _record(1, 100.0, 0.012, 0.010, 0.050, 0.060, False)
    connect, send, wait, first, receive = crossed.phases()
    assert (connect, wait) == (0.0, 0.0) and send == pytest.approx(0.010)
    for rec in (ok, crossed):
        _, send, wait, first, receive = rec.phases()
        assert send + wait + first == pytest.approx(rec.ttft, abs=1e-12)
        assert send + wait + first + receive == pytest.approx(rec.e2e, abs=1e-12)
    # before a first token there are no phases; without a send stamp (gRPC) no send phase
    assert _record(2, 1.0, 0.001, 0.002, 0.003, 0.004, False).phases() is not None
    bare = RequestRecord(request_id="g", api="vllm-grpc", t_sched=1.0, t_sent=1.0, wall_sent=1.0, t_headers=1.01)
    assert bare.phases() is None
    bare.t_first = bare.t_end = 1.03
    assert bare.phases() == pytest.approx((None, None, 0.01, 0.02, 0.0), abs=1e-12)


def test_phase_figures_merge_across_workers_as_one_worker_would_count_them():
    recs = [_record(i, 10.0 + i, 0.0005 * i, 0.01 + 0.001 * i, 0.05 + 0.002 * i, 0.3, i % 5 == 0) for i in range(40)]
    one, a, b = Aggregate(), Aggregate(), Aggregate()
    for i, r in enumerate(recs):
        one.add(r)
        (a if i % 2 else b).add(r)
    merged = Aggregate()
    for worker in (a, b):  # over the wire, as a worker's report goes to the master
        merged.merge_wire(msgpack.unpackb(msgpack.packb(worker.to_wire()), raw=False))
    want, got = figures(one)["phases"], figures(merged)["phases"]
    assert got == want
    assert got["connections"] == {"new": 8, "reused": 32} and got["connect_new"]["count"] == 8
    assert {p: got[p]["count"] for p in PHASES} == dict.fromkeys(PHASES, 40)
    ttft, e2e = figures(merged)["latency"]["ttft"]["mean"], figures(merged)["latency"]["e2e"]["mean"]
    parts = got["send"]["mean"] + got["wait"]["mean"] + got["first_token"]["mean"]
    assert parts == pytest.approx(ttft, abs=2e-6) and parts + got["receive"]["mean"] == pytest.approx(e2e, abs=3e-6)
    text = format_summary(figures(merged))
    assert "TTFT mean 89.0 ms = send 9.8 + wait 19.8 + first token 59.5 (phase means)" in text, text
    assert "connections: 8 new (connect p50 4.0 ms, max 4.0 ms), 32 kept alive" in text


def test_a_run_without_phases_says_nothing_of_them():
    agg = Aggregate()
    agg.add(RequestRecord(request_id="e", api="openai-embeddings", t_sched=1.0, t_sent=1.0, wall_sent=1.0, t_end=1.1))
    assert "phases" not in figures(agg) and "phases (ms)" not in format_summary(figures(agg))


# ------------------------------------------------------------------ against a real server


def test_a_kept_alive_connection_has_no_connect_and_a_new_one_says_so():
    srv = DelayServer()
    try:
        client = stream_client(srv.url, "openai-completions", keep_text=False)
        recs = [client.send(SPEC, f"r{i}") for i in range(3)]
    finally:
        srv.stop()
    assert all(r.ok for r in recs), [(r.outcome, r.error) for r in recs]
    assert srv.accepted == 1
    assert recs[0].new_connection is True and recs[0].connect > 0
    assert [(r.new_connection, r.connect) for r in recs[1:]] == [(False, 0.0), (False, 0.0)]
    for r in recs:
        assert r.t_sent <= r.t_written <= r.t_headers <= r.t_first <= r.t_end


@pytest.mark.timing
def test_each_phase_measures_what_the_server_held_it_back(tls_files):
    delays = {"connect": 0.060, "wait": 0.090, "first_token": 0.120, "receive": 0.050}
    srv = DelayServer(
        tls_files,
        handshake=(0.0, delays["connect"]),
        head=delays["wait"],
        first=delays["first_token"],
        rest=delays["receive"],
    )
    try:
        # a first connection, not held back, takes the process's one-time TLS costs (loading the
        # CA file, the first handshake's set-up): the one held back is then timed alone
        _tls_client(srv.url, tls_files[0]).send(SPEC, "warm")
        client = _tls_client(srv.url, tls_files[0])
        recs = [client.send(SPEC, f"r{i}") for i in range(2)]
    finally:
        srv.stop()
    assert all(r.ok for r in recs), [(r.outcome, r.error) for r in recs]
    assert srv.accepted == 2
    for i, r in enumerate(recs):
        connect, send, wait, first, receive = r.phases()
        got = {"connect": connect, "wait": wait, "first_token": first, "receive": receive}
        want = {**delays, "connect": delays["connect"] if i == 0 else 0.0}
        # each within a few ms above its delay (a TLS handshake's own work, the loop's wake-ups)
        off = {k: round((got[k] - want[k]) * 1000, 2) for k in want if not -0.001 <= got[k] - want[k] <= 0.015}
        assert not off, (i, off, got)
        assert 0 <= send < 0.005 and r.new_connection is (i == 0)
        assert send + wait + first == pytest.approx(r.ttft, abs=1e-9)
    assert recs[1].connect == 0.0


def test_grpc_phases_are_connect_and_what_follows_its_send():
    from test_grpc_h2 import Server, ok_reply

    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(ok_reply)
    c = H2GrpcClient(f"127.0.0.1:{srv.port}", Timeouts(connect=2.0, no_progress=2.0, total=5.0))
    try:
        recs = [c.send(RequestSpec(prompt="hi", max_tokens=4), f"r{i}") for i in range(2)]
    finally:
        c.close()
        srv.close()
    assert all(r.ok for r in recs), [(r.outcome, r.error) for r in recs]
    assert recs[0].new_connection is True and recs[0].connect > 0
    assert (recs[1].new_connection, recs[1].connect) == (False, 0.0)
    for r in recs:
        connect, send, wait, first, receive = r.phases()
        assert send is None and wait + first == pytest.approx(r.ttft, abs=1e-9)  # its t_sent is after its write


# ------------------------------------------------------------------ a real run


def test_a_grpc_connection_opened_by_the_warm_up_is_no_requests_connect_phase():
    """An open-loop replay opens its gRPC connection before "go" (warm_up): the first request
    then goes out on a kept connection and spent nothing connecting. Charging the warm-up's open
    to it (as this did) gave the first request a connect phase it never waited for."""
    from test_grpc_h2 import Server, ok_reply

    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(ok_reply)
    c = H2GrpcClient(f"127.0.0.1:{srv.port}", Timeouts(connect=2.0, no_progress=2.0, total=5.0))
    try:
        c.warm_up()
        recs = [c.send(RequestSpec(prompt="hi", max_tokens=4), f"r{i}") for i in range(2)]
    finally:
        c.close()
        srv.close()
    assert all(r.ok for r in recs), [(r.outcome, r.error) for r in recs]
    assert [(r.new_connection, r.connect) for r in recs] == [(False, 0.0), (False, 0.0)]


def test_a_run_carries_the_phases_into_results_summary_report_and_exporter(tmp_path):
    """Two workers against the simulator: the merged phases in the results (the run's and each
    step's), the summary, the HTML report and the Prometheus exposition."""
    from llm_locust.sim.process import SimProcess

    port = free_port()
    results, log = tmp_path / "r.json", tmp_path / "records"
    with SimProcess(slots=8) as sim:
        proc = start_run(
            "--host", sim.url, "--workers", "2", "-u", "4", "-t", "8s", "--max-tokens-cap", "16",
            "--prometheus-port", str(port), "--results", str(results), "--record-log", str(log),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            held, text = scrape_until(
                port,
                lambda t: re.search(r'llm_locust_request_phase_seconds_count\{phase="first_token"\} [1-9]', t),
                timeout=40,
                every=0.5,
            )
        finally:
            out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    assert held, text[-2000:]
    assert 'llm_locust_connections_total{connection="new"}' in text

    r = json.loads(results.read_text())
    ph, lat = r["summary"]["phases"], r["summary"]["latency"]
    ok = r["summary"]["ok"]
    assert {p: ph[p]["count"] for p in PHASES} == dict.fromkeys(PHASES, ok)
    assert ph["connections"]["new"] + ph["connections"]["reused"] == ok
    assert 4 <= ph["connections"]["new"] < ok  # each user opens its connection, then keeps it
    # each sample is kept to the microsecond: the means add up within a few microseconds
    parts = ph["send"]["mean"] + ph["wait"]["mean"] + ph["first_token"]["mean"]
    assert parts == pytest.approx(lat["ttft"]["mean"], abs=2e-6)
    assert parts + ph["receive"]["mean"] == pytest.approx(lat["e2e"]["mean"], abs=3e-6)
    assert all(s["phases"]["wait"]["count"] == s["ok"] for s in r["steps"] if s["ok"]), r["steps"]

    # every record: connect 0 on a kept-alive connection; its stamps in order
    rows = [row for row in read_records(log) if row["outcome"] == "ok"]
    assert len(rows) == ok
    assert sum(row["new_connection"] for row in rows) == ph["connections"]["new"]
    assert all(row["connect"] == 0.0 for row in rows if not row["new_connection"])
    assert all(0 <= row["written"] and row["headers"] <= row["first"] for row in rows)

    assert "phases (ms)" in out and "TTFT mean" in out and "kept alive" in out, out[-3000:]
    html = tmp_path / "r.html"
    p = cli_process("report", str(results), "-o", str(html), timeout=60)
    assert p.returncode == 0, p.stderr
    page = html.read_text()
    assert "id='phases'" in page and 'id="phases-table"' in page and "TTFT mean" in page


def test_a_ladders_summary_has_the_phases_per_step():
    """Issue 26 item 6: percentiles per step in the summary too (p50/p99 of each phase, a row a
    step), from the steps' own figures; nothing when no step timed them."""
    from llm_locust.report.summary import step_phase_lines

    def ph(first: float) -> dict:
        means = {"connect": 0.0, "send": 0.0003, "wait": 0.001, "first_token": first, "receive": 0.2}
        return {k: {"count": 4, "p50": v, "p99": 2 * v} for k, v in means.items()}

    lines = step_phase_lines([(1, ph(0.0144)), (2, None), (3, ph(0.0469))])
    assert lines[0] == "request phases per step (ms)" and lines[1].split()[:3] == ["step", "Connect", "p50/p99"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[3:]}
    assert rows == {"1": ["0.0/0.0", "0.3/0.6", "1.0/2.0", "14.4/28.8", "200.0/400.0"],
                    "3": ["0.0/0.0", "0.3/0.6", "1.0/2.0", "46.9/93.8", "200.0/400.0"]}  # fmt: skip
    assert step_phase_lines([(1, None)]) == []
