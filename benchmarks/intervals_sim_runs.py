"""Run-to-run coverage of one run's 95% intervals (docs/metrics.md, "Confidence intervals").

RUNS identical closed-loop runs (`llm-locust run -u USERS -t SECONDS --synthetic SPEC`)
against one simulator. Per figure: the pooled estimate, the runs' spread (sd and max/min), and the
share of runs whose own interval holds the pooled estimate
(nominal 95%; the issue asks 90-99%). Runs whose figure has no interval (too few samples) are
counted apart.

    python benchmarks/intervals_sim_runs.py [--runs 30] [--seconds 8] [--users 8] [--synthetic SPEC] [--pin]
        [--keep DIR]
    python benchmarks/intervals_sim_runs.py --replay DIR   # the kept runs' intervals, by this code
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

from llm_locust.metrics.blocks import Blocks  # noqa: E402
from llm_locust.metrics.gaps import gap_samples  # noqa: E402
from llm_locust.sim.process import SimProcess  # noqa: E402

SYNTHETIC = "requests=1000,input=uniform:16:48,output=uniform:32:96,seed=1"
FIGURES = (
    ("ttft mean", ("latency", "ttft", "mean"), ("latency", "ttft", "mean")),
    ("ttft p50", ("latency", "ttft", "p50"), ("latency", "ttft", "p50")),
    ("ttft p90", ("latency", "ttft", "p90"), ("latency", "ttft", "p90")),
    ("itl p50", ("latency", "itl", "p50"), ("latency", "itl", "p50")),
    ("itl p90", ("latency", "itl", "p90"), ("latency", "itl", "p90")),
    ("itl p99", ("latency", "itl", "p99"), ("latency", "itl", "p99")),
    ("tpot p50", ("latency", "tpot", "p50"), ("latency", "tpot", "p50")),
    ("e2e mean", ("latency", "e2e", "mean"), ("latency", "e2e", "mean")),
    ("output tokens/s", ("output_tokens_per_s",), ("rates", "output_tokens_per_s")),
    ("requests/s", ("requests_per_s",), ("rates", "requests_per_s")),
)


def _samples(log: Path) -> dict[str, list[float]]:
    """A run's per-request (TTFT, TPOT, E2E) and per-token (ITL) values of its ok requests, from
    its record log: the figures' samples in whole microseconds, as the run's histograms take them
    (an exact 10,431.6 us is 10,432 there: compared unrounded, it fell between two buckets)."""
    out: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": [], "e2e": []}
    for line in log.read_text().splitlines():
        r = json.loads(line)
        if r["outcome"] != "ok" or r["first"] is None:
            continue
        out["ttft"].append(_us(r["first"]))
        out["e2e"].append(_us(r["end"]))
        times, ntoks = r["chunks"], r["chunk_tokens"]
        if r["n_out"] > 1:
            out["tpot"].append(_us((times[-1] - r["first"]) / (r["n_out"] - 1)))
        for i in range(1, len(times)):
            out["itl"] += [_us(round((times[i] - times[i - 1]) * 1e6) / 1e6 / ntoks[i])] * ntoks[i]
    return out


def _us(seconds: float) -> float:
    return max(round(seconds * 1e6), 0) / 1e6


def _pooled(samples: list[float], stat: str) -> float:
    """The pooled sample's figure: its mean, or its percentile at HdrHistogram's rank (the runs')."""
    if stat == "mean":
        return statistics.fmean(samples)
    xs = sorted(samples)
    rank = max(round(float(stat[1:]) / 100 * len(xs)), 1)
    return xs[rank - 1]


def _with_seed(spec: str, seed: int) -> str:
    """The synthetic spec with its seed= item set to `seed`."""
    return ",".join([p for p in spec.split(",") if not p.startswith("seed=")] + [f"seed={seed}"])


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
        "--synthetic",
        default=SYNTHETIC,
        help=f"the workload (the run's --synthetic; default {SYNTHETIC}); 'requests=1000,input=32,output=64,"
        "seed=1' is the lock-step worst case: every request alike, so users that start together stay in step",
    )
    ap.add_argument(
        "--same-seed",
        action="store_true",
        help="every run replays the workload's own seed (the same requests in the same order); by default run k "
        "draws with seed k+1: independent samples of one workload, what an interval's coverage is about",
    )
    ap.add_argument("--show", default="", help="a figure (as named in the table) whose runs are printed one by one")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the simulator on CPU 0 and each run on CPU 1, both SCHED_FIFO (root): other jobs on a shared "
        "machine then move the runs' latencies less",
    )
    ap.add_argument("--keep", default="", help="a folder that keeps every run's results and record log")
    ap.add_argument(
        "--replay",
        default="",
        help="a --keep folder: no runs, but each kept run's intervals computed again by this code from its "
        "record log (the same runs judged by two methods: check out the older code and replay)",
    )
    a = ap.parse_args()
    rows, pool = _replay(Path(a.replay)) if a.replay else _runs(a)
    seeds = "the same seed" if a.same_seed else "seed k+1 in run k"
    what = (
        f"replayed from {a.replay}"
        if a.replay
        else f"of -u {a.users} -t {a.seconds}s --synthetic {a.synthetic} ({seeds})"
    )
    print(f"{len(rows)} runs {what}, 8 slots")
    _table(rows, pool, a.show)


