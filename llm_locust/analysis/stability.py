"""Stability verdicts, each pass or fail (docs/verdicts.md, "Stability"). Pure: no Locust, no clock.

    burst_recovery(series, base=(a, b), burst=(c, d), end=e, limit=30) -> dict
    soak(series, counts, start, end, window=60, ...) -> dict
    format_stability(results["stability"]) -> str

`series` is an Aggregate's `by_sent` (metrics/timeseries.LatencySeries: TTFT and ITL by the wall
second each request was sent), `counts` its per-second series (wall second -> [tokens, ok, failed]).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

from llm_locust.schema import BurstRecovery, Figures, ItlFigures, KvPressure, OverlongMix, Soak, Stability

BURST_WINDOW = 2  # seconds: the sliding window TTFT p50 is read over after a burst
BURST_TOLERANCE = 0.10  # recovered: p50 <= (1 + tolerance) x the base step's p50


def burst_recovery(
    series,
    base: tuple[float, float],
    burst: tuple[float, float],
    end: float,
    *,
    window: int = BURST_WINDOW,
    tolerance: float = BURST_TOLERANCE,
    limit: float = 0.0,
) -> BurstRecovery:
    """Seconds after the burst until TTFT p50 is back within `tolerance` of the base.

    base: the base step's measurement window (wall clock); its whole seconds give the baseline p50
    (requests sent in them). burst: the burst step (start, end). After it, windows of `window`
    whole seconds starting at s = ceil(burst end), s + 1, ... (while s + window <= end): the first
    whose p50 (requests sent in [s, s + window)) is at most (1 + tolerance) x baseline recovers;
    recovery_s = s - burst end (0 when the first window already is). Pass: recovered, and within
    `limit` seconds when a limit is given (> 0). Never recovered before `end`: fail."""
    a, b = math.ceil(base[0]), math.floor(base[1])
    base_p50 = series.percentile("ttft", 50, a, b) if b > a else None
    base_n = series.count("ttft", a, b) if b > a else 0
    c, d = burst
    out: dict[str, Any] = {
        "base_ttft_p50": base_p50,
        "base_samples": base_n,
        "base_window": [a, b],
        "burst_window": [c, d],
        "end": end,
        "window": window,
        "tolerance": tolerance,
        "limit": limit or None,
        "recovery_s": None,
        "recovered": False,
        "peak_ttft_p50": None,
        "peak_after_s": None,
        "curve": [],
    }
    if base_p50 is None:
        out.update(passed=False, reason="no TTFT in the base step: no baseline")
        return cast(BurstRecovery, out)  # its verdict added by update (passed, reason)
    threshold = base_p50 * (1 + tolerance)
    out["threshold"] = threshold
    peak = None
    for s in range(math.floor(c), math.floor(end) - window + 1):
        p = series.percentile("ttft", 50, s, s + window)
        if p is None:
            continue
        if peak is None or p > peak[1]:
            peak = (s, p)
        if s >= math.ceil(d):
            out["curve"].append([round(s - d, 3), p])
            if out["recovery_s"] is None and p <= threshold:
                out["recovery_s"] = round(max(0.0, s - d), 3)
                out["recovered"] = True
    if peak is not None:
        out["peak_ttft_p50"], out["peak_after_s"] = peak[1], round(peak[0] - c, 3)
    if not out["recovered"]:
        out.update(
            passed=False,
            reason=f"TTFT p50 never came back within {tolerance:.0%} of the base "
            f"({_ms(base_p50)}) in the {end - d:.0f} s after the burst",
        )
    elif limit and out["recovery_s"] > limit:
        out.update(passed=False, reason=f"recovered after {out['recovery_s']:g} s > limit {limit:g} s")
    else:
        out.update(
            passed=True,
            reason=f"recovered after {out['recovery_s']:g} s"
            + (f" <= limit {limit:g} s" if limit else " (no limit: within the run)"),
        )
    return cast(BurstRecovery, out)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y on x; None with fewer than 2 distinct x."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx <= 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def soak(
    series,
    counts: dict[int, list[int]],
    start: float,
    end: float,
    *,
    window: float = 60.0,
    max_drift: float = 0.10,
    max_error_rate: float = 0.05,
    memory: dict[str, list[tuple[float, float]]] | None = None,
    max_memory_growth: float = 0.0,
) -> Soak:
    """Drift of a long run, per hour of wall clock.

    Windows of `window` seconds (whole seconds, from ceil(start); the last partial one dropped).
    Where the run is older than the series keep second by second (15 min for latencies, 6 h for
    the counts: metrics/timeseries.py), the windows are widened to a whole number of the folded
    buckets and start on their grid (`window` in the result; `window_asked` the one asked for).
    Per window: TTFT p50 and ITL p50 (requests sent in it), requests ok and failed (ended in it).
    drift: least-squares slope of the windows' p50 against their mid time, in seconds per hour,
    and relative to the mean of the windows' p50 (fraction per hour). error bursts: windows whose
    error rate failed / (ok + failed) is above `max_error_rate`. memory: {name: [(wall time,
    bytes)]}, each a least-squares slope in bytes per hour. Pass: |relative drift| <= max_drift
    for TTFT and ITL, no error burst, and each memory slope <= max_memory_growth (bytes/hour)
    when that is > 0 (else memory is reported, not judged)."""
    w = max(1, int(round(window)))
    a = math.ceil(start)
    res = _resolution(series, counts, a, end)
    if res > 1:  # the run's older part is kept in buckets of `res` s: windows on their grid
        w = -(-w // res) * res
        a = -(-a // res) * res
    n = int((math.floor(end) - a) // w)
    rows = []
    for i in range(n):
        s = a + i * w
        ok = sum((counts.get(t) or (0, 0, 0))[1] for t in range(s, s + w))
        failed = sum((counts.get(t) or (0, 0, 0))[2] for t in range(s, s + w))
        rows.append(
            {
                "start": s,
                "ttft_p50": series.percentile("ttft", 50, s, s + w),
                "itl_p50": series.percentile("itl", 50, s, s + w),
                "ok": ok,
                "failed": failed,
                "error_rate": failed / (ok + failed) if ok + failed else 0.0,
            }
        )
    out: dict[str, Any] = {
        "window": w,
        "window_asked": max(1, int(round(window))),
        "windows": len(rows),
        "max_drift": max_drift,
        "max_error_rate": max_error_rate,
        "rows": rows,
        "checks": [],
    }
    failed_checks = []
    for metric in ("ttft", "itl"):
        pts = [(r["start"] + w / 2, r[f"{metric}_p50"]) for r in rows if r[f"{metric}_p50"] is not None]
        k = slope(pts)
        mean = sum(p[1] for p in pts) / len(pts) if pts else None
        d = {
            "slope_s_per_hour": k * 3600 if k is not None else None,
            "relative_per_hour": k * 3600 / mean if k is not None and mean else None,
            "mean_p50": mean,
        }
        out[f"{metric}_drift"] = d
        if d["relative_per_hour"] is not None and abs(d["relative_per_hour"]) > max_drift:
            failed_checks.append(f"{metric} p50 drifts {d['relative_per_hour']:+.1%}/h (limit {max_drift:.0%}/h)")
    bursts = [r["start"] for r in rows if r["ok"] + r["failed"] and r["error_rate"] > max_error_rate]
    out["error_bursts"] = bursts
    if bursts:
        failed_checks.append(f"{len(bursts)} window(s) with error rate above {max_error_rate:.0%}")
    mem = {}
    for name, pts in (memory or {}).items():
        k = slope(list(pts))
        mem[name] = {"bytes_per_hour": k * 3600 if k is not None else None, "samples": len(pts)}
        if max_memory_growth and k is not None and k * 3600 > max_memory_growth:
            failed_checks.append(
                f"{name} grows {k * 3600 / 2**20:,.0f} MiB/h (limit {max_memory_growth / 2**20:,.0f} MiB/h)"
            )
    out["memory"] = mem
    out["max_memory_growth"] = max_memory_growth or None
    if len(rows) < 2:
        out.update(passed=False, reason=f"{len(rows)} window(s) of {w} s: too short to measure a drift")
    else:
        out.update(
            passed=not failed_checks, reason="; ".join(failed_checks) or "no drift, no error burst above the limits"
        )
    return cast(Soak, out)  # built by metric name (ttft_drift, itl_drift)


def _resolution(*series_and_start_end) -> int:
    """The widest bucket the series keep in [start, end): 1 while every second is kept apart,
    else the width of the buckets older seconds were folded into (metrics/timeseries.py)."""
    *tables, start, end = series_and_start_end
    widths = [t.resolution(start, end) for t in tables if hasattr(t, "resolution")]
    return max(widths, default=1)


def kv_pressure(
    steps: list[dict[str, Any]], server: Sequence[Mapping[str, Any]] | None, *, min_load: float = 0.0
) -> KvPressure:
    """Where the server starts preempting under a ladder of long outputs.

    steps: the ladder's step dicts (offered, latency.itl); server: its /metrics windows per step
    (matched by step number; `preemptions_total.increase` inside the step's measurement window,
    `kv_cache_usage.max`). The first step whose preemptions increased is where preemption starts;
    ITL p50 and p99 of the step before it and of it are kept, with their ratios. Pass: no step
    preempted, or preemption started at a load >= `min_load` when that is > 0."""
    by = {w.get("step"): w for w in server or []}
    rows: list[dict[str, Any]] = []  # the steps' figures, as the step dicts give them
    for st in steps:
        w = by.get(st.get("step"), {})
        itl = (st.get("latency") or {}).get("itl") or {}
        rows.append(
            {
                "step": st.get("step"),
                "offered": st.get("offered"),
                "preemptions": (w.get("preemptions_total") or {}).get("increase"),
                "kv_cache_usage_max": (w.get("kv_cache_usage") or {}).get("max"),
                "itl_p50": itl.get("p50"),
                "itl_p99": itl.get("p99"),
                "itl_max": itl.get("max"),
            }
        )
    out: dict[str, Any] = {
        "rows": rows,
        "min_load": min_load or None,
        "first_step": None,
        "first_load": None,
        "itl_before": None,
        "itl_after": None,
    }
    if not any(r["preemptions"] is not None for r in rows):
        out.update(
            passed=False,
            reason="the server reports no preemption counter (vllm:num_preemptions_total, "
            "sglang:num_retracted_reqs): nothing to judge",
        )
        return cast(KvPressure, out)  # built with its ratios by percentile (itl_p50_ratio, ...)
    i = next((k for k, r in enumerate(rows) if r["preemptions"]), None)
    if i is None:
        out.update(passed=True, reason=f"no preemption up to {rows[-1]['offered']:g}")
        return cast(KvPressure, out)
    first = rows[i]
    out["first_step"], out["first_load"] = first["step"], first["offered"]
    after: ItlFigures = {"p50": first["itl_p50"], "p99": first["itl_p99"], "max": first["itl_max"]}
    out["itl_after"] = after
    if i > 0:
        prev = rows[i - 1]
        out["itl_before"] = {"p50": prev["itl_p50"], "p99": prev["itl_p99"], "max": prev["itl_max"]}
        for p in ("p50", "p99", "max"):
            if prev[f"itl_{p}"] and first[f"itl_{p}"] is not None:
                out[f"itl_{p}_ratio"] = first[f"itl_{p}"] / prev[f"itl_{p}"]
    text = f"preemption starts at {first['offered']:g} (step {first['step']}, {first['preemptions']:g} preempted)"
    if min_load and first["offered"] >= min_load:
        out.update(passed=True, reason=f"{text} >= {min_load:g}")
    else:
        out.update(passed=False, reason=text + (f" < {min_load:g}" if min_load else ""))
    return cast(KvPressure, out)


def overlong_mix(
    counts: list[int],
    summary: Figures,
    *,
    share: float,
    tokens: int,
    baseline: Mapping[str, Any] | None = None,
    tolerance: float = 0.10,
) -> OverlongMix:
    """The overlong mix: `counts` = the Aggregate's overlong [finished, ok, classified overlong];
    `summary` = the run's figures (metrics.aggregate.figures); `baseline` = a clean run's summary.

    overlong: those requests, each expected to fail with cause `overlong` (the server's own words,
    protocols/causes.py). others: every other request (failed = all failures less the overlong
    ones; TTFT and E2E p50 over the ok requests, which are the others' when no overlong request
    was served). Pass: at least one overlong request, none served, every one classified overlong,
    no other request failed, and with a baseline the others' TTFT p50 and E2E p50 at most
    (1 + tolerance) x the baseline's."""
    n, served, classified = (list(counts) + [0, 0, 0])[:3]
    lat = summary["latency"]
    others: dict[str, Any] = {
        "ok": summary["ok"] - served,
        "failed": summary["failed"] - (n - served),
        "ttft_p50": st.get("p50") if (st := lat.get("ttft")) else None,
        "e2e_p50": st.get("p50") if (st := lat.get("e2e")) else None,
    }
    out: dict[str, Any] = {
        "share": share,
        "tokens": tokens,
        "overlong": n,
        "served": served,
        "classified": classified,
        "unclassified": n - served - classified,
        "others": others,
        "tolerance": tolerance,
        "baseline": None,
    }
    why = []
    if n == 0:
        why.append("no overlong request finished")
    if served:
        why.append(f"{served} overlong request(s) served (the server truncated or accepted them)")
    if n - served - classified:
        why.append(f"{n - served - classified} overlong failure(s) not classified overlong")
    if others["failed"] > 0:
        why.append(f"{others['failed']} other request(s) failed")
    if baseline is not None:
        blat = baseline.get("latency") or {}
        b: dict[str, float | None] = {
            "ttft_p50": (blat.get("ttft") or {}).get("p50"),
            "e2e_p50": (blat.get("e2e") or {}).get("p50"),
        }
        out["baseline"] = b
        for k in ("ttft_p50", "e2e_p50"):
            mine, clean = others[k], b[k]
            if clean and mine is not None:
                out[f"{k}_ratio"] = mine / clean
                if mine > clean * (1 + tolerance):
                    why.append(
                        f"others' {k.replace('_', ' ')} {_ms(mine)} > {1 + tolerance:.2f} x"
                        f" the clean run's {_ms(clean)}"
                    )
    out["passed"] = not why
    out["reason"] = (
        "; ".join(why)
        if why
        else (
            f"{n} overlong request(s) all rejected as overlong, the others unaffected"
            + ("" if baseline is not None else " (no baseline: latency not judged)")
        )
    )
    return cast(OverlongMix, out)  # built with its ratios by figure (ttft_p50_ratio, e2e_p50_ratio)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:,.1f} ms"


