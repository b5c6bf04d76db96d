"""Latencies by the wall-clock second their request was sent: mergeable, exact to the HDR precision.

    s = LatencySeries()
    s.add(rec, offset)                 # offset: wall clock - perf_counter of that request
    s.percentile("ttft", 50, 120, 122) # TTFT p50 of the requests sent in wall seconds [120, 122)

Per second and per metric ("ttft": one sample per ok request with a first token; "itl": the
per-token gaps of ok requests, gap_k / n_k in whole microseconds counted n_k times, as the run's
histograms round them) a sparse {bucket: count}, the bucket
being the value in microseconds with its lowest bits cleared. TTFT as the run's HDR histograms keep
it (3 significant digits: values below 2048 us exact, above that the top 11 bits, within 0.05%);
ITL, many samples a second, coarser: the top 8 bits (below 256 us exact, above within 0.4%). Merging
adds counts, so a master's merge of its workers' series is exactly the series one process would
have kept. A percentile over a span of seconds is hdrh's: the highest value equivalent to the
bucket where the cumulative count reaches the target.

Bounded: a second holds at most one key per distinct bucket, whatever the request rate (TTFT: at
most one per request; ITL: 128 per doubling of the gap, a few dozen to a few hundred in practice:
about 20 KB a second at 50 requests/s). Kept every second for a whole run, that grew with the
run's length (70 MB an hour per Aggregate, and a local run keeps two: the step's and the total);
so only the last FINE_SECONDS (10 min) are kept second by second, and older seconds are folded
into buckets of COARSE_SECONDS (a minute, on the clock's minutes), at most MAX_COARSE of them:
past that the buckets double in width (2 min, 4 min ...), so a run of any length holds at most
about 900 buckets (`Timeline`), their latencies at COARSE_BITS (TTFT too: a minute's TTFTs at
11 bits are a key per request). Used by the stability verdicts (analysis/stability.py): burst
recovery reads 2 s windows of the last minutes; the soak verdict reads windows of a minute or
more, aligned on the folded buckets where the run is that old (`resolution`), its percentiles
then within 0.4%.
Aggregate.series (tokens and requests by the second, metrics/aggregate.py) is folded the same
way (`Seconds`), after SERIES_FINE_SECONDS (6 h: a ladder's steps are read from it at its end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from llm_locust.metrics.gaps import gap_samples

METRICS = ("ttft", "itl")
BITS = {"ttft": 11, "itl": 8}  # significant bits kept per metric
FINE_SECONDS = 600  # LatencySeries: the last 10 minutes second by second
SERIES_FINE_SECONDS = 6 * 3600  # Aggregate.series (about 170 bytes a second): the last 6 hours
COARSE_SECONDS = 60  # older seconds in buckets of a minute ...
MAX_COARSE = 240  # ... at most this many (4 hours of minutes), else twice as wide
COARSE_BITS = 8  # latencies in folded buckets: the top 8 bits (within 0.4%, as ITL always is)
FOLD_EVERY = 60  # fold when the newest second has moved this far past the last fold


class Timeline:
    """Which seconds of a per-second series are kept one by one, and which are folded into
    coarse buckets: keys below `folded` are buckets of `width` seconds, keyed by their start (a
    multiple of `width`), covering [key, min(key + width, folded)); keys from `folded` on are
    seconds. `fine`: how many seconds behind the newest one stay seconds."""

    __slots__ = ("fine", "width", "max_coarse", "folded", "newest", "low")

    def __init__(self, fine: int = FINE_SECONDS, width: int = COARSE_SECONDS, max_coarse: int = MAX_COARSE) -> None:
        self.fine, self.width, self.max_coarse = fine, width, max_coarse
        self.folded: int | None = None  # None until the first fold: every key is a second
        self.newest: int | None = None
        self.low: int | None = None  # the oldest second not folded (before the first fold: the oldest seen)

    def key(self, second: int) -> int:
        """Where a second's data goes: itself, or the start of the bucket it was folded into."""
        f = self.folded
        if f is None or second >= f:
            return second
        return second - second % self.width

    def note(self, second: int) -> bool:
        """A second seen; True when the newest second has moved far enough to fold (`fold`)."""
        if self.low is None or (self.folded is None and second < self.low):
            self.low = second
        n = self.newest
        if n is not None and second <= n:
            return False
        self.newest = second
        return second - self.fine - self.low >= FOLD_EVERY

    def fold(self, tables: Iterable[dict[int, Any]], merge: Callable[[dict[int, Any], int, Any], None]) -> None:
        """Fold every second older than `fine` behind the newest into its bucket, in each table
        ({key: value}; `merge(table, key, value)` adds a value into a key's), then widen the
        buckets while there are more than `max_coarse`."""
        assert self.newest is not None and self.low is not None
        limit = self.newest - self.fine
        start = self.low if self.folded is None else self.folded
        tables = list(tables)
        for t in tables:
            old = [k for k in t if start <= k < limit]
            for k in old:
                merge(t, k - k % self.width, t.pop(k))
        self.folded = self.low = max(start, limit)
        while max((sum(1 for k in t if k < self.folded) for t in tables), default=0) > self.max_coarse:
            self.width *= 2
            for t in tables:
                for k in [k for k in t if k < self.folded and k % self.width]:
                    merge(t, k - k % self.width, t.pop(k))

    def coarse_in(self, start: int, end: int) -> list[int]:
        """The starts of the folded buckets that begin in [start, end) (a bucket counts where it
        begins: windows aligned on `width` read them exactly)."""
        if self.folded is None or start >= self.folded or self.width <= 1:
            return []
        first = start + (-start) % self.width
        return list(range(first, min(end, self.folded), self.width))

    def resolution(self, start: float, end: float) -> int:
        """The widest bucket a window [start, end) reads: 1 (seconds) unless it reaches folded data."""
        return self.width if self.folded is not None and start < self.folded and self.newest is not None else 1


