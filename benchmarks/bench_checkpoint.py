"""The cost of one checkpoint (--checkpoint-every, transport/checkpoint.py) on the master's loop.

A checkpoint builds the results document from what the master holds (report.outcome.build, marked
partial), turns it into JSON with the secrets masked (report.results.results_json) and writes it
atomically (report.files.write_atomic: a temporary file, fsync, rename). All of it runs on the
master's event loop, which merges the workers' reports in between: this measures how long one
write holds the loop, for a large run: `--groups` endpoints x `--groups` models (64: the cap per
dimension, metrics/aggregate.py MAX_GROUPS), `--steps` ladder steps, `--workers` worker rows, and a
per-second series of `--hours` hours (kept second by second up to 6 h: the largest `series`).

The baseline, in the same sitting: the end's write of the same run (the same build, not marked
partial), which every run already pays once. Prints each part's median over `--repeat` writes
(the build and the JSON in CPU time, the write in wall time), the ratio to the baseline, and the
share of one core the checkpoint takes at the default interval (60 s).

Run:  python benchmarks/bench_checkpoint.py [--groups 64] [--steps 10] [--workers 200] [--hours 6]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

from llm_locust.metrics.aggregate import Aggregate  # noqa: E402
from llm_locust.metrics.records import RequestRecord  # noqa: E402
from llm_locust.report import outcome  # noqa: E402
from llm_locust.report.files import write_atomic  # noqa: E402
from llm_locust.report.results import results_json  # noqa: E402
from llm_locust.settings import derive  # noqa: E402

WALL = 1_800_000_000.0


def record(i: int, n: int, hours: float, groups: int, tokens: int = 16) -> RequestRecord:
    """Request i of n, spread evenly over `hours`; its endpoint and model cycle over `groups`
    values each (every pair met)."""
    t = i * hours * 3600 / n
    first = t + 0.05 + (i % 7) * 0.01
    times = [first + k * (0.01 + (i % 5) * 0.002) for k in range(tokens)]
    return RequestRecord(
        request_id=str(i),
        api="openai-chat",
        t_sched=t,
        t_sent=t,
        wall_sent=WALL + t,
        t_first=first,
        t_end=times[-1] + 0.001,
        chunk_times=times,
        chunk_tokens=[1] * tokens,
        n_out=tokens,
        n_out_source="usage",
        n_in=100,
        n_in_source="usage",
        endpoint=f"http://10.0.{i % groups}.1:8000",
        model=f"model-{(i // groups) % groups}",
    )


def run_state(a: argparse.Namespace) -> tuple[Aggregate, dict[int, Aggregate]]:
    total, steps = Aggregate(), {k: Aggregate() for k in range(1, a.steps + 1)}
    n = int(a.hours * 3600 * a.rate)
    for i in range(n):
        rec = record(i, n, a.hours, a.groups)
        rec.step = 1 + i * a.steps // n
        total.add_sent(1)
        steps[rec.step].add_sent(1)
        total.add(rec)
        steps[rec.step].add(rec)
    total.add_sent(a.in_flight)  # in flight at the checkpoint
    return total, steps


def workers(n: int) -> list[dict]:
    return [
        {
            "id": f"host{i}_{i:08x}",
            "index": i,
            "reports": 7200,
            "sent": 1000,
            "finished": 999,
            "in_flight_at_last_report": 1,
            "lost": 0,
            "final_report": False,
            "lost_at": None,
            "rejoined_at": None,
            "left_at": None,
            "joined_at": WALL,
            "clock": None,
        }
        for i in range(n)
    ]


def one_write(ended: outcome.Ended, path: Path) -> tuple[float, float, float, int]:
    """(build s, JSON s, write s, bytes) of one write of `ended`'s document: the build and the JSON
    in this process's CPU time (what holds the loop; other processes' load on a shared machine
    does not count), the write in wall time (it waits for the disk: fsync)."""
    gc.collect()  # each write starts with the collector's generations empty: the same for both
    cpu = time.process_time
    t0 = cpu()
    out = outcome.build(ended)
    t1 = cpu()
    data = results_json(out.results)
    t2 = cpu()
    w0 = time.perf_counter()
    write_atomic(path, data)
    t3 = t2 + time.perf_counter() - w0
    return t1 - t0, t2 - t1, t3 - t2, len(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=64, help="endpoints, and models, each (default 64)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--rate", type=float, default=1.0, help="requests per second of the run (default 1)")
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    t = time.perf_counter()
    total, steps = run_state(a)
    print(
        f"state: {total.sent} requests over {a.hours:g} h, {len(total.series)} series rows, "
        f"{a.groups} x {a.groups} groups, {a.steps} steps, {a.workers} workers "
        f"(built in {time.perf_counter() - t:.0f} s)"
    )
    s = derive.resolve(None, derive.cli_values(derive.run_parser().parse_known_args([])[0]))
    start, at = WALL, WALL + a.hours * 3600
    common = {"settings": s, "total": total, "steps": steps, "started_at": start, "ended_at": at}
    rows = workers(a.workers)
    facts = {"every_s": 60.0, "counted_until": at - 1.0, "workers_missing": 0}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.json"
        results: dict[str, list[tuple[float, float, float, int]]] = {"end (baseline)": [], "checkpoint": []}
        for _ in range(a.repeat):  # interleaved: the machine's load hits both alike
            results["end (baseline)"].append(one_write(outcome.Ended(**common, workers=rows), path))
            results["checkpoint"].append(one_write(outcome.Ended(**common, workers=rows, checkpoint=facts), path))
    med = {k: [statistics.median(x[j] for x in v) for j in range(4)] for k, v in results.items()}
    print(
        f"{'median of ' + str(a.repeat):16} {'build ms':>9} {'JSON ms':>8} {'write ms':>9} {'total ms':>9} {'MiB':>6}"
    )
    for k, (b, j, w, size) in med.items():
        print(f"{k:16} {b * 1e3:9.1f} {j * 1e3:8.1f} {w * 1e3:9.1f} {(b + j + w) * 1e3:9.1f} {size / 2**20:6.2f}")
    base, cp = sum(med["end (baseline)"][:3]), sum(med["checkpoint"][:3])
    print(
        f"checkpoint / end: {cp / base:.2f}; at --checkpoint-every 60s the loop is held {cp * 1e3:.0f} ms "
        f"a minute: {cp / 60:.2%} of a core"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
