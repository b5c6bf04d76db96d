"""Our HTTP/2 gRPC reader (transport.grpc_h2) against a real socket server that answers each call
with chosen frames: every shape a server can send ends as the same classified outcome grpcio's
client gives (transport.grpc_io.status_outcome), never a crash or a hang. The happy path and
the real server's own failures are in test_real_grpc.py (both clients, vLLM's gRPC server)."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_locust.metrics.records import Outcome
from llm_locust.protocols import grpc_vllm
from llm_locust.protocols.base import RequestSpec, StreamState, Timeouts
from llm_locust.transport.grpc_h2 import _readable

_FRAME = struct.Struct(">HBBBL")


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(payload) >> 8, len(payload) & 0xFF, ftype, flags, sid) + payload


def grpc_msg(m: bytes) -> bytes:
    return b"\x00" + len(m).to_bytes(4, "big") + m


def chunk(i: int) -> bytes:
    return grpc_vllm._len_field(
        1,
        grpc_vllm._len_field(1, grpc_vllm._varint(1000 + i))
        + grpc_vllm._scalar(2, "uint", 7, "")
        + grpc_vllm._scalar(3, "uint", 1, ""),
    )


COMPLETE = grpc_vllm._len_field(2, grpc_vllm._len_field(2, b"length"))


class Server:
    """Answers each call (after the request's last DATA frame) with `answer(encoder, sid)`."""

    def __init__(self, answer, close_after: bool = False, window: int | None = None) -> None:
        self.answer = answer
        self.close_after = close_after
        self.window = window  # given: SETTINGS_INITIAL_WINDOW_SIZE and the connection's window, no updates
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.calls = 0
        self.body_bytes = 0
        self.overran = False  # the client sent past the window it was given
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        enc = hpack.Encoder()
        buf = b""
        credit = 65535
        with conn:
            if self.window:
                credit = self.window
                conn.sendall(
                    frame(4, 0, 0, struct.pack(">HL", 0x4, self.window))
                    + frame(8, 0, 0, struct.pack(">L", self.window - 65535))
                )
            else:
                conn.sendall(frame(4, 0, 0))
            while True:
                while len(buf) >= 9 + 24 or (buf and not buf.startswith(b"PRI")):
                    if buf.startswith(b"PRI"):
                        buf = buf[24:]
                        continue
                    hi, lo, ftype, flags, sid = _FRAME.unpack_from(buf)
                    n = hi << 8 | lo
                    if len(buf) < 9 + n:
                        break
                    buf = buf[9 + n :]
                    if ftype == 0:  # flow control: the window (64 KiB) back only once it is used up
                        self.body_bytes += n
                        credit -= n
                        self.overran |= credit < 0
                        if credit == 0 and not self.window:
                            inc = struct.pack(">L", 65535)
                            conn.sendall(frame(8, 0, 0, inc) + frame(8, 0, sid, inc))
                            credit = 65535
                    if ftype == 0 and flags & 1:
                        self.calls += 1
                        conn.sendall(self.answer(enc, sid))
                        if self.close_after:
                            return
                try:
                    more = conn.recv(65536)
                except OSError:
                    return
                if not more:
                    return
                buf += more

    def close(self) -> None:
        self.sock.close()


def ok_reply(enc, sid, n=3, trailers=(("grpc-status", "0"),)):
    return (
        frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
        + b"".join(frame(0, 0, sid, grpc_msg(chunk(i))) for i in range(n))
        + frame(0, 0, sid, grpc_msg(COMPLETE))
        + frame(1, 5, sid, enc.encode(list(trailers)))
    )


def send(answer, close_after=False, **timeouts):
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(answer, close_after)
    c = H2GrpcClient(
        f"127.0.0.1:{srv.port}", Timeouts(**{"connect": 2.0, "no_progress": 2.0, "total": 5.0, **timeouts})
    )
    try:
        return c.send(RequestSpec(prompt="hi", max_tokens=4), "r1"), c, srv
    finally:
        c.close()
        srv.close()


def test_a_whole_reply_is_read_and_the_connection_kept():
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(ok_reply)
    c = H2GrpcClient(f"127.0.0.1:{srv.port}", Timeouts(connect=2.0, no_progress=2.0, total=5.0))
    try:
        recs = [c.send(RequestSpec(prompt="hi", max_tokens=4), f"r{i}") for i in range(3)]
    finally:
        c.close()
        srv.close()
    for r in recs:
        assert r.ok and r.n_out == 3 and r.chunk_tokens == [1, 1, 1] and r.n_in == 7, (r.outcome, r.error)
        assert r.t_sent <= r.t_headers <= r.t_first <= r.t_end and r.finish_reason == "length"


def test_a_request_over_the_send_window_waits_for_the_servers_window_updates():
    """A long prompt (100,000 token ids: 300 KB) is sent in frames of the peer's size, as the server's
    WINDOW_UPDATEs allow (the default window is 64 KiB): all of it, then the reply is read."""
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(ok_reply)
    c = H2GrpcClient(f"127.0.0.1:{srv.port}", Timeouts(connect=2.0, no_progress=2.0, total=10.0))
    spec = RequestSpec(max_tokens=4, extra_body={"prompt_token_ids": list(range(100000, 200000))})
    body = len(grpc_vllm.encode_generate(spec, "big")) + 5
    try:
        r = c.send(spec, "big")
    finally:
        c.close()
        srv.close()
    assert body > 4 * 65535 and srv.body_bytes == body and not srv.overran, (body, srv.body_bytes)
    assert r.ok and r.n_out == 3, (r.outcome, r.error)


def test_a_larger_initial_window_in_the_servers_settings_opens_the_request_stream_too():
    """A server that raises SETTINGS_INITIAL_WINDOW_SIZE (and the connection window) and sends
    no WINDOW_UPDATE for the stream: the stream's window grows by the difference (RFC 9113
    6.9.2), so a request over 64 KiB goes out without waiting for an update that never comes."""
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(ok_reply, window=1 << 20)
    c = H2GrpcClient(f"127.0.0.1:{srv.port}", Timeouts(connect=2.0, no_progress=2.0, total=10.0))
    spec = RequestSpec(max_tokens=4, extra_body={"prompt_token_ids": list(range(100000, 200000))})
    try:
        r = c.send(spec, "big")
    finally:
        c.close()
        srv.close()
    assert r.ok and not srv.overran, (r.outcome, r.error)


def test_a_connection_the_server_closed_while_idle_is_not_reused():
    """The server hangs up after each reply (as one does at an idle timeout): the next request
    goes out on a fresh connection and succeeds, not a connect_error from a stale one."""
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(ok_reply, close_after=True)
    c = H2GrpcClient(f"127.0.0.1:{srv.port}", Timeouts(connect=2.0, no_progress=2.0, total=5.0))
    try:
        first = c.send(RequestSpec(prompt="hi", max_tokens=4), "r0")
        assert first.ok, first.error
        deadline = time.monotonic() + 5
        while not _readable(c._idle[0].sock) and time.monotonic() < deadline:
            time.sleep(0.01)  # until the server's close has reached this side (bounded)
        second = c.send(RequestSpec(prompt="hi", max_tokens=4), "r1")
    finally:
        c.close()
        srv.close()
    assert second.ok and srv.calls == 2, (second.outcome, second.error)


def test_a_ping_while_idle_is_answered_and_the_connection_kept():
    def answer(enc, sid):  # a reply, then a PING and new SETTINGS while the connection idles
        return ok_reply(enc, sid) + frame(6, 0, 0, b"12345678") + frame(4, 0, 0, struct.pack(">HL", 0x5, 32768))

    from llm_locust.transport.grpc_h2 import H2GrpcClient

    srv = Server(answer)
    c = H2GrpcClient(f"127.0.0.1:{srv.port}", Timeouts(connect=2.0, no_progress=2.0, total=5.0))
    try:
        assert c.send(RequestSpec(prompt="hi", max_tokens=4), "r0").ok
        conn = c._idle[0]
        deadline = time.monotonic() + 5
        while not (conn.rest or _readable(conn.sock)) and time.monotonic() < deadline:
            time.sleep(0.01)  # until the PING has arrived, read with the reply or not (bounded)
        second = c.send(RequestSpec(prompt="hi", max_tokens=4), "r1")
        assert second.ok and c._idle == [conn] and conn.peer_max_frame == 32768, (second.error, c._idle)
    finally:
        c.close()
        srv.close()


def test_messages_split_across_frames_and_frames_across_reads():
    def answer(enc, sid):
        body = b"".join(grpc_msg(chunk(i)) for i in range(5)) + grpc_msg(COMPLETE)
        head = frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
        parts = [body[i : i + 7] for i in range(0, len(body), 7)]  # gRPC messages cut across DATA frames
        padded = frame(0, 0x8, sid, b"\x03" + parts[0] + b"\x00\x00\x00")  # and one with padding
        return (
            head
            + padded
            + b"".join(frame(0, 0, sid, p) for p in parts[1:])
            + frame(1, 5, sid, enc.encode([("grpc-status", "0")]))
        )

    r, _, _ = send(answer)
    assert r.ok and r.n_out == 5 and r.chunk_tokens == [1] * 5, (r.outcome, r.error)


@pytest.mark.parametrize(
    ("answer", "outcome", "words"),
    [
        # a status in the trailers, before any message: http_error with the server's words
        (
            lambda enc, sid: frame(
                1,
                5,
                sid,
                enc.encode(
                    [
                        (":status", "200"),
                        ("content-type", "application/grpc"),
                        ("grpc-status", "3"),
                        ("grpc-message", "too%20long"),
                    ]
                ),
            ),
            Outcome.HTTP_ERROR,
            "gRPC INVALID_ARGUMENT: too long",
        ),
        # after messages: UNAVAILABLE truncates, INTERNAL is a stream error
        (
            lambda enc, sid: ok_reply(enc, sid, trailers=[("grpc-status", "14"), ("grpc-message", "gone")]),
            Outcome.TRUNCATED,
            "gRPC UNAVAILABLE: gone",
        ),
        (lambda enc, sid: ok_reply(enc, sid, trailers=[("grpc-status", "13")]), Outcome.STREAM_ERROR, "gRPC INTERNAL"),
        # an HTTP status that is not 200, as gRPC maps it
        (lambda enc, sid: frame(1, 5, sid, enc.encode([(":status", "404")])), Outcome.HTTP_ERROR, "UNIMPLEMENTED"),
        (lambda enc, sid: frame(1, 5, sid, enc.encode([(":status", "503")])), Outcome.CONNECT_ERROR, "UNAVAILABLE"),
        # the server resets the stream mid-reply
        (
            lambda enc, sid: (
                frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
                + frame(0, 0, sid, grpc_msg(chunk(0)))
                + frame(3, 0, sid, struct.pack(">L", 2))
            ),
            Outcome.STREAM_ERROR,
            "RST_STREAM with error code 2",
        ),
        (
            lambda enc, sid: (
                frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
                + frame(0, 0, sid, grpc_msg(chunk(0)))
                + frame(3, 0, sid, struct.pack(">L", 8))
            ),
            Outcome.TRUNCATED,
            "CANCELLED",
        ),
        # GOAWAY before taking the request
        (lambda enc, sid: frame(7, 0, 0, struct.pack(">LL", 0, 0) + b"bye"), Outcome.CONNECT_ERROR, "GOAWAY"),
        # a reply that is not gRPC
        (
            lambda enc, sid: frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "text/html")])),
            Outcome.HTTP_ERROR,
            "not gRPC",
        ),
        # bytes no HPACK decoder reads
        (lambda enc, sid: frame(1, 4, sid, b"\xff\xff\xff\xff\xff"), Outcome.STREAM_ERROR, "HPACK"),
        # a frame over the size we allow
        (lambda enc, sid: _FRAME.pack(0x100, 0, 0, 0, sid) + b"x" * 65536, Outcome.STREAM_ERROR, "frame of"),
        # a compressed message we never asked for
        (
            lambda enc, sid: (
                frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
                + frame(0, 0, sid, b"\x01\x00\x00\x00\x02ab")
            ),
            Outcome.STREAM_ERROR,
            "compressed",
        ),
        # a message the codec cannot read
        (
            lambda enc, sid: (
                frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
                + frame(0, 0, sid, grpc_msg(b"\x0a\x05\x01"))
            ),
            Outcome.STREAM_ERROR,
            "",
        ),
        # trailers without a grpc-status after the complete message
        (lambda enc, sid: ok_reply(enc, sid, trailers=[("x", "y")]), Outcome.TRUNCATED, "no grpc-status"),
    ],
)
def test_every_server_shape_is_a_classified_outcome(answer, outcome, words):
    r, _, _ = send(answer)
    assert r.outcome is outcome and words in r.error, (r.outcome, r.error)
    assert r.t_end is not None and r.n_out == sum(r.chunk_tokens)


