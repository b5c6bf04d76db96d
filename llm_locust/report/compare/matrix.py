"""Values and scores: each criterion's figure per run (read_value), normalised so that the best
run scores 1.0 (normalise), weighted into totals and ranks with pass lines and validity marks (score).
A whole-run figure with its 95% interval (results `intervals`) that is within noise of the best
run's scores as the best's (judge_noise): runs whose figures differ only within noise tie."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from llm_locust.report.compare.format import _fmt_pass, _fmt_value
from llm_locust.report.compare.metric_table import Metric
from llm_locust.report.compare.runs import Run, _get
from llm_locust.report.compare.weights import Criterion


@dataclass
class Cell:
    value: float | None
    score: float = 0.0
    passed: bool | None = None  # None: no pass line
    bound: str = ""  # ">=": the value is a lower bound (a ladder that had not saturated at its top)
    note: str = ""  # why there is no value, or where it was read
    flags: list[str] = field(default_factory=list)  # validity marks of the figures used
    step: int | None = None  # the ladder step it was read from (None: the whole run)
    # half the width of the figure's 95% interval (results `intervals`, docs/metrics.md); inf: its
    # samples are too few for one; None: the run has no interval for it (point estimate only)
    half: float | None = None
    noise: bool | None = None  # against the best run: True within noise, False significant, None unjudged
    judged: str = ""  # "within noise", "significant", "too few samples to judge" (judge_noise)


def _at_step(value: float | None, st: dict[str, Any], **kw: Any) -> Cell:
    return Cell(value, flags=list(st.get("flags") or []), step=st.get("step"), **kw)


def read_value(run: Run, crit: Criterion) -> Cell:
    """The criterion's figure of one run, with the validity marks of where it was read."""
    m = crit.metric
    if m.name == "saturation_load":
        if not run.ladder:
            return Cell(None, note="no ladder")
        sat = run.verdict.get("saturation")
        if isinstance(sat, dict):
            return _at_step(_float(sat.get("offered")), run.step(sat.get("step")) or sat)
        if run.still_rising():
            top = run.ladder_steps[-1]
            return _at_step(_float(top.get("offered")), top, bound=">=", note="still rising at the top step")
        return Cell(None, note="no knee found")
    if m.name == "max_slo_load":
        if not run.ladder:
            return Cell(None, note="no ladder")
        if not run.slos:
            return Cell(None, note="no SLOs")
        v = run.verdict.get("max_slo_load")
        if v is None:
            return Cell(0.0, note="no step met every SLO")
        met = run.step(run.verdict.get("max_slo_step")) or {}
        top = run.ladder_steps[-1]
        at_top = bool(met) and met.get("step") == top.get("step")
        return _at_step(
            _float(v), met, bound=">=" if at_top else "", note="the top step met them all" if at_top else ""
        )
    if crit.scope == "summary":
        return _summary_cell(run, m)
    if not run.ladder:
        return Cell(None, note="no ladder")
    if crit.scope == "knee":
        st, note = run.knee()
        if st is None:
            return Cell(None, note=note)
    else:  # max_slo
        st, note = run.step(run.verdict.get("max_slo_step")), ""
        if st is None:
            return Cell(None, note="no SLOs" if not run.slos else "no step met every SLO")
    v = _figure(st, m)
    return _at_step(v, st, note=note if v is not None else (note or "no value"))


def _summary_cell(run: Run, m: Metric) -> Cell:
    """A figure of the whole run; none where another tool's figure of that name means another thing."""
    flags = list(run.doc["validity"]["flags"])
    if _not_comparable(run, m):
        return Cell(None, note="not comparable", flags=flags)
    if m.name.startswith("goodput") and not run.slos:
        return Cell(None, note="no SLOs", flags=flags)
    return Cell(_figure(run.summary, m), flags=flags, half=interval_half(run.summary, m))


def _not_comparable(run: Run, m: Metric) -> bool:
    """Another tool's figure of this name means another thing (tools.ForeignRun, foreign.Foreign.mark)."""
    f = getattr(run, "foreign", None)
    if f is None:
        return False
    parts = m.field.split(".", 2)
    figure, stat = (parts[1], parts[2]) if parts[0] == "latency" and len(parts) == 3 else (m.field, "")
    return bool(f.mark("goodput" if figure.startswith("goodput") else figure, stat))


def interval_half(src: dict[str, Any], m: Metric) -> float | None:
    """Half the width of a figure's 95% interval in a window's `intervals` (metrics/intervals.py):
    inf where its samples are too few for one, None where the window has none for it."""
    ivs = src.get("intervals")
    if not isinstance(ivs, dict):
        return None
    if m.unit == "s":
        _latency, metric, stat = m.field.split(".", 2)
        iv = _get(ivs, "latency", metric, stat)
    else:
        iv = _get(ivs, "rates", m.field)
    if not isinstance(iv, dict):
        return None
    low, high = _float(iv.get("low")), _float(iv.get("high"))
    return math.inf if low is None or high is None else (high - low) / 2