def bucket_us(us: int, bits: int = 11) -> int:
    """The lowest value of the bucket that holds `us` with its top `bits` bits kept (11: the HDR
    histograms' 3 significant digits)."""
    if us < (1 << bits):
        return us if us > 0 else 0
    shift = us.bit_length() - bits
    return (us >> shift) << shift


def highest_equivalent_us(b: int, bits: int = 11) -> int:
    """The highest value of the bucket whose lowest value is `b` (hdrh's highest equivalent value)."""
    if b < (1 << bits):
        return b
    shift = b.bit_length() - bits
    return b + (1 << shift) - 1


def _add_buckets(table: dict[int, dict[int, int]], key: int, buckets: dict[int, int]) -> None:
    """Fold one second's (or bucket's) latency buckets into a folded bucket, at COARSE_BITS."""
    mine = table.get(key)
    if mine is None:
        mine = table[key] = {}
    for b, n in buckets.items():
        b = bucket_us(b, COARSE_BITS)
        mine[b] = mine.get(b, 0) + n


class LatencySeries:
    __slots__ = ("data", "timeline")

    def __init__(self, fine: int = FINE_SECONDS) -> None:
        # metric -> wall second of send (or, folded, a bucket's first second) -> {bucket us: count}
        self.data: dict[str, dict[int, dict[int, int]]] = {m: {} for m in METRICS}
        self.timeline = Timeline(fine)

    def _second(self, second: int) -> int:
        """The key a second's samples go to; folds the old seconds when the newest moves on."""
        tl = self.timeline
        if tl.note(second):
            tl.fold(self.data.values(), _add_buckets)
        return tl.key(second)

    def record(self, metric: str, second: int, seconds: float, count: int = 1) -> None:
        key = self._second(second)
        b = bucket_us(round(seconds * 1e6), BITS[metric] if key == second else COARSE_BITS)
        second = key
        sec = self.data[metric].get(second)
        if sec is None:
            sec = self.data[metric][second] = {}
        sec[b] = sec.get(b, 0) + count

    def add(self, rec, offset: float, itl_counts: dict[int, int] | None = None) -> None:
        """One ok request (the caller checks): its TTFT and its per-token gaps, by its send second.

        `itl_counts`: the request's ITL samples as the run's histograms keep them ({bucket us at
        11 bits: count}, gap_samples' third item), when the caller has them: the series takes
        them re-bucketed to 8 bits, a few dozen keys, rather than one step per gap (a paced
        256-token stream has 255 different gaps). Without them they are worked out here."""
        if rec.t_first is None:
            return
        second = int(rec.wall_sent)
        self.record("ttft", second, rec.t_first - rec.t_sent)
        times = rec.chunk_times
        if len(times) < 2:
            return
        if itl_counts is None:
            itl_counts = gap_samples(times, rec.chunk_tokens)[2]
        second = self.timeline.key(second)
        per = self.data["itl"]
        sec = per.get(second)
        if sec is None:
            sec = per[second] = {}
        get = sec.get
        # an 11-bit bucket's value re-bucketed at 8 bits is the gap's own 8-bit bucket (the same
        # top bits are kept of a value with the same bit length)
        for us, n in itl_counts.items():
            if us >= 256:
                shift = us.bit_length() - 8
                us = (us >> shift) << shift
            sec[us] = get(us, 0) + n

    @property
    def empty(self) -> bool:
        return not any(self.data.values())

    def to_wire(self) -> dict[str, list]:
        return {
            m: [[s, list(b.keys()), list(b.values())] for s, b in per.items()] for m, per in self.data.items() if per
        }

    def merge_wire(self, wire: dict[str, list] | None) -> None:
        """Add another series' to_wire (a worker's: seconds; a folded one's buckets go to the key
        their first second maps to here)."""
        for m, rows in (wire or {}).items():
            self.data.setdefault(m, {})
            for s, keys, counts in rows:
                per = self.data[m]
                key = self._second(s)
                if key != s or (self.timeline.folded is not None and s < self.timeline.folded):
                    _add_buckets(per, key, dict(zip(keys, counts, strict=True)))
                    continue
                sec = per.get(key)
                if sec is None:
                    sec = per[key] = {}
                for k, n in zip(keys, counts, strict=True):
                    sec[k] = sec.get(k, 0) + n

    def seconds(self, metric: str = "ttft") -> list[int]:
        return sorted(self.data.get(metric, {}))

    def resolution(self, start: float, end: float) -> int:
        """1 when [start, end) is kept second by second, else the width of its folded buckets."""
        return self.timeline.resolution(start, end)

    def counts(self, metric: str, start: int, end: int) -> dict[int, int]:
        """The merged buckets of the seconds in [start, end), and of the folded buckets that begin
        in it."""
        out: dict[int, int] = {}
        per = self.data.get(metric, {})
        folded = self.timeline.folded
        first = start if folded is None else max(start, folded)
        keys = [*self.timeline.coarse_in(start, end), *range(first, end)]
        for s in keys:
            for k, n in per.get(s, {}).items():
                out[k] = out.get(k, 0) + n
        return out

    def percentile(self, metric: str, p: float, start: int, end: int) -> float | None:
        """The p-th percentile (seconds) of `metric` over the requests sent in [start, end); None: none.
        A window that reads folded buckets is read at their COARSE_BITS."""
        counts = self.counts(metric, start, end)
        bits = BITS.get(metric, 11)
        if self.resolution(start, end) > 1 and bits > COARSE_BITS:
            bits, coarse = COARSE_BITS, counts
            counts = {}
            for k, n in coarse.items():
                k = bucket_us(k, bits)
                counts[k] = counts.get(k, 0) + n
        return percentile_of(counts, p, bits)

    def count(self, metric: str, start: int, end: int) -> int:
        return sum(self.counts(metric, start, end).values())


