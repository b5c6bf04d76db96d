"""A finished request's inter-chunk and ITL samples, folded once per request.

Shared by the Aggregate (its ITL and inter-chunk histograms, metrics/aggregate.py) and the latency
series by send second (metrics/timeseries.py), so that both count the same rounded gaps.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice, repeat
from operator import and_ as _and
from operator import mul as _mul
from operator import sub as _sub

from llm_locust.metrics.histogram import _EXACT_BELOW, HIGHEST_US

_MICRO = repeat(1e6)  # an endless iterator of 1e6: map() stops at its shortest input


def gap_samples(times: list[float], ntoks: list[int]) -> tuple[dict[int, int], int, dict[int, int], int, float]:
    """A request's ITL and inter-chunk samples, folded once for every Aggregate it goes into
    (a step's and the run's total): (inter-chunk {bucket us: count}, their exact sum in us,
    ITL {bucket us: count}, their exact sum, the largest per-token gap in s).

    Per gap: what inter_chunk.record_us(gap_us) and itl.record_us(round(gap_us / n), n) do
    (clamp to HIGHEST_US, exact sum, bucket rounding, count), written out in the loop: a paced
    stream has a different gap at every token, and two calls a gap were most of a finished
    request's cost. Repeats of a gap (chunks read together) are counted at once.
    """
    if len(times) > 2 and ntoks.count(1) == len(ntoks):
        return _one_token_gaps(times)
    itl_max_us = 0.0
    ic_counts: dict[int, int] = {}
    itl_counts: dict[int, int] = {}
    ic_get, itl_get = ic_counts.get, itl_counts.get
    ic_sum = itl_sum = 0
    prev = times[0] if times else 0.0
    last_gap = last_n = -1  # the previous gap's (gap_us, n), and its keys and values below
    ic_key = ic_us = itl_key = itl_us = run = 0
    for i in range(1, len(times)):
        t = times[i]
        gap_us = round((t - prev) * 1e6)
        prev = t
        if gap_us < 0:
            gap_us = 0
        n = ntoks[i]
        if gap_us == last_gap and n == last_n:  # chunks read together: the same samples again
            run += 1
            continue
        if run:  # the repeats of the previous gap, counted at once
            ic_counts[ic_key] += run
            ic_sum += ic_us * run
            itl_counts[itl_key] += last_n * run
            itl_sum += itl_us * last_n * run
            run = 0
        last_gap, last_n = gap_us, n
        per_token = gap_us / n
        if per_token > itl_max_us:
            itl_max_us = per_token
        ic_us = us = gap_us if gap_us <= HIGHEST_US else HIGHEST_US  # inter_chunk.record_us(gap_us)
        ic_sum += us
        if us >= _EXACT_BELOW:
            shift = us.bit_length() - 11
            us = (us >> shift) << shift
        ic_key = us
        ic_counts[us] = ic_get(us, 0) + 1
        us = round(per_token)  # itl.record_us(round(per_token), n)
        if us > HIGHEST_US:
            us = HIGHEST_US
        itl_us = us
        itl_sum += us * n
        if us >= _EXACT_BELOW:
            shift = us.bit_length() - 11
            us = (us >> shift) << shift
        itl_key = us
        itl_counts[us] = itl_get(us, 0) + n
    if run:
        ic_counts[ic_key] += run
        ic_sum += ic_us * run
        itl_counts[itl_key] += last_n * run
        itl_sum += itl_us * last_n * run
    return ic_counts, ic_sum, itl_counts, itl_sum, itl_max_us / 1e6


def _one_token_gaps(times: list[float]) -> tuple[dict[int, int], int, dict[int, int], int, float]:
    """gap_samples when every chunk holds one token (a paced server, the common case): then each
    ITL sample is its inter-chunk gap, so both are the same counts, taken with C-level map and
    Counter over the gaps; buckets by one mask when every gap has the same bit length (a paced
    stream), else a Python step per distinct value. ~4x cheaper than the general loop for a
    paced 256-token stream; same values (tests/test_metrics.py).

    A burst (a server faster than the client: hundreds of tokens a read, all with that read's
    time) has few distinct times: when they are in order, the gaps are the steps between them
    and a zero for every other token, taken without a gap per token."""
    n = len(times)
    distinct = set(times)
    zeros = 0
    if len(distinct) * 4 <= n and times == sorted(times):
        values = sorted(distinct)
        zeros = n - len(values)  # the gaps within one time's run
        us = list(map(round, map(_mul, map(_sub, islice(values, 1, None), values), _MICRO)))
        if not us:
            return {0: zeros}, 0, {0: zeros}, 0, 0.0
    else:
        us = list(map(round, map(_mul, map(_sub, islice(times, 1, None), times), _MICRO)))
    lo, hi = min(us), max(us)
    itl_max = hi / 1e6 if hi > 0 else 0.0  # the largest gap, before any clamping
    if lo < 0 or hi > HIGHEST_US:  # clock steps or hour-long gaps: clamp as record_us does
        us = [0 if u < 0 else HIGHEST_US if u > HIGHEST_US else u for u in us]
        lo, hi = min(us), max(us)
    total = sum(us)
    counts = _bucket_counts(us, lo, hi)
    if zeros:
        counts[0] = counts.get(0, 0) + zeros
    return counts, total, counts, total, itl_max


def _bucket_counts(us: list[int], lo: int, hi: int) -> dict[int, int]:
    """{histogram bucket: count} of gaps in us, lo and hi their least and greatest."""
    width = hi.bit_length()
    if hi < _EXACT_BELOW:  # every gap below 2 ms: buckets are the values themselves
        return dict(Counter(us))
    if lo.bit_length() == width:  # one power of two holds every gap: one mask buckets them all
        return dict(Counter(map(_and, us, repeat(-1 << (width - 11)))))
    counts: dict[int, int] = {}
    for u, k in Counter(us).items():
        if u >= _EXACT_BELOW:
            shift = u.bit_length() - 11
            u = (u >> shift) << shift
        counts[u] = counts.get(u, 0) + k
    return counts
