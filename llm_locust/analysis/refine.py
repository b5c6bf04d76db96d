"""The knee with its precision: the bracket of loads the ladder's knee lies in, and the points
`--refine N` adds inside it (docs/verdicts.md, "The knee's margin"). Pure: reads `StepResult`s
and the saturation `Verdict` of the ladder's own steps.

A throughput knee at step k (analysis.saturation) means step k gained significantly over step
k-1 and no later step gained significantly over it: the load where throughput stops growing lies
in (x[k-1], x[k]], the *bracket*. Refining halves it: a point m in the middle runs as one more
step; m is *below the knee* when the bracket's top gained significantly over m (the same test,
`saturation.significant`: at least 5% and at least 0.1 x the relative load added), else m is *at
the knee* (on the plateau already). Below: the bracket becomes (m, hi]; at: (lo, m]. The knee's
load is *known* once the bracket is at most MARGIN (10%) of its top wide, or one user wide on a
concurrency ladder (no whole number of users lies between).

A latency knee at step k (its load fine, step k+1's queueing) has the bracket [x[k], x[k+1]);
it is refined as above when the throughput knee is step k+1 (both rules put the knee between the
same two loads), else not: the refinement judges throughput. A flat ladder (saturated at or below
its first step) has no load below its knee: not refined either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from llm_locust.analysis.saturation import (
    FLAT_TOLERANCE,
    MIN_ELASTICITY,
    Verdict,
    _throughput,
    _tps_rel,
    point,
    significant,
)
from llm_locust.analysis.steps import OFFERED_UNITS, StepResult
from llm_locust.metrics.intervals import Interval, difference

MARGIN = 0.10  # the bracket, at most this share of its top wide: the knee's load is known


def allowed_width(hi: float, kind: str) -> float:
    """The widest bracket whose knee counts as known: MARGIN of its top, one user on a
    concurrency ladder if that is more."""
    return max(MARGIN * hi, 1.0 if kind == "concurrency" else 0.0)


def _decision(lo: StepResult, hi: StepResult, tol: float, elasticity: float) -> dict[str, Any]:
    """Is `hi` a significant throughput gain over `lo`? With the gain, the threshold it is held
    to, and whether the 95% interval of the difference holds the threshold (within noise)."""
    x, y = [lo.offered, hi.offered], [_throughput(lo), _throughput(hi)]
    gain = y[1] / y[0] - 1 if y[0] > 0 else math.inf
    threshold = max(tol, elasticity * (x[1] / x[0] - 1)) if x[0] > 0 else tol
    out: dict[str, Any] = {
        "gain": gain,
        "threshold": threshold,
        "significant": significant(x, [y[0], max(y)], y, 0, 1, tol=tol, elasticity=elasticity),
        "within_noise": None,
    }
    r_lo, r_hi = _tps_rel(lo), _tps_rel(hi)
    if r_lo is not None and r_hi is not None and y[0] > 0:
        bar = (1 + threshold) * y[0]  # the throughput hi must reach to be significant
        d = difference(
            Interval(bar, bar * (1 - r_lo), bar * (1 + r_lo)), Interval(y[1], y[1] * (1 - r_hi), y[1] * (1 + r_hi))
        )
        if d is not None:
            out["within_noise"] = abs(d[0]) <= d[1]
            out["noise"] = d[1] / y[0]
    return out


def coarse_bracket(steps: Sequence[StepResult], verdict: Verdict) -> tuple[StepResult | None, StepResult] | None:
    """(the step below the knee, the knee's step) of a verdict over `steps` (sorted by load):
    for a throughput knee the step before it and it; for a latency knee it and the step after
    (its load still fine, the next one queueing); None without a knee."""
    sat = verdict.saturation
    if sat is None:
        return None
    k = next((i for i, s in enumerate(steps) if s.step == sat["step"]), None)
    if k is None:
        return None
    if verdict.knee_by == "latency":
        return (steps[k], steps[k + 1]) if k + 1 < len(steps) else None
    return (steps[k - 1] if k > 0 else None), steps[k]


def knee_range(
    steps: Sequence[StepResult],
    verdict: Verdict,
    refined: Sequence[StepResult] = (),
    *,
    flat_tolerance: float = FLAT_TOLERANCE,
    min_elasticity: float = MIN_ELASTICITY,
) -> dict[str, Any] | None:
    """The knee's bracket after the refine steps (`refined`, in the order they ran), as the
    results keep it (`ladder.saturation.knee_range`); None without a knee.

    steps: the ladder's own steps, sorted by load, that `verdict` was made from."""
    pair = coarse_bracket(steps, verdict)
    if pair is None:
        return None
    lo, hi = pair
    kind = hi.offered_kind
    points = []
    # a latency knee is refined (by throughput) when the throughput knee is the step after it:
    # both rules put the knee between the same two loads
    refinable = lo is not None and (verdict.knee_by != "latency" or verdict.candidates.get("throughput") == hi.offered)
    for m in refined if refinable else ():
        assert lo is not None
        if not lo.offered < m.offered < hi.offered:
            continue  # not inside the bracket as it stood (cannot happen with next_level's points)
        d = _decision(m, hi, flat_tolerance, min_elasticity)
        side = "below" if d["significant"] else "at"
        points.append({"step": m.step, "offered": m.offered, "side": side, **d})
        lo, hi = (m, hi) if side == "below" else (lo, m)
    width = hi.offered - (lo.offered if lo is not None else 0.0)
    last = _decision(lo, hi, flat_tolerance, min_elasticity) if lo is not None and refinable else None
    noisy = [d for d in [*points, *([last] if last else [])] if d["within_noise"]]
    return {
        "low": lo.offered if lo is not None else None,
        "high": hi.offered,
        "low_step": lo.step if lo is not None else None,
        "high_step": hi.step,
        "width": width,
        "allowed": allowed_width(hi.offered, kind),
        "known": lo is not None and width <= allowed_width(hi.offered, kind) + 1e-9,
        "refinable": refinable,
        "points": points,
        "gain": last["gain"] if last else None,  # the top's throughput over the bottom's, - 1
        "threshold": last["threshold"] if last else None,
        "within_noise": noisy[0] if noisy else None,  # the first decision within noise
        "by": "latency" if verdict.knee_by == "latency" else "throughput",
        "offered_kind": kind,
    }


def next_level(kr: dict[str, Any] | None) -> float | None:
    """The next load to run inside the bracket (its middle; a whole number of users on a
    concurrency ladder), or None when the knee is known, cannot be refined or has no middle."""
    if kr is None or not kr["refinable"] or kr["known"] or kr["low"] is None:
        return None
    lo, hi = kr["low"], kr["high"]
    mid = (lo + hi) / 2
    if kr["offered_kind"] == "concurrency":
        mid = float(math.floor(mid))
    else:
        mid = float(f"{mid:.4g}")
    return mid if lo < mid < hi else None


def apply(verdict: Verdict, steps: Sequence[StepResult], refined: Sequence[StepResult] = ()) -> None:
    """Part of the ladder's report: the verdict's knee_range, its saturation point moved to the
    refined knee's step, and a reason naming the bracket."""
    kr = knee_range(steps, verdict, refined)
    verdict.knee_range = kr
    if kr is None:
        return
    if refined and kr["refinable"]:
        by_step = {s.step: s for s in [*steps, *refined]}
        knee = by_step[kr["high_step"]]
        if verdict.saturation is not None and knee.step != verdict.saturation["step"]:
            verdict.saturation = point(knee)
            verdict.candidates["refined"] = knee.offered
            if verdict.knee_by == "latency":
                verdict.knee_by = "throughput"
                verdict.reasons.append(
                    "refined by throughput between the latency knee and the throughput knee, the next step"
                )
    kr["text"] = describe(kr, len(refined))


def describe(kr: dict[str, Any], refined: int = 0) -> str:
    """The bracket in words: "knee between 11 and 12 users (within the margin: ...)"."""
    unit = OFFERED_UNITS.get(kr["offered_kind"], "")
    hi = f"{kr['high']:g} {unit}".rstrip()
    if kr["low"] is None:
        return f"knee at or below {hi} (the first step): below the ladder, not refined"
    text = f"knee between {kr['low']:g} and {hi}"
    margin = f"the margin: {kr['allowed']:.3g} {unit}".rstrip()
    if not kr["refinable"]:
        return f"{text} (a latency knee below the throughput knee: not refined)"
    text += f" ({'within' if kr['known'] else 'wider than'} {margin}"
    text += f"; {refined} refine point{'s' if refined != 1 else ''})" if refined else ")"
    noisy = kr["within_noise"]
    if noisy:
        at = (
            f"at {noisy['offered']:g} {unit}".rstrip()
            if "offered" in noisy
            else f"between {kr['low']:g} and {kr['high']:g}"
        )
        text += (
            f"; the decision {at} is within noise: a gain of {noisy['gain']:.1%} against the "
            f"{noisy['threshold']:.1%} threshold, ± {noisy['noise']:.1%}"
        )
    return text