def test_a_connection_closed_mid_reply_is_truncated_and_one_never_answering_times_out():
    def cut(enc, sid):  # the headers and two messages, then the server hangs up
        return (
            frame(1, 4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
            + frame(0, 0, sid, grpc_msg(chunk(0)))
            + frame(0, 0, sid, grpc_msg(chunk(1)))
        )

    r, _, _ = send(cut, close_after=True)
    assert r.outcome is Outcome.TRUNCATED and "UNAVAILABLE" in r.error and r.n_out == 2, (r.outcome, r.error)
    r, _, _ = send(lambda enc, sid: b"", no_progress=0.3)
    assert r.outcome is Outcome.TIMEOUT and r.error.startswith("no data for"), (r.outcome, r.error)
    r, _, _ = send(lambda enc, sid: b"", no_progress=3.0, total=0.4)
    assert r.outcome is Outcome.TIMEOUT and "total" in r.error, (r.outcome, r.error)


def test_nothing_listening_is_a_connect_error():
    from llm_locust.transport.grpc_h2 import H2GrpcClient

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = H2GrpcClient(f"127.0.0.1:{port}", Timeouts(connect=1.0)).send(RequestSpec(prompt="hi", max_tokens=2), "x")
    assert r.outcome is Outcome.CONNECT_ERROR and "connect" in r.error, (r.outcome, r.error)


# ------------------------------------------------------------------ the codec's fast path
_varint_values = st.integers(min_value=0, max_value=70000)


_chunks = st.tuples(
    st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=6),
    st.lists(st.tuples(st.sampled_from([2, 3, 4, 7]), _varint_values), max_size=5),
    st.booleans(),
)