def differs(a: float, ha: float, b: float, hb: float) -> bool:
    """Whether two independent runs' figures differ beyond noise: the difference's 95% interval,
    b - a +- sqrt(ha^2 + hb^2) (the half widths added in quadrature; conservative), excludes 0.
    A figure whose samples are too few for an interval (inf) differs from nothing."""
    return abs(b - a) > math.hypot(ha, hb)


def judge_noise(row: list[Cell], higher_is_better: bool) -> None:
    """Each cell with an interval against the row's best value: within noise or significant; a
    cell within noise scores as the best (1.0): the matrix ranks no run on a difference within noise,
    nor on a figure whose samples are too few for an interval (it cannot be told from noise)."""
    have = [c for c in row if c.value is not None]
    if not have:
        return
    pick = max if higher_is_better else min
    best = pick(have, key=lambda c: c.value or 0.0)
    if best.half is None:
        return
    for c in have:
        if c is best or c.half is None:
            continue
        assert c.value is not None and best.value is not None
        c.noise = not differs(best.value, best.half, c.value, c.half)
        c.judged = noise_word(best.half, c.half, c.noise)
        if c.noise:
            c.score = best.score


def noise_word(ha: float, hb: float, noise: bool) -> str:
    """How a difference was judged, in the words compare prints."""
    if not (math.isfinite(ha) and math.isfinite(hb)):
        return "too few samples to judge"
    return "within noise" if noise else "significant"


def _figure(src: dict[str, Any], m: Metric) -> float | None:
    if m.unit == "s":
        _latency, metric, stat = m.field.split(".", 2)  # "latency.e2e.p99.9": the stat keeps its dot
        return _float(_get(src, "latency", metric, stat))
    return _float(src.get(m.field))


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def normalise(values: list[float | None], higher_is_better: bool) -> list[float]:
    """Per criterion: the best run 1.0, the others in proportion; no value 0.
    Higher is better: v / max. Lower is better: min / v, and when the best is 0 (no errors),
    1.0 for the runs at 0 and 0.0 for the others. All runs equal (all 0 included): 1.0 each."""
    have = [v for v in values if v is not None]
    if not have:
        return [0.0 for _ in values]
    out = []
    if higher_is_better:
        best = max(have)
        for v in values:
            out.append(0.0 if v is None else (1.0 if best <= 0 else max(v, 0.0) / best))
    else:
        best = min(have)
        for v in values:
            if v is None:
                out.append(0.0)
            elif best > 0:
                out.append(best / v)
            else:
                out.append(1.0 if v <= best else 0.0)
    return out


@dataclass
class Matrix:
    criteria: list[Criterion]
    cells: list[list[Cell]]  # [criterion][run]
    totals: list[float]  # per run: sum(weight x score) / sum(weight), 0..1
    ranks: list[int]  # per run: 1 = best (equal totals share a rank)
    fails: list[list[str]]  # per run: the pass lines it missed, as text
    marks: list[list[str]]  # per run: validity marks of the run, its steps, and the figures scored


def score(runs: list[Run], criteria: list[Criterion]) -> Matrix:
    cells: list[list[Cell]] = []
    for crit in criteria:
        row = [read_value(r, crit) for r in runs]
        for c, s in zip(row, normalise([c.value for c in row], crit.metric.higher_is_better), strict=True):
            c.score = s
            if crit.pass_line is not None:
                c.passed = c.value is not None and crit.pass_line.ok(c.value)
        judge_noise(row, crit.metric.higher_is_better)
        cells.append(row)
    wsum = sum(c.weight for c in criteria) or 1.0
    totals = [sum(crit.weight * cells[i][j].score for i, crit in enumerate(criteria)) / wsum for j in range(len(runs))]
    rounded = [round(t, 9) for t in totals]
    ranks = [1 + sum(1 for u in rounded if u > t) for t in rounded]
    fails: list[list[str]] = [[] for _ in runs]
    for i, crit in enumerate(criteria):
        for j, c in enumerate(cells[i]):
            if c.passed is False:
                got = (
                    ("no value" + (f" ({c.note})" if c.note else ""))
                    if c.value is None
                    else _fmt_value(runs[j], crit.metric, c.value, c.bound)
                )
                fails[j].append(f"{crit.name} {got}, needs {_fmt_pass(crit.metric, crit.pass_line, runs[j])}")
    marks: list[list[str]] = []
    for j, r in enumerate(runs):
        out = []
        for step, text in r.flag_items():
            used = [
                crit.name
                for i, crit in enumerate(criteria)
                if cells[i][j].flags and (cells[i][j].step == step if step is not None else crit.scope == "summary")
            ]
            out.append(text + (f" (scored: {', '.join(used)})" if used and step is not None else ""))
        marks.append(out)
    return Matrix(criteria, cells, totals, ranks, fails, marks)
