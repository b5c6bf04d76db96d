"""The steady window of a run: found from the requests in flight (closed loop) or from the sends'
lateness (open loop), not assumed; its figures beside the whole run's, and the ramp and drain
around it (results `steady`, docs/metrics.md "Steady window").

The rule, per wall-clock second of metrics/flow.py's Flow:
- closed loop: a second is steady when the time-averaged number of requests in flight in it is
  within TOLERANCE (5%) of the target concurrency, the users;
- open loop (replay): a second is steady when at most TOLERANCE of the requests sent in it were
  sent more than LATE_S (50 ms) after their due time (a second with no send keeps its schedule).
The steady window is the longest run of consecutive steady seconds (the earliest of equal
ones); an open loop's is trimmed to its first and last second with a send. It ends at the latest
at the second that sent the first request the stop cut (before_cut). It is then narrowed to
the edges of the time blocks its figures are read from (metrics/blocks.py: 1/8 s at first, wider
in long runs). A window shorter than MIN_SECONDS is none: the run says it found no steady window.
The ramp is from the run's first send to the window's start, the drain from the window's end to
the run's last end; the requests counted in each part are those sent in it (any outcome).
The window's figures are those of the ok requests sent in it (requests sent in the ramp are not in
them, whenever they end), with their 95% intervals by metrics/blocks.py's method.
Not assessed for a ladder (each step is its own window) or a closed loop with think time (its
users are idle between requests by design, so the in-flight count never reaches their number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

from llm_locust.metrics.blocks import COUNTS, CUT, METRICS, PERCENTILES, Blocks, rate_figures
from llm_locust.metrics.flow import LATE_S, Flow
from llm_locust.metrics.intervals import _pooled, _value_at
from llm_locust.schema import Steady, SteadyFigures

TOLERANCE = 0.05  # closed loop: in flight within 5% of the users; open loop: at most 5% late sends
MIN_SECONDS = 2.0  # a shorter window is no window
HEADLINE = "whole run"  # what the summary's and results' headline figures are over

Span = tuple[int, int, float, int, int]  # Flow.spans(): start, width, busy s, sent, late


def rule(mode: str, target: int | None = None) -> str:
    """The rule applied, in words (the summary, the results' `steady.rule`)."""
    if mode == "closed":
        who = f"{target} users" if target is not None else "the users"
        return f"in flight within {TOLERANCE:.0%} of {who}, each second"
    return f"at most {TOLERANCE:.0%} of each second's sends more than {LATE_S * 1000:g} ms late"


def _fill(spans: Sequence[Span]) -> list[Span]:
    """The spans with the seconds between them that no request touched, as empty rows."""
    out: list[Span] = []
    for sp in spans:
        if out:
            end = out[-1][0] + out[-1][1]
            out += [(s, 1, 0.0, 0, 0) for s in range(end, sp[0])]
        out.append(sp)
    return out


def _longest(spans: Sequence[Span], good: Sequence[bool]) -> tuple[int, int] | None:
    """(first, last) indices of the longest run of consecutive good spans (the earliest of equal
    ones, by seconds); None when no span is good."""
    best: tuple[int, int] | None = None
    best_len = 0.0
    i = 0
    while i < len(spans):
        if not good[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(spans) and good[j + 1]:
            j += 1
        length = spans[j][0] + spans[j][1] - spans[i][0]
        if length > best_len:
            best, best_len = (i, j), length
        i = j + 1
    return best


def closed_window(spans: Sequence[Span], target: int) -> tuple[float, float] | None:
    """[start, end) of the longest run of seconds whose mean in flight is within TOLERANCE of
    `target`; None when there is none."""
    spans = _fill(spans)
    good = [abs(busy / w - target) <= TOLERANCE * target for _, w, busy, _, _ in spans]
    got = _longest(spans, good)
    if got is None:
        return None
    i, j = got
    return float(spans[i][0]), float(spans[j][0] + spans[j][1])


def open_window(spans: Sequence[Span]) -> tuple[float, float] | None:
    """[start, end) of the longest run of seconds whose sends kept their schedule, trimmed to its
    first and last second with a send; None when there is none."""
    spans = _fill(spans)
    good = [late <= TOLERANCE * sent for _, _, _, sent, late in spans]
    got = _longest(spans, good)
    if got is None:
        return None
    i, j = got
    while i <= j and spans[i][3] == 0:
        i += 1
    while j >= i and spans[j][3] == 0:
        j -= 1
    if i > j:
        return None
    return float(spans[i][0]), float(spans[j][0] + spans[j][1])


def aligned(window: tuple[float, float], width: float) -> tuple[float, float]:
    """The window narrowed to the edges of time blocks `width` seconds wide."""
    start, end = window
    return math.ceil(start / width - 1e-9) * width, math.floor(end / width + 1e-9) * width


def before_cut(window: tuple[float, float], sent_blocks: Blocks) -> tuple[float, float]:
    """The window, ended at the start of the second that sent the first request the stop cut
    (Blocks.add_life's "cut", keyed by send). Such a request counts nowhere, so a window holding
    its send read its figures low: in 30 8-s simulator runs, whose windows ran to the last whole
    second before the stop, the window's output tokens/s spread by 3.2% between runs, and by 1.6%
    ended here (benchmarks/README.md, "Rates")."""
    w = sent_blocks.width
    cuts = [i for i, b in sent_blocks.blocks.items() if b.counts[CUT]]
    if not cuts:
        return window
    start, end = window
    return start, max(start, min(end, float(math.floor(min(cuts) * w))))


def _sent_in(spans: Sequence[Span], start: float, end: float) -> int:
    """Requests sent in the rows that begin in [start, end)."""
    return sum(sent for s, _, _, sent, _ in spans if start <= s < end)


def window_figures(blocks: Blocks, start: float, end: float, seconds: float) -> SteadyFigures:
    """The figures of the ok requests in the blocks of [start, end) (edges on the blocks' width):
    count, latency mean and percentiles (s; a percentile HdrHistogram's way, over the pooled
    histograms), the rates over the window's `seconds`, and their 95% intervals."""
    w = blocks.width
    first, last = round(start / w), round(end / w)  # block indices [first, last)
    inside = [b for i, b in blocks.blocks.items() if first <= i < last]
    latency: dict[str, dict[str, float | None]] = {}
    for m in METRICS:
        n = sum(sum(b.histogram(m).values()) for b in inside)
        figs: dict[str, float | None] = {"mean": sum(b.sums[m] for b in inside) / n / 1e6 if n else None}
        pooled = _pooled([b.histogram(m) for b in inside])
        for name, p in PERCENTILES.items():
            figs[name] = _value_at(pooled, max(int(p * n + 0.5), 1)) / 1e6 if n else None
        latency[m] = figs
    rates = rate_figures([sum(b.counts[i] for b in inside) for i in range(len(COUNTS))], seconds)
    return {
        "ok": sum(b.counts[0] for b in inside),
        "latency": latency,
        "rates": rates,
        # the block that begins at `end` is not the window's: the float just below `end` (end is a
        # multiple of the blocks' power-of-two width, so end / width scales exactly)
        "intervals": blocks.intervals(start, math.nextafter(end, -math.inf)),
    }


def steady(
    flow: Flow,
    sent_blocks: Blocks,
    first_sent: float | None,
    last_end: float | None,
    mode: str,
    users: int | None,
    think_time: float = 0.0,
) -> Steady:
    """The results' `steady` section (docs/results.md): the window, the ramp, the drain and the
    window's figures; `found` False with a `reason` when there is no window."""
    doc: dict[str, Any] = {"headline": HEADLINE, "found": False, "reason": None, "mode": mode, "target": None}
    doc.update(rule=None, window=None, ramp=None, drain=None, figures=None, in_flight=flow.to_doc())
    why = _not_assessed(mode, users, think_time, first_sent, last_end)
    if why is not None:
        doc["reason"] = why
        return cast(Steady, doc)
    assert first_sent is not None and last_end is not None  # _not_assessed said so
    spans = flow.spans()
    target = users if mode == "closed" else None
    doc["target"], doc["rule"] = target, rule(mode, target)
    found = closed_window(spans, target) if target is not None else open_window(spans)
    window = aligned(before_cut(found, sent_blocks), sent_blocks.width) if found is not None else None
    if window is None or window[1] - window[0] < MIN_SECONDS:
        doc["reason"] = _none_reason(found, window, mode, target)
        return cast(Steady, doc)
    start, end = window
    seconds = min(end, last_end) - max(start, first_sent)
    doc["found"] = True
    doc["window"] = {
        "start": max(start, first_sent),
        "end": min(end, last_end),
        "seconds": seconds,
        "requests": _sent_in(spans, start, end),
    }
    doc["ramp"] = {"seconds": max(0.0, start - first_sent), "requests": _sent_in(spans, -math.inf, start)}
    doc["drain"] = {"seconds": max(0.0, last_end - end), "requests": _sent_in(spans, end, math.inf)}
    doc["figures"] = window_figures(sent_blocks, start, end, seconds)
    return cast(Steady, doc)


def _not_assessed(
    mode: str, users: int | None, think_time: float, first_sent: float | None, last_end: float | None
) -> str | None:
    if mode == "ladder":
        return "not assessed for a ladder: each step is its own window"
    if mode == "closed" and think_time:
        return "not assessed with think time: the users are idle between requests by design"
    if mode == "closed" and not users:
        return "not assessed: the number of users is not known"
    if first_sent is None or last_end is None:
        return "no request finished"
    return None


def _none_reason(
    found: tuple[float, float] | None, window: tuple[float, float] | None, mode: str, target: int | None
) -> str:
    if found is None:
        if mode == "closed":
            return f"no steady window: the requests in flight never came within {TOLERANCE:.0%} of {target} users"
        return "no steady window: the sends never kept their schedule"
    length = 0.0 if window is None else max(0.0, window[1] - window[0])
    return f"no steady window: the longest ({rule(mode, target)}) lasted {length:.1f} s, under {MIN_SECONDS:g} s"


def _ms(v: float | None, iv: Any = None) -> str:
    """A latency in ms, with its interval's "± %" where it has one, or "insufficient (needs N
    samples)" where its samples are too few for one (as the summary's precision lines say it)."""
    if v is None:
        return "-"
    if isinstance(iv, dict) and iv.get("needs"):  # too few samples: said, not printed as a number
        return f"insufficient (needs {iv['needs']} samples)"
    rel = iv.get("rel") if isinstance(iv, dict) else None
    return f"{v * 1000:.0f} ms" + (f" ± {rel * 100:.1f}%" if rel is not None else "")


def steady_line(doc: Steady | None) -> str | None:
    """The summary's line: the window, the ramp and the drain, and a few of the window's figures
    (the headline figures above stay the whole run's); None when not assessed."""
    if not doc or (not doc.get("found") and str(doc.get("reason") or "").startswith("not assessed")):
        return None
    if not doc["found"]:
        return f"steady: {doc['reason']}; the figures above are the whole run's"
    w, r, d, f = doc["window"], doc["ramp"], doc["drain"], doc["figures"]
    assert w is not None and r is not None and d is not None and f is not None  # found: steady() wrote them
    iv_doc = f.get("intervals")
    lat, ivs = f["latency"], (iv_doc.get("latency") if iv_doc else None) or {}

    def fig(m: str, stat: str) -> str:
        return _ms(lat[m][stat], (ivs.get(m) or {}).get(stat))

    return (
        f"steady: {w['seconds']:.1f} s ({doc['rule']}), ramp {r['seconds']:.1f} s ({r['requests']} requests), "
        f"drain {d['seconds']:.1f} s ({d['requests']} requests); over it {f['ok']} ok, "
        f"TTFT p50 {fig('ttft', 'p50')}, p99 {fig('ttft', 'p99')}, E2E p50 {fig('e2e', 'p50')}, "
        f"{f['rates']['output_tokens_per_s']:.1f} output tokens/s; the figures above are the {doc['headline']}'s"
    )
