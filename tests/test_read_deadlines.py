"""Every request ends within its timeouts, on every read path (issue 24, item 1 and its class).

A server that stalls must end the request at its no-progress limit (`timeout`, "no data for
..."), within the watchdog's granularity (a tenth of the limit, at most 100 ms) of the last byte
it read; a server that resumes before the limit must give a whole reply (`ok`); nothing may wait
for the total timeout. Each read path is driven with the same matrix: a stall before the first
token, after it and mid-stream, each just before, at and just after the limit, plus a crowd of
streams whose stall ends within a few percent of the limit (the race of item 1: the first token
arriving in the same loop iteration as the watchdog's close). The HTTP paths run it while a busy
greenlet holds the process 10 ms of every 14, as an overloaded replay does, so that a socket's
data and the watchdog's timer are seen in one loop iteration; and that moment itself is made
for the pump and TLS (test_a_first_token_that_comes_as_the_watchdog_fires...):

- HTTP/1.1: the general path (token reads off), token reads in the stream's own greenlet, token
  reads in the pump (transport/pump.py), TLS (reads without kernel stamps), a one-body JSON reply;
- gRPC: our HTTP/2 reader (transport/grpc_h2.py) and grpcio's client (transport/grpc_io.py, in a
  gevent-patched child process, as under Locust), against an in-process HTTP/2 stand-in; and a
  request whose body waits for send window the server never opens.

Times are compared with the server's own log (the same monotonic clock: the servers run in this
process, the grpcio client's child reads the same clock)."""

from __future__ import annotations

import json
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import gevent
import gevent.event
import gevent.ssl
import hpack
import orjson
import pytest
from gevent.server import StreamServer
from geventhttpclient import HTTPClient
from support import ROOT, json_client, need_binary, read_records, run_ok, stream_client
from test_grpc_h2 import COMPLETE, chunk, frame, grpc_msg

from llm_locust.protocols import get_adapter
from llm_locust.protocols.base import RequestSpec, Timeouts
from llm_locust.transport.http import StreamClient
from llm_locust.transport.pump import PUMP

pytestmark = pytest.mark.timing  # asserts ends within ~100 ms of where they are due

LIMIT = 0.5  # the no-progress limit of every request here
TOTAL = 6.0  # the total timeout: far past every case's end, so a request that waits for it shows
SLACK = 0.25  # scheduling, the busy greenlet's holds (10-20 ms), the servers' own pace
TOKENS = 12
GAP = 0.01  # between tokens


@dataclass(frozen=True)
class Case:
    after: int  # tokens sent before the stall (0: the stall comes before the first token)
    stall: float  # seconds
    expect: str  # "ok", "timeout" or "either" (a stall that ends at the limit)

    @property
    def name(self) -> str:
        where = {0: "before the first token", 1: "after the first token"}.get(self.after, "mid-stream")
        return f"stall {self.stall:.3f}s {where}"


def matrix(crowd: int = 30) -> list[Case]:
    """Stalls just before (60%), at and just after (150%) the limit, at three places; then a
    crowd whose stalls end between 96% and 106% of it, before or after the first token."""
    cases = [
        Case(after, LIMIT * share, expect)
        for after in (0, 1, TOKENS // 2)
        for share, expect in ((0.6, "ok"), (1.0, "either"), (1.5, "timeout"))
    ]
    cases += [Case(k % 2, LIMIT * (0.96 + 0.1 * k / crowd), "either") for k in range(crowd)]
    return cases


class Log:
    """What the server did, per request id, on the monotonic clock: when it wrote the last bytes
    before the stall, when it began to write again, and when it wrote the reply's end."""

    def __init__(self) -> None:
        self.stall: dict[str, float] = {}
        self.resume: dict[str, float] = {}
        self.done: dict[str, float] = {}


Result = tuple[str, str | None, float, list[float]]


def result(rec) -> Result:
    """(outcome, error, when send returned, the record's times: sent, headers, each token)."""
    times = [rec.t_sent, *([rec.t_headers] if rec.t_headers is not None else []), *rec.chunk_times]
    return rec.outcome.value, rec.error, time.perf_counter(), times


class Starved:
    """The longest this process went without running a thread, and (`loop`) a greenlet, that ask
    to run every 5 ms: the machine's own stalls (other jobs on its cores) and how late the loop
    came round, added to every bound below, so that a loaded machine does not fail a case that a
    hang still fails (a request that hangs leaves the process free to run)."""

    def __init__(self, loop: bool = False) -> None:
        self.most = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, args=(time.sleep,), daemon=True)
        self._greenlet = gevent.spawn(self._tick, gevent.sleep) if loop else None

    def __enter__(self) -> Starved:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(1)
        if self._greenlet is not None:
            self._greenlet.join(1)

    def _tick(self, sleep) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            sleep(0.005)
            self.most = max(self.most, time.perf_counter() - t0 - 0.005)


