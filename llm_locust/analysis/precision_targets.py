"""Stop when precise (--precision): the targets, and whether a window's 95% intervals meet them.

A target names a headline figure and the largest relative half-width its 95% interval may have:
`ttft.p99=2%` is met once the interval of TTFT's p99 (metrics/blocks.py Blocks.intervals, the
method of metrics/intervals.py) is within ± 2% of the figure. The figures are those the results'
`intervals` hold: METRIC.STAT for latency (ttft, itl, tpot, e2e; mean, p50, p90, p99) and the
rates by their results name (output_tokens_per_s, requests_per_s, goodput_requests_per_s,
goodput_tokens_per_s). A limit is a percentage ("2%") or a fraction (0.02), above 0 and below 100%.

The run (runtime/precision_stop.py) or each ladder step (runtime/shapes.py) is judged about once a
second, on the master from the workers' merged blocks, and ends once every target is met. A stop
also needs intervals from at least STOP_MIN_BATCHES time blocks: the spread of 5 block figures
(the fewest an interval is given from) is itself too uncertain to stop on.

Plain Python: no Locust, no gevent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.blocks import METRICS, PERCENTILES, RATES
from llm_locust.schema import Intervals, PrecisionCheck, PrecisionFigure
from llm_locust.workload.values import suggest

STOP_MIN_BATCHES = 10
STATS = ("mean", *PERCENTILES)
FIGURES = tuple(f"{m}.{s}" for m in METRICS for s in STATS) + tuple(RATES)
EXAMPLE = "ttft.p99=2%,itl.mean=1%"


def _limit(name: str, v: Any) -> float:
    """A target's limit as a fraction: "2%" is 0.02, a bare number is a fraction."""
    text = str(v).strip()
    try:
        if isinstance(v, bool):
            raise ValueError
        x = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{name}={text}: expected a percentage (2%) or a fraction (0.02)") from None
    if not (math.isfinite(x) and 0 < x < 1):
        hint = f" (a bare number is a fraction: write {text}%)" if not text.endswith("%") and 1 <= x < 100 else ""
        raise ValueError(f"{name}={text}: a target must be above 0 and below 100%{hint}")
    return x


def parse_targets(value: Any) -> dict[str, float]:
    """{figure: relative half-width} from `ttft.p99=2%,itl.mean=1%` or a mapping (a plan's);
    ValueError with one line naming the bad part."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        items: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, v = part.partition("=")
            if not sep or not v.strip():
                raise ValueError(f"bad target {part!r}: expected FIGURE=PERCENT, e.g. {EXAMPLE}")
            items[name.strip()] = v.strip()
        value = items
    if not isinstance(value, Mapping):
        raise ValueError(f"expected FIGURE=PERCENT,... (e.g. {EXAMPLE}) or a mapping of FIGURE: PERCENT")
    out: dict[str, float] = {}
    for name, v in value.items():
        name = str(name)
        if name not in FIGURES:
            raise ValueError(
                f"unknown figure {name!r}{suggest(name, FIGURES)}: METRIC.STAT with METRIC one of "
                f"{', '.join(METRICS)} and STAT one of {', '.join(STATS)}, or a rate: {', '.join(RATES)}"
            )
        out[name] = _limit(name, v)
    return out


def metrics_of(targets: Mapping[str, float]) -> tuple[str, ...]:
    """The latency metrics the targets name (the intervals a check computes; the rates always)."""
    named = {name.partition(".")[0] for name in targets if name not in RATES}
    return tuple(m for m in METRICS if m in named)


def _interval(intervals: Intervals | None, name: str) -> Mapping[str, Any] | None:
    if not intervals:
        return None
    if name in RATES:
        return intervals["rates"].get(name)
    metric, _, stat = name.partition(".")
    return (intervals["latency"].get(metric) or {}).get(stat)


def _figure(intervals: Intervals | None, name: str, target: float, enough: bool) -> PrecisionFigure:
    iv = _interval(intervals, name)
    rel = iv.get("rel") if iv else None
    row: PrecisionFigure = {"target": target, "rel": rel, "met": enough and rel is not None and rel <= target}
    if rel is None:
        row["reason"] = (iv or {}).get("reason") or "no interval yet"
    elif not enough:
        row["reason"] = f"a stop needs intervals from {STOP_MIN_BATCHES} time blocks"
    return row


def judge(
    intervals: Intervals | None, targets: Mapping[str, float], requests: int, seconds: float, step: int | None = None
) -> PrecisionCheck:
    """Whether every target is met by these intervals (a window's `intervals`), each figure's
    relative half-width beside its target. `requests`: the ok requests they come from; `seconds`:
    the window's measured seconds so far."""
    enough = bool(intervals) and intervals is not None and intervals["blocks"] >= STOP_MIN_BATCHES
    figures = {name: _figure(intervals, name, t, enough) for name, t in targets.items()}
    return {
        "step": step,
        "met": bool(figures) and all(f["met"] for f in figures.values()),
        "stopped": False,
        "seconds": round(seconds, 3),
        "requests": requests,
        "blocks": intervals["blocks"] if intervals else 0,
        "until": None,
        "figures": figures,
    }


def check(
    agg: Aggregate, targets: dict[str, float], seconds: float, step: int | None = None, until: float | None = None
) -> PrecisionCheck:
    """The targets judged on `agg`'s intervals over its window (first sent to last ended), as the
    results' `intervals` of that run or step are computed; `until`: the window cut there (a
    master: where every worker's figures are in, runtime/precision_stop.py merged_until)."""
    end = agg.last_end if until is None or agg.last_end is None else min(agg.last_end, until)
    last = math.floor(end / agg.blocks.width) if end is not None else -1
    ok = sum(b.counts[0] for i, b in agg.blocks.blocks.items() if i <= last)
    intervals = agg.blocks.intervals(agg.first_sent, end, metrics_of(targets))
    c = judge(intervals, targets, ok, seconds, step)
    c["until"] = end
    return c


def target_text(name: str, f: Mapping[str, Any]) -> str:
    """ "ttft.p99 ± 1.8% (target 2%)", or with the reason it has no interval."""
    got = f"± {f['rel'] * 100:.1f}%" if f.get("rel") is not None else (f.get("reason") or "no interval")
    return f"{name} {got} (target {f['target'] * 100:g}%)"
