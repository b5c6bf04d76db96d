"""What a criterion can name: the metric table (METRICS, resolve_metric) and pass lines
("<= 500ms", ">= 800", "< 1%") in the metric's unit. The names are listed in docs/compare.md."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from llm_locust.analysis.steps import SLO_STATS, parse_slo_name
from llm_locust.workload.values import parse_seconds, suggest

LATENCY_METRICS = ("ttft", "itl", "tpot", "e2e")
SCOPE_PREFIXES = {"at_knee.": "knee", "at_max_slo.": "max_slo", "at_summary.": "summary"}
OPERATORS = ("<=", ">=", "<", ">")


# ---- the metric table ----


@dataclass(frozen=True)
class Metric:
    """A figure of a results file that a criterion can name."""

    name: str
    higher_is_better: bool
    unit: str  # "s" (latency, shown in ms), "tok/s", "req/s", "fraction", "load"
    field: str  # where it is read, for the documentation and the messages
    scoped: bool = True  # can be read at the knee / the max-SLO step as well as over the whole run

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"


def _metric_table() -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for m in LATENCY_METRICS:
        for s in SLO_STATS:
            out[f"{m}_{s}"] = Metric(f"{m}_{s}", False, "s", f"latency.{m}.{s}")
    out["output_tokens_per_s"] = Metric("output_tokens_per_s", True, "tok/s", "output_tokens_per_s")
    out["requests_per_s"] = Metric("requests_per_s", True, "req/s", "requests_per_s")
    out["goodput_requests_per_s"] = Metric("goodput_requests_per_s", True, "req/s", "goodput_requests_per_s")
    out["goodput_tokens_per_s"] = Metric("goodput_tokens_per_s", True, "tok/s", "goodput_tokens_per_s")
    out["error_rate"] = Metric("error_rate", False, "fraction", "error_rate")
    # the verdicts (analysis/efficiency.py, docs/verdicts.md): per GPU, per user, energy, cost
    for name, (better, unit) in {
        "output_tokens_per_s_per_gpu": (True, "tok/s/GPU"),
        "total_tokens_per_s_per_gpu": (True, "tok/s/GPU"),
        "interactivity": (True, "tok/s/user"),
        "joules_per_output_token": (False, "J/tok"),
        "usd_per_million_output_tokens": (False, "$/Mtok"),
        "usd_per_million_total_tokens": (False, "$/Mtok"),
    }.items():
        out[name] = Metric(name, better, unit, name)
    out["saturation_load"] = Metric(
        "saturation_load", True, "load", "ladder.saturation.saturation.offered", scoped=False
    )
    out["max_slo_load"] = Metric("max_slo_load", True, "load", "ladder.saturation.max_slo_load", scoped=False)
    return out


METRICS = _metric_table()


def metric_names() -> list[str]:
    return list(METRICS)


def known_metrics_text() -> str:
    """Every accepted name, for error messages."""
    return (
        f"{', '.join(METRICS)}; a bare ttft, itl, tpot or e2e means its p99 and p999 is p99.9;"
        f" prefix at_knee. or at_max_slo. (or give at: knee|max_slo|summary) to read a figure at the"
        f" ladder's knee step or its highest step that met every SLO"
    )


def resolve_metric(name: str) -> tuple[Metric, str | None]:
    """(metric, scope named by a prefix or None). ValueError listing the known names."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"expected a metric name, got {name!r}; known: {known_metrics_text()}")
    text = name.strip()
    scope = None
    for prefix, sc in SCOPE_PREFIXES.items():
        if text.startswith(prefix):
            text, scope = text[len(prefix) :], sc
            break
    if text in METRICS:
        return METRICS[text], scope
    try:  # the SLO vocabulary's spellings: bare ttft = p99, p999 = p99.9, itl_max
        metric, stat = parse_slo_name(text)
    except ValueError:
        metric, stat = "", None
    if metric in LATENCY_METRICS and stat is not None:
        return METRICS[f"{metric}_{stat}"], scope
    raise ValueError(f"unknown metric {name!r}{suggest(text, METRICS)}; known: {known_metrics_text()}")


# ---- pass lines ----

_PASS_RE = re.compile(r"^\s*(<=|>=|<|>|=<|=>)?\s*(.*?)\s*$")


@dataclass(frozen=True)
class PassLine:
    op: str  # <=, <, >=, >
    threshold: float  # in the metric's base unit (seconds, fraction, per second, load)
    text: str  # as written

    def ok(self, value: float) -> bool:
        return {
            "<=": value <= self.threshold,
            "<": value < self.threshold,
            ">=": value >= self.threshold,
            ">": value > self.threshold,
        }[self.op]


def _parse_value(metric: Metric, raw: Any) -> float:
    if metric.unit == "s":
        return parse_seconds(raw)
    if metric.unit == "fraction":
        if isinstance(raw, str) and raw.strip().endswith("%"):
            v = float(raw.strip()[:-1]) / 100
        else:
            v = float(raw)
        if not 0 <= v <= 1:
            raise ValueError(f"an error rate is a fraction between 0 and 1 (or a percentage), got {raw!r}")
        return v
    if isinstance(raw, str):
        raw = raw.replace(",", "").replace("_", "")
    return float(raw)


def parse_pass(metric: Metric, expr: Any) -> PassLine:
    """A pass line such as "<= 500ms", ">= 800", "< 1%", or a bare value (the metric's direction
    gives the operator: <= for lower-is-better, >= for higher-is-better). ValueError if not."""
    example = {"s": "'<= 500ms'", "fraction": "'<= 1%'"}.get(metric.unit, "'>= 800'")
    hint = f"expected OPERATOR VALUE with OPERATOR one of {', '.join(OPERATORS)}, e.g. {example}"
    if isinstance(expr, bool) or expr is None:
        raise ValueError(f"bad pass line {expr!r}: {hint}")
    raw: float | str
    if isinstance(expr, (int, float)):
        op, raw, text = ("<=" if not metric.higher_is_better else ">="), expr, str(expr)
    elif isinstance(expr, str):
        m = _PASS_RE.match(expr)
        given, raw, text = (m[1] if m else None), (m[2] if m else ""), expr.strip()
        op = {"=<": "<=", "=>": ">="}.get(given, given) if given else ("<=" if not metric.higher_is_better else ">=")
        if not raw:
            raise ValueError(f"bad pass line {expr!r}: no value; {hint}")
    else:
        raise ValueError(f"bad pass line {expr!r}: {hint}")
    try:
        value = _parse_value(metric, raw)
    except (TypeError, ValueError):
        unit = {"s": "seconds (a number, or e.g. 500ms, 2s)", "fraction": "a fraction (0.01) or a percentage (1%)"}.get(
            metric.unit,
            "a number" + (f" ({metric.unit})" if metric.unit != "load" else " (users, req/s or speed factor)"),
        )
        raise ValueError(f"bad pass line {expr!r} for {metric.name}: the value must be {unit}; {hint}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"bad pass line {expr!r} for {metric.name}: the value must be a finite number >= 0; {hint}")
    return PassLine(op, value, text)
