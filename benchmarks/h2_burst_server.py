"""A burst stand-in for vLLM's gRPC server, the gRPC twin of nginx serving a recorded stream:
each `VllmEngine/Generate` call is answered with its whole reply (response headers, N one-token
`chunk` messages in their own DATA frames, the `complete` message, the trailers) written at once,
as the frames a gRPC server sends for it. `GetModelInfo` names the model "bench-model".

grpcio's own server sends message by message, so a client reading from it wakes once a token and
measures the server as much as itself (benchmarks/grpc_stream_server.py); this one, like nginx for
the HTTP APIs, leaves the client's own cost per token to measure. It speaks just enough HTTP/2 for
that: it gives back the window a request used (or the client's requests stop once 64 KiB have
gone over a connection), and a reply must fit the client's window, which ours opens to 2^31-1.

Run: python benchmarks/h2_burst_server.py PORT [N]   (prints "ready PORT" when it listens)
"""

from __future__ import annotations

import socket
import struct
import sys
import threading

import hpack
from grpc_stream_server import messages

from llm_locust.protocols.grpc_vllm import _len_field as _field

_FRAME = struct.Struct(">HBBBL")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(payload) >> 8, len(payload) & 0xFF, ftype, flags, sid) + payload


def reply(enc: hpack.Encoder, sid: int, msgs: list[bytes]) -> bytes:
    head = frame(1, 0x4, sid, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
    body = b"".join(frame(0, 0, sid, b"\x00" + len(m).to_bytes(4, "big") + m) for m in msgs)
    return head + body + frame(1, 0x5, sid, enc.encode([("grpc-status", "0")]))


def serve(conn: socket.socket, generate: list[bytes], info: bytes) -> None:
    try:
        _serve(conn, generate, info)
    except OSError:
        pass  # the client went away (a run's end): nothing to answer


def _serve(conn: socket.socket, generate: list[bytes], info: bytes) -> None:
    enc, dec = hpack.Encoder(), hpack.Decoder()
    buf = b""
    paths: dict[int, str] = {}
    with conn:
        conn.sendall(frame(4, 0, 0))  # our SETTINGS: the defaults
        while not buf.startswith(PREFACE):
            more = conn.recv(65536)
            if not more:
                return
            buf += more
        buf = buf[len(PREFACE) :]
        while True:
            while len(buf) >= 9:
                hi, lo, ftype, flags, sid = _FRAME.unpack_from(buf)
                n = hi << 8 | lo
                if len(buf) < 9 + n:
                    break
                payload, buf = buf[9 : 9 + n], buf[9 + n :]
                if ftype == 4 and not flags & 1:
                    conn.sendall(frame(4, 1, 0))
                elif ftype == 6 and not flags & 1:
                    conn.sendall(frame(6, 1, 0, payload))
                elif ftype == 1:
                    paths[sid] = dict(dec.decode(payload)).get(":path", "")
                elif ftype == 0:
                    out = frame(8, 0, 0, struct.pack(">L", n)) if n else b""  # the connection's window back
                    if flags & 1:  # the request's last DATA frame: answer it whole
                        path = paths.pop(sid, "")
                        out += reply(enc, sid, generate if path.endswith("/Generate") else [info])
                    elif n:
                        out += frame(8, 0, sid, struct.pack(">L", n))
                    if out:
                        conn.sendall(out)
            more = conn.recv(65536)
            if not more:
                return
            buf += more


def main() -> None:
    port, n = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 256
    generate = messages(n)
    info = _field(1, b"bench-model") + _field(6, b"bench-model")
    srv = socket.create_server(("127.0.0.1", port), backlog=128)
    print("ready", srv.getsockname()[1], flush=True)  # port 0: the one the system gave
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, generate, info), daemon=True).start()


if __name__ == "__main__":
    main()
