"""Mergeable latency histograms: HdrHistogram in whole microseconds, 3 significant digits.

Why HDR: fixed relative precision over 1 us .. 1 h, exact merging (bucket counts add), and a
compact compressed encoding to ship deltas from workers to the master.
"""

from __future__ import annotations

from collections.abc import Mapping

from hdrh.histogram import HdrHistogram

from llm_locust.schema import LatencyStats

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


def latency_stats(count: int, mean: float, low: float, high: float, pct: Mapping[str, float]) -> LatencyStats:
    """A latency's summary (schema LatencyStats) in seconds: count, mean, min, max, then
    the percentiles of PERCENTILES found in `pct` ({"p50": seconds, ...})."""
    out: LatencyStats = {"count": count, "mean": mean, "min": low, "max": high}
    if "p50" in pct:  # one line per percentile: a TypedDict's keys are literals
        out["p50"] = pct["p50"]
    if "p90" in pct:
        out["p90"] = pct["p90"]
    if "p95" in pct:
        out["p95"] = pct["p95"]
    if "p99" in pct:
        out["p99"] = pct["p99"]
    if "p99.9" in pct:
        out["p99.9"] = pct["p99.9"]
    return out


# HdrHistogram with lowest value 1 and 3 significant digits keeps 2048 sub-buckets: values
# below 2048 us are exact, above that a value shares its bucket with the values that agree in
# their top 11 bits. Recording to a dict keyed by that bucket's lowest value first costs a
# fraction of hdrh's pure-Python record_value and loses nothing the histogram would keep.
_EXACT_BELOW = 2048
_VECTOR_FROM = 64  # fewer pending values: hdrh's record_value is as quick as numpy's set-up


def load_numpy() -> None:
    """Import numpy now, before any load: the histograms import it at their first flush (kept
    out of the module's imports for the start-up of commands that never flush one), and a
    Locust worker, forked before anything had imported it, did so at its first report, about a
    second into the load: 100-200 ms with its event loop held, every stream's tokens waiting in
    their sockets. At 100 streams `--workers auto` read 1.5% of its first tokens with the second,
    10-30 ms late, where one process read none (docs/accuracy.md). Called by the plugin's init
    in every process (runtime/plugin.py). `numpy.ctypeslib` too: numpy loads it at first use."""
    import numpy.ctypeslib  # noqa: F401


def _record_many(hdr: HdrHistogram, pending: dict[int, int]) -> None:
    """hdrh's record_value for many (value, count) pairs at once: its bucket index arithmetic
    (_get_bucket_index, _get_sub_bucket_index, _counts_index) on numpy arrays."""
    import numpy as np

    values = np.fromiter(pending.keys(), dtype=np.int64, count=len(pending))
    counts = np.fromiter(pending.values(), dtype=np.int64, count=len(pending))
    # bit length of (value | sub_bucket_mask): 64 - count_leading_zeros, as hdrh computes it
    masked = values | hdr.sub_bucket_mask
    pow2ceiling = np.floor(np.log2(masked.astype(np.float64))).astype(np.int64) + 1
    # log2 in floating point can be off by one just below a power of two: correct it exactly
    pow2ceiling -= (np.left_shift(1, pow2ceiling - 1) > masked).astype(np.int64)
    pow2ceiling += (np.left_shift(1, pow2ceiling) <= masked).astype(np.int64)
    bucket = pow2ceiling - hdr.unit_magnitude - (hdr.sub_bucket_half_count_magnitude + 1)
    sub_bucket = np.right_shift(values, bucket + hdr.unit_magnitude)
    index = np.left_shift(bucket + 1, hdr.sub_bucket_half_count_magnitude) + (sub_bucket - hdr.sub_bucket_half_count)
    keep = (index >= 0) & (index < hdr.counts_len) & (values >= 0)
    if not keep.all():
        values, counts, index = values[keep], counts[keep], index[keep]
    if not len(values):
        return
    np.add.at(np.ctypeslib.as_array(hdr.counts), index, counts)
    hdr.total_count += int(counts.sum())
    hdr.min_value = min(hdr.min_value, int(values.min()))
    hdr.max_value = max(hdr.max_value, int(values.max()))