def check(cases: dict[str, Case], results: dict[str, Result], log: Log, starved: float, limit: float = LIMIT) -> None:
    """Each request ended as its case says: a timeout no sooner than the limit after the last
    thing it heard, and within the watchdog's grain (and slack) of the server's last write
    before its stall; a whole reply soon after the server wrote its end. A process the machine
    starved for over a tenth of the limit may see either outcome where one was due."""
    assert set(results) == set(cases)
    bad = []
    for rid, case in cases.items():
        outcome, error, returned, times = results[rid]
        expect = case.expect if starved < limit / 10 else "either"
        if outcome == "timeout" and error == f"no data for {limit:g}s" and rid not in log.stall:
            if expect != "either":  # the server was starved before it wrote its first bytes
                bad.append((case.name, outcome, error, "before the server wrote its first bytes"))
        elif outcome == "timeout" and error == f"no data for {limit:g}s":
            waited = returned - log.stall[rid]
            # what the request heard before the server wrote again (a read taken as the watchdog
            # fired may hold what came after)
            heard = max(t for t in times if t < log.resume.get(rid, float("inf")))
            if expect == "ok" or returned - heard < limit or waited > limit + limit / 10 + SLACK + starved:
                bad.append((case.name, outcome, error, f"ended {waited:.3f}s after the stall began"))
        elif outcome == "ok":
            late = returned - log.done[rid]
            if expect == "timeout" or not -0.01 <= late <= SLACK + starved:
                bad.append((case.name, outcome, error, f"ended {late:.3f}s after the reply's end"))
        else:
            bad.append((case.name, outcome, error, "neither a whole reply nor the no-progress timeout"))
    assert not bad, (f"starved up to {starved:.3f}s", bad)


# ------------------------------------------------------------------ HTTP/1.1


def _token_event(k: int) -> bytes:
    choice = {"index": 0, "text": f" w{k}", "finish_reason": "length" if k == TOKENS - 1 else None}
    data = b"data: " + orjson.dumps({"id": "c", "object": "text_completion", "model": "m", "choices": [choice]})
    return data + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


EMBEDDING = orjson.dumps(
    {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.125] * 2000}],
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }
)


def http_server(cases: dict[str, Case], log: Log, tls: tuple[str, str] | None = None) -> StreamServer:
    """Answers each request as its case says: a paced completions stream (a token every GAP s,
    each in its own write), or for /v1/embeddings one JSON body in TOKENS parts; the stall
    after `after` tokens (parts)."""

    def handle(sock, _addr):
        head = b""
        while b"\r\n\r\n" not in head:
            more = sock.recv(65536)
            if not more:
                return
            head += more
        found = re.search(rb"(?i)x-request-id: (\S+)", head)
        rid = found.group(1).decode() if found else ""
        case = cases[rid]
        if b"/v1/embeddings" in head.split(b"\r\n", 1)[0]:
            step = len(EMBEDDING) // TOKENS + 1
            parts = [EMBEDDING[i : i + step] for i in range(0, len(EMBEDDING), step)]
            start = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            writes = [start % len(EMBEDDING), *parts]
        else:
            start = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            end = _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
            writes = [start, *(_chunked(_token_event(k)) for k in range(TOKENS)), end]
        try:
            for i, data in enumerate(writes):
                if i:
                    gevent.sleep(case.stall if i == case.after + 1 else GAP)
                if i == case.after + 1:
                    log.resume[rid] = time.perf_counter()
                sock.sendall(data)
                if i == case.after:
                    log.stall[rid] = time.perf_counter()
            log.done[rid] = time.perf_counter()
            sock.recv(1)  # until the client closes or sends its next request
        except OSError:
            pass

    ssl_args = {}
    if tls:
        context = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        ssl_args["ssl_context"] = context
    server = StreamServer(("127.0.0.1", 0), handle, **ssl_args)
    server.start()
    return server