def _chunk_message(ids, fields, ids_first) -> bytes:
    packed = grpc_vllm._len_field(1, b"".join(grpc_vllm._varint(i) for i in ids)) if ids else b""
    rest = b"".join(grpc_vllm._scalar(n, "uint", v, "") for n, v in fields)
    return grpc_vllm._len_field(1, packed + rest if ids_first else rest + packed)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(_chunks, min_size=1, max_size=5), repeat=st.booleans())
def test_the_fast_chunk_path_agrees_with_the_general_walk(chunks, repeat):
    """feed_response reads the usual small chunk without the general field walk, and keeps its
    counts for the next message with the same ones; message after message, it must leave the
    state exactly as the walk does."""
    msgs = [_chunk_message(*c) for c in chunks]
    if repeat:
        msgs = msgs + msgs  # the counts-kept path: the same tails again
    fast, slow = StreamState(False), StreamState(False)
    for msg in msgs:
        ((number, _wire, (start, end)),) = list(grpc_vllm._fields(msg))
        assert grpc_vllm.feed_response(msg, fast) == grpc_vllm._feed_chunk(msg, start, end, slow)
        assert (fast.cont_tokens, fast.usage_in, fast.usage_out, fast.usage_cached, fast.extra) == (
            slow.cont_tokens,
            slow.usage_in,
            slow.usage_out,
            slow.usage_cached,
            slow.extra,
        )


