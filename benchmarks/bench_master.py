"""What one master can merge: the cost of a worker's report, in process (issue 37 item 4).

Each worker sends its figures since its last report every 3 s (Locust's WORKER_REPORT_INTERVAL):
per ladder step, a whole Aggregate on the wire (metrics/aggregate.py to_wire: every histogram,
the per-second series, the time blocks, the per-endpoint and per-model groups). The master
decodes the message (msgpack, as Locust's ZMQ messages are) and merges it twice: into the step's
figures and into the run's (runtime/hub.py MasterHub.merge_report). So the master's cost per
report is that of one decode and two merges, and the ceiling of one core is

    workers = report interval / cost per report

This builds realistic reports (STREAMS streams per worker at TOKENS_S tokens/s each, 100-token
replies; ENDPOINTS x MODELS groups; every latency histogram filled), times the decode and the
merges over REPORTS reports, prints the cost per report and its parts, the ceiling at 3 s, and the
top of a cProfile of the merges. Exactness is checked on the way: the merged figures equal one
Aggregate fed every record (the same HDR histograms).

    python benchmarks/bench_master.py [--workers 200] [--streams 5] [--groups 64] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import sys
import time

import msgpack

sys.path.insert(0, os.getcwd())

from llm_locust.metrics.aggregate import Aggregate, figures  # noqa: E402
from llm_locust.metrics.records import RequestRecord  # noqa: E402

INTERVAL = 3.0  # Locust's WORKER_REPORT_INTERVAL


def _records(worker: int, n: int, t0: float, groups: int, rng: random.Random, tokens: int = 100):
    """n finished requests of one worker within one report interval from t0 (wall clock)."""
    for i in range(n):
        t = t0 + rng.random() * INTERVAL
        first = t + 0.05 + rng.random() * 0.2
        times = [first]
        for _ in range(tokens - 1):
            times.append(times[-1] + 0.008 + rng.random() * 0.004)
        yield RequestRecord(
            request_id=f"{worker}-{i}",
            api="openai-chat",
            t_sched=t,
            t_sent=t,
            wall_sent=t,
            t_headers=t + 0.01,
            t_first=first,
            t_first_content=first,
            t_end=times[-1] + 0.001,
            chunk_times=times,
            chunk_tokens=[1] * tokens,
            n_out=tokens,
            n_out_source="usage",
            n_in=200 + rng.randrange(800),
            n_in_source="usage",
            n_cached=rng.randrange(200),
            endpoint=f"http://10.0.0.{rng.randrange(max(1, groups // 2))}:8000",
            model=f"model-{rng.randrange(max(1, groups // 2))}",
        )


def build_reports(workers: int, per_report: int, groups: int, seed: int = 1):
    """One report per worker (packed as on the wire), and the Aggregate of every record."""
    rng = random.Random(seed)
    t0 = 1_800_000_000.0
    single = Aggregate()
    packed = []
    for w in range(workers):
        agg = Aggregate()
        for rec in _records(w, per_report, t0, groups, rng):
            for a in (agg, single):
                a.add_sent()
                a.add(rec)
        packed.append(msgpack.packb({"steps": {"0": agg.to_wire()}}))
    return packed, single


def merge_all(packed: list[bytes], ladder: bool) -> tuple[Aggregate, Aggregate, float, float]:
    """(step, total, decode seconds, merge seconds): the master's work for these reports. A run
    without a ladder merges each report once (its only step is the run's totals: MasterHub's
    _step_totals), a ladder's twice (the step's, the run's)."""
    total = Aggregate()
    step = Aggregate() if ladder else total
    decode = merge = 0.0
    for data in packed:
        t = time.perf_counter()
        msg = msgpack.unpackb(data, raw=False)
        t1 = time.perf_counter()
        wire = msg["steps"]["0"]
        step.merge_wire(wire)
        if step is not total:
            total.merge_wire(wire)
        t2 = time.perf_counter()
        decode += t1 - t
        merge += t2 - t1
    return step, total, decode, merge


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=200, help="reports merged (one per worker)")
    ap.add_argument("--streams", type=int, default=5, help="concurrent streams per worker")
    ap.add_argument("--e2e", type=float, default=1.2, help="seconds per request (100 tokens at ~10 ms)")
    ap.add_argument("--groups", type=int, default=64, help="endpoint + model groups")
    ap.add_argument("--ladder", action="store_true", help="a ladder's report: merged into its step and the run")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    per_report = max(1, round(a.streams * INTERVAL / a.e2e))
    t = time.perf_counter()
    packed, single = build_reports(a.workers, per_report, a.groups)
    built = time.perf_counter() - t
    size = sum(len(p) for p in packed) / len(packed)
    _, total, decode, merge = merge_all(packed, a.ladder)
    exact = figures(total) == figures(single)
    per = (decode + merge) / len(packed)
    merges = "two merges" if a.ladder else "one merge"
    print(
        f"{a.workers} reports of {per_report} requests each ({a.streams} streams x {INTERVAL:g} s / {a.e2e:g} s), "
        f"{a.groups} groups; built in {built:.1f} s"
    )
    print(f"report size: {size / 1024:.1f} KiB (msgpack)")
    print(
        f"master per report: {per * 1e3:.2f} ms (decode {decode / len(packed) * 1e3:.2f} ms, "
        f"{merges} {merge / len(packed) * 1e3:.2f} ms)"
    )
    print(f"one core at a {INTERVAL:g} s report interval: {INTERVAL / per:.0f} workers (ceiling)")
    print(f"{a.workers} workers: {a.workers * per / INTERVAL:.1%} of a core")
    print(f"merged figures equal one process fed every record: {exact}")
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        merge_all(packed, a.ladder)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
        print(out.getvalue())


if __name__ == "__main__":
    main()
