"""Run-to-run coverage of one run's 95% intervals (docs/metrics.md, "Confidence intervals").

RUNS identical closed-loop runs (`llm-locust run -u USERS -t SECONDS`, a fixed synthetic workload)
against one simulator. Per figure: the pooled estimate (the mean of the runs' figures), the
runs' spread (sd and max/min), and the share of runs whose own interval holds the pooled estimate
(nominal 95%; the issue asks 90-99%). Runs whose figure has no interval (too few samples) are
counted apart.

    python benchmarks/intervals_sim_runs.py [--runs 30] [--seconds 8] [--users 8] [--pin]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_locust.sim.process import SimProcess  # noqa: E402

FIGURES = (
    ("ttft mean", ("latency", "ttft", "mean"), ("latency", "ttft", "mean")),
    ("ttft p50", ("latency", "ttft", "p50"), ("latency", "ttft", "p50")),
    ("ttft p90", ("latency", "ttft", "p90"), ("latency", "ttft", "p90")),
    ("itl p99", ("latency", "itl", "p99"), ("latency", "itl", "p99")),
    ("tpot p50", ("latency", "tpot", "p50"), ("latency", "tpot", "p50")),
    ("e2e mean", ("latency", "e2e", "mean"), ("latency", "e2e", "mean")),
    ("output tokens/s", ("output_tokens_per_s",), ("rates", "output_tokens_per_s")),
    ("requests/s", ("requests_per_s",), ("rates", "requests_per_s")),
)


def _get(d, path):
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the simulator on CPU 0 and each run on CPU 1, both SCHED_FIFO (root): other jobs on a shared "
        "machine then move the runs' latencies less",
    )
    a = ap.parse_args()
    rows = []
    sim = SimProcess(slots=8)
    client = [sys.executable]
    if a.pin:
        sim.cmd = ["taskset", "-c", "0", "chrt", "-f", "10", *sim.cmd]
        client = ["taskset", "-c", "1", "chrt", "-f", "10", sys.executable]
    with tempfile.TemporaryDirectory() as d, sim:
        for k in range(a.runs):
            path = Path(d) / f"r{k}.json"
            argv = ["run", "--host", sim.url, "-u", str(a.users), "-t", f"{a.seconds}s", "--results", str(path)]
            argv += ["--synthetic", "requests=1000,input=32,output=64,seed=1"]
            p = subprocess.run([*client, "-m", "llm_locust.cli", *argv], capture_output=True, text=True, cwd=d)
            if p.returncode != 0:
                print(f"run {k}: exit {p.returncode}: {p.stderr[-300:]}")
                continue
            rows.append(json.loads(path.read_text())["summary"])
    print(f"{len(rows)} runs of -u {a.users} -t {a.seconds}s against one simulator (8 slots)")
    head = f"{'figure':<16}{'pooled':>12}{'sd/pooled':>11}{'median ±':>10}{'max/min':>9}"
    print(f"{head}{'covered':>9}{'no interval':>13}")
    for name, fpath, ipath in FIGURES:
        values = [_get(s, fpath) for s in rows]
        pooled = statistics.fmean(v for v in values if v is not None)
        covered = judged = 0
        rels = []
        for s, v in zip(rows, values, strict=True):
            iv = _get(s.get("intervals") or {}, ipath) or {}
            if iv.get("low") is None or v is None:
                continue
            judged += 1
            rels.append(iv.get("rel") or 0.0)
            covered += iv["low"] <= pooled <= iv["high"]
        vs = [v for v in values if v]
        sd = statistics.stdev(vs) / pooled if len(vs) > 1 and pooled else float("nan")
        share = f"{covered / judged:.2f}" if judged else "-"
        rel = f"{statistics.median(rels):.3f}" if rels else "-"
        row = f"{name:<16}{pooled:>12.5g}{sd:>11.3f}{rel:>10}{max(vs) / min(vs):>9.3f}"
        print(f"{row}{share:>9}{len(rows) - judged:>13}")


if __name__ == "__main__":
    main()