def test_a_process_that_used_grpcio_spawns_children_that_live():
    """grpc-core's fork handlers (on unless GRPC_ENABLE_FORK_SUPPORT says otherwise) killed 2-4 of
    60 children spawned by a process that had used grpcio: exit -6 before the child's own code
    ran (a real gRPC ladder test failed so). transport/grpc_io.py turns them off before grpc is
    first imported; a fresh process checks it (here grpc may be imported already)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = f"""
import subprocess, sys
sys.path.insert(0, {str(root / "benchmarks")!r})
from gevent import monkey; monkey.patch_all()
from llm_locust.transport.grpc_io import GrpcStreamClient
from llm_locust.protocols.base import RequestSpec, Timeouts
server = subprocess.Popen([sys.executable, {str(root / "benchmarks" / "h2_burst_server.py")!r}, "0", "4"],
                          stdout=subprocess.PIPE, text=True, cwd={str(root / "benchmarks")!r})
try:
    port = int(server.stdout.readline().split()[1])
    c = GrpcStreamClient(f"127.0.0.1:{{port}}", Timeouts(connect=5, no_progress=5, total=10))
    assert all(c.send(RequestSpec(prompt="hi", max_tokens=4), f"x{{i}}").ok for i in range(3))
    codes = [subprocess.run([sys.executable, "-c", "pass"]).returncode for _ in range(60)]
    print("dead children:", sum(1 for rc in codes if rc))
finally:
    server.kill()
"""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "dead children: 0" in p.stdout, p.stdout[-1000:] + p.stderr[-2000:]
