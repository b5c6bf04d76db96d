"""Runs side by side and a weighted decision matrix: `llm-locust compare A.json B.json ...`.

    load_runs(paths, labels=()) -> list[Run]            # ResultsError (load_results' message)
    check_comparable(runs) -> list[Issue]               # what makes runs not comparable, and notes
    load_weights(path) -> list[Criterion]               # WeightsError: file:line, criteria[i], what
    parse_criteria(data, source=...) -> list[Criterion]
    resolve_metric(name) -> (Metric, scope)             # METRICS: the metric table
    score(runs, criteria) -> Matrix                     # normalised scores, pass lines, totals, ranks
    compare(paths, labels, weights) -> Comparison
    render_text / render_markdown / render_html(Comparison) -> str
    main(argv) -> int                                   # 0 done; 2 bad input or --strict refusal

No single score decides: each criterion is a results figure with a direction (lower or higher
is better), a weight and optionally a pass line. Per criterion the best run scores 1.0 and the
others in proportion (higher is better: value / best; lower is better: best / value); the
weighted total is sum(weight x score) / sum(weight). A run that misses a pass line is still
ranked, and marked "fails: ...". docs/compare.md has the metric table and the rules.
"""

from __future__ import annotations

import argparse
import html
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..plan import PlanError, _suggest, parse_seconds, read_yaml
from ..steps import OFFERED_UNITS, SLO_STATS, parse_slo_name
from .results import ResultsError, load_results

FORMATS = ("text", "markdown", "html")
LATENCY_METRICS = ("ttft", "itl", "tpot", "e2e")
SCOPES = ("summary", "knee", "max_slo")
SCOPE_PREFIXES = {"at_knee.": "knee", "at_max_slo.": "max_slo", "at_summary.": "summary"}
CRITERION_KEYS = ("metric", "weight", "pass", "at")
TOP_KEYS = ("criteria", "name", "description")
OPERATORS = ("<=", ">=", "<", ">")
DEFAULT_USERS = 8  # `llm-locust run`'s closed-loop default (cli.DEFAULTS), for results that do not say
DEFAULT_RUN_TIME = "15s"


class CompareError(ValueError):
    """Input that stops the comparison (a clear message; the command exits 2, writes nothing)."""


