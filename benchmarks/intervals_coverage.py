"""Coverage of the 95% intervals of metrics/intervals.py (docs/metrics.md, "Confidence intervals").

For each distribution (normal, exponential, lognormal with a heavy tail, Pareto with a heavier
one, and an AR(1) series, phi 0.7 and 0.9, whose samples are correlated in time), draw DRAWS
samples of n values in time order, cut each into 20 equal time blocks (as a run's window is cut),
and count how often the interval of the mean, the p50, the p90 and the p99 holds the true value.
Nominal: 95%. A draw whose percentile has too few samples for an interval is counted apart
("insufficient"), not as a miss. Also printed: the coverage of the mean's interval were the
samples taken as independent (sd / sqrt(n)), which the autocorrelated series break.

    python benchmarks/intervals_coverage.py [--draws 400] [--n 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_locust.metrics.intervals import mean_interval, percentile_interval  # noqa: E402

Z = {0.5: 0.0, 0.9: 1.2815515655446004, 0.99: 2.3263478740408408}
K = 20


def ar1(phi: float, sigma: float = 0.1):
    sd = sigma / math.sqrt(1 - phi * phi)

    def draw(rng: random.Random, n: int) -> list[float]:
        y = rng.gauss(0.0, sd)
        out = []
        for _ in range(n):
            y = phi * y + rng.gauss(0.0, sigma)
            out.append(1.0 + y)
        return out

    truth = {"mean": 1.0, **{p: 1.0 + sd * z for p, z in Z.items()}}
    return draw, truth


ALPHA = 2.5  # Pareto shape: finite mean and variance, a heavy tail
DISTRIBUTIONS = {
    "normal(1, 0.2)": (
        lambda rng, n: [rng.gauss(1.0, 0.2) for _ in range(n)],
        {"mean": 1.0, **{p: 1.0 + 0.2 * z for p, z in Z.items()}},
    ),
    "exponential(0.1) + 0.01": (
        lambda rng, n: [0.01 + rng.expovariate(10.0) for _ in range(n)],
        {"mean": 0.11, **{p: 0.01 - 0.1 * math.log(1 - p) for p in Z}},
    ),
    "lognormal(-2, 1)": (
        lambda rng, n: [rng.lognormvariate(-2.0, 1.0) for _ in range(n)],
        {"mean": math.exp(-1.5), **{p: math.exp(-2.0 + z) for p, z in Z.items()}},
    ),
    f"pareto({ALPHA}) x 0.01": (
        lambda rng, n: [0.01 * rng.paretovariate(ALPHA) for _ in range(n)],
        {"mean": 0.01 * ALPHA / (ALPHA - 1), **{p: 0.01 * (1 - p) ** (-1 / ALPHA) for p in Z}},
    ),
    "AR(1) phi 0.7": ar1(0.7),
    "AR(1) phi 0.9": ar1(0.9),
}


def study(draw, truth, draws: int, n: int, rng: random.Random) -> dict[str, tuple[float, int]]:
    hit: Counter = Counter()
    short: Counter = Counter()
    naive = 0
    for _ in range(draws):
        xs = draw(rng, n)
        size = n // K
        parts = [xs[b * size : (b + 1) * size] for b in range(K)]
        hists = [Counter(max(round(v * 1e6), 0) for v in part) for part in parts]
        iv = mean_interval([sum(p) for p in parts], [len(p) for p in parts])
        hit["mean"] += iv.low is not None and iv.high is not None and iv.low <= truth["mean"] <= iv.high
        m = sum(xs) / n
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
        naive += abs(m - truth["mean"]) <= 1.96 * sd / math.sqrt(n)
        for p in Z:
            iv = percentile_interval(p, hists, 1e-6)
            if iv.low is None or iv.high is None:
                short[p] += 1
                continue
            hit[p] += iv.low <= truth[p] <= iv.high
    out = {"mean": (hit["mean"] / draws, 0), "naive mean": (naive / draws, 0)}
    for p in Z:
        judged = draws - short[p]
        out[f"p{round(p * 100)}"] = (hit[p] / judged if judged else float("nan"), short[p])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    cols = ("mean", "p50", "p90", "p99", "naive mean")
    print(f"coverage of nominal 95% intervals: {a.draws} draws of n={a.n}, {K} time blocks, seed {a.seed}")
    print(f"{'distribution':<26}" + "".join(f"{c:>12}" for c in cols) + "   insufficient p99")
    for name, (draw, truth) in DISTRIBUTIONS.items():
        t = time.perf_counter()
        got = study(draw, truth, a.draws, a.n, rng)
        cells = "".join(f"{got[c][0]:>12.3f}" for c in cols)
        print(f"{name:<26}{cells}   {got['p99'][1]:>5}   ({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
