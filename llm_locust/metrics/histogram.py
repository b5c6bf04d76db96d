"""Mergeable latency histograms: HdrHistogram in whole microseconds, 3 significant digits.

Why HDR: fixed relative precision over 1 us .. 1 h, exact merging (bucket counts add), and a
compact compressed encoding to ship deltas from workers to the master.
"""

from __future__ import annotations

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


class Histogram:
    """Latencies recorded in seconds, stored as microseconds."""

    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)

    def record(self, seconds: float, count: int = 1) -> None:
        us = round(seconds * 1e6)
        if us < 0:
            us = 0  # clock granularity can make a gap of one tick negative after rounding: clamp
        elif us > HIGHEST_US:
            us = HIGHEST_US
        self._h.record_value(us, count)

    def record_us(self, us: int, count: int = 1) -> None:
        """Hot-path variant: the caller already has a non-negative integer of microseconds."""
        self._h.record_value(us if us <= HIGHEST_US else HIGHEST_US, count)

    @property
    def count(self) -> int:
        return self._h.get_total_count()

    def merge(self, other: "Histogram") -> None:
        self._h.add(other._h)

    def encode(self) -> bytes:
        return self._h.encode()

    def merge_encoded(self, data: bytes) -> None:
        if data:
            self._h.decode_and_add(data)

    @classmethod
    def decode(cls, data: bytes) -> "Histogram":
        h = cls()
        h.merge_encoded(data)
        return h

    def reset(self) -> None:
        self._h.reset()

    def percentile(self, p: float) -> float | None:
        if not self.count:
            return None
        return self._h.get_value_at_percentile(p) / 1e6

    def summary(self) -> dict[str, float | int | None]:
        """count, mean, min, max and the standard percentiles, all in seconds."""
        n = self.count
        if not n:
            return {"count": 0}
        values = self._h.get_percentile_to_value_dict(list(PERCENTILES))
        out: dict[str, float | int | None] = {
            "count": n,
            "mean": self._h.get_mean_value() / 1e6,
            "min": self._h.get_min_value() / 1e6,
            "max": self._h.get_max_value() / 1e6,
        }
        for p in PERCENTILES:
            out[f"p{p:g}"] = values[p] / 1e6
        return out
