"""Open-loop arrival times: the one definition of the inter-arrival draw.

    draw = interval_draw("gamma", rate=4.0, burstiness=0.5, rng=random.Random(7))
    draw()  # seconds to the next arrival
    share_offsets("poisson", 4.0, seed=7, share=(1, 3))  # worker 1 of 3: every 3rd arrival, from the 2nd

Kinds (`--arrivals`, a rate ladder's `ladder.arrivals`, the synthetic workload's `arrivals=`):

- `poisson`: exponential intervals of mean 1/rate (coefficient of variation 1);
- `constant`: every interval exactly 1/rate (CV 0);
- `gamma`: gamma intervals with shape = burstiness and scale = 1 / (rate x burstiness): mean
  1/rate, CV 1/sqrt(burstiness). This is vLLM's `--burstiness` (benchmarks/serve: gamma with
  shape=burstiness, theta=1/(rate*burstiness)) and AIPerf's `--arrival-smoothness` (the same
  value gives the same distribution): 1 is Poisson, below 1 burstier (arrivals cluster, long
  gaps between), above 1 smoother (towards constant).

A `poisson` kind with a burstiness other than 1 is gamma (`effective_kind`), as vLLM's
`--burstiness` shapes its default Poisson process. Pure: no gevent, no Locust; the dispatcher
(runtime.dispatcher.rate_pass) and the synthetic trace generator (workload.synth) both draw here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Literal, get_args

Arrivals = Literal["poisson", "constant", "gamma"]
ARRIVAL_KINDS: tuple[str, ...] = get_args(Arrivals)
MIN_BURSTINESS = 0.01  # CV 10: below it a step's arrivals are a handful of bursts, nothing steady to measure
MAX_BURSTINESS = 1000.0  # CV 0.03: constant arrivals in all but name


def effective_kind(kind: str, burstiness: float = 1.0) -> str:
    """The distribution drawn: `poisson` with a burstiness other than 1 is `gamma`."""
    return "gamma" if kind == "poisson" and burstiness != 1.0 else kind


def arrival_problem(kind: str, burstiness: float = 1.0) -> str | None:
    """What is wrong with this kind and burstiness, in one line naming the fix; None: fine."""
    if kind not in ARRIVAL_KINDS:
        return f"arrivals: unknown kind {kind!r}; one of {', '.join(ARRIVAL_KINDS)}"
    if not (isinstance(burstiness, (int, float)) and math.isfinite(burstiness)):
        return f"burstiness: expected a number, got {burstiness!r}"
    if not MIN_BURSTINESS <= burstiness <= MAX_BURSTINESS:
        return (
            f"burstiness: {burstiness:g} is outside {MIN_BURSTINESS:g}..{MAX_BURSTINESS:g} "
            "(1 = Poisson, below 1 burstier, above 1 smoother)"
        )
    if kind == "constant" and burstiness != 1.0:
        return (
            f"burstiness: {burstiness:g} shapes random arrivals: drop it, or use poisson or gamma arrivals "
            "instead of constant"
        )
    return None


def interval_draw(kind: str, rate: float, burstiness: float, rng: random.Random) -> Callable[[], float]:
    """A function giving the seconds to the next arrival, drawn from `rng` (ValueError: bad input).

    Poisson keeps rng.expovariate, so a seeded Poisson sequence (a synthetic trace, a ladder's
    arrivals) is the same as before gamma arrivals existed."""
    problem = arrival_problem(kind, burstiness)
    if problem:
        raise ValueError(problem)
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"rate: expected a positive number of requests/s, got {rate!r}")
    kind = effective_kind(kind, burstiness)
    if kind == "constant":
        gap = 1.0 / rate
        return lambda: gap
    if kind == "poisson":
        return lambda: rng.expovariate(rate)
    shape, scale = burstiness, 1.0 / (rate * burstiness)
    return lambda: rng.gammavariate(shape, scale)


def share_offsets(
    kind: str, rate: float, *, burstiness: float = 1.0, seed: int = 0, share: tuple[int, int] = (0, 1)
) -> Iterator[float]:
    """Seconds from the pass's start of this share's arrivals, for ever (the caller stops).

    The cluster's arrivals are one sequence at `rate` (drawn from `seed`, the same on every
    worker); worker i of K sends arrivals i, i+K, i+2K, ...: the merged arrivals have exactly the
    chosen distribution (K gamma processes of rate/K each would merge into a smoother one), and
    constant arrivals are evenly interleaved across workers."""
    i, k = share
    draw = interval_draw(kind, rate, burstiness, random.Random(seed))
    t, n = 0.0, 0
    while True:
        t += draw()
        if n % k == i:
            yield t
        n += 1


def interval_stats(intervals: list[float]) -> tuple[float, float]:
    """(mean, coefficient of variation) of inter-arrival intervals: CV = sample std / mean
    (0 for fewer than 2 intervals or a zero mean). What the tests check a shape against."""
    n = len(intervals)
    if n < 2:
        return (intervals[0] if intervals else 0.0), 0.0
    mean = sum(intervals) / n
    if mean <= 0:
        return mean, 0.0
    var = sum((x - mean) ** 2 for x in intervals) / (n - 1)
    return mean, math.sqrt(var) / mean
