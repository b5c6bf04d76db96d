"""The stress suite's verdicts (`llm-locust suite stress`, docs/stress-suite.md): each case's
results file -> PASS, FAIL or SKIP with its reason. Pure: no Locust, no clock, no network.

Why a verdict of three: a case that does not apply to the server (a context too short for the
long-context case) or that left nothing to judge (no request in the base step, fewer than two
soak windows, no cancel that took effect) says SKIP, not FAIL: a suite whose every case must
apply would fail on a small model for no fault of the server.

Every case but long-context's refusals shares one rule: any failed request fails the case (a
stress case is there to find a server that breaks under it), then the case's own rule applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
_NOT_FAILED = ("ok", "cancelled", "client_cancelled")  # outcomes that are no failure (docs/metrics.md)
SWING_TOLERANCE = 0.5  # zigzag / microburst: each base step's TTFT p50 <= (1 + this) x the first's


@dataclass(frozen=True)
class Verdict:
    """One case's verdict: `status` PASS, FAIL or SKIP, `reason` in words, `figures` what it read."""

    case: str
    status: str
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _summary(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return doc.get("summary") or {}


def _p50(lat: Mapping[str, Any] | None, metric: str = "ttft") -> float | None:
    v = ((lat or {}).get(metric) or {}).get("p50")
    return float(v) if isinstance(v, (int, float)) else None


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:,.1f} ms"


def _failures(doc: Mapping[str, Any]) -> str:
    """'' when no request failed; else 'N of M requests failed (cause n, ...)'."""
    s = _summary(doc)
    failed = int(s.get("failed") or 0)
    if not failed:
        return ""
    kinds = s.get("causes") or {k: v for k, v in (s.get("outcomes") or {}).items() if k not in _NOT_FAILED}
    causes = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()) if v)
    return f"{failed} of {s.get('finished', 0)} requests failed" + (f" ({causes})" if causes else "")


def _base(doc: Mapping[str, Any]) -> dict[str, Any]:
    s = _summary(doc)
    return {"sent": s.get("sent"), "ok": s.get("ok"), "failed": s.get("failed"), "ttft_p50": _p50(s.get("latency"))}


def judge_burst(doc: Mapping[str, Any]) -> Verdict:
    """The burst verdict (analysis.stability burst_recovery) plus the suite's rule (no failure);
    no burst verdict, or no TTFT in the base step: SKIP (nothing to judge)."""
    b = (doc.get("stability") or {}).get("burst")
    figures = _base(doc)
    if not b:
        return Verdict(
            "burst", SKIP, "the run has no burst verdict (its steps did not all run): nothing to judge", figures
        )
    figures.update(
        base_ttft_p50=b.get("base_ttft_p50"), peak_ttft_p50=b.get("peak_ttft_p50"), recovery_s=b.get("recovery_s")
    )
    if not b.get("base_samples"):
        return Verdict("burst", SKIP, "no TTFT in the base step: nothing to judge", figures)
    if failed := _failures(doc):
        return Verdict("burst", FAIL, failed, figures)
    detail = f"TTFT p50 base {_ms(b.get('base_ttft_p50'))}, peak {_ms(b.get('peak_ttft_p50'))}"
    return Verdict("burst", PASS if b.get("passed") else FAIL, f"{b.get('reason')}; {detail}", figures)


def judge_swings(case: str, doc: Mapping[str, Any], tolerance: float = SWING_TOLERANCE) -> Verdict:
    """A rate series that swings between a base rate (its lowest) and higher ones (zigzag,
    microburst): each base step after the first must have TTFT p50 <= (1 + tolerance) x the first
    base step's (the server is back after every swing), and no request failed. Fewer than two base
    steps with a TTFT: SKIP (nothing to judge)."""
    steps = list((doc.get("ladder") or {}).get("steps") or [])
    figures = _base(doc)
    rates = [s.get("offered") for s in steps if isinstance(s.get("offered"), (int, float))]
    if not rates:
        return Verdict(case, SKIP, "the run has no rate steps: nothing to judge", figures)
    low = min(rates)
    base: list[tuple[Any, float]] = [
        (s.get("step"), p) for s in steps if s.get("offered") == low and (p := _p50(s.get("latency"))) is not None
    ]
    high = [p for s in steps if s.get("offered") != low and (p := _p50(s.get("latency"))) is not None]
    figures.update(
        base_rate=low,
        base_ttft_p50=[p for _, p in base],
        peak_ttft_p50=max(high, default=None),
        tolerance=tolerance,
    )
    if len(base) < 2:
        return Verdict(case, SKIP, f"{len(base)} base step(s) at {low:g}/s with a TTFT: nothing to judge", figures)
    if failed := _failures(doc):
        return Verdict(case, FAIL, failed, figures)
    first = base[0][1]
    limit = first * (1 + tolerance)
    late = [(k, p) for k, p in base[1:] if p > limit]
    text = f"base TTFT p50 {_ms(first)}, highest after a swing {_ms(max(p for _, p in base[1:]))}"
    if late:
        k, p = late[0]
        return Verdict(
            case, FAIL, f"step {k}'s TTFT p50 {_ms(p)} > {1 + tolerance:g} x the first base step's; {text}", figures
        )
    return Verdict(case, PASS, f"back within {tolerance:.0%} of the base TTFT p50 after every swing; {text}", figures)