def percentile_of(buckets: dict[int, int], p: float, bits: int = 11) -> float | None:
    n = sum(buckets.values())
    if n <= 0:
        return None
    target = max(int(p * n / 100 + 0.5), 1)  # hdrh's target count
    acc = 0
    for k in sorted(buckets):
        acc += buckets[k]
        if acc >= target:
            return highest_equivalent_us(k, bits) / 1e6
    return highest_equivalent_us(max(buckets), bits) / 1e6


def _add_row(table: dict[int, list[int]], key: int, row: list[int]) -> None:
    mine = table.get(key)
    if mine is None:
        table[key] = row
        return
    mine[0] += row[0]
    mine[1] += row[1]
    mine[2] += row[2]


class Seconds(dict):
    """Aggregate.series: wall second -> [output tokens arrived, requests ok, requests failed], with
    the seconds older than `fine` behind the newest folded (Timeline): a folded row is keyed by
    its bucket's first second and carries the bucket's width as a 4th item ([tokens, ok, failed,
    width]), so whoever reads the rows (the results' `series`, the report's plot) can spread it.
    A plain dict to every reader of recent seconds (`series.get(second)`)."""

    __slots__ = ("timeline",)

    def __init__(self, fine: int = SERIES_FINE_SECONDS) -> None:
        super().__init__()
        self.timeline = Timeline(fine)

    def bucket(self, second: int) -> list[int]:
        """The row a second's counts go to (created at 0)."""
        tl = self.timeline
        if tl.note(second):
            tl.fold((self,), _add_row)
            for k in [k for k in self if tl.folded is not None and k < tl.folded]:
                self[k][3:] = [tl.width]
        key = tl.key(second)
        row = self.get(key)
        if row is None:
            folded = tl.folded is not None and key < tl.folded
            row = self[key] = [0, 0, 0, tl.width] if folded else [0, 0, 0]
        return row

    def resolution(self, start: float, end: float) -> int:
        return self.timeline.resolution(start, end)