class Histogram:
    """Latencies recorded in seconds, stored as microseconds. The mean is exact (a running sum)."""

    __slots__ = ("_h", "_pending", "_sum_us", "_sum_exact")

    def __init__(self) -> None:
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
        self._pending: dict[int, int] = {}
        self._sum_us = 0
        self._sum_exact = True

    def record(self, seconds: float, count: int = 1) -> None:
        us = round(seconds * 1e6)
        # clock granularity can make a gap of one tick negative after rounding: clamp
        self.record_us(us if us > 0 else 0, count)

    def record_us(self, us: int, count: int = 1) -> None:
        """Hot path: the caller has a non-negative integer of microseconds."""
        if us > HIGHEST_US:
            us = HIGHEST_US
        self._sum_us += us * count
        if us >= _EXACT_BELOW:
            shift = us.bit_length() - 11
            us = (us >> shift) << shift
        pending = self._pending
        pending[us] = pending.get(us, 0) + count

    def _flush(self) -> None:
        """Fold the pending values into hdrh's counts in one vectorised step (hdrh's own
        record_value is ~8 us of Python a value: a busy worker's report of 10,000 distinct
        values stalled its event loop ~80 ms, which the client validity checks saw as lag)."""
        pending = self._pending
        if not pending:
            return
        if len(pending) < _VECTOR_FROM:
            record = self._h.record_value
            for us, count in pending.items():
                record(us, count)
        else:
            _record_many(self._h, pending)
        pending.clear()

    @property
    def count(self) -> int:
        self._flush()
        return self._h.get_total_count()

    @property
    def sum_us(self) -> int | None:
        """Exact sum of the recorded microseconds; None once merged with data that had none."""
        return self._sum_us if self._sum_exact else None

    def merge(self, other: Histogram) -> None:
        other._flush()
        self._flush()
        self._h.add(other._h)
        self._add_sum(other.sum_us)

    def encode(self) -> bytes:
        self._flush()
        return self._h.encode()

    def merge_encoded(self, data: bytes, sum_us: int | None = None) -> None:
        if data:
            self._flush()
            self._h.decode_and_add(data)
            self._add_sum(sum_us)

    def _add_sum(self, sum_us: int | None) -> None:
        if sum_us is None:
            self._sum_exact = False
        else:
            self._sum_us += sum_us

    @classmethod
    def decode(cls, data: bytes, sum_us: int | None = None) -> Histogram:
        h = cls()
        h.merge_encoded(data, sum_us)
        return h

    def reset(self) -> None:
        self._h.reset()
        self._pending.clear()
        self._sum_us = 0
        self._sum_exact = True

    def buckets_us(self) -> list[tuple[int, int]]:
        """(lowest value of the bucket in us, count) of every non-empty bucket, in order.

        Reads hdrh's counts array through numpy: hdrh's own iterator walks every one of its
        ~23,000 buckets in Python (tens of ms per histogram, at every Prometheus scrape)."""
        import numpy as np

        self._flush()
        hdr = self._h
        counts = np.ctypeslib.as_array(hdr.counts)
        value_at = hdr.get_value_from_index
        return [(value_at(int(i)), int(counts[i])) for i in np.flatnonzero(counts)]

    def counts(self):
        """The bucket counts as a numpy array (a live view of hdrh's array, not a copy)."""
        import numpy as np

        self._flush()
        return np.ctypeslib.as_array(self._h.counts)

    def percentiles_of(self, counts, pcts=PERCENTILES) -> dict[str, float] | None:
        """{"p50": seconds, ...} of bucket counts laid out like this histogram's (e.g. the
        difference of two snapshots of `counts()`); None when they hold no sample.

        hdrh's get_value_at_percentile (the highest equivalent value of the bucket reaching the
        target count), with its arithmetic, through a numpy cumulative sum: about 0.05 ms where
        hdrh's own walk over its ~23,000 buckets in Python takes about 1 ms."""
        import numpy as np

        cs = np.cumsum(counts, dtype=np.int64)
        n = int(cs[-1]) if len(cs) else 0
        if n <= 0:
            return None
        hdr = self._h
        out: dict[str, float] = {}
        for p in pcts:
            target = max(int(p * n / 100 + 0.5), 1)  # hdrh's get_target_count_at_percentile
            i = int(np.searchsorted(cs, target, side="left"))
            out[f"p{p:g}"] = hdr.get_highest_equivalent_value(hdr.get_value_from_index(i)) / 1e6
        return out

    def percentile(self, p: float) -> float | None:
        if not self.count:
            return None
        return (self.percentiles_of(self.counts(), (p,)) or {}).get(f"p{p:g}")

    def summary(self) -> LatencyStats:
        """count, mean, min, max and the standard percentiles, all in seconds."""
        n = self.count
        if not n:
            return {"count": 0}
        mean_us = self._sum_us / n if self._sum_exact else self._h.get_mean_value()
        pct = self.percentiles_of(self.counts()) or {}
        return latency_stats(n, mean_us / 1e6, self._h.get_min_value() / 1e6, self._h.get_max_value() / 1e6, pct)
