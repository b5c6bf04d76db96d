"""How much the simulated server delivers, and what it costs in server CPU.

Runs the simulator in --fast mode (no pacing) and in paced mode, drives it with a raw-socket client
(non-blocking sockets + selectors, keep-alive, one stream at a time per connection, spread over
client processes), and prints streams/s, tokens/s and the server's CPU seconds per 1k streams
(utime + stime from /proc/PID/stat). No asserts.

    python benchmarks/bench_sim.py [--seconds 5] [--conns 64] [--clients 2] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import selectors
import socket
import sys
from time import perf_counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from llm_locust.sim.engine import SimConfig, capacity  # noqa: E402
from llm_locust.sim.process import SimProcess  # noqa: E402

MARK = b'"text":"'  # one per token chunk
END = b"\r\n0\r\n\r\n"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(port: int, conns: int, tokens: int, seconds: float, start, out) -> None:
    body = json.dumps(
        {"model": "m", "prompt": "a b c d", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    ).encode()
    req = (
        b"POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(body), body)
    )
    sel = selectors.DefaultSelector()
    tails = {}
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        tails[s] = b""
    start.wait()
    t0 = perf_counter()
    deadline = t0 + seconds
    for s in tails:
        s.send(req)
    streams = n_tokens = 0
    while tails:
        for key, _ in sel.select(1.0):
            s = key.fileobj
            data = s.recv(1 << 18)
            if not data:
                raise SystemExit("server closed a connection")
            # keep the last len(MARK)-1 bytes so a marker split across reads is counted once
            buf = tails[s] + data
            n_tokens += buf.count(MARK)
            tails[s] = buf[-len(MARK) + 1 :]
            if buf.endswith(END):
                streams += 1
                if perf_counter() < deadline:
                    s.send(req)
                else:
                    sel.unregister(s)
                    s.close()
                    del tails[s]
    out.put((streams, n_tokens, perf_counter() - t0, os.times().user + os.times().system))


def run(label: str, sim_options: dict, args) -> None:
    with SimProcess(**sim_options) as sim:
        ctx = mp.get_context("fork")
        start, out = ctx.Event(), ctx.Queue()
        per = max(1, args.conns // args.clients)
        procs = [
            ctx.Process(target=client, args=(sim.port, per, args.tokens, args.seconds, start, out))
            for _ in range(args.clients)
        ]
        for p in procs:
            p.start()
        cpu0 = cpu_seconds(sim.pid)
        start.set()
        results = [out.get() for _ in procs]
        cpu1 = cpu_seconds(sim.pid)
        for p in procs:
            p.join()
    streams = sum(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    wall = max(r[2] for r in results)
    client_cpu = sum(r[3] for r in results)
    print(
        f"{label:<8} {streams / wall:9.0f} streams/s {tokens / wall:10.0f} tokens/s   server CPU "
        f"{(cpu1 - cpu0) / streams * 1000:6.3f} s/1k streams ({(cpu1 - cpu0) / wall * 100:4.0f}% of a core)   "
        f"client CPU {client_cpu / wall * 100:4.0f}%   [{streams} streams x {args.tokens} tokens, "
        f"{per * args.clients} conns, {wall:.1f} s]"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--conns", type=int, default=64, help="concurrent streams (connections), all clients")
    p.add_argument("--clients", type=int, default=2, help="client processes")
    p.add_argument("--tokens", type=int, default=64, help="max_tokens per stream (ignore_eos)")
    p.add_argument("--slots", type=int, default=256, help="paced mode: batch slots")
    p.add_argument("--iter-base", type=float, default=0.005)
    p.add_argument("--iter-per-seq", type=float, default=0.00002)
    p.add_argument("--uvloop", action="store_true")
    args = p.parse_args()
    print(f"{os.cpu_count()} CPUs; server and clients share them")
    run("fast", {"fast": True, "uvloop": args.uvloop}, args)
    cfg = SimConfig(
        slots=args.slots, iter_base=args.iter_base, iter_per_seq=args.iter_per_seq, iter_per_prefill_token=0
    )
    run(
        "paced",
        {
            "slots": cfg.slots,
            "iter_base": cfg.iter_base,
            "iter_per_seq": cfg.iter_per_seq,
            "iter_per_prefill_token": 0,
            "uvloop": args.uvloop,
        },
        args,
    )
    n = min(args.conns, cfg.slots)
    print(
        f"         model at {n} running: {n / (cfg.iter_base + cfg.iter_per_seq * n):.0f} tokens/s "
        f"(closed loop loses ~1 iteration per stream between requests; capacity at {cfg.slots} slots: "
        f"{capacity(cfg)['decode_tokens_per_s_saturated']:.0f} tokens/s)"
    )


if __name__ == "__main__":
    main()
