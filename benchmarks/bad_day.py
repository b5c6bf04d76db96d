"""The bad day, measured: what a hostile or broken server costs the client.

    python benchmarks/bad_day.py [--gib 1] [--soak 120]

(a) Timeouts under an endless fast stream. A local server answers 200 and then sends SSE
    comments (`: x`) as fast as the socket takes them, forever. One request with a 2 s total
    timeout, then one with a 1 s no-progress timeout against a server that sends one comment and
    stalls. Printed: when each request ended (seconds after it was sent) and its outcome; the
    target is the timeout's value + 10% (or 100 ms).

(b) Peak memory against a newline-less stream. The server sends `--gib` GiB of `x` after the
    headers, no newline anywhere. A whole `llm-locust run` process (1 user, --request-timeout 30)
    is sampled for its resident memory every 0.1 s. Printed: its peak RSS and the outcomes.

(c) Memory over a long fast run. `llm-locust run` against the simulator without pacing
    (--sim-fast) for `--soak` seconds with 32 users, its Prometheus exporter read every 5 s for
    finished requests and the process's resident memory. Printed: requests, RSS at the first and
    last read after 30 s, and the slope of a least-squares line through those reads in MB per
    100k requests.

Numbers only, no assertions (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def serve(handler) -> tuple[str, socket.socket]:
    """A raw TCP server on 127.0.0.1 running `handler(conn)` per connection, in threads."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)

    def loop():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=_run, args=(handler, conn), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", srv


def _run(handler, conn) -> None:
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            piece = conn.recv(65536)
            if not piece:
                return
            head += piece
        if head.startswith(b"GET"):
            body = b'{"data": [{"id": "m"}]}'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            return
        handler(conn)
    except OSError:
        pass
    finally:
        conn.close()


def endless_comments(conn) -> None:
    conn.sendall(HEAD)
    block = b": x\n\n" * 8192
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        conn.sendall(block)


def one_then_stall(conn) -> None:
    conn.sendall(HEAD + b": x\n\n")
    time.sleep(30)


def timeouts() -> None:
    from gevent import monkey

    monkey.patch_all()
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_adapter
    from llm_locust.protocols.base import RequestSpec, Timeouts
    from llm_locust.transport.http import StreamClient

    print("(a) timeouts under an endless fast stream")
    for what, handler, timeouts, limit in (
        ("total 2 s, endless comments", endless_comments, Timeouts(connect=5, no_progress=60, total=2.0), 2.0),
        (
            "no progress 1 s, one comment then silence",
            one_then_stall,
            Timeouts(connect=5, no_progress=1.0, total=60),
            1.0,
        ),
    ):
        url, srv = serve(handler)
        client = StreamClient(HTTPClient.from_url(url), url, get_adapter("openai-chat"), timeouts)
        rec = client.send(RequestSpec(model="m", prompt="hi", max_tokens=8), "bench")
        ended = rec.t_end - rec.t_sent
        print(
            f"  {what}: ended after {ended:.3f} s as {rec.outcome.value} ({rec.error}); "
            f"late by {(ended - limit) * 1000:.0f} ms, target <= {max(0.1, limit * 0.1) * 1000:.0f} ms"
        )
        srv.close()


def peak_rss(gib: float) -> None:
    total = int(gib * 1024**3)

    def newline_less(conn) -> None:
        conn.sendall(HEAD)
        block = b"x" * (1 << 20)
        sent = 0
        while sent < total:
            conn.sendall(block)
            sent += len(block)

    url, srv = serve(newline_less)
    cmd = [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        url,
        "--model",
        "m",
        "-u",
        "1",
        "-t",
        "20s",
        "--request-timeout",
        "30",
        "--no-fail-fast",
        "--no-preflight",
        "--results",
        "/tmp/bad_day_rss.json",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    p = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            peak = max(peak, p.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.1)
    srv.close()
    s = json.loads(Path("/tmp/bad_day_rss.json").read_text())["summary"]
    print(
        f"(b) {gib:g} GiB newline-less stream: peak RSS {peak / 2**20:.0f} MiB; outcomes "
        f"{ {k: v for k, v in s['outcomes'].items() if v} }"
    )


def soak(seconds: int) -> None:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--sim-fast",
        "--sim-slots",
        "64",
        "-u",
        "32",
        "-t",
        f"{seconds}s",
        "--prometheus-port",
        str(port),
        "--max-tokens-cap",
        "16",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reads = []
    t0 = time.monotonic()
    while proc.poll() is None:
        time.sleep(5)
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            continue
        done = sum(
            float(v) for v in re.findall(r'^llm_locust_requests_total\{outcome="[a-z_]+"\} ([0-9.e+]+)$', text, re.M)
        )
        rss = re.search(r"^process_resident_memory_bytes ([0-9.e+]+)$", text, re.M)
        if rss and time.monotonic() - t0 >= 30:
            reads.append((done, float(rss.group(1))))
    if len(reads) < 3:
        print("(c) too few reads")
        return
    n = len(reads)
    mx = sum(r[0] for r in reads) / n
    my = sum(r[1] for r in reads) / n
    slope = sum((x - mx) * (y - my) for x, y in reads) / max(sum((x - mx) ** 2 for x, _ in reads), 1e-9)
    print(
        f"(c) {seconds} s fast run, 32 users: {reads[-1][0]:.0f} requests; RSS {reads[0][1] / 2**20:.0f} MiB at "
        f"{reads[0][0]:.0f} requests, {reads[-1][1] / 2**20:.0f} MiB at {reads[-1][0]:.0f}; slope "
        f"{slope * 100_000 / 2**20:.2f} MiB per 100k requests ({n} reads)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--soak", type=int, default=120)
    ap.add_argument("--only", choices=("timeouts", "rss", "soak"))
    a = ap.parse_args()
    if a.only in (None, "rss"):
        peak_rss(a.gib)
    if a.only in (None, "soak"):
        soak(a.soak)
    if a.only in (None, "timeouts"):
        timeouts()  # last: it monkey-patches this process


if __name__ == "__main__":
    main()
