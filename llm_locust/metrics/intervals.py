"""95% confidence intervals of one run's headline figures, valid for requests correlated in time.

The requests of a run are not independent: a slow second slows every request in it. So every
interval here is made by batch means over time blocks (docs/metrics.md, "Confidence intervals"):
the measured window is cut into k consecutive time blocks (k at most MAX_BATCHES, at least
MIN_BATCHES), each block's figure is computed, and the spread of the k block figures, not of the
single requests, gives the standard error. t = Student's t(0.975, k-1) (t975, below).

- A mean (latency mean; the error rate) is a ratio sum / count over the blocks.
  Its standard error is the batch-means ratio estimator's:
      se^2 = sum_b (S_b - m * N_b)^2 / (k (k-1) Nbar^2)
  S_b, N_b the block's sum and count, m = sum S / sum N,
  Nbar = sum N / k. With equal blocks this is sd(block means) / sqrt(k). Interval m +- t * se.
- A rate (events over seconds) takes its variance from the requests' work spread over their
  lives, and from the requests its window's edges cut (rate_interval).
- A percentile p (a fraction, 0.99 for p99) is the pooled sample's value at rank max(round(p n), 1)
  (HdrHistogram's rule). Its interval is distribution-free, from order statistics: the values at
  ranks floor(n (p - h)) and ceil(n (p + h)), h = c * sqrt(p (1-p) / n), the standard error of the
  fraction of samples at or below the percentile were they independent, times
  c = max(1.96, t * sqrt(VIF)). VIF, the variance inflation of correlated requests, is
  (se_B / sqrt(p (1-p) / n))^2, se_B the batch-means ratio estimator's standard error of that
  fraction over the blocks' counts at or below the percentile. Never narrower than the
  independent samples' interval.
- Samples that come in clusters (`units`: an ITL sample's cluster is its request, whose tokens
  share the server's state) count as at most one sample per cluster: c >= 1.96 sqrt(n / units),
  the interval of `units` independent samples. Batch means over a short run's 5-7 blocks missed
  most of that correlation (benchmarks/README.md: ITL p50/p90/p99 covered 87/77/67% of 30 runs).
- Too few samples: a percentile whose lower or upper rank falls outside 1..n, or whose sample is
  smaller than the binomial minimum for an order-statistic interval with 2.5% in each tail
  (`min_samples`: p^n <= 0.025 and (1-p)^n <= 0.025, e.g. 368 for p99, 36 for p90, 6 for p50),
  has no interval: it is None with a reason and the samples it needs, the larger of that
  minimum and c^2 * max(p/(1-p), (1-p)/p) (the n at which both ranks fall within 1..n).
  A window of fewer than MIN_BATCHES blocks has no interval at all. Histograms that keep each
  value as its bucket's highest (metrics.blocks, `bits`) give the low end as its bucket's lowest:
  the interval holds the measurement's resolution.

Plain Python: no Locust, no gevent, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Student's t, two-sided 95% (the 0.975 quantile), for 1..30 degrees of freedom: the standard
# table (NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2, "Critical values of
# the Student's t distribution", column 0.025 upper tail), to 3 decimals.
T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
# beyond 30: the same table's rows for 40, 60 and 100 (read stepwise, never below the normal's)
T975_MORE = ((40, 2.021), (60, 2.000), (100, 1.984))
Z975 = 1.960  # the normal's 0.975 quantile: the limit of t as the degrees of freedom grow


def t975(dof: float) -> float:
    """Student's t 0.975 quantile for `dof` degrees of freedom (Welch's may be fractional: its
    floor is taken, which makes the test slightly conservative)."""
    if not dof >= 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {dof!r}")
    d = int(math.floor(dof + 1e-9))  # a Welch dof of 3.9999999 (rounding) is 4
    if d <= 30:
        return T975[d - 1]
    value = T975[29]
    for k, v in T975_MORE:
        if d >= k:
            value = v
    return value if d < 1000 else Z975


MAX_BATCHES = 20
MIN_BATCHES = 5
TAIL = 0.025  # each tail of a two-sided 95% interval
METHOD_MEAN = "batch means over time blocks (ratio estimator), t(0.975, k-1)"
METHOD_RATE = "batch means of each request's work spread over its life, plus the requests cut at the edges"
METHOD_PERCENTILE = "order statistics, variance inflated by batch means over time blocks"
# ITL: its samples clustered by request (at most one sample's worth of information per request)
METHOD_PERCENTILE_CLUSTERED = METHOD_PERCENTILE + ", at least n / requests"


@dataclass(frozen=True)
class Interval:
    """A figure's 95% interval; low/high None with `reason` (and `needs`) when it has none."""

    value: float | None
    low: float | None
    high: float | None
    reason: str | None = None
    needs: int | None = None

    @property
    def rel(self) -> float | None:
        """Half the interval's width over the figure (0.031: "± 3.1%"); None when it has none."""
        if self.low is None or self.high is None or not self.value:
            return None
        return (self.high - self.low) / 2 / abs(self.value)

    def doc(self) -> dict[str, float | int | str | None]:
        out: dict[str, float | int | str | None] = {"low": self.low, "high": self.high, "rel": self.rel}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.needs is not None:
            out["needs"] = self.needs
        return out


