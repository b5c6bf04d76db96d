"""How figures are written: numbers, milliseconds, percentages, loads, and a metric's value or
pass line in its unit. Shared by the runs' facts, the matrix's fail texts and the sections. `run` arguments are
runs.Run objects (read for their offered kind only; typed Any so this module need not import runs)."""

from __future__ import annotations

from typing import Any

from llm_locust.analysis.steps import OFFERED_UNITS
from llm_locust.report.compare.metric_table import Metric, PassLine


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 999.5:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _num_plain(v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:g}"
    return str(v)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{_num(v * 1000)} ms"


def _pct(v: float | None) -> str:
    if v is None:
        return "-"
    return "0%" if v == 0 else f"{v * 100:.3g}%"


def _load(v: Any, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "x":
        return f"{_num_plain(v)}x"
    return f"{_num_plain(v)} {unit}".strip()


def _fmt_slo(name: str, v: float) -> str:
    return _pct(v) if name == "error_rate" else _ms(v)


def _fmt_value(run: Any, metric: Metric, v: float | None, bound: str = "") -> str:
    if v is None:
        return "-"
    pre = f"{bound} " if bound else ""
    if metric.unit == "s":
        return pre + _ms(v)
    if metric.unit == "fraction":
        return pre + _pct(v)
    if metric.unit == "load":
        return pre + _load(v, OFFERED_UNITS.get(run.offered_kind, "") if run else "")
    return f"{pre}{_num(v)} {metric.unit}"


def _fmt_pass(metric: Metric, pl: PassLine | None, run: Any = None) -> str:
    if pl is None:
        return "-"
    if metric.unit == "load":
        unit = OFFERED_UNITS.get(run.offered_kind, "") if run else ""
        return f"{pl.op} {_load(pl.threshold, unit)}"
    return f"{pl.op} {_fmt_value(None, metric, pl.threshold)}"
