"""Soak: RSS of the master and the workers over a long run against the simulator's fast mode.

    python benchmarks/bench_soak.py --duration 300 --workers 2 --users 64

Prints RSS (MiB) of the master and each worker at the start and every --every seconds, the
requests done so far and the exposition's series (sample lines) from the master's Prometheus
exporter, and at the end each process's RSS slope per 100k requests (least squares over the
samples after the first --settle seconds, 11 minutes: the latency series keep their last 10
minutes second by second, a bounded buffer that fills first), and the series count's first and
last values (flat: bounded label sets). Issue 37's target: a slope <= 1 MiB per 100k requests
and a flat series count over a 30-minute soak (--duration 1800). No asserts: a benchmark.
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import time
import urllib.request

from llm_locust.sim.process import SimProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / 100


def scrape(port: int) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    took = time.perf_counter() - t0
    done = sum(
        float(v) for v in re.findall(r'^llm_locust_requests_total\{outcome="[a-z_]+"\} ([0-9.e+]+)$', text, re.M)
    )
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return done, took, series


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys on xs (0 with fewer than 2 distinct xs)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--users", type=int, default=64)
    p.add_argument("--every", type=int, default=30)
    p.add_argument(
        "--settle",
        type=int,
        default=660,
        help="seconds before the slope's samples: the latency series by send second keeps its last 10 minutes "
        "second by second (docs/metrics.md, 'Per-second series'), so memory grows until they are full",
    )
    a = p.parse_args()
    port = free_port()
    with SimProcess(slots=1024, fast=True) as sim:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llm_locust.cli",
                "run",
                "--host",
                sim.url,
                "--workers",
                str(a.workers),
                "-u",
                str(a.users),
                "-r",
                str(a.users),
                "-t",
                f"{a.duration}s",
                "--max-tokens",
                "1",
                "--api",
                "openai-completions",
                "--prometheus-port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(8)  # start-up: the workers connect and spawn
        rows, scrape_times = [], []
        start = time.monotonic()
        while proc.poll() is None and time.monotonic() - start < a.duration - 5:
            try:
                done, took, series = scrape(port)
            except OSError:
                break
            scrape_times.append(took)
            master = proc.pid
            workers = children(master)
            rows.append(
                (time.monotonic() - start, done, rss_mib(master), [rss_mib(w) for w in workers], cpu_s(master), series)
            )
            print(
                f"t={rows[-1][0]:6.0f}s requests {done:10,.0f}  master {rows[-1][2]:6.1f} MiB  workers "
                + " ".join(f"{x:6.1f}" for x in rows[-1][3])
                + f" MiB  master CPU {rows[-1][4]:.1f} s  scrape {took * 1000:.1f} ms  series {series}",
                flush=True,
            )
            time.sleep(a.every)
        proc.wait(timeout=120)
    if len(rows) >= 2:
        (t0, d0, m0, w0, c0, s0), (t1, d1, m1, w1, c1, s1) = rows[0], rows[-1]
        print(f"\nrequests {d0:,.0f} -> {d1:,.0f} in {t1 - t0:.0f} s ({(d1 - d0) / (t1 - t0):,.0f}/s)")
        print(f"master CPU {100 * (c1 - c0) / (t1 - t0):.1f}%; exposition series {s0} -> {s1}")
        late = [r for r in rows if r[0] >= a.settle] or rows  # start-up, and the series' 10 minutes filling
        done = [r[1] / 1e5 for r in late]
        print(
            f"master RSS {m0:.1f} -> {m1:.1f} MiB; slope {slope(done, [r[2] for r in late]):+.3f} MiB per 100k requests"
        )
        for i in range(len(w0)):
            ys = [r[3][i] for r in late if len(r[3]) > i]
            if len(ys) == len(done):
                print(
                    f"worker {i} RSS {w0[i]:.1f} -> {w1[i]:.1f} MiB; slope {slope(done, ys):+.3f} MiB per 100k requests"
                )
        scrape_times.sort()
        print(
            f"exporter scrape: median {scrape_times[len(scrape_times) // 2] * 1000:.1f} ms, "
            f"max {scrape_times[-1] * 1000:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