def judge_churn(doc: Mapping[str, Any]) -> Verdict:
    """Connection churn: requests cancelled by the client mid-reply (each closing its connection).
    No cancel took effect: SKIP (no churn happened); any failed request or none served: FAIL."""
    s = _summary(doc)
    conn = ((s.get("phases") or {}).get("connections")) or {}
    figures = {**_base(doc), "client_cancelled": s.get("client_cancelled"), "connections_new": conn.get("new")}
    if not s.get("client_cancelled"):
        return Verdict("churn", SKIP, "no request was cancelled by the client: no churn to judge", figures)
    if failed := _failures(doc):
        return Verdict("churn", FAIL, failed, figures)
    if not s.get("ok"):
        return Verdict("churn", FAIL, "no request was served to its end", figures)
    new = f", {conn['new']} new connections" if conn.get("new") is not None else ""
    return Verdict(
        "churn",
        PASS,
        f"{s['client_cancelled']} requests cancelled mid-reply{new}; {s['ok']} served, none failed, "
        f"TTFT p50 {_ms(_p50(s.get('latency')))}",
        figures,
    )


def context_skip(needed: int, context: int | None, source: str) -> Verdict | None:
    """The long-context case before it runs: SKIP when the server says a context shorter than
    `needed` tokens (prompt + max_tokens); None (run it) when it is long enough or says none."""
    if context is None or context >= needed:
        return None
    return Verdict(
        "long-context",
        SKIP,
        f"the server's context is {context:,} tokens ({source}); the case needs {needed:,}",
        {"context": context, "needed": needed},
    )


def judge_long_context(doc: Mapping[str, Any], needed: int) -> Verdict:
    """Long prompts: every request failed as `overlong` and none was served -> SKIP (the first
    refusal says the context is too short); any other failure -> FAIL; else PASS."""
    s = _summary(doc)
    figures = {**_base(doc), "needed": needed}
    causes = {k: v for k, v in (s.get("causes") or {}).items() if v}
    if not s.get("ok") and s.get("failed") and set(causes) == {"overlong"}:
        return Verdict(
            "long-context",
            SKIP,
            f"the server refused every {needed:,}-token request as overlong: its context is shorter",
            figures,
        )
    if failed := _failures(doc):
        return Verdict("long-context", FAIL, failed, figures)
    if not s.get("ok"):
        return Verdict("long-context", SKIP, "no request ended: nothing to judge", figures)
    return Verdict(
        "long-context",
        PASS,
        f"{s['ok']} requests of {needed:,} tokens served, none failed; TTFT p50 {_ms(_p50(s.get('latency')))}",
        figures,
    )


def judge_soak(doc: Mapping[str, Any]) -> Verdict:
    """The soak verdict (analysis.stability soak) plus the suite's rule; fewer than two windows:
    SKIP (no drift measurable: nothing to judge)."""
    so = (doc.get("stability") or {}).get("soak")
    figures = _base(doc)
    if not so:
        return Verdict("soak", SKIP, "the run has no soak verdict: nothing to judge", figures)
    drift = so.get("ttft_drift") or {}
    figures.update(
        windows=so.get("windows"),
        ttft_drift_per_hour=drift.get("relative_per_hour"),
        error_bursts=len(so.get("error_bursts") or []),
    )
    if (so.get("windows") or 0) < 2:
        return Verdict("soak", SKIP, f"{so.get('windows') or 0} window(s): too short to measure a drift", figures)
    if failed := _failures(doc):
        return Verdict("soak", FAIL, f"{failed}; {so.get('reason')}", figures)
    return Verdict("soak", PASS if so.get("passed") else FAIL, str(so.get("reason")), figures)


def exit_status(verdicts: Sequence[Verdict]) -> int:
    """0 when every case passed or was skipped, 1 when any failed."""
    return int(any(v.status == FAIL for v in verdicts))


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The text summary: one line per case (case, verdict, seconds, reason)."""
    width = max((len(str(r["case"])) for r in rows), default=4)
    lines = [f"{'case':<{width}}  verdict  {'time':>6}  reason"]
    for r in rows:
        secs = r.get("seconds")
        t = "-" if secs is None else f"{secs:.0f} s"
        lines.append(f"{r['case']:<{width}}  {r['status']:<7}  {t:>6}  {r['reason']}")
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASS, FAIL, SKIP)}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)
