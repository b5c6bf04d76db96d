"""Coverage of the 95% intervals when a run stops as soon as they are precise (--precision).

Stopping at the first check whose interval is narrow enough is a sequential test: a draw whose
interval is narrow by chance stops there, and an interval that is narrow by chance covers the
truth less often. This measures how much, in-process, on the code a run uses (metrics/blocks.py,
analysis/precision_targets.judge):

For each draw, requests end at RATE a second (Poisson), their TTFT drawn from a known
distribution (lognormal, or an AR(1) series whose values are correlated in time), E2E 50 ms (the
batches' least length). Every simulated second the window's intervals are judged against the
target, as runtime/precision_stop.py does; the draw stops at the first met check (or at MAX_S).
Counted: how often the stopping interval holds the true value, against the baseline: intervals
from fixed windows as long as the median stop, the same distributions, the same sitting.

    python benchmarks/precision_stop_coverage.py [--draws 400] [--rate 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_locust.analysis.precision_targets import judge  # noqa: E402
from llm_locust.metrics.blocks import Blocks  # noqa: E402

MAX_S = 120
T0 = 1_000_000_000.0
E2E_US = 50_000


def lognormal(rng: random.Random, n: int) -> list[float]:
    return [rng.lognormvariate(math.log(0.2), 0.5) for _ in range(n)]


def ar1(rng: random.Random, n: int, phi: float = 0.9, sigma: float = 0.02) -> list[float]:
    sd = sigma / math.sqrt(1 - phi * phi)
    y, out = rng.gauss(0.0, sd), []
    for _ in range(n):
        y = phi * y + rng.gauss(0.0, sigma)
        out.append(0.2 + y)
    return out


CASES = {  # name: (draw, {figure: truth in s})
    "lognormal(ln 0.2, 0.5)": (lognormal, {"ttft.mean": 0.2 * math.exp(0.125), "ttft.p50": 0.2}),
    "AR(1) phi 0.9 around 0.2": (ar1, {"ttft.mean": 0.2, "ttft.p50": 0.2}),
}


def run(draw, rng: random.Random, rate: float, figure: str, target: float | None, length: float):
    """One draw: (stopped at s, covered) judged each second until met (target) or at `length`."""
    ends, t = [], 0.0
    while t < MAX_S:
        t += rng.expovariate(rate)
        ends.append(t)
    values = draw(rng, len(ends))
    blocks, i = Blocks(), 0
    for second in range(1, int(length) + 1):
        while i < len(ends) and ends[i] <= second:
            blocks.add_ok(T0 + ends[i], {"ttft": max(1, int(values[i] * 1e6)), "e2e": E2E_US}, 1, True)
            i += 1
        if target is None and second < length:
            continue
        iv = blocks.intervals(T0, T0 + ends[i - 1], ("ttft", "e2e"))
        if target is None:
            return second, iv
        c = judge(iv, {figure: target}, i, second)
        if c["met"]:
            return second, iv
    return length, blocks.intervals(T0, T0 + ends[i - 1], ("ttft", "e2e"))


def covered(iv, figure: str, truth: float) -> bool | None:
    metric, _, stat = figure.partition(".")
    doc = iv["latency"][metric][stat] if iv else None
    if not doc or doc.get("low") is None:
        return None
    return doc["low"] <= truth <= doc["high"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print(f"{a.draws} draws each, {a.rate:g} requests/s; stop at the first met check (once a second, <= {MAX_S} s)")
    print(f"{'case':28} {'target':16} {'median stop':>11} {'coverage at stop':>16} {'fixed window':>13} {'ratio':>6}")
    for name, (draw, truths) in CASES.items():
        for figure, target in (("ttft.mean", 0.05), ("ttft.p50", 0.05)):
            rng = random.Random(a.seed)
            stops, hits = [], []
            for _ in range(a.draws):
                s, iv = run(draw, rng, a.rate, figure, target, MAX_S)
                stops.append(s)
                hits.append(covered(iv, figure, truths[figure]))
            length = statistics.median(stops)
            rng = random.Random(a.seed + 1)
            fixed = [
                covered(run(draw, rng, a.rate, figure, None, length)[1], figure, truths[figure]) for _ in range(a.draws)
            ]
            at_stop = sum(1 for h in hits if h) / max(1, sum(1 for h in hits if h is not None))
            base = sum(1 for h in fixed if h) / max(1, sum(1 for h in fixed if h is not None))
            label = f"{figure}={target:.0%}"
            print(f"{name:28} {label:16} {length:9.0f} s {at_stop:15.1%} {base:12.1%} {at_stop / base:6.3f}")


if __name__ == "__main__":
    main()