def min_samples(p: float) -> int:
    """The fewest samples for which an order-statistic interval of the p-quantile with at most
    2.5% in each tail exists: the smallest n with p^n <= 0.025 and (1-p)^n <= 0.025 (the sample's
    maximum then lies above the quantile with probability >= 97.5%, its minimum below it too)."""
    worst = max(p, 1 - p)
    return max(1, math.ceil(math.log(TAIL) / math.log(worst) - 1e-12))


def _ratio_se(sums: Sequence[float], counts: Sequence[float]) -> tuple[float, float] | None:
    """(sum S / sum N, its batch-means standard error) over k blocks; None when N sums to 0."""
    k = len(sums)
    total_n = sum(counts)
    if k < 2 or total_n <= 0:
        return None
    m = sum(sums) / total_n
    nbar = total_n / k
    ss = sum((s - m * c) ** 2 for s, c in zip(sums, counts, strict=True))
    return m, math.sqrt(ss / (k * (k - 1))) / nbar


def mean_interval(sums: Sequence[float], counts: Sequence[float]) -> Interval:
    """The interval of sum(sums) / sum(counts) from per-block sums and counts (a latency mean:
    seconds and requests; a rate: events and seconds). Every such figure is non-negative, so the
    low end is clipped at 0 (a mean of 278 ms from 8 requests in 5 blocks had [-89.5, 645] ms)."""
    k = len(sums)
    if k < MIN_BATCHES:
        return Interval(None, None, None, f"insufficient (needs {MIN_BATCHES} time blocks, has {k})")
    got = _ratio_se(sums, counts)
    if got is None or sum(1 for c in counts if c > 0) < 2:
        return Interval(None, None, None, "insufficient (needs samples in 2 time blocks)", 2)
    m, se = got
    h = t975(k - 1) * se
    return Interval(m, max(m - h, 0.0), m + h)


def rate_interval(
    counts: Sequence[float], seconds: Sequence[float], work: Sequence[float], edge_var: float
) -> Interval:
    """The interval of a rate, sum(counts) / sum(seconds), over k batches: its variance is that of
    the work done in the window plus what its edges cut (docs/metrics.md, "Confidence intervals").

    - `work`: each batch's share of the requests' work, each request spread over its life in
      proportion to its time in the batch (metrics.blocks.SPREAD). Counted at their ends, a closed
      loop's batches of two E2Es swing with the requests straddling their edges, which the whole
      window's total does not (a closed loop's users send again as they end), and their batch
      means gave 8-s simulator runs +- 12.6% where identical runs spread by 1% (benchmarks/README.md,
      "Rates"). Var = k / (k-1) * sum_b (W_b - r s_b)^2, r = sum W / sum s: the batch-means
      variance of the window's total.
    - `edge_var`: the variance of what the window's edges cut: each request in flight at an edge,
      or cut at the stop, had done a share of its work that is uniform on [0, 1] (see
      Blocks.intervals).
    Interval: value +- t(0.975, k-1) sqrt(Var) / sum(seconds), the low end clipped at 0."""
    k = len(counts)
    if k < MIN_BATCHES:
        return Interval(None, None, None, f"insufficient (needs {MIN_BATCHES} time blocks, has {k})")
    total_s = sum(seconds)
    if total_s <= 0:
        return Interval(None, None, None, "insufficient (needs samples in 2 time blocks)", 2)
    value = sum(counts) / total_s
    r = sum(work) / total_s
    var = k / (k - 1) * sum((w - r * s) ** 2 for w, s in zip(work, seconds, strict=True)) + max(edge_var, 0.0)
    h = t975(k - 1) * math.sqrt(var) / total_s
    return Interval(value, max(value - h, 0.0), value + h)