class WeightsError(CompareError):
    """A weights file that cannot be used; `problems` lists each one ("file:line: where: what")."""

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__(f"invalid weights file {source}:\n" + "\n".join(f"  {p}" for p in self.problems))


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
    out["saturation_load"] = Metric("saturation_load", True, "load", "ladder.saturation.saturation.offered", scoped=False)
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
            text, scope = text[len(prefix):], sc
            break
    if text in METRICS:
        return METRICS[text], scope
    try:  # the SLO vocabulary's spellings: bare ttft = p99, p999 = p99.9, itl_max
        metric, stat = parse_slo_name(text)
    except ValueError:
        metric, stat = "", None
    if metric in LATENCY_METRICS and stat is not None:
        return METRICS[f"{metric}_{stat}"], scope
    raise ValueError(f"unknown metric {name!r}{_suggest(text, METRICS)}; known: {known_metrics_text()}")


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
    if isinstance(expr, (int, float)):
        op, raw, text = ("<=" if not metric.higher_is_better else ">="), expr, str(expr)
    elif isinstance(expr, str):
        m = _PASS_RE.match(expr)
        op, raw, text = (m[1] if m else None), (m[2] if m else ""), expr.strip()
        op = {"=<": "<=", "=>": ">="}.get(op, op) if op else ("<=" if not metric.higher_is_better else ">=")
        if not raw:
            raise ValueError(f"bad pass line {expr!r}: no value; {hint}")
    else:
        raise ValueError(f"bad pass line {expr!r}: {hint}")
    try:
        value = _parse_value(metric, raw)
    except (TypeError, ValueError):
        unit = {"s": "seconds (a number, or e.g. 500ms, 2s)", "fraction": "a fraction (0.01) or a percentage (1%)"}.get(
            metric.unit, "a number" + (f" ({metric.unit})" if metric.unit != "load" else " (users, req/s or speed factor)")
        )
        raise ValueError(f"bad pass line {expr!r} for {metric.name}: the value must be {unit}; {hint}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"bad pass line {expr!r} for {metric.name}: the value must be a finite number >= 0; {hint}")
    return PassLine(op, value, text)


# ---- criteria and the weights file ----


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
            err((key,), f"unknown key {key!r}{_suggest(key, TOP_KEYS)}; known: {', '.join(TOP_KEYS)}")
    items = data.get("criteria")
    if not isinstance(items, list) or not items:
        err(("criteria",), "expected a non-empty list of criteria (each: metric, weight, pass, at)")
        raise WeightsError(problems, source)
    out: list[Criterion] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        path = ("criteria", i)
        if not isinstance(item, dict):
            err(path, f"expected a mapping of {', '.join(CRITERION_KEYS)}, got {item!r}")
            continue
        bad = False
        for key in item:
            if key not in CRITERION_KEYS:
                err(path + (key,), f"unknown key {key!r}{_suggest(key, CRITERION_KEYS)}; known: {', '.join(CRITERION_KEYS)}")
                bad = True
        if "metric" not in item:
            err(path, f"no metric given; known: {known_metrics_text()}")
            continue
        try:
            metric, scope = resolve_metric(item["metric"])
        except ValueError as e:
            err(path + ("metric",), str(e))
            continue
        at = item.get("at")
        if at is not None:
            if at not in SCOPES:
                err(path + ("at",), f"unknown scope {at!r}{_suggest(str(at), SCOPES)}; known: {', '.join(SCOPES)}")
                bad = True
            elif not metric.scoped:
                err(path + ("at",), f"{metric.name} is a figure of the whole ladder: `at` does not apply to it")
                bad = True
            elif scope is not None and scope != at:
                err(path + ("at",), f"at: {at} contradicts the metric name {item['metric']!r}")
                bad = True
            else:
                scope = at
        scope = scope or ("summary" if metric.scoped else "run")
        if not metric.scoped and scope != "run":
            err(path + ("metric",), f"{metric.name} is a figure of the whole ladder: it takes no at_ prefix")
            bad = True
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
            continue
        crit = Criterion(metric, scope, float(weight), pass_line, i)
        if crit.name in seen:
            err(path + ("metric",), f"{crit.name} is already criteria[{seen[crit.name]}]")
            continue
        seen[crit.name] = i
        out.append(crit)
    if problems:
        raise WeightsError(problems, source)
    return out


def load_weights(path: str | Path) -> list[Criterion]:
    """Read and check a weights YAML file (WeightsError naming the file, line and criterion)."""
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


# ---- runs ----


def _get(d: Any, *keys: Any, default: Any = None) -> Any:
    for k in keys:
        if isinstance(d, dict) and k in d:
            d = d[k]
        elif isinstance(d, list) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return default
    return d


def _opt(cmd: list[str], *names: str) -> str | None:
    """The value of the last occurrence of an option in a command line (`-u 8`, `--users=8`)."""
    val = None
    for i, a in enumerate(cmd):
        for n in names:
            if a == n and i + 1 < len(cmd):
                val = cmd[i + 1]
            elif a.startswith(n + "=") and n.startswith("--"):
                val = a[len(n) + 1:]
    return val


@dataclass
class Run:
    """One results file and the facts the comparison reads from it."""

    label: str
    path: str
    doc: dict[str, Any]

    @property
    def summary(self) -> dict[str, Any]:
        return self.doc.get("summary") or {}

    @property
    def settings(self) -> dict[str, Any]:
        return _get(self.doc, "run", "settings", default={}) or {}

    @property
    def slos(self) -> dict[str, float]:
        return self.settings.get("slos") or {}

    @property
    def ladder(self) -> dict[str, Any] | None:
        """The ladder section (steps, saturation), or None for a run without one."""
        ld = self.doc.get("ladder")
        return ld if isinstance(ld, dict) and ld.get("steps") else None

    @property
    def ladder_steps(self) -> list[dict[str, Any]]:
        return list((self.ladder or {}).get("steps") or [])

    @property
    def verdict(self) -> dict[str, Any]:
        return _get(self.ladder, "saturation", default={}) or {}

    @property
    def offered_kind(self) -> str:
        return self.verdict.get("offered_kind") or _get(self.ladder_steps, 0, "offered_kind", default="") or ""

    def step(self, number: Any) -> dict[str, Any] | None:
        return next((s for s in self.ladder_steps if s.get("step") == number), None)

    def knee(self) -> tuple[dict[str, Any] | None, str]:
        """(the ladder step at the knee, a note). A ladder still rising at its top has no knee:
        its top step stands in for it (the knee is at or beyond it), with a note saying so."""
        if not self.ladder:
            return None, "no ladder"
        sat = self.verdict.get("saturation")
        if isinstance(sat, dict):
            return self.step(sat.get("step")), ""
        if self.still_rising():
            return self.ladder_steps[-1], "top step: no knee, still rising"
        return None, "no knee found"

    def still_rising(self) -> bool:
        return any(str(r).startswith("no knee found") for r in self.verdict.get("reasons") or [])

    # -- the facts shown side by side --

    @property
    def server(self) -> str:
        srv = _get(self.doc, "environment", "server", default={}) or {}
        kind = srv.get("kind") or "unknown server"
        ver = srv.get("version")
        if isinstance(ver, dict):
            ver = ver.get("version") or ver.get("build_info") or ver.get("sha") or next(iter(ver.values()), None)
        return f"{kind} {ver}" if ver else str(kind)

    @property
    def model(self) -> str:
        return (
            _get(self.doc, "environment", "server", "model")
            or _get(self.doc, "run", "server", "model")
            or self.settings.get("model")
            or "unknown"
        )

    @property
    def gpu(self) -> str:
        gpus = _get(self.doc, "environment", "gpus", default=[]) or []
        names = [g.get("model_name") or "GPU" for g in gpus if isinstance(g, dict)]
        if not names:
            return "-"
        counts: dict[str, int] = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        return ", ".join(f"{c}x {n}" if c > 1 else n for n, c in counts.items())

    @property
    def trace_sha(self) -> str | None:
        return _get(self.doc, "environment", "trace", "sha256")

    @property
    def trace_path(self) -> str:
        return _get(self.doc, "environment", "trace", "path") or self.settings.get("trace") or ""

    @property
    def trace(self) -> str:
        name = os.path.basename(self.trace_path) or "?"
        return f"{self.trace_sha[:12]} ({name})" if self.trace_sha else f"{name} (no sha256)"

    @property
    def command(self) -> list[str]:
        cmd = _get(self.doc, "run", "command", default=[]) or []
        return [str(c) for c in cmd] if isinstance(cmd, list) else []

    def _plan_ladder(self) -> dict[str, Any] | None:
        ld = _get(self.doc, "plan", "ladder")
        if isinstance(ld, dict):
            return ld
        ld = _get(self.ladder, "ladder")
        return ld if isinstance(ld, dict) else None

    @property
    def load(self) -> str:
        """The load plan: the ladder's kind and levels, or the loop and its users / speed."""
        ld = self._plan_ladder()
        if ld:
            levels = ",".join(_num_plain(v) for v in ld.get("steps") or [])
            arr = f" ({ld.get('arrivals')} arrivals)" if ld.get("kind") == "rate" and ld.get("arrivals") else ""
            return f"ladder {ld.get('kind')}:{levels}{arr}"
        spec = _get(self.settings, "ladder", "spec")
        if spec:
            return f"ladder {spec}"
        cmd = self.command
        think = self.settings.get("think_time") or 0
        extra = f", think time {think:g} s" if think else ""
        recorded = _get(self.doc, "run", "load") or {}  # results version 2 record the load itself
        if "--replay" in cmd or recorded.get("mode") == "replay":
            rp = self.settings.get("replay") or {}
            parts = [f"replay at {rp.get('speed', 1.0):g}x"]
            if rp.get("start_offset"):
                parts.append(f"from {rp['start_offset']:g} s")
            if rp.get("duration"):
                parts.append(f"{rp['duration']:g} s of trace")
            if (rp.get("loops") or 1) != 1:
                parts.append(f"{rp['loops']} loops")
            if rp.get("max_in_flight"):
                parts.append(f"max {rp['max_in_flight']} in flight")
            return ", ".join(parts) + extra
        users = str(recorded["users"]) if recorded.get("users") is not None else _opt(cmd, "-u", "--users")
        if users is None and cmd[:1] and cmd[0].endswith("llm-locust"):
            users = str(DEFAULT_USERS)
        return f"closed loop, {users or '?'} users{extra}"

    @property
    def timing(self) -> str:
        """How long the load was held: step length and warm-up, or the run time."""
        ld = self._plan_ladder()
        if ld:
            out = f"{_num_plain(ld.get('duration'))} s steps, {_num_plain(ld.get('warmup'))} s warm-up"
            if ld.get("requests"):
                out += f", {ld['requests']} requests"
            if ld.get("stable"):
                st = ld["stable"]
                out += f", stable window {_num_plain(st.get('window'))} s"
            return out
        recorded = _get(self.doc, "run", "load") or {}
        if "--replay" in self.command or recorded.get("mode") == "replay":
            return "the trace's own length"
        t = f"{recorded['run_time']}s" if recorded.get("run_time") else _opt(self.command, "-t", "--run-time")
        if t is None and self.command[:1] and self.command[0].endswith("llm-locust"):
            t = DEFAULT_RUN_TIME
        return f"{t}" if t else "?"

    @property
    def output_length(self) -> str:
        s = self.settings
        mt = s.get("max_tokens") or 0
        cap = s.get("max_tokens_cap") or 0
        out = f"max_tokens {mt}" if mt else "the workload's lengths"
        if cap:
            out += f", cap {cap}"
        return out

    @property
    def force_length(self) -> str:
        return "forced" if self.settings.get("force_length", True) else "not forced"

    @property
    def api(self) -> str:
        return str(self.settings.get("api") or "?")

    @property
    def slo_text(self) -> str:
        if not self.slos:
            return "-"
        return ", ".join(f"{k} {_fmt_slo(k, v)}" for k, v in self.slos.items())

    def flag_items(self) -> list[tuple[int | None, str]]:
        """The validity marks of the run (step None) and of its (ladder) steps, as texts."""
        out: list[tuple[int | None, str]] = [(None, f"run: {f}") for f in _get(self.doc, "validity", "flags", default=[]) or []]
        unit = OFFERED_UNITS.get(self.offered_kind, "")
        for s in self.ladder_steps:
            if s.get("flags"):
                out.append((s.get("step"), f"step {s.get('step')} ({_load(s.get('offered'), unit)}): {', '.join(s['flags'])}"))
        if not self.ladder:
            for s in self.doc.get("steps") or []:
                if isinstance(s, dict) and isinstance(s.get("step"), int) and s["step"] > 0 and s.get("flags"):
                    out.append((s["step"], f"step {s['step']}: {', '.join(s['flags'])}"))
        return out

    def flags(self) -> list[str]:
        return [t for _, t in self.flag_items()]


def _unique_labels(paths: list[str], labels: list[str]) -> list[str]:
    if len(labels) > len(paths):
        raise CompareError(f"{len(labels)} --label given for {len(paths)} results files")
    stems = list(labels) + [Path(p).stem for p in paths[len(labels):]]
    out = list(stems)
    for i in range(len(labels), len(paths)):
        if stems.count(stems[i]) > 1:  # two results.json from different folders: say which
            parent = Path(paths[i]).resolve().parent.name
            out[i] = f"{parent}/{stems[i]}" if parent else stems[i]
    seen: dict[str, int] = {}
    for i, lab in enumerate(out):
        if lab in seen:
            if i < len(labels):
                raise CompareError(f"label {lab!r} given twice: labels must tell the runs apart")
            seen[lab] += 1
            out[i] = f"{lab}#{seen[lab]}"
        else:
            seen[lab] = 1
    return out


def load_runs(paths: list[str], labels: list[str] | tuple[str, ...] = ()) -> list[Run]:
    """Each file through load_results (its ResultsError as it is), labelled."""
    if not paths:
        raise CompareError("no results files given")
    labs = _unique_labels([str(p) for p in paths], list(labels))
    return [Run(lab, str(p), load_results(p)) for lab, p in zip(labs, paths)]


# ---- comparability ----


@dataclass(frozen=True)
class Issue:
    what: str  # short: "different trace (sha256)", "different load plan", ...
    detail: str  # the values, by run
    severity: str = "incomparable"  # incomparable: the figures measure different things | note

    @property
    def blocking(self) -> bool:
        return self.severity == "incomparable"

    def text(self) -> str:
        return f"{'not comparable' if self.blocking else 'note'}: {self.what}: {self.detail}"


def _groups(runs: list[Run], key: Callable[[Run], Any], show: Callable[[Run], str] | None = None) -> str | None:
    """None when every run has the same key; else "A, B: value; C: other value"."""
    by: dict[Any, list[Run]] = {}
    for r in runs:
        by.setdefault(_hashable(key(r)), []).append(r)
    if len(by) < 2:
        return None
    show = show or (lambda r: str(key(r)))
    return "; ".join(f"{', '.join(r.label for r in rs)}: {show(rs[0])}" for rs in by.values())


def _hashable(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v


def check_comparable(runs: list[Run]) -> list[Issue]:
    """Why these runs' figures do not measure the same thing (incomparable), and differences
    worth knowing that do not change what was measured (notes). Server, GPU and their versions
    are what a comparison compares: never an issue."""
    if len(runs) < 2:
        return []
    issues: list[Issue] = []

    def add(what: str, key, show=None, severity="incomparable") -> None:
        d = _groups(runs, key, show)
        if d:
            issues.append(Issue(f"different {what}", d, severity))

    with_sha = [r for r in runs if r.trace_sha]
    if len({r.trace_sha for r in with_sha}) > 1:
        issues.append(Issue("different trace (sha256)", _groups(with_sha, lambda r: r.trace_sha, lambda r: r.trace) or ""))
    without = [r for r in runs if not r.trace_sha]
    if without:
        unverified = ", ".join(r.label for r in without)
        path = lambda r: os.path.abspath(r.trace_path) if r.trace_path else ""  # noqa: E731
        sha_paths = {path(r) for r in with_sha}
        d = _groups(runs, path, lambda r: r.trace_path or "?")
        # only what the sha256 check has not said already: an unverified run's file differs
        if d and (not issues or any(path(r) not in sha_paths for r in without)):
            issues.append(Issue(f"different trace (file; no sha256 recorded for {unverified})", d))
        else:
            issues.append(Issue("trace not verified", f"{unverified}: no sha256 recorded (an older results file, or the"
                                " trace could not be read): the same trace file, its content not verified", "note"))
    known_load = [r for r in runs if "?" not in r.load]
    d = _groups(known_load, lambda r: r.load)
    if d:
        issues.append(Issue("different load plan", d))
    if len(known_load) < len(runs):
        issues.append(Issue("load not checked", f"{', '.join(r.label for r in runs if r not in known_load)}:"
                            " the results do not say how many users ran", "note"))
    add("model", lambda r: r.model)
    add("api", lambda r: r.api)
    add("max_tokens", lambda r: r.output_length)
    add("force_length", lambda r: r.force_length)
    add("SLOs (goodput and max_slo_load are judged against them)", lambda r: r.slos, lambda r: r.slo_text)
    add("step timing / run time", lambda r: r.timing, severity="note")
    add("seed", lambda r: r.settings.get("seed", _get(r.doc, "run", "seed")), severity="note")
    add("llm-locust version", lambda r: _get(r.doc, "environment", "llm_locust"), severity="note")
    add("client machine", lambda r: _get(r.doc, "environment", "hostname"), severity="note")
    add("worker processes", lambda r: len(r.doc.get("workers") or []), severity="note")
    return issues


# ---- values and scores ----


@dataclass
class Cell:
    value: float | None
    score: float = 0.0
    passed: bool | None = None  # None: no pass line
    bound: str = ""  # ">=": the value is a lower bound (a ladder that had not saturated at its top)
    note: str = ""  # why there is no value, or where it was read
    flags: list[str] = field(default_factory=list)  # validity marks of the figures used
    step: int | None = None  # the ladder step it was read from (None: the whole run)


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
        st = run.step(run.verdict.get("max_slo_step")) or {}
        top = run.ladder_steps[-1]
        at_top = bool(st) and st.get("step") == top.get("step")
        return _at_step(_float(v), st, bound=">=" if at_top else "", note="the top step met them all" if at_top else "")
    if crit.scope == "summary":
        flags = list(_get(run.doc, "validity", "flags", default=[]) or [])
        if m.name.startswith("goodput") and not run.slos:
            return Cell(None, note="no SLOs", flags=flags)
        return Cell(_figure(run.summary, m), flags=flags)
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


def _figure(src: dict[str, Any], m: Metric) -> float | None:
    if m.unit == "s":
        metric, stat = m.field.split(".")[1:]
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
        for c, s in zip(row, normalise([c.value for c in row], crit.metric.higher_is_better)):
            c.score = s
            if crit.pass_line is not None:
                c.passed = c.value is not None and crit.pass_line.ok(c.value)
        cells.append(row)
    wsum = sum(c.weight for c in criteria) or 1.0
    totals = [sum(crit.weight * cells[i][j].score for i, crit in enumerate(criteria)) / wsum for j in range(len(runs))]
    rounded = [round(t, 9) for t in totals]
    ranks = [1 + sum(1 for u in rounded if u > t) for t in rounded]
    fails: list[list[str]] = [[] for _ in runs]
    for i, crit in enumerate(criteria):
        for j, c in enumerate(cells[i]):
            if c.passed is False:
                got = ("no value" + (f" ({c.note})" if c.note else "")) if c.value is None else _fmt_value(runs[j], crit.metric, c.value, c.bound)
                fails[j].append(f"{crit.name} {got}, needs {_fmt_pass(crit.metric, crit.pass_line, runs[j])}")
    marks: list[list[str]] = []
    for j, r in enumerate(runs):
        out = []
        for step, text in r.flag_items():
            used = [crit.name for i, crit in enumerate(criteria)
                    if cells[i][j].flags and (cells[i][j].step == step if step is not None else crit.scope == "summary")]
            out.append(text + (f" (scored: {', '.join(used)})" if used and step is not None else ""))
        marks.append(out)
    return Matrix(criteria, cells, totals, ranks, fails, marks)


# ---- the whole comparison ----


@dataclass
class Comparison:
    runs: list[Run]
    issues: list[Issue]
    matrix: Matrix
    weights_source: str  # the weights file, or "default criteria"

    @property
    def comparable(self) -> bool:
        return not any(i.blocking for i in self.issues)


def compare(paths: list[str], labels: list[str] | tuple[str, ...] = (), weights: str | None = None) -> Comparison:
    criteria = load_weights(weights) if weights else None  # a bad weights file is reported before the runs are read
    runs = load_runs(paths, labels)
    if criteria is None:
        criteria = default_criteria(runs)
    return Comparison(runs, check_comparable(runs), score(runs, criteria), str(weights) if weights else "default criteria")


# ---- formatting ----


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


def _fmt_value(run: Run | None, metric: Metric, v: float | None, bound: str = "") -> str:
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


def _fmt_pass(metric: Metric, pl: PassLine | None, run: Run | None = None) -> str:
    if pl is None:
        return "-"
    if metric.unit == "load":
        unit = OFFERED_UNITS.get(run.offered_kind, "") if run else ""
        return f"{pl.op} {_load(pl.threshold, unit)}"
    return f"{pl.op} {_fmt_value(None, metric, pl.threshold)}"


# ---- the sections every format renders ----


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""
    numeric_from: int = 1  # columns from this one are right-aligned in text


def _runs_table(c: Comparison) -> Table:
    runs = c.runs
    rows = [
        ["file", *[r.path for r in runs]],
        ["server", *[r.server for r in runs]],
        ["model", *[r.model for r in runs]],
        ["GPU", *[r.gpu for r in runs]],
        ["trace sha256", *[r.trace for r in runs]],
        ["api", *[r.api for r in runs]],
        ["output length", *[f"{r.output_length}, {r.force_length}" for r in runs]],
        ["load", *[r.load for r in runs]],
        ["timing", *[r.timing for r in runs]],
        ["SLOs", *[r.slo_text for r in runs]],
        ["seed", *[str(r.settings.get("seed", _get(r.doc, "run", "seed", default="?"))) for r in runs]],
        ["started (UTC)", *[str(_get(r.doc, "run", "started_at_utc", default="?")) for r in runs]],
        ["llm-locust", *[str(_get(r.doc, "environment", "llm_locust", default="?")) for r in runs]],
        ["validity", *["; ".join(r.flags()) or "ok" for r in runs]],
    ]
    return Table("Runs", ["", *[r.label for r in runs]], rows, numeric_from=99)


def _figures_table(c: Comparison) -> Table:
    runs = c.runs

    def lat(m: str, s: str) -> list[str]:
        return [_ms(_float(_get(r.summary, "latency", m, s))) for r in runs]

    def rate(key: str, unit: str) -> list[str]:
        return [f"{_num(_float(r.summary.get(key)))} {unit}" if _float(r.summary.get(key)) is not None else "-" for r in runs]

    rows = [
        ["TTFT p50", *lat("ttft", "p50")],
        ["TTFT p99", *lat("ttft", "p99")],
        ["ITL p50", *lat("itl", "p50")],
        ["ITL p99", *lat("itl", "p99")],
        ["TPOT p50", *lat("tpot", "p50")],
        ["E2E p99", *lat("e2e", "p99")],
        ["output tokens/s", *rate("output_tokens_per_s", "tok/s")],
        ["requests/s", *rate("requests_per_s", "req/s")],
        ["goodput", *[
            f"{_num(r.summary.get('goodput_requests_per_s'))} req/s, {_num(r.summary.get('goodput_tokens_per_s'))} tok/s"
            if r.slos else "- (no SLOs)" for r in runs]],
        ["error rate", *[_pct(_float(r.summary.get("error_rate"))) for r in runs]],
        ["requests ok / sent", *[f"{r.summary.get('ok', '?')} / {r.summary.get('sent', '?')}" for r in runs]],
    ]
    if any(r.ladder for r in runs):
        rows += [
            ["saturation point", *[_saturation_text(r) for r in runs]],
            ["tok/s at the knee", *[_knee_tps(r) for r in runs]],
            ["max SLO load", *[_max_slo_text(r) for r in runs]],
        ]
    return Table("Key figures (whole run; ladders: the knee and the SLO-limited load)", ["", *[r.label for r in runs]], rows)


def _saturation_text(r: Run) -> str:
    if not r.ladder:
        return "- (no ladder)"
    unit = OFFERED_UNITS.get(r.offered_kind, "")
    sat = r.verdict.get("saturation")
    if isinstance(sat, dict):
        by = f", by {r.verdict['knee_by']}" if r.verdict.get("knee_by") else ""
        return f"{_load(sat.get('offered'), unit)} (step {sat.get('step')}{by})"
    if r.still_rising():
        return f">= {_load(_get(r.ladder_steps, -1, 'offered'), unit)} (still rising)"
    return "none found"


def _knee_tps(r: Run) -> str:
    st, note = r.knee()
    if st is None:
        return "-"
    v = _float(st.get("output_tokens_per_s"))
    return f"{_num(v)} tok/s" + (" (top step)" if note else "")


def _max_slo_text(r: Run) -> str:
    if not r.ladder:
        return "- (no ladder)"
    if not r.slos:
        return "- (no SLOs)"
    cell = read_value(r, Criterion(METRICS["max_slo_load"], "run", 1.0))
    if cell.value == 0 and cell.note:
        return "none (no step met every SLO)"
    return _fmt_value(r, METRICS["max_slo_load"], cell.value, cell.bound)


def _steps_table(c: Comparison) -> Table | None:
    ladders = [r for r in c.runs if r.ladder]
    if not ladders:
        return None
    kinds = {r.offered_kind for r in ladders}
    unit = OFFERED_UNITS.get(next(iter(kinds)), "") if len(kinds) == 1 else ""
    levels = sorted({float(s["offered"]) for r in ladders for s in r.ladder_steps if _float(s.get("offered")) is not None})
    rows = []
    for lv in levels:
        row = [_load(lv, unit) if unit else _num_plain(lv)]
        for r in c.runs:
            st = next((s for s in r.ladder_steps if _float(s.get("offered")) == lv), None)
            if st is None:
                row.append("-")
                continue
            cell = f"{_num(_float(st.get('output_tokens_per_s')))} / {_ms(_float(_get(st, 'latency', 'ttft', 'p99')))}"
            knee, _ = r.knee()
            if knee is not None and knee.get("step") == st.get("step"):
                cell += " [knee]"
            if st.get("flags"):
                cell += f" ({', '.join(st['flags'])})"
            if st.get("slo_broken"):
                cell += " [SLO broken]"
            row.append(cell)
        rows.append(row)
    return Table("Ladder steps: output tok/s / TTFT p99", ["load", *[r.label for r in c.runs]], rows)


def _cell_text(run: Run, crit: Criterion, cell: Cell) -> str:
    val = _fmt_value(run, crit.metric, cell.value, cell.bound) if cell.value is not None else f"n/a ({cell.note})"
    if cell.value is not None and crit.scope == "knee" and cell.note:
        val += " (top step)"
    out = f"{val} · {cell.score:.2f}"
    if cell.passed is not None:
        out += " · " + ("pass" if cell.passed else "FAIL")
    if cell.flags and crit.scope != "summary":
        out += " *"
    return out


def _matrix_table(c: Comparison) -> Table:
    m = c.matrix
    rows = []
    for i, crit in enumerate(m.criteria):
        ref = next((r for r in c.runs if r.ladder), c.runs[0])
        rows.append([
            crit.name,
            "higher" if crit.metric.higher_is_better else "lower",
            _num_plain(crit.weight),
            _fmt_pass(crit.metric, crit.pass_line, ref),
            *[_cell_text(r, crit, m.cells[i][j]) for j, r in enumerate(c.runs)],
        ])
    rows.append(["weighted total", "", _num_plain(sum(x.weight for x in m.criteria)), "",
                 *[f"{t:.3f}" for t in m.totals]])
    rows.append(["rank", "", "", "", *[str(k) for k in m.ranks]])
    note = ("each cell: value · score · pass line; score: best run 1.0, others value/best (higher is better) or "
            "best/value (lower is better), no value 0; total = sum(weight x score) / sum(weight); "
            "* the figure comes from a ladder step with validity flags")
    return Table(f"Decision matrix ({c.weights_source})", ["criterion", "better", "weight", "pass line",
                                                            *[r.label for r in c.runs]], rows, note=note, numeric_from=2)


def _ranking_table(c: Comparison) -> Table:
    m = c.matrix
    order = sorted(range(len(c.runs)), key=lambda j: (m.ranks[j], j))
    rows = []
    for j in order:
        r = c.runs[j]
        result = "passes all" if not m.fails[j] else "fails: " + "; ".join(m.fails[j])
        if not any(cr.pass_line for cr in m.criteria):
            result = "no pass lines"
        rows.append([str(m.ranks[j]), r.label, f"{m.totals[j]:.3f}", result, "; ".join(m.marks[j]) or "ok"])
    return Table("Ranking", ["rank", "run", "total", "pass lines", "validity"], rows, numeric_from=99)


def sections(c: Comparison) -> list[Table]:
    out = [_runs_table(c), _figures_table(c)]
    st = _steps_table(c)
    if st is not None:
        out.append(st)
    out += [_matrix_table(c), _ranking_table(c)]
    return out


def _verdict_line(c: Comparison) -> str:
    m = c.matrix
    best = [c.runs[j].label for j in range(len(c.runs)) if m.ranks[j] == 1]
    line = f"best weighted total: {', '.join(best)}"
    j0 = m.ranks.index(1)
    if m.fails[j0]:
        line += f" (but it fails {len(m.fails[j0])} pass line{'s' if len(m.fails[j0]) > 1 else ''})"
    passing = [c.runs[j].label for j in sorted(range(len(c.runs)), key=lambda j: m.ranks[j]) if not m.fails[j]]
    if any(cr.pass_line for cr in m.criteria):
        line += f"; passing every pass line: {', '.join(passing) if passing else 'none'}"
    if not c.comparable:
        line += "; WARNING: the runs are not comparable (see above)"
    return line


def _comparability_lines(c: Comparison) -> tuple[str, list[str]]:
    if len(c.runs) < 2:
        return "one run: nothing to compare it with", []
    blocking = [i for i in c.issues if i.blocking]
    head = ("WARNING: these runs are NOT comparable; their figures measure different things" if blocking
            else "comparable: no difference in trace, load plan, model, api, output lengths or SLOs")
    return head, [i.text() for i in blocking] + [i.text() for i in c.issues if not i.blocking]


# ---- renderers ----


def _text_table(t: Table) -> str:
    cols = len(t.header)
    widths = [max(len(t.header[k]), *(len(r[k]) for r in t.rows)) if t.rows else len(t.header[k]) for k in range(cols)]

    def line(cells: list[str]) -> str:
        parts = [
            (s.rjust(widths[k]) if k >= t.numeric_from else s.ljust(widths[k])) for k, s in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    out = [line(t.header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in t.rows]
    return "\n".join(out)


def render_text(c: Comparison) -> str:
    out = [f"llm-locust compare: {len(c.runs)} run{'s' if len(c.runs) != 1 else ''}", ""]
    head, lines = _comparability_lines(c)
    out.append(head)
    out += [f"  ! {x}" if x.startswith("not comparable") else f"  - {x}" for x in lines]
    for t in sections(c):
        out += ["", t.title, "", _text_table(t)]
        if t.note:
            out.append(t.note)
    out += ["", _verdict_line(c)]
    return "\n".join(out) + "\n"


def _md(s: str) -> str:
    return (
        s.replace("&", "&amp;").replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
        .replace("\r", " ").replace("\n", " ").replace("*", "\\*").replace("`", "\\`")
    )


def _md_table(t: Table) -> str:
    align = ["---:" if k >= t.numeric_from else "---" for k in range(len(t.header))]
    out = ["| " + " | ".join(_md(h) for h in t.header) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(_md(x) for x in r) + " |" for r in t.rows]
    return "\n".join(out)


def render_markdown(c: Comparison) -> str:
    out = [f"# llm-locust compare: {_md(', '.join(r.label for r in c.runs))}", ""]
    head, lines = _comparability_lines(c)
    if any(i.blocking for i in c.issues):
        out.append(f"> **{_md(head)}**")
        out.append(">")
        out += [f"> - {_md(x)}" for x in lines]
    else:
        out.append(f"_{_md(head)}_")
        out += [""] + [f"- {_md(x)}" for x in lines] if lines else []
    for t in sections(c):
        out += ["", f"## {_md(t.title)}", "", _md_table(t)]
        if t.note:
            out += ["", _md(t.note)]
    out += ["", f"**{_md(_verdict_line(c))}**"]
    return "\n".join(out) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em;color:#1b1b1b}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em;vertical-align:top}
th{background:#f2f2f2;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.fail{background:#fde2e1}.pass{background:#e3f5e1}
.warn{border:2px solid #c0392b;background:#fdecea;padding:.6em 1em;margin:1em 0}
.ok{border:1px solid #9bc59d;background:#eef8ee;padding:.6em 1em;margin:1em 0}
.note{color:#555;font-size:.85em}
"""


def _h(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _html_table(t: Table, matrix: bool = False) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{_h(h)}</th>" for h in t.header) + "</tr>"]
    for r in t.rows:
        cells = []
        for k, x in enumerate(r):
            cls = []
            if k >= t.numeric_from:
                cls.append("num")
            if matrix and k >= 4:
                if "· FAIL" in x:
                    cls.append("fail")
                elif "· pass" in x:
                    cls.append("pass")
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{_h(x)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def render_html(c: Comparison) -> str:
    """A self-contained page: inline CSS, no script, no external resource; every text escaped."""
    title = f"llm-locust compare: {', '.join(r.label for r in c.runs)}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_h(title)}</h1>",
    ]
    head, lines = _comparability_lines(c)
    cls = "warn" if any(i.blocking for i in c.issues) else "ok"
    out.append(f'<div class="{cls}"><strong>{_h(head)}</strong>')
    if lines:
        out.append("<ul>" + "".join(f"<li>{_h(x)}</li>" for x in lines) + "</ul>")
    out.append("</div>")
    for t in sections(c):
        out.append(f"<h2>{_h(t.title)}</h2>")
        out.append(_html_table(t, matrix=t.title.startswith("Decision matrix")))
        if t.note:
            out.append(f'<p class="note">{_h(t.note)}</p>')
    out.append(f"<p><strong>{_h(_verdict_line(c))}</strong></p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


RENDERERS: dict[str, Callable[[Comparison], str]] = {"text": render_text, "markdown": render_markdown, "html": render_html}


# ---- the command ----


def write_atomic(path: str | Path, text: str) -> None:
    """The whole file or nothing: a temporary file beside it, then os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # a report to share: the usual permissions, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-locust compare",
        description="Line up results files side by side and write a weighted decision matrix "
        "(docs/compare.md). Exit status 0: written; 2: bad input, or runs not comparable with --strict.",
    )
    p.add_argument("results", nargs="+", metavar="RESULTS.json", help="results files of `llm-locust run --results`")
    p.add_argument("--weights", metavar="W.yaml", help="criteria: metric, weight, pass line, scope (default: a built-in set)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="text (default), markdown or html; with -o, taken from its extension when not given")
    p.add_argument("-o", "--output", metavar="OUT", help="write here (atomically) instead of standard output")
    p.add_argument("--label", action="append", default=[], metavar="NAME",
                   help="a name per results file, in order (default: the file name)")
    p.add_argument("--strict", action="store_true", help="refuse (exit 2) when the runs are not comparable")
    return p


def _format_for(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    ext = Path(args.output).suffix.lower() if args.output else ""
    return {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}.get(ext, "text")


def main(argv: list[str] | None = None) -> int:
    """`llm-locust compare`: 0 when the comparison was written, 2 on bad input (one message on
    stderr, nothing written) or, with --strict, when the runs are not comparable."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else 2
    prog = "llm-locust compare"
    try:
        cmp = compare(args.results, args.label, args.weights)
    except (ResultsError, CompareError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    blocking = [i for i in cmp.issues if i.blocking]
    if blocking and args.strict:
        print(f"{prog}: error: the runs are not comparable (--strict):", file=sys.stderr)
        for i in blocking:
            print(f"  - {i.text()}", file=sys.stderr)
        return 2
    fmt = _format_for(args)
    text = RENDERERS[fmt](cmp)
    if args.output:
        try:
            write_atomic(args.output, text)
        except OSError as e:
            print(f"{prog}: error: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
            return 2
        for i in blocking:
            print(f"{prog}: warning: {i.text()}", file=sys.stderr)
        print(f"{prog}: wrote {args.output} ({fmt})", file=sys.stderr)
    else:
        if blocking and fmt != "text":
            for i in blocking:
                print(f"{prog}: warning: {i.text()}", file=sys.stderr)
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
