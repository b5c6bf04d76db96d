"""What one --precision check costs (runtime/precision_stop.py check), against the results' own
computation of every interval of the same window (Blocks.intervals with every metric), the
baseline, in the same sitting.

The blocks are filled in-process as a long run's would be: N ok requests spread over S seconds,
TTFT / TPOT / E2E lognormal (so nearly every request has a histogram bucket of its own at 11
bits: the worst case), 4 ITL samples of 50 tokens each. Each target set is checked R times; the
median is printed in ms and as a ratio to the baseline. A check holds the event loop that long
(the local runner's also sends the load), so the watch waits PACE times a check's cost between
two checks (runtime/precision_stop.py).

    python benchmarks/bench_precision_check.py [--requests 200000] [--seconds 600] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from llm_locust.analysis.precision_targets import check
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.runtime.precision_stop import PACE

TARGETS = {
    "ttft.p99": {"ttft.p99": 0.02},
    "itl.mean": {"itl.mean": 0.01},
    "tpot.mean + output_tokens_per_s": {"tpot.mean": 0.02, "output_tokens_per_s": 0.05},
    "ttft.p99, itl.p99, tpot.p50, e2e.p90": {"ttft.p99": 0.02, "itl.p99": 0.02, "tpot.p50": 0.02, "e2e.p90": 0.02},
}


def filled(n: int, seconds: float, seed: int = 1) -> Aggregate:
    rng = random.Random(seed)
    agg = Aggregate()
    t0 = 1_000_000_000.0
    for i in range(n):
        end = t0 + seconds * i / n
        lat = {m: int(rng.lognormvariate(11, 0.5)) for m in ("ttft", "tpot", "e2e")}
        agg.blocks.add_ok(end, lat, 200, True)
        itl = {int(rng.lognormvariate(9, 0.6)): 50 for _ in range(4)}
        agg.blocks.add_itl(end, itl, sum(k * v for k, v in itl.items()))
    agg.first_sent, agg.last_end = t0, t0 + seconds
    return agg


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    agg = filled(a.requests, a.seconds)
    keys = sum(len(h) for b in agg.blocks.blocks.values() for h in b.hist.values())
    print(f"{a.requests} requests over {a.seconds:g} s: {len(agg.blocks.blocks)} blocks, {keys} histogram buckets")
    base = median_ms(lambda: agg.blocks.intervals(agg.first_sent, agg.last_end), a.repeat)
    print(f"{'baseline: every interval (the results)':45} {base:8.1f} ms  1.00")
    for label, targets in TARGETS.items():
        ms = median_ms(lambda t=targets: check(agg, t, a.seconds), a.repeat)
        print(f"{label:45} {ms:8.1f} ms  {ms / base:.2f}  (next check in {max(1.0, PACE * ms / 1000):.1f} s)")


if __name__ == "__main__":
    main()