def format_stability(st: Stability | None) -> str:
    """The printed lines: one verdict per plan."""
    if not st:
        return ""
    lines = []
    b = st.get("burst")
    if b:
        lines.append(
            f"burst: {'PASS' if b['passed'] else 'FAIL'}: {b['reason']}; TTFT p50 base {_ms(b['base_ttft_p50'])}, "
            f"peak {_ms(b['peak_ttft_p50'])}"
            + (f" at {b['peak_after_s']:g} s into the burst" if b.get("peak_after_s") is not None else "")
        )
    ov = st.get("overlong")
    if ov:
        o, clean = ov["others"], ov.get("baseline")
        lines.append(
            f"overlong mix: {'PASS' if ov['passed'] else 'FAIL'}: {ov['reason']}; {ov['overlong']} overlong "
            f"({ov['tokens']} tokens, {ov['classified']} classified overlong), others TTFT p50 {_ms(o['ttft_p50'])}, "
            f"E2E p50 {_ms(o['e2e_p50'])}"
            + (f" (clean run {_ms(clean['ttft_p50'])}, {_ms(clean['e2e_p50'])})" if clean else "")
        )
    kv = st.get("kv_pressure")
    if kv:
        bf, af = kv.get("itl_before"), kv.get("itl_after")
        no_itl: ItlFigures = {"p50": None, "p99": None, "max": None}
        before = bf or no_itl
        lines.append(
            f"KV pressure: {'PASS' if kv['passed'] else 'FAIL'}: {kv['reason']}"
            + (
                f"; ITL p50/p99/max {_ms(before['p50'])}/{_ms(before['p99'])}/{_ms(before['max'])} before, "
                f"{_ms(af['p50'])}/{_ms(af['p99'])}/{_ms(af['max'])} at it"
                if af
                else ""
            )
        )
    so = st.get("soak")
    if so:
        t, i = so.get("ttft_drift") or {}, so.get("itl_drift") or {}

        def rel(d):
            return "-" if d.get("relative_per_hour") is None else f"{d['relative_per_hour']:+.1%}/h"

        lines.append(
            f"soak: {'PASS' if so['passed'] else 'FAIL'}: {so['reason']}; {so['windows']} windows of {so['window']} s, "
            f"TTFT p50 drift {rel(t)}, ITL p50 drift {rel(i)}, error bursts {len(so['error_bursts'])}"
            + "".join(
                f", {k} {bph / 2**20:+,.1f} MiB/h"
                for k, v in so.get("memory", {}).items()
                if (bph := v.get("bytes_per_hour")) is not None
            )
        )
    return "\n".join(lines)


def verdict_rows(st: Stability | None) -> list[tuple[str, bool, str]]:
    """(plan, passed, reason) per verdict, for the report and compare."""
    return [(k, bool(v.get("passed")), v.get("reason", "")) for k, v in (st or {}).items() if isinstance(v, dict)]
