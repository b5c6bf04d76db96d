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
most one per request; ITL: 128 per doubling of the gap, a few dozen to a few hundred in practice).
A long run keeps every second: about 100 to 300 keys a second, i.e. some tens of MB per hour on
the master. Used by the stability verdicts (analysis/stability.py): burst recovery, soak drift.
"""

from __future__ import annotations

from llm_locust.metrics.gaps import gap_samples

METRICS = ("ttft", "itl")
BITS = {"ttft": 11, "itl": 8}  # significant bits kept per metric


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


class LatencySeries:
    __slots__ = ("data",)

    def __init__(self) -> None:
        # metric -> wall second of send -> {bucket us: count}
        self.data: dict[str, dict[int, dict[int, int]]] = {m: {} for m in METRICS}

    def record(self, metric: str, second: int, seconds: float, count: int = 1) -> None:
        b = bucket_us(round(seconds * 1e6), BITS[metric])
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
        for m, rows in (wire or {}).items():
            per = self.data.setdefault(m, {})
            for s, keys, counts in rows:
                sec = per.get(s)
                if sec is None:
                    sec = per[s] = {}
                for k, n in zip(keys, counts, strict=True):
                    sec[k] = sec.get(k, 0) + n

    def seconds(self, metric: str = "ttft") -> list[int]:
        return sorted(self.data.get(metric, {}))

    def counts(self, metric: str, start: int, end: int) -> dict[int, int]:
        """The merged buckets of the seconds in [start, end)."""
        out: dict[int, int] = {}
        per = self.data.get(metric, {})
        for s in range(start, end):
            for k, n in per.get(s, {}).items():
                out[k] = out.get(k, 0) + n
        return out

    def percentile(self, metric: str, p: float, start: int, end: int) -> float | None:
        """The p-th percentile (seconds) of `metric` over the requests sent in [start, end); None: none."""
        return percentile_of(self.counts(metric, start, end), p, BITS.get(metric, 11))

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
