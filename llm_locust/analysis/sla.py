"""The SLA search (`--ladder sla:rate`, `sla:concurrency`): the highest load that meets every SLO,
to a stated relative precision. Pure: probes in, the next level (or the end) out.

    next_level(history, kind, lo, hi, precision) -> float | None   # None: the search is over
    conclude(history, kind, lo, hi, precision) -> dict             # answer, bracket, why it ended

`history` is the probes so far, in the order they ran: (level, met) pairs, `met` whether the
probe met every SLO. The search:

1. **Bracketing**: the first probe is `lo`; while every probe met the SLOs, the next one doubles
   the highest (capped at `hi`). `lo` itself breaking ends the search without an answer; `hi`
   meeting them ends it with `hi` (the limit lies higher: widen the range).
2. **Bisection** between the last good load (the highest that met the SLOs below the lowest that
   broke them) and the first bad one, at their midpoint, until (bad - good) / good <= precision.
   Concurrency levels are whole users: the search also ends when good and bad are adjacent.

The answer is the last good load: a load that was measured to meet every SLO, within `precision`
below the true limit (when the server's behaviour is monotone in the load; a noisy probe that
meets the SLOs above a broken one is not believed: the bracket keeps the lower bad load).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Probe = tuple[float, bool]  # (level, met every SLO)


def bracket(history: Sequence[Probe]) -> tuple[float | None, float | None]:
    """(last good, first bad): the lowest load that broke an SLO, and the highest below it that
    met them all; None where there is none."""
    bads = [lv for lv, met in history if not met]
    bad = min(bads) if bads else None
    goods = [lv for lv, met in history if met and (bad is None or lv < bad)]
    return (max(goods) if goods else None), bad


def _round(kind: str, v: float) -> float:
    if kind == "concurrency":
        return float(math.floor(v))
    return float(f"{v:.6g}")


def next_level(history: Sequence[Probe], kind: str, lo: float, hi: float, precision: float) -> float | None:
    """The load of the next probe, or None when the search is over (see `conclude` for why)."""
    if not history:
        return float(lo)
    good, bad = bracket(history)
    if good is None:
        if bad is not None and bad <= lo:
            return None  # the lowest load already breaks an SLO
        return float(lo)  # (not reached by the search itself: it starts at lo)
    if bad is None:
        if good >= hi:
            return None  # the top of the range still meets every SLO
        return _round(kind, min(good * 2, hi)) if kind != "concurrency" else float(min(int(good) * 2, int(hi)))
    if (bad - good) / good <= precision:
        return None
    mid = _round(kind, (good + bad) / 2)
    if mid <= good or mid >= bad:
        return None  # adjacent whole users (or levels closer than 6 digits): nothing between them
    return mid


def conclude(history: Sequence[Probe], kind: str, lo: float, hi: float, precision: float) -> dict[str, Any]:
    """What the search found: {kind, answer, precision, probes, bracket, reached, reason}.

    reached: "precision" (bisection ended), "adjacent" (whole users next to each other), "top"
    (hi met every SLO), "lowest_breaks" (lo broke one: no answer), "unfinished" (stopped early).
    """
    good, bad = bracket(history)
    unit = "users" if kind == "concurrency" else "requests/s"
    out: dict[str, Any] = {
        "kind": kind,
        "answer": good,
        "precision": precision,
        "probes": len(history),
        "bracket": [good, bad],
        "range": [lo, hi],
    }
    if good is None and bad is not None and bad <= lo:
        reached, reason = (
            "lowest_breaks",
            f"the lowest load, {lo:g} {unit}, already breaks an SLO: no load meets them all",
        )
    elif good is None:
        reached, reason = "unfinished", "no probe met every SLO"
    elif bad is None and good >= hi:
        reached, reason = (
            "top",
            f"the top of the range, {hi:g} {unit}, still meets every SLO: "
            "the limit lies higher (raise the upper bound)",
        )
    elif bad is None:
        reached, reason = "unfinished", f"search stopped at {good:g} {unit} before any probe broke an SLO"
    elif (bad - good) / good <= precision:
        reached, reason = (
            "precision",
            (
                f"highest load meeting every SLO: {good:g} {unit} "
                f"({bad:g} broke; within {(bad - good) / good:.1%} <= {precision:.1%})"
            ),
        )
    elif next_level(history, kind, lo, hi, precision) is None:
        reached, reason = "adjacent", f"highest load meeting every SLO: {good:g} {unit} ({bad:g} broke)"
    else:
        reached, reason = "unfinished", f"search stopped between {good:g} and {bad:g} {unit}"
    out["reached"] = reached
    out["reason"] = reason
    return out


def fixed_ladder_steps(lo: float, answer: float, precision: float) -> int:
    """Steps a fixed geometric ladder with ratio 1 + precision would run from lo up to the first
    level above `answer` (stopping at the first break): what the search saves."""
    return math.floor(math.log(answer / lo) / math.log1p(precision)) + 2
