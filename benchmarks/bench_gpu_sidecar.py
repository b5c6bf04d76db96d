"""GPU sidecar cost: CPU use at 10 Hz with the fake backend on 8 GPUs, and scrape latency.

    python benchmarks/bench_gpu_sidecar.py [--gpus 8] [--seconds 20] [--interval 0.1]

Starts the sidecar as a real subprocess, reads its CPU seconds from /proc/PID/stat over the
window (scraped every 5 s, like a Prometheus job), then times 50 back-to-back scrapes.
Prints figures; no asserts.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def scrape(url: str) -> tuple[float, int]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as r:
        n = len(r.read())
    return time.perf_counter() - t, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.1)
    a = ap.parse_args()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llm_locust.gpu.sidecar",
            "--fake",
            str(a.gpus),
            "--port",
            "0",
            "--interval",
            str(a.interval),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = p.stdout.readline()
        url = re.search(r"(http://\S+)", line).group(1) + "/metrics"
        time.sleep(1.0)  # past start-up imports
        c0, t0 = cpu_seconds(p.pid), time.monotonic()
        next_scrape = t0
        while time.monotonic() - t0 < a.seconds:
            if time.monotonic() >= next_scrape:
                scrape(url)
                next_scrape += 5.0
            time.sleep(0.05)
        c1, t1 = cpu_seconds(p.pid), time.monotonic()
        cpu = 100.0 * (c1 - c0) / (t1 - t0)
        lat, size = [], 0
        for _ in range(50):
            dt, size = scrape(url)
            lat.append(dt * 1000)
        lat.sort()
        print(f"sidecar --fake {a.gpus} at {1 / a.interval:.0f} Hz, {t1 - t0:.1f} s, scraped every 5 s:")
        print(f"  CPU: {c1 - c0:.2f} s = {cpu:.2f}% of one core")
        print(
            f"  scrape latency over 50: p50 {statistics.median(lat):.2f} ms, "
            f"p95 {lat[int(0.95 * len(lat)) - 1]:.2f} ms, max {lat[-1]:.2f} ms; exposition {size} bytes"
        )
    finally:
        p.terminate()
        p.wait(10)


if __name__ == "__main__":
    main()