def busy(stop: gevent.event.Event, hold: float, rest: float) -> None:
    """Holds the process `hold` s of every hold + rest: a socket's data and the watchdog's timer
    then come due in the same loop iteration, as in an overloaded run."""
    while not stop.is_set():
        t0 = time.perf_counter()
        while time.perf_counter() < t0 + hold:
            pass
        gevent.sleep(rest)


def run_http(client, cases: dict[str, Case], spec: RequestSpec, hold=0.010, rest=0.004) -> dict[str, Result]:
    """Every case's request at once, while `busy` holds the process."""
    results: dict[str, Result] = {}

    def one(rid: str) -> None:
        results[rid] = result(client.send(spec, rid))

    stop = gevent.event.Event()
    hog = gevent.spawn(busy, stop, hold, rest)
    try:
        jobs = [gevent.spawn(one, rid) for rid in cases]
        gevent.joinall(jobs, timeout=TOTAL + 5)
    finally:
        stop.set()
        hog.join(1)
    return results


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl; an EC key: 40 handshakes at once in a
    process held busy must not take seconds)."""
    openssl = need_binary("openssl", "apt-get install -y openssl")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
        + ["-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return str(cert), str(key)


TIMEOUTS = Timeouts(2.0, LIMIT, TOTAL)
STREAM_SPEC = RequestSpec(model="m", prompt="hi", max_tokens=TOKENS)


def http_client(path: str, url: str, tls, timeouts: Timeouts, n: int):
    """The client of one HTTP read path for `url`, with `n` connections; and the spec it sends."""
    if path == "json":
        spec = RequestSpec(model="m", prompt="", max_tokens=0, extra_body={"input": "hi"})
        return json_client(url, timeouts=timeouts, concurrency=n), spec
    if tls:  # gevent's TLS sockets, as under Locust's patching (unpatched, the stdlib's would block)
        http = HTTPClient.from_url(
            url,
            concurrency=n,
            connection_timeout=2.0,
            ssl_options={"ca_certs": tls[0]},
            ssl_context_factory=lambda: gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT),
        )
        return StreamClient(http, url, get_adapter("openai-completions"), timeouts), STREAM_SPEC
    # the general path reads every byte the general way; "token reads" without the pump
    token_reads, pump = path != "general", path == "pump"
    client = stream_client(
        url, "openai-completions", timeouts=timeouts, keep_text=False, concurrency=n, token_reads=token_reads, pump=pump
    )
    return client, STREAM_SPEC


def run_path(path: str, cases: dict[str, Case], tls, limit: float = LIMIT, hold=0.010, rest=0.004):
    """Every case's request over one HTTP read path at once, against `http_server`; the server's
    log, the results and how long the machine starved this process meanwhile."""
    log = Log()
    server = http_server(cases, log, tls)
    try:
        url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_port}"
        client, spec = http_client(path, url, tls, Timeouts(2.0, limit, TOTAL), len(cases))
        with Starved(loop=True) as starved:
            results = run_http(client, cases, spec, hold, rest)
    finally:
        server.stop()
    return log, results, starved.most


def read_path(path: str, monkeypatch, request):
    """TLS files for TLS (its reads have no kernel stamps, so no pump; token reads on)."""
    return request.getfixturevalue("tls_files") if path == "tls" else None


@pytest.mark.parametrize("path", ["general", "token reads", "pump", "tls", "json"])
def test_every_http_request_ends_within_its_timeouts(path, monkeypatch, request):
    """The matrix over one HTTP read path, all at once, the process held 10 ms of every 14."""
    tls = read_path(path, monkeypatch, request)
    cases = {f"{path.replace(' ', '-')}-{i}": c for i, c in enumerate(matrix())}
    log, results, starved = run_path(path, cases, tls, hold=0.010, rest=0.004)
    check(cases, results, log, starved)
    assert PUMP._streams == {}  # every socket left the pump, however its request ended


class FirstTokenAtTheLimit:
    """A server (a thread: it writes while the client's process is held) whose every reply is the
    head, then, `limit` + 10 ms later, a short paced stream; `head_at` is when it wrote the head."""

    def __init__(self, limit: float, tls) -> None:
        self.limit = limit
        self.head_at: float | None = None
        self.context = None
        if tls:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(*tls)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
                if self.context is not None:
                    conn = self.context.wrap_socket(conn, server_side=True)
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        start = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(start)
                self.head_at = head = time.perf_counter()
                time.sleep(max(0.0, head + self.limit + 0.01 - time.perf_counter()))
                for k in range(TOKENS):
                    conn.sendall(_chunked(_token_event(k)))
                    time.sleep(GAP)
                conn.sendall(_chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
                conn.recv(1)
            except OSError:
                pass

    def hold_across_the_limit(self) -> None:
        """Holds the client's process from 20 ms before the limit to 60 ms after it: the
        watchdog's check (every 30 ms) and the first token both come due in the hold, and are
        seen in the one loop iteration after it, the watchdog's timer first."""
        while self.head_at is None:
            gevent.sleep(0.001)
        head = self.head_at
        gevent.sleep(max(0.0, head + self.limit - 0.02 - time.perf_counter()))
        while time.perf_counter() < head + self.limit + 0.06:
            pass

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("path", ["pump", "tls"])
def test_a_first_token_that_comes_as_the_watchdog_fires_ends_the_request_in_its_timeouts(path, monkeypatch, request):
    """Issue 24 item 1: an overloaded replay waited for its total timeout, with no connection left,
    on a request whose first token came as its no-progress limit passed. The watchdog closed the
    socket while the request's greenlet waited for that token; gevent defers such a close until
    the wait is cancelled, and the token, seen in the same loop iteration, woke the greenlet
    first: it read the token, took the stream's shape and went to wait in the pump after the
    fire; the close then dropped the socket from the pump's epoll set unseen, and the watchdog,
    having fired, never woke it. Over TLS the same moment made the next read raise ValueError (a
    closed SSL socket): a stream_error. Here that moment is made: the process is held across the
    limit while the first token arrives, for 4 requests in turn (before the fix the first of them
    failed, 3 runs of 3, over both paths)."""
    tls = read_path(path, monkeypatch, request)
    limit = 0.3
    server = FirstTokenAtTheLimit(limit, tls)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{server.port}"
    try:
        for k in range(4):
            client, spec = http_client(path, url, tls, Timeouts(2.0, limit, 3.0), 1)
            server.head_at = None
            hold = gevent.spawn(server.hold_across_the_limit)
            t0 = time.perf_counter()
            rec = client.send(spec, f"first-{k}")
            took = time.perf_counter() - t0
            hold.join(1)
            assert rec.outcome.value in ("ok", "timeout"), (k, rec.outcome, rec.error)
            assert rec.ok or rec.error == f"no data for {limit:g}s", (k, rec.error)
            assert took < limit + 0.5, (k, rec.outcome, rec.error, took)  # not the total timeout (3 s)
            assert PUMP._streams == {}
    finally:
        server.close()


def test_an_overloaded_replay_ends_with_its_work(tmp_path):
    """Issue 24 item 1 as reported, the issue's done-when: `run --replay --speed 5` on the bundled
    sample against the built-in 8-slot simulator, limits 5 s without progress and 40 s in all:
    most requests wait in the simulator's queue past 5 s. Before, a request whose first token
    came as its limit passed waited for the total timeout with no connection left (2 runs of 3
    by hand: 58-60 s for 28-29 s of work, the throughput halved over that time). Now the run
    ends within the no-progress limit of the last byte it read, its figures over that time."""
    results, log = tmp_path / "r.json", tmp_path / "records.jsonl"
    run_ok(
        *("--replay", "--speed", "5", "--no-progress-timeout", "5s", "--request-timeout", "40s"),
        *("--results", str(results), "--record-log", str(log)),
        rc=(0, 1),  # 1: the error rate (most requests time out in the queue)
        timeout=300,
    )
    recs = read_records(log)
    assert len(recs) == 400 and not [r["id"] for r in recs if "total timeout" in (r["error"] or "")]
    t0 = min(r["t_sent"] for r in recs)
    heard = max(r["t_sent"] + max([r["headers"] or 0.0, *(r["chunks"] or [])]) for r in recs) - t0
    ended = max(r["t_sent"] + r["end"] for r in recs) - t0
    assert ended <= heard + 5 + 1, (heard, ended)  # the last request ends in its limit (+ the grain, slack)
    duration = json.loads(results.read_text())["summary"]["duration_s"]
    assert duration <= ended + 1, (duration, ended)


# ------------------------------------------------------------------ gRPC over HTTP/2

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_FRAME = struct.Struct(">HBBBL")


class H2Server:
    """A stand-in for vLLM's gRPC server: each Generate call (its request id names its case in
    `cases`) is answered with the response headers, TOKENS one-token messages GAP s apart in their
    own DATA frames with the case's stall, the `complete` message and the trailers. Threads: one
    per connection, one per call (grpcio multiplexes calls on one connection). `window`: the
    connection's and every stream's send window it gives the client, never opened further;
    `ping`: it PINGs the client every 0.1 s (a peer that keeps a waiting request busy)."""

    def __init__(self, cases: dict[str, Case], log: Log, window: int | None = None, ping: bool = False) -> None:
        self.cases, self.log, self.window, self.ping = cases, log, window, ping
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        lock = threading.Lock()
        enc = hpack.Encoder()
        bodies: dict[int, bytes] = {}
        try:
            with conn:
                if self.window is None:
                    conn.sendall(frame(4, 0, 0))
                else:
                    conn.sendall(frame(4, 0, 0, struct.pack(">HL", 0x4, self.window)))
                if self.ping:
                    threading.Thread(target=self._ping, args=(conn, lock), daemon=True).start()
                buf = b""
                while True:
                    more = conn.recv(65536)
                    if not more:
                        return
                    buf += more
                    if buf.startswith(PREFACE):
                        buf = buf[len(PREFACE) :]
                    buf = self._frames(conn, lock, enc, bodies, buf)
        except OSError:
            pass

    def _frames(self, conn, lock, enc, bodies: dict[int, bytes], buf: bytes) -> bytes:
        while len(buf) >= 9:
            hi, lo, ftype, flags, sid = _FRAME.unpack_from(buf)
            n = hi << 8 | lo
            if len(buf) < 9 + n:
                break
            payload, buf = buf[9 : 9 + n], buf[9 + n :]
            with lock:
                if ftype == 4 and not flags & 1:
                    conn.sendall(frame(4, 1, 0))
                elif ftype == 6 and not flags & 1:
                    conn.sendall(frame(6, 1, 0, payload))
                elif ftype == 0 and n and self.window is None:  # the window back, as it is used
                    conn.sendall(frame(8, 0, 0, struct.pack(">L", n)) + frame(8, 0, sid, struct.pack(">L", n)))
            if ftype == 0:
                bodies[sid] = bodies.get(sid, b"") + payload
                if flags & 1:
                    found = re.search(rb"dl\.[a-z0-9]+\.\d+", bodies.pop(sid))
                    rid = found.group(0).decode() if found else ""
                    args = (conn, lock, enc, sid, rid)
                    threading.Thread(target=self._answer, args=args, daemon=True).start()
        return buf

    def _answer(self, conn, lock, enc, sid: int, rid: str) -> None:
        case = self.cases[rid]
        head = [(":status", "200"), ("content-type", "application/grpc")]
        writes = [None, *(frame(0, 0, sid, grpc_msg(chunk(k))) for k in range(TOKENS)), None]
        try:
            for i, data in enumerate(writes):
                if i:
                    time.sleep(case.stall if i == case.after + 1 else GAP)
                if i == case.after + 1:
                    self.log.resume[rid] = time.perf_counter()
                with lock:  # a header block is encoded as it is written (HPACK's table is the connection's)
                    if i == 0:
                        data = frame(1, 4, sid, enc.encode(head))
                    elif data is None:
                        trailers = enc.encode([("grpc-status", "0")])
                        data = frame(0, 0, sid, grpc_msg(COMPLETE)) + frame(1, 5, sid, trailers)
                    conn.sendall(data)
                    if i == case.after:
                        self.log.stall[rid] = time.perf_counter()
            self.log.done[rid] = time.perf_counter()
        except OSError:
            pass

    def _ping(self, conn, lock) -> None:
        while not self.closed:
            time.sleep(0.1)
            try:
                with lock:
                    conn.sendall(frame(6, 0, 0, b"12345678"))
            except OSError:
                return


def test_every_grpc_request_ends_within_its_timeouts_over_our_http2_reader():
    """The matrix over our HTTP/2 reader: each request on its own connection (its reads wait on
    the socket with the no-progress limit, or less when the total deadline is nearer)."""
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    cases = {f"dl.h2.{i}": c for i, c in enumerate(matrix())}
    log = Log()
    server = H2Server(cases, log)
    client = H2GrpcClient(f"127.0.0.1:{server.port}", TIMEOUTS)
    results: dict[str, Result] = {}

    def one(rid: str) -> None:
        results[rid] = result(client.send(RequestSpec(prompt="hi", max_tokens=TOKENS), rid))

    threads = [threading.Thread(target=one, args=(rid,), daemon=True) for rid in cases]  # its sockets block
    try:
        with Starved() as starved:
            for t in threads:
                t.start()
            for t in threads:
                t.join(TOTAL + 5)
    finally:
        client.close()
        server.close()
    check(cases, results, log, starved.most)


GRPCIO_CLIENT = """
import json, sys, time
from gevent import monkey; monkey.patch_all()
import gevent
from llm_locust.protocols.base import RequestSpec, Timeouts
from llm_locust.transport.grpc_io import GrpcStreamClient

port, rids, limit, total, tokens = json.loads(sys.argv[1])
client = GrpcStreamClient(f"127.0.0.1:{port}", Timeouts(5.0, limit, total))
client.warm_up()
out = {}

def one(rid):
    rec = client.send(RequestSpec(prompt="hi", max_tokens=tokens), rid)
    times = [rec.t_sent, *([rec.t_headers] if rec.t_headers is not None else []), *rec.chunk_times]
    out[rid] = (rec.outcome.value, rec.error, time.perf_counter(), times)

lag = [0.0]

def tick():  # this process's own stalls (its loop, the machine): the test adds them to its bounds
    while True:
        t0 = time.perf_counter()
        gevent.sleep(0.005)
        lag[0] = max(lag[0], time.perf_counter() - t0 - 0.005)

ticker = gevent.spawn(tick)
gevent.joinall([gevent.spawn(one, rid) for rid in rids], timeout=total + 5)
ticker.kill()
print(json.dumps([out, lag[0]]), flush=True)
"""


def test_every_grpc_request_ends_within_its_timeouts_over_grpcio():
    """grpcio's client, in a gevent-patched process as under Locust (its watchdog is a timer in
    gevent's hub), against the same stand-in; its calls share one connection."""
    pytest.importorskip("grpc")
    cases = {f"dl.grpcio.{i}": c for i, c in enumerate(matrix())}
    log = Log()
    server = H2Server(cases, log)
    try:
        arg = json.dumps([server.port, list(cases), LIMIT, TOTAL, TOKENS])
        with Starved() as starved:
            p = subprocess.run(
                [sys.executable, "-c", GRPCIO_CLIENT, arg], capture_output=True, text=True, timeout=60, cwd=ROOT
            )
    finally:
        server.close()
    assert p.returncode == 0, p.stderr[-3000:]
    out, lag = json.loads(p.stdout.splitlines()[-1])
    results: dict[str, Result] = {rid: (o, e, r, t) for rid, (o, e, r, t) in out.items()}
    check(cases, results, log, max(starved.most, lag))


@pytest.mark.parametrize(
    "no_progress, total, ping, error",
    [(0.5, TOTAL, False, "no data for 0.5s"), (30.0, 1.0, True, "total timeout 1s")],
)
def test_a_grpc_request_whose_body_waits_for_a_window_never_opened_ends_within_its_timeouts(
    no_progress, total, ping, error
):
    """A request past the server's 64 KiB window waits for its window updates; a server that
    never sends one ends it at the no-progress limit when it sends nothing, and at the total
    timeout when it keeps the connection busy with PINGs (before: the wait had neither bound: the
    connect timeout's, or none)."""
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    server = H2Server({}, Log(), window=65535, ping=ping)
    client = H2GrpcClient(f"127.0.0.1:{server.port}", Timeouts(5.0, no_progress, total))
    done: list = []

    def one() -> None:
        rec = client.send(RequestSpec(prompt="word " * 20_000, max_tokens=4), "dl.window.0")
        done.append((rec.outcome.value, rec.error, time.perf_counter() - t0))

    t0 = time.perf_counter()
    thread = threading.Thread(target=one, daemon=True)
    thread.start()
    thread.join(10)
    client.close()
    server.close()
    assert done, "the request did not end"
    outcome, text, took = done[0]
    due = min(no_progress, total)
    assert (outcome, text) == ("timeout", error)
    assert due - 0.01 <= took <= due + SLACK, took
