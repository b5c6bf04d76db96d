"""Figures by time block, for the confidence intervals of one run (metrics/intervals.py).

Each ok request lands in the block of its end (wall clock): its TTFT, TPOT and E2E (and its ITL
samples) in the block's sparse histograms ({bucket's highest value in us: count}, TTFT/TPOT/E2E at
11 significant bits as the run's HDR histograms keep them, ITL at 8 bits, within 0.4%), their
exact sums in us, and its count, output tokens and goodput in the block's counters.

Blocks are aligned on the wall clock: block i covers [i * width, (i + 1) * width), width =
BASE_WIDTH * 2^j. So two processes' blocks merge exactly (a wider side first folds the narrower
one's pairs together), and a master's merge of its workers is what one process would have kept.
Bounded: past MAX_BLOCKS blocks the width doubles and neighbouring pairs merge, so a run of any
length keeps between MAX_BLOCKS/2 and MAX_BLOCKS blocks.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, cast

from llm_locust.metrics.intervals import (
    MAX_BATCHES,
    METHOD_MEAN,
    METHOD_PERCENTILE,
    METHOD_PERCENTILE_CLUSTERED,
    METHOD_RATE,
    Interval,
    mean_interval,
    percentile_interval,
    rate_interval,
)
from llm_locust.schema import Intervals, SteadyRates

BASE_WIDTH = 0.125  # s: a 1.25 s window still has 10 blocks
MAX_BLOCKS = 64
BATCH_E2E = 2.0  # a batch spans at least this many mean E2Es
METRICS = ("ttft", "itl", "tpot", "e2e")
BITS = {"ttft": 11, "itl": 8, "tpot": 11, "e2e": 11}
# "failed" and "answered" (ok or failed, any API: the error rate's parts, metrics.aggregate.error_rate);
# the rates' intervals' (Blocks.add_life): the squares of the ok and good requests' output tokens,
# the requests cut at the stop, and the ok requests started and ended in the block (in flight at
# a block's edge: those started before it less those ended before it)
COUNTS = (
    "ok",
    "tokens_out",
    "goodput_requests",
    "goodput_tokens",
    "failed",
    "answered",
    "tokens_sq",
    "goodput_tokens_sq",
    "cut",
    "started",
    "ended",
)
OK, TOKENS_OUT, GOOD_REQUESTS, GOOD_TOKENS, FAILED, ANSWERED, TOKENS_SQ, GOOD_TOKENS_SQ, CUT, STARTED, ENDED = range(11)
# each request's work spread over its life, in proportion to its time in each block (Blocks.add_life):
# an ok request's one request and its output tokens (and a good one's, for goodput), a cut one's
# tokens read and its one request; what a rate's interval takes its variance from (intervals.rate_interval)
SPREAD = ("ok", "tokens_out", "goodput_requests", "goodput_tokens", "cut_tokens", "cut")
CUT_TOKENS, CUT_REQUESTS = 4, 5
# rates (figures' names) -> the block counter they count; typed: `rate_figures` writes each into
# the schema's `SteadyRates`, so that a renamed figure fails mypy here
Rate = Literal["output_tokens_per_s", "requests_per_s", "goodput_requests_per_s", "goodput_tokens_per_s"]
RATES: dict[Rate, str] = {
    "output_tokens_per_s": "tokens_out",
    "requests_per_s": "ok",
    "goodput_requests_per_s": "goodput_requests",
    "goodput_tokens_per_s": "goodput_tokens",
}
PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


def rate_figures(counts: Sequence[float], seconds: float) -> SteadyRates:
    """Every rate of RATES, per s over `seconds` (0.0 over none), from a window's totals of the
    block counters (`counts`, in the order of COUNTS)."""
    out = cast(SteadyRates, {})
    for name, counter in RATES.items():
        out[name] = counts[COUNTS.index(counter)] / seconds if seconds > 0 else 0.0
    return out


def bucket_high(us: int, bits: int) -> int:
    """The highest value of the bucket holding `us` with its top `bits` bits kept (HdrHistogram's
    highest equivalent value: what its percentiles report)."""
    if us < (1 << bits):
        return us if us > 0 else 0
    shift = us.bit_length() - bits
    return ((us >> shift) << shift) + (1 << shift) - 1


class Packed(Mapping[int, int]):
    """A block's histogram once nothing writes to it: its keys and counts in two sorted arrays,
    16 bytes a key against a dict's ~100 (an int object per key and per count above 256, and the
    table). A master's blocks of a soak at 1,900 requests/s held 10,000 keys each; as dicts, one set
    of blocks took 22-36 MiB (benchmarks/README.md, "Soak")."""

    __slots__ = ("keys_", "counts")

    def __init__(self, hist: Mapping[int, int]) -> None:
        items = sorted(hist.items())
        self.keys_ = array("q", [k for k, _ in items])
        self.counts = array("q", [n for _, n in items])

    def __getitem__(self, key: int) -> int:
        i = bisect_left(self.keys_, key)
        if i == len(self.keys_) or self.keys_[i] != key:
            raise KeyError(key)
        return self.counts[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)

    def items(self) -> Iterable[tuple[int, int]]:  # type: ignore[override]  # a plain pairs' view is what readers iterate
        return zip(self.keys_, self.counts, strict=True)

    def values(self) -> Iterable[int]:  # type: ignore[override]
        return self.counts


class Block:
    """One time block's counts, latency histograms and sums. Written as dicts; packed
    (`Packed`) once a sweep finds it untouched since the sweep before (Blocks.block), and
    unpacked again by any later write (a long request's send block, a late worker's report)."""

    __slots__ = ("counts", "spread", "hist", "sums", "packed", "touched")

    def __init__(self) -> None:
        self.counts = [0] * len(COUNTS)
        self.spread = [0.0] * len(SPREAD)  # never packed: written without unpacking (Blocks.add_life)
        self.hist: dict[str, dict[int, int]] = {m: {} for m in METRICS}  # {} while packed
        self.sums = dict.fromkeys(METRICS, 0)
        self.packed: dict[str, Packed] | None = None
        self.touched = True  # written since the last sweep (Blocks.block)

    def histogram(self, metric: str) -> Mapping[int, int]:
        """The block's histogram of `metric` ({bucket's highest value in us: count}), packed or not:
        what every reader takes."""
        packed = self.packed
        return packed[metric] if packed is not None else self.hist[metric]

    def pack(self) -> None:
        if self.packed is None:
            self.packed = {m: Packed(h) for m, h in self.hist.items()}
            self.hist = {}

    def unpack(self) -> Block:
        """The block, its histograms dicts again (before any write), marked touched."""
        packed = self.packed
        if packed is not None:
            self.hist = {m: dict(h.items()) for m, h in packed.items()}
            self.packed = None
        self.touched = True
        return self

    def record(self, metric: str, us: int, count: int = 1) -> None:
        h = self.unpack().hist[metric]
        key = bucket_high(us, BITS[metric])
        h[key] = h.get(key, 0) + count

    def add(self, other: Block, metrics: Collection[str] = METRICS) -> None:
        """`other` added in: its counts, and its histograms and sums of `metrics`."""
        self.unpack()
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        for i, x in enumerate(other.spread):
            self.spread[i] += x
        for m in metrics:
            mine = self.hist[m]
            for k, n in other.histogram(m).items():
                mine[k] = mine.get(k, 0) + n
            self.sums[m] += other.sums[m]

    def to_wire(self) -> list[Any]:
        hists = {m: self.histogram(m) for m in METRICS}
        return [self.counts, {m: [self.sums[m], list(h.items())] for m, h in hists.items() if h}, self.spread]

    @classmethod
    def from_wire(cls, wire: list[Any]) -> Block:
        b = cls()
        b.add_wire(wire[0], wire[1], wire[2] if len(wire) > 2 else None)
        return b

    def add_wire(self, counts: list[int], hists: dict[str, list[Any]], spread: list[float] | None = None) -> None:
        """Add a block's to_wire parts in place: the master's merge of every worker's report
        (building a Block per wire block first cost a third of the merge, benchmarks/README.md)."""
        self.unpack()
        mine = self.counts
        for i, n in enumerate(counts):
            mine[i] += int(n)
        if spread:
            work = self.spread
            for i, x in enumerate(spread):
                work[i] += float(x)
        hist, sums = self.hist, self.sums
        for m, (total, items) in hists.items():
            h = hist.get(m)
            if h is None:
                continue
            sums[m] += int(total)
            get = h.get
            for k, n in items:
                h[k] = get(k, 0) + n


class Blocks:
    """The blocks of one Aggregate: {index: Block}, index = floor(wall / width)."""

    __slots__ = ("level", "blocks")

    def __init__(self) -> None:
        self.level = 0  # width = BASE_WIDTH * 2^level
        self.blocks: dict[int, Block] = {}

    @property
    def width(self) -> float:
        return BASE_WIDTH * (1 << self.level)

    def block(self, wall: float) -> Block:
        i = int(wall // (BASE_WIDTH * (1 << self.level)))
        b = self.blocks.get(i)
        if b is None:
            self._sweep()
            b = self.blocks[i] = Block()
            if len(self.blocks) > MAX_BLOCKS:
                self._widen(self.level + 1)
                b = self.block(wall)
            return b
        if b.packed is not None:
            return b.unpack()
        b.touched = True
        return b

    def _sweep(self) -> None:
        """Pack the blocks untouched since the last sweep (one a block's width, at the first write
        to a new block): what no request's end or worker's report still writes to."""
        for b in self.blocks.values():
            if b.touched:
                b.touched = False
            else:
                b.pack()

    def _widen(self, level: int) -> None:
        """Double the width until it is BASE_WIDTH * 2^level, merging neighbouring blocks."""
        shift = level - self.level
        if shift <= 0:
            return
        merged: dict[int, Block] = {}
        for i, b in self.blocks.items():
            j = i >> shift
            a = merged.get(j)
            if a is None:
                merged[j] = b
                continue
            still = a.packed is not None and b.packed is not None  # neither written lately: stays packed
            a.add(b)
            if still:
                a.pack()
                a.touched = False
        self.blocks, self.level = merged, level
        while len(self.blocks) > MAX_BLOCKS:
            self._widen(self.level + 1)

    def add_ok(self, wall_end: float, latencies_us: dict[str, int], n_out: int, good: bool) -> None:
        """An ok request: its latencies ({metric: us}), its output tokens and whether it met the SLOs."""
        b = self.block(wall_end)
        b.counts[0] += 1
        b.counts[5] += 1
        b.counts[1] += n_out
        if good:
            b.counts[2] += 1
            b.counts[3] += n_out
        hist, sums = b.hist, b.sums
        for m, us in latencies_us.items():  # 11 bits: bucket_high inlined (the hot path)
            key = us if us < 2048 else (((us >> (s := us.bit_length() - 11)) + 1) << s) - 1
            h = hist[m]
            h[key] = h.get(key, 0) + 1
            sums[m] += us

    def add_failed(self, wall_end: float) -> None:
        """A failed request (an outcome the error rate counts: not ok, not cancelled)."""
        counts = self.block(wall_end).counts
        counts[4] += 1
        counts[5] += 1

    def add_answered(self, wall_end: float) -> None:
        """An ok request whose latencies the blocks do not keep (an embeddings or other kind's)."""
        self.block(wall_end).counts[5] += 1

    def add_life(self, key: float, sent: float, end: float, n_out: int, kind: Literal["ok", "good", "cut"]) -> None:
        """A finished request's part in the rates' intervals (Blocks.intervals): an ok one ("good":
        it met the SLOs) counts the square of its output tokens in the block of `key` (where its
        add_ok counted it: its end, or its send in a Blocks keyed by send), its start and its end,
        and spreads its request and tokens over its life [sent, end]; one cut at the stop ("cut")
        counts in the block of `key` and spreads the tokens it had read and its one request. Per
        request, not per chunk: a request spans at most MAX_BLOCKS blocks."""
        if kind == "cut":
            self._counts_at(key)[CUT] += 1
            self._spread(sent, end, CUT_REQUESTS, CUT_TOKENS, float(n_out), False)
            return
        sq = n_out * n_out
        counts = self._counts_at(key)
        counts[TOKENS_SQ] += sq
        if kind == "good":
            counts[GOOD_TOKENS_SQ] += sq
        self._counts_at(sent)[STARTED] += 1
        self._counts_at(end)[ENDED] += 1
        self._spread(sent, end, OK, TOKENS_OUT, float(n_out), kind == "good")

    def _counts_at(self, wall: float) -> list[int]:
        """The counters of the block of `wall`, the block made if missing; a packed one stays
        packed (its histograms are not written)."""
        b = self.blocks.get(int(wall // (BASE_WIDTH * (1 << self.level))))
        return b.counts if b is not None else self.block(wall).counts

    def _spread(self, sent: float, end: float, i_req: int, i_tok: int, tokens: float, good: bool) -> None:
        """One request and its `tokens` added to SPREAD[i_req] and SPREAD[i_tok] (and to the
        goodput's when `good`) over [sent, end], in proportion to the time in each block (all of it
        in the block of `end` when sent >= end)."""
        while math.floor(end / self.width) - math.floor(sent / self.width) >= MAX_BLOCKS:
            self._widen(self.level + 1)  # a life longer than the blocks hold: they widen anyway
        w, blocks = self.width, self.blocks
        first, last = math.floor(sent / w), math.floor(end / w)
        life = end - sent
        for i in range(first, last + 1):
            lo = i * w
            share = (min(end, lo + w) - max(sent, lo)) / life if life > 0 else 1.0
            if share <= 0:
                continue
            b = blocks.get(i)
            if b is None:
                b = blocks[i] = Block()
            spread = b.spread
            spread[i_req] += share
            spread[i_tok] += tokens * share
            if good:
                spread[GOOD_REQUESTS] += share
                spread[GOOD_TOKENS] += tokens * share
        if len(blocks) > MAX_BLOCKS:
            self._widen(self.level + 1)

    def in_flight(self, index: int) -> int:
        """Ok requests in flight at the start of block `index` (of the current width): those
        started before it less those ended before it (Blocks.add_life)."""
        return sum(b.counts[STARTED] - b.counts[ENDED] for i, b in self.blocks.items() if i < index)

    def add_itl(self, wall_end: float, counts: dict[int, int], total_us: int) -> None:
        """An ok request's ITL samples ({us: count}) and their sum (metrics.gaps.gap_samples)."""
        b = self.block(wall_end)
        h = b.hist["itl"]
        get = h.get
        for us, n in counts.items():  # 8 bits: bucket_high inlined
            key = us if us < 256 else (((us >> (s := us.bit_length() - 8)) + 1) << s) - 1
            h[key] = get(key, 0) + n
        b.sums["itl"] += total_us

    def to_wire(self) -> list[Any]:
        return [self.level, [[i, *b.to_wire()] for i, b in self.blocks.items()]]

    def merge_wire(self, wire: list[Any] | None) -> None:
        if not wire:
            return
        level, rows = int(wire[0]), wire[1]
        self._widen(level)
        shift = self.level - level
        blocks = self.blocks
        for i, counts, hists, *spread in rows:
            j = int(i) >> shift
            b = blocks.get(j)
            if b is None:
                self._sweep()
                b = blocks[j] = Block()
            b.add_wire(counts, hists, spread[0] if spread else None)
        while len(self.blocks) > MAX_BLOCKS:
            self._widen(self.level + 1)

    def batches(
        self, start: float, end: float, min_seconds: float = 0.0, metrics: Collection[str] = METRICS
    ) -> tuple[list[Block], list[float]]:
        """The window [start, end) cut into at most MAX_BATCHES batches of consecutive blocks
        (empty ones included), each at least `min_seconds` long: each batch's merged Block (its
        counts, and the histograms of `metrics`) and its seconds within the window."""
        w = self.width
        first, last = math.floor(start / w), math.floor(end / w)
        n = last - first + 1
        per = max(1, math.ceil(n / MAX_BATCHES), math.ceil(min_seconds / w))
        starts = range(first, last + 1, per)
        out = [Block() for _ in starts]
        for i, block in self.blocks.items():  # the blocks held (at most MAX_BLOCKS), not every index
            if first <= i <= last:  # of the window: a window of years is as cheap as one of seconds
                out[(i - first) // per].add(block, metrics)
        seconds = [max(min(end, (g + per) * w) - max(start, g * w), 0.0) for g in starts]
        return out, seconds

    def intervals(self, start: float | None, end: float | None, metrics: Collection[str] = METRICS) -> Intervals | None:
        """The 95% intervals of the window's figures (results `intervals`, docs/results.md); None
        without a window. `metrics`: the latency metrics computed (all of them but where a reader
        needs only some: a --precision check, runtime/precision_stop.py), the rates always."""
        if start is None or end is None or end <= start:
            return None
        # a batch spans at least twice the mean E2E: requests are correlated with those they
        # overlapped (a closed loop's users send again as they end), and batch means need batches
        # longer than that correlation
        ok = sum(sum(b.histogram("e2e").values()) for b in self.blocks.values())
        mean_e2e = sum(b.sums["e2e"] for b in self.blocks.values()) / ok / 1e6 if ok else 0.0
        # ITL samples cluster by request: the requests with 2+ tokens (a TPOT each) are its units
        merged = {*metrics, "tpot"} if "itl" in metrics else metrics
        batches, seconds = self.batches(start, end, BATCH_E2E * mean_e2e, merged)
        latency: dict[str, dict[str, Any]] = {}
        for m in metrics:
            figs = {
                "mean": mean_interval([b.sums[m] / 1e6 for b in batches], [sum(b.hist[m].values()) for b in batches])
            }
            units = sum(sum(b.hist["tpot"].values()) for b in batches) if m == "itl" else None
            for name, p in PERCENTILES.items():
                figs[name] = percentile_interval(p, [b.hist[m] for b in batches], 1e-6, BITS[m], units)
            latency[m] = {name: iv.doc() for name, iv in figs.items()}
        w = self.width
        edges = self.in_flight(math.floor(start / w)) + self.in_flight(math.floor(end / w) + 1)
        rates: dict[str, Any] = rate_intervals(batches, seconds, edges)
        # the error rate, a share of the answered requests: failed over ok + failed, batch by batch
        rates["error_rate"] = mean_interval([b.counts[4] for b in batches], [b.counts[5] for b in batches]).doc()
        return cast(
            Intervals,
            {
                "blocks": len(batches),
                "block_s": (end - start) / len(batches),
                "method": {
                    "mean": METHOD_MEAN,
                    "percentile": METHOD_PERCENTILE,
                    "rate": METHOD_RATE,
                    **({"itl_percentile": METHOD_PERCENTILE_CLUSTERED} if "itl" in metrics else {}),
                },
                "latency": latency,
                "rates": rates,
            },
        )


def rate_intervals(batches: Sequence[Block], seconds: Sequence[float], edges: int) -> dict[str, Any]:
    """Every rate's interval (intervals.rate_interval; docs/metrics.md, "Confidence intervals").

    Each batch's work is the ok requests' spread over their lives, plus that of the requests cut at
    the stop, which were working until it: their tokens read, and half a request each (the mean
    of the share f below; without them the batches before a stop read low, and batch means took
    that one-off for noise: 144 against 880 tokens/s in an 8-s run's last batch). The edges' part:
    the requests in flight at the window's edges (`edges`) and those cut in it, each having done a
    share f ~ U(0, 1) of a request whose figure x (its tokens, or 1 for a request, and 0 if it did
    not meet the SLOs for goodput) is drawn from the window's ok requests, so its share's variance
    is E[x^2] / 3 - E[x]^2 / 4."""
    tot = [sum(b.counts[i] for b in batches) for i in range(len(COUNTS))]
    ok = tot[OK]
    cut_requests = [b.spread[CUT_REQUESTS] / 2 for b in batches]
    cut_tokens = [b.spread[CUT_TOKENS] for b in batches]
    good = tot[GOOD_REQUESTS] / ok if ok else 0.0
    good_tokens = tot[GOOD_TOKENS] / tot[TOKENS_OUT] if tot[TOKENS_OUT] else 0.0
    # per rate: its index (the same in COUNTS and SPREAD), the cut work counted as its (batch by
    # batch), and the sums of x and x^2 over the window's ok requests (x: one request's part in it)
    parts: dict[Rate, tuple[int, Sequence[float], float, float]] = {
        "output_tokens_per_s": (TOKENS_OUT, cut_tokens, tot[TOKENS_OUT], tot[TOKENS_SQ]),
        "requests_per_s": (OK, cut_requests, ok, ok),
        "goodput_requests_per_s": (
            GOOD_REQUESTS,
            [x * good for x in cut_requests],
            tot[GOOD_REQUESTS],
            tot[GOOD_REQUESTS],
        ),
        "goodput_tokens_per_s": (
            GOOD_TOKENS,
            [x * good_tokens for x in cut_tokens],
            tot[GOOD_TOKENS],
            tot[GOOD_TOKENS_SQ],
        ),
    }
    out: dict[str, Any] = {}
    for name, (i, cut, sum_x, sum_x2) in parts.items():
        work = [b.spread[i] + c for b, c in zip(batches, cut, strict=True)]
        share_var = (sum_x2 / ok / 3 - (sum_x / ok) ** 2 / 4) if ok else 0.0
        counts = [b.counts[i] for b in batches]
        if tot[i] and not any(work):  # blocks written without add_life: the counts' batch means
            out[name] = mean_interval(counts, seconds).doc()
            continue
        out[name] = rate_interval(counts, seconds, work, (edges + tot[CUT]) * share_var).doc()
    return out


def interval_of(doc: Any, value: float | None) -> Interval | None:
    """An Interval from a results `intervals` entry and its figure's value (compare, summary)."""
    if not isinstance(doc, dict) or value is None:
        return None
    return Interval(value, doc.get("low"), doc.get("high"), doc.get("reason"), doc.get("needs"))