def _pooled(blocks: Sequence[Mapping[int, int]]) -> list[tuple[int, int]]:
    """The blocks' histograms ({value: count}) added, sorted by value."""
    total: dict[int, int] = {}
    for b in blocks:
        for v, c in b.items():
            total[v] = total.get(v, 0) + c
    return sorted(total.items())


def _value_at(pooled: list[tuple[int, int]], rank: int) -> int:
    """The value of the sample at 1-based `rank` in the pooled, sorted histogram."""
    seen = 0
    for v, c in pooled:
        seen += c
        if seen >= rank:
            return v
    return pooled[-1][0]


def bucket_low(value: int, bits: int) -> int:
    """The lowest value of the bucket whose highest is `value`, in histograms that keep the top
    `bits` bits (metrics.blocks.bucket_high): a value below 2^bits is its own bucket."""
    if value < (1 << bits):
        return value
    shift = value.bit_length() - bits
    return (value >> shift) << shift


def percentile_interval(
    p: float,
    blocks: Sequence[Mapping[int, int]],
    scale: float = 1.0,
    bits: int | None = None,
    units: int | None = None,
) -> Interval:
    """The interval of the p-quantile (0 < p < 1) of the samples held by per-block histograms
    ({value: count}); values are multiplied by `scale` in the result (1e-6: microseconds to s).
    With `bits`, the histograms keep values as their bucket's highest (metrics.blocks): the low
    end is then its bucket's lowest value, so the interval holds the bucket's resolution too (a
    run whose samples fall in one bucket had a zero-width interval, and identical runs whose
    percentiles fell in neighbouring buckets were called apart).
    With `units`, the samples come in that many clusters (ITL: the requests they belong to): the
    variance inflation is at least n / units, as if each cluster were one sample. A request's
    tokens share the server's state, and 8 streams of one server step the same gap: batch means
    over a short run's few blocks saw about a third of the run-to-run variance of an ITL p99."""
    k = len(blocks)
    pooled = _pooled(blocks)
    n = sum(c for _, c in pooled)
    n_min = min_samples(p)
    if k < MIN_BATCHES:
        return Interval(None, None, None, f"insufficient (needs {MIN_BATCHES} time blocks, has {k})")
    if n == 0:
        return Interval(None, None, None, f"insufficient (needs {n_min} samples)", n_min)
    point = _value_at(pooled, max(int(p * n + 0.5), 1))
    below = [sum(c for v, c in b.items() if v <= point) for b in blocks]
    sizes = [sum(b.values()) for b in blocks]
    se_iid = math.sqrt(p * (1 - p) / n)
    got = _ratio_se(below, sizes)
    # the multiplier of se_iid: z for independent samples, t * sqrt(VIF) where batch means say more
    c = max(Z975, t975(k - 1) * (got[1] if got else 0.0) / se_iid)
    if units:  # at most one independent sample per cluster: z, as for `units` independent ones
        c = max(c, Z975 * math.sqrt(n / units))
    h = c * se_iid
    lo_rank = math.floor(n * (p - h))
    hi_rank = math.ceil(n * (p + h))
    if n < n_min or lo_rank < 1 or hi_rank > n:
        # the ranks fall within 1..n once n >= c^2 * max(p/(1-p), (1-p)/p)
        odds = max(p / (1 - p), (1 - p) / p)
        needs = max(n_min, math.ceil(c * c * odds), n + 1)
        return Interval(point * scale, None, None, f"insufficient (needs {needs} samples, has {n})", needs)
    low = _value_at(pooled, lo_rank)
    if bits is not None:
        low = bucket_low(low, bits)
    return Interval(point * scale, low * scale, _value_at(pooled, hi_rank) * scale)


def difference(a: Interval, b: Interval) -> tuple[float, float] | None:
    """(b - a, the half width of its 95% interval) for two independent runs' figures: the half
    widths added in quadrature, sqrt(h_a^2 + h_b^2) (conservative for asymmetric percentile
    intervals: each half width is half its interval's width). None when either has no interval."""
    if a.value is None or b.value is None or a.low is None or b.low is None or a.high is None or b.high is None:
        return None
    ha, hb = (a.high - a.low) / 2, (b.high - b.low) / 2
    return b.value - a.value, math.hypot(ha, hb)
