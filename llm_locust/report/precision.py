"""The summary's precision lines: each headline figure with its 95% interval as "± x%" (half the
interval's width over the figure), or "insufficient (needs N samples)" where its samples cannot
give one (results `intervals`, metrics/blocks.py; docs/metrics.md "Confidence intervals")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from llm_locust.analysis.precision_targets import target_text
from llm_locust.metrics.intervals import MIN_BATCHES
from llm_locust.schema import Figures

LATENCY_LABELS = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E"))
FIGURES = ("mean", "p50", "p90", "p99")
# the rates with an interval, by their name in the summary (`Figures`): typed, so that a renamed
# figure fails mypy at `fig[key]` below
Rate = Literal["output_tokens_per_s", "requests_per_s", "goodput_requests_per_s", "goodput_tokens_per_s"]
RATE_LABELS: tuple[tuple[Rate, str, int], ...] = (
    ("output_tokens_per_s", "output tokens/s", 1),
    ("requests_per_s", "requests/s", 2),
    ("goodput_requests_per_s", "goodput requests/s", 2),
    ("goodput_tokens_per_s", "goodput tokens/s", 1),
)


def pm(iv: Mapping[str, Any] | None) -> str:
    """ " ± 3.1%", " insufficient (needs 368 samples)" or "" (no interval kept)."""
    if not iv:
        return ""
    if iv.get("rel") is not None:
        return f" ± {iv['rel'] * 100:.1f}%"
    if iv.get("needs"):
        return f" insufficient (needs {iv['needs']} samples)"
    return f" {iv.get('reason') or 'insufficient'}"


def _latency_line(label: str, stats: Mapping[str, Any], ivs: Mapping[str, Any]) -> str | None:
    parts = []
    for name in FIGURES:
        v = stats.get(name)
        iv = ivs.get(name)
        if v is None or iv is None:
            continue
        if iv.get("rel") is None:
            parts.append(f"{name}{pm(iv)}")
        else:
            parts.append(f"{name} {v * 1000:.1f} ms{pm(iv)}")
    return f"  {label}: " + ", ".join(parts) if parts else None  # one space apart: the summary wraps it


def precision_lines(fig: Figures) -> list[str]:
    """The lines, a blank one last (none when the window has no intervals)."""
    iv = fig.get("intervals")
    if not iv:
        return []
    if iv["blocks"] < MIN_BATCHES:  # one reason for every figure: say it once
        return [
            f"precision (95% intervals): none: the window holds {iv['blocks']} time blocks of"
            f" {iv['block_s']:.2f} s (each at least twice the mean E2E) and needs {MIN_BATCHES}: a longer run has them",
            "",
        ]
    lines = [f"precision (95% intervals, batch means over {iv['blocks']} time blocks of {iv['block_s']:.2f} s):"]
    for key, label in LATENCY_LABELS:
        stats: Mapping[str, Any] = fig["latency"].get(key) or {}
        if not stats.get("count"):
            continue
        line = _latency_line(label, stats, iv["latency"].get(key) or {})
        if line:
            lines.append(line)
    rates = []
    for key, label, digits in RATE_LABELS:
        v = fig[key] if key in fig else None
        if isinstance(v, int | float) and v > 0 and key in iv["rates"]:  # goodput 0: no SLO, or none met
            rates.append(f"{label} {v:.{digits}f}{pm(iv['rates'][key])}")
    err, share = iv["rates"].get("error_rate"), fig.get("error_rate") or 0.0
    if share > 0 and err:  # a share: its ± too is half the width over the figure
        rates.append(f"error rate {share * 100:.1f}%{pm(err)}")
    if rates:
        lines.append("  " + ", ".join(rates))
    return [*lines, ""]


def target_lines(doc: Mapping[str, Any] | None) -> list[str]:
    """--precision's lines (results `precision`): each target met or NOT MET, with the run's or
    each step's relative half-widths beside their targets."""
    if not doc:
        return []
    checks = doc.get("checks") or []
    ladder = any(c.get("step") is not None for c in checks)
    head = "precision targets " + ("met" if doc.get("met") else "NOT MET")
    if ladder:
        missed = [str(c["step"]) for c in checks if not c["met"]]
        head += f" in step {', '.join(missed)}" if missed else " in every step"
    lines = [head + ":"]
    for c in checks:
        where = f"step {c['step']}: " if ladder else ""
        if c["met"] and c.get("stopped"):
            how = f"met after {c['seconds']:.1f} s, {'the step' if ladder else 'the run'} stopped early"
        elif c["met"]:
            how = f"met at the end, {c['seconds']:.1f} s"
        else:
            how = f"NOT MET by the end ({'the step' if ladder else '-t'}), {c['seconds']:.1f} s"
        figs = ", ".join(target_text(name, f) for name, f in c["figures"].items())
        lines.append(f"  {where}{how} ({c['requests']} requests): {figs}")
    return lines


def target_text_line(doc: Mapping[str, Any]) -> str:
    """target_lines in one line (the HTML report's facts): "met: met after 20.1 s, ...; ..."."""
    head, *rest = target_lines(doc)
    return head.removeprefix("precision targets ").rstrip(":") + ": " + "; ".join(line.strip() for line in rest)