def _replay(d: Path) -> tuple[list[dict], dict[str, list[float]]]:
    """The kept runs' summaries, each with its `intervals` computed again from its record log."""
    rows = []
    pool: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": [], "e2e": []}
    for path in sorted(d.glob("r*.json"), key=lambda p: int(p.stem[1:]) if p.stem[1:].isdigit() else -1):
        log = path.with_suffix(".jsonl")
        if not path.stem[1:].isdigit() or not log.exists():
            continue
        summary = json.loads(path.read_text())["summary"]
        summary["intervals"] = _intervals(log)
        rows.append(summary)
        for metric, values in _samples(log).items():
            pool[metric] += values
    return rows, pool


def _intervals(log: Path) -> dict | None:
    """A run's intervals from its record log, as its Aggregate keeps its blocks: each ok request in
    the block of its end (metrics/aggregate.py, _add_block), the window from first send to last end."""
    blocks = Blocks()
    first = last = None
    for line in log.read_text().splitlines():
        r = json.loads(line)
        wall_end = r["wall_sent"] + (r["end"] or 0.0)
        first = r["wall_sent"] if first is None else min(first, r["wall_sent"])
        last = wall_end if last is None else max(last, wall_end)
        if r["outcome"] == "cancelled":  # cut at the stop: its part in the rates' intervals
            blocks.add_life(wall_end, r["wall_sent"], wall_end, r["n_out"], "cut")
        if r["outcome"] != "ok":
            continue
        blocks.add_life(wall_end, r["wall_sent"], wall_end, r["n_out"], "ok")
        lat = {"e2e": max(round(r["end"] * 1e6), 0)}
        if r["first"] is not None:
            lat["ttft"] = max(round(r["first"] * 1e6), 0)
            if r["n_out"] >= 2:
                lat["tpot"] = max(round((r["chunks"][-1] - r["first"]) / (r["n_out"] - 1) * 1e6), 0)
            if len(r["chunks"]) > 1:
                gaps = gap_samples(r["chunks"], r["chunk_tokens"])
                blocks.add_itl(wall_end, gaps[2], gaps[3])
        blocks.add_ok(wall_end, lat, r["n_out"], False)
    return dict(blocks.intervals(first, last) or {})


def _runs(a: argparse.Namespace) -> tuple[list[dict], dict[str, list[float]]]:
    rows = []
    pool: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": [], "e2e": []}
    sim = SimProcess(slots=8)
    client = [sys.executable]
    if a.pin:
        sim.cmd = ["taskset", "-c", "0", "chrt", "-f", "10", *sim.cmd]
        client = ["taskset", "-c", "1", "chrt", "-f", "10", sys.executable]
    with tempfile.TemporaryDirectory() as tmp, sim:
        d = a.keep or tmp
        Path(d).mkdir(parents=True, exist_ok=True)
        for k in range(a.runs):
            path = Path(d) / f"r{k}.json"
            argv = ["run", "--host", sim.url, "-u", str(a.users), "-t", f"{a.seconds}s", "--results", str(path)]
            argv += ["--record-log", str(path.with_suffix(".jsonl"))]
            spec = a.synthetic if a.same_seed else _with_seed(a.synthetic, k + 1)
            argv += ["--synthetic", spec]
            p = subprocess.run([*client, "-m", "llm_locust.cli", *argv], capture_output=True, text=True, cwd=d)
            if p.returncode != 0:
                print(f"run {k}: exit {p.returncode}: {p.stderr[-300:]}")
                continue
            rows.append(json.loads(path.read_text())["summary"])
            for metric, values in _samples(path.with_suffix(".jsonl")).items():
                pool[metric] += values
    return rows, pool


def _table(rows: list[dict], pool: dict[str, list[float]], show: str) -> None:
    head = f"{'figure':<16}{'runs mean':>12}{'pooled':>12}{'sd/mean':>9}{'median ±':>10}{'max/min':>9}"
    print(f"{head}{'covered':>9}{'by mean':>9}{'low/high':>10}{'no interval':>13}")
    for name, fpath, ipath in FIGURES:
        values = [_get(s, fpath) for s in rows]
        mean = statistics.fmean(v for v in values if v is not None)
        pooled = _pooled(pool[ipath[1]], ipath[2]) if ipath[0] == "latency" else mean
        covered = by_mean = judged = low = high = 0
        rels = []
        for s, v in zip(rows, values, strict=True):
            iv = _get(s.get("intervals") or {}, ipath) or {}
            if iv.get("low") is None or v is None:
                continue
            judged += 1
            rels.append(iv.get("rel") or 0.0)
            covered += iv["low"] <= pooled <= iv["high"]
            by_mean += iv["low"] <= mean <= iv["high"]
            low, high = low + (pooled < iv["low"]), high + (pooled > iv["high"])
            if name == show:
                print(f"  {name}: {v:.6g} [{iv['low']:.6g}, {iv['high']:.6g}] pooled {pooled:.6g}")
        vs = [v for v in values if v]
        sd = statistics.stdev(vs) / mean if len(vs) > 1 and mean else float("nan")
        share, share_mean = (f"{x / judged:.2f}" if judged else "-" for x in (covered, by_mean))
        rel = f"{statistics.median(rels):.3f}" if rels else "-"
        row = f"{name:<16}{mean:>12.5g}{pooled:>12.5g}{sd:>9.3f}{rel:>10}{max(vs) / min(vs):>9.3f}"
        print(f"{row}{share:>9}{share_mean:>9}{f'{low}/{high}':>10}{len(rows) - judged:>13}")


if __name__ == "__main__":
    main()
