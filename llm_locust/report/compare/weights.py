"""Criteria: the weights file (load_weights, parse_criteria, WeightsError naming file:line and
criteria[i]) and the built-in set used without --weights (default_criteria)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_locust.report.compare.errors import CompareError
from llm_locust.report.compare.metric_table import Metric, PassLine, known_metrics_text, parse_pass, resolve_metric
from llm_locust.report.compare.runs import Run
from llm_locust.report.compare.tools import read_input
from llm_locust.settings.units import PlanError, read_yaml
from llm_locust.workload.values import suggest

SCOPES = ("summary", "knee", "max_slo")
CRITERION_KEYS = ("metric", "weight", "pass", "at")
TOP_KEYS = ("criteria", "name", "description")


class WeightsError(CompareError):
    """A weights file that cannot be used; `problems` lists each one ("file:line: where: what")."""

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__(f"invalid weights file {source}:\n" + "\n".join(f"  {p}" for p in self.problems))


@dataclass(frozen=True)
class Criterion:
    metric: Metric
    scope: str  # summary | knee | max_slo | run (saturation_load, max_slo_load)
    weight: float
    pass_line: PassLine | None = None
    index: int = 0

    @property
    def name(self) -> str:
        if self.scope in ("summary", "run"):
            return self.metric.name
        return f"at_{self.scope}.{self.metric.name}"


DEFAULT_CRITERIA: list[dict[str, Any]] = [
    {"metric": "ttft_p99", "weight": 2},
    {"metric": "tpot_p50", "weight": 1},
    {"metric": "e2e_p99", "weight": 1},
    {"metric": "output_tokens_per_s", "weight": 2},
    {"metric": "error_rate", "weight": 1},
]


def parse_criteria(data: Any, *, source: str = "weights", lines: dict[tuple, int] | None = None) -> list[Criterion]:
    """Criteria from the weights document (a mapping with `criteria:`). WeightsError lists every
    problem, each with the file, the line when known and the criterion index."""
    lines = lines or {}
    problems: list[str] = []

    def err(path: tuple, msg: str) -> None:
        line, p = None, path
        while p and line is None:
            line = lines.get(p)
            p = p[:-1]
        where = f"{source}:{line}" if line is not None else source
        dotted = "".join(f"[{x}]" if isinstance(x, int) else (f".{x}" if i else str(x)) for i, x in enumerate(path))
        problems.append(f"{where}: {dotted or 'weights'}: {msg}")

    if not isinstance(data, dict):
        err((), f"expected a mapping with a `criteria:` list, got {type(data).__name__}")
        raise WeightsError(problems, source)
    for key in data:
        if key not in TOP_KEYS:
            err((key,), f"unknown key {key!r}{suggest(key, TOP_KEYS)}; known: {', '.join(TOP_KEYS)}")
    items = data.get("criteria")
    if not isinstance(items, list) or not items:
        err(("criteria",), "expected a non-empty list of criteria (each: metric, weight, pass, at)")
        raise WeightsError(problems, source)
    out: list[Criterion] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        crit = _criterion(item, i, err)
        if crit is None:
            continue
        if crit.name in seen:
            err(("criteria", i, "metric"), f"{crit.name} is already criteria[{seen[crit.name]}]")
            continue
        seen[crit.name] = i
        out.append(crit)
    if problems:
        raise WeightsError(problems, source)
    return out


def _criterion(item: Any, i: int, err: Callable[[tuple, str], None]) -> Criterion | None:
    """Part of parse_criteria: criteria[i] checked, every problem reported through err; None when it has one."""
    path = ("criteria", i)
    if not isinstance(item, dict):
        err(path, f"expected a mapping of {', '.join(CRITERION_KEYS)}, got {item!r}")
        return None
    bad = False
    for key in item:
        if key not in CRITERION_KEYS:
            err(
                path + (key,),
                f"unknown key {key!r}{suggest(key, CRITERION_KEYS)}; known: {', '.join(CRITERION_KEYS)}",
            )
            bad = True
    if "metric" not in item:
        err(path, f"no metric given; known: {known_metrics_text()}")
        return None
    try:
        metric, scope = resolve_metric(item["metric"])
    except ValueError as e:
        err(path + ("metric",), str(e))
        return None
    scope, scope_ok = _scope(item, metric, scope, path, err)
    bad = bad or not scope_ok
    weight = item.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        err(path + ("weight",), f"the weight must be a positive number, got {weight!r}")
        bad = True
    pass_line = None
    if "pass" in item:
        try:
            pass_line = parse_pass(metric, item["pass"])
        except ValueError as e:
            err(path + ("pass",), str(e))
            bad = True
    if bad:
        return None
    return Criterion(metric, scope, float(weight), pass_line, i)


def _scope(
    item: dict[str, Any], metric: Metric, scope: str | None, path: tuple, err: Callable[[tuple, str], None]
) -> tuple[str, bool]:
    """Part of parse_criteria: the criterion's scope from `at` and the metric name, and whether they fit together."""
    ok = True
    at = item.get("at")
    if at is not None:
        if at not in SCOPES:
            err(path + ("at",), f"unknown scope {at!r}{suggest(str(at), SCOPES)}; known: {', '.join(SCOPES)}")
            ok = False
        elif not metric.scoped:
            err(path + ("at",), f"{metric.name} is a figure of the whole ladder: `at` does not apply to it")
            ok = False
        elif scope is not None and scope != at:
            err(path + ("at",), f"at: {at} contradicts the metric name {item['metric']!r}")
            ok = False
        else:
            scope = at
    scope = scope or ("summary" if metric.scoped else "run")
    if not metric.scoped and scope != "run":
        err(path + ("metric",), f"{metric.name} is a figure of the whole ladder: it takes no at_ prefix")
        ok = False
    return scope, ok


def load_weights(path: str | Path) -> list[Criterion]:
    """Read and check a weights YAML file (WeightsError naming the file, line and criterion); a
    pipe, a device or a file too big to be weights is refused as a results file is (tools.read_input)."""
    read_input(str(path), "a weights file")
    try:
        data, lines = read_yaml(path, "weights file")
    except PlanError as e:
        raise WeightsError(e.problems, str(path)) from None
    return parse_criteria(data, source=str(path), lines=lines)


def default_criteria(runs: list[Run]) -> list[Criterion]:
    """The criteria used without --weights (docs/compare.md): latency, throughput and errors, plus
    goodput when a run had SLOs, and the ladder's knee and SLO-limited load when a run is a ladder."""
    items = list(DEFAULT_CRITERIA)
    if any(r.slos for r in runs):
        items.append({"metric": "goodput_requests_per_s", "weight": 1})
    if any(r.ladder for r in runs):
        items.append({"metric": "saturation_load", "weight": 1})
        if any(r.slos for r in runs):
            items.append({"metric": "max_slo_load", "weight": 1})
    return parse_criteria({"criteria": items}, source="default criteria")
