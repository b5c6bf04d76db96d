"""The sections every format renders, as tables of texts: the runs, the key figures, the ladder
steps, the decision matrix and the ranking; and the comparability and verdict lines."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from llm_locust.analysis.efficiency import covers, frontier_verdict
from llm_locust.analysis.repeats import HEADLINE, noise_verdicts
from llm_locust.analysis.steps import OFFERED_UNITS
from llm_locust.report import plots
from llm_locust.report.compare.comparison import Comparison
from llm_locust.report.compare.format import _fmt_pass, _fmt_value, _load, _ms, _num, _num_plain, _pct
from llm_locust.report.compare.matrix import Cell, _float, read_value
from llm_locust.report.compare.metric_table import METRICS
from llm_locust.report.compare.runs import Run, _get
from llm_locust.report.compare.weights import Criterion
from llm_locust.safe.terminal import terminal_safe
from llm_locust.schema import Figures, LadderStep


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""
    numeric_from: int = 1  # columns from this one are right-aligned in text
    svg: str = ""  # a plot drawn under the table in HTML (inline SVG from report/plots.py); text and Markdown skip it


def _runs_table(c: Comparison) -> Table:
    runs = c.runs
    rows = [
        ["file", *[r.path for r in runs]],
        *([["tool", *[r.tool for r in runs]]] if any(getattr(r, "foreign", None) for r in runs) else []),
        ["server", *server_texts(runs)],
        ["model", *[r.model for r in runs]],
        ["GPU", *[r.gpu for r in runs]],
        ["trace sha256", *[r.trace for r in runs]],
        ["api", *[r.api for r in runs]],
        ["output length", *[f"{r.output_length}, {r.force_length}" for r in runs]],
        ["load", *[r.load for r in runs]],
        ["timing", *[r.timing for r in runs]],
        ["SLOs", *[r.slo_text for r in runs]],
        ["seed", *[str(r.settings.get("seed", r.doc["run"].get("seed", "?"))) for r in runs]],
        ["started (UTC)", *[str(r.doc["run"].get("started_at_utc", "?")) for r in runs]],
        ["llm-locust", *[str((r.doc.get("environment") or {}).get("llm_locust", "-")) for r in runs]],
        ["validity", *[_validity(r) for r in runs]],
    ]
    return Table("Runs", ["", *[r.label for r in runs]], rows, numeric_from=99)


class _Footnotes:
    """The footnotes of the key figures: how another tool measures a figure that means the same as
    ours (its TTFT starts before the connect ...), numbered once per tool and text."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, tool: str, text: str) -> str:
        line = f"{tool}: {text}"
        if line not in self.texts:
            self.texts.append(line)
        return f"[{self.texts.index(line) + 1}]"

    def note(self) -> str:
        return "\n".join(f"[{i}] {t}" for i, t in enumerate(self.texts, 1))


def _mapped(r: Run, figure: str, stat: str, text: str, foot: _Footnotes) -> str:
    """A figure's cell: ours as it is; another tool's as mapped (a footnote where it is measured a
    little differently), or "not comparable: ..." where its figure of that name means another thing."""
    f = getattr(r, "foreign", None)
    if f is None:
        return text
    mark = f.mark(figure, stat)
    if mark:
        return f"not comparable: {mark}"
    caveat = f.caveat(figure, stat)
    return f"{text} {foot.ref(f.tool, caveat)}" if caveat and text != "-" else text


def _failures_text(r: Run) -> str:
    """Failed requests and their kinds: ours by outcome, another tool's by error class."""
    s = r.summary
    failed = s.get("failed")
    if not failed:
        return "0" if failed is not None else "-"
    outcomes = {k: v for k, v in (s.get("outcomes") or {}).items() if k not in ("ok", "cancelled") and v}
    if not outcomes:
        outcomes = {}
        for texts in (s.get("errors") or {}).values():
            for text, n in (texts or {}).items():
                name = str(text).split(":", 1)[0]
                outcomes[name] = outcomes.get(name, 0) + n
    kinds = ", ".join(f"{k} {v}" for k, v in outcomes.items())
    return f"{failed} ({kinds})" if kinds else str(failed)


# the figures read by name of a run's summary and of its ladder steps: through `_figure` and
# `_step_figure`, typed by the schema's `Figures` and `LadderStep`, so that a renamed figure fails
# mypy here
SummaryFigure = Literal[
    "output_tokens_per_s",
    "requests_per_s",
    "tokens_out",
    "tokens_in",
    "duration_s",
    "concurrency",
    "error_rate",
    "goodput_requests_per_s",
    "goodput_tokens_per_s",
]
StepFigure = Literal["output_tokens_per_s"]


def _figure(summary: Mapping[str, Any], key: SummaryFigure) -> Any:
    """summary.get(key), by a name of `Figures`."""
    fig = cast(Figures, summary)
    return fig[key] if key in fig else None


def _step_figure(step: Mapping[str, Any], key: StepFigure) -> Any:
    """step.get(key), by a name of `LadderStep`."""
    st = cast(LadderStep, step)
    return st[key] if key in st else None


def _validity(r: Run) -> str:
    if getattr(r, "foreign", None):
        return "not judged (another tool's run)"
    return "; ".join(r.flags()) or "ok"


def _figures_table(c: Comparison) -> Table:
    runs = c.runs
    foot = _Footnotes()
    mixed = any(getattr(r, "foreign", None) for r in runs)

    def lat(m: str, s: str) -> list[str]:
        return [_mapped(r, m, s, _ms(_float(_get(r.summary, "latency", m, s))), foot) for r in runs]

    def rate(key: SummaryFigure, unit: str) -> list[str]:
        return [
            _mapped(
                r, key, "", f"{_num(v)} {unit}" if (v := _float(_figure(r.summary, key))) is not None else "-", foot
            )
            for r in runs
        ]

    goodput = [
        _mapped(
            r,
            "goodput",
            "",
            f"{_num(_figure(r.summary, 'goodput_requests_per_s'))} req/s, "
            f"{_num(_figure(r.summary, 'goodput_tokens_per_s'))} tok/s"
            if r.slos
            else "- (no SLOs)",
            foot,
        )
        for r in runs
    ]
    counts = [
        [
            "error rate",
            *[_mapped(r, "error_rate", "", _pct(_float(_figure(r.summary, "error_rate"))), foot) for r in runs],
        ],
        ["requests ok / sent", *[f"{r.summary.get('ok', '?')} / {r.summary.get('sent', '?')}" for r in runs]],
    ]
    if not mixed:
        rows = [
            ["TTFT p50", *lat("ttft", "p50")],
            ["TTFT p99", *lat("ttft", "p99")],
            ["ITL p50", *lat("itl", "p50")],
            ["ITL p99", *lat("itl", "p99")],
            ["TPOT p50", *lat("tpot", "p50")],
            ["E2E p99", *lat("e2e", "p99")],
            ["output tokens/s", *rate("output_tokens_per_s", "tok/s")],
            ["requests/s", *rate("requests_per_s", "req/s")],
            ["goodput", *goodput],
            *counts,
        ]
    else:  # another tool's run: every figure it maps, in our definitions (docs/compare.md, "Other tools")
        rows = [[f"{name} {s}", *lat(m, s)] for name, m in _LATENCY_ROWS for s in ("p50", "p99", "mean")]
        rows += [
            ["output tokens/s", *rate("output_tokens_per_s", "tok/s")],
            ["requests/s", *rate("requests_per_s", "req/s")],
            ["goodput", *goodput],
            *counts,
            ["failed", *[_failures_text(r) for r in runs]],
            ["output tokens", *rate("tokens_out", "tok")],
            ["input tokens", *rate("tokens_in", "tok")],
            ["duration", *rate("duration_s", "s")],
            ["concurrency (mean)", *rate("concurrency", "")],
        ]
    if any(r.ladder for r in runs):
        rows += [
            ["saturation point", *[_saturation_text(r) for r in runs]],
            ["tok/s at the knee", *[_knee_tps(r) for r in runs]],
            ["max SLO load", *[_max_slo_text(r) for r in runs]],
        ]
    if any(_agents(r) for r in runs):
        rows.append(["agents under tier", *[_agents_text(r) for r in runs]])
    note = foot.note()
    if mixed:
        note = "\n".join(x for x in (_OTHER_TOOLS_NOTE, note) if x)
    return Table(
        "Key figures (whole run; ladders: the knee and the SLO-limited load)",
        ["", *[r.label for r in runs]],
        rows,
        note=note,
    )


_LATENCY_ROWS = (("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("inter-chunk", "inter_chunk"), ("E2E", "e2e"))
_OTHER_TOOLS_NOTE = (
    "other tools' figures in our definitions (docs/metrics.md), read from their files; "
    "'not comparable' where theirs of that name means another thing, '-' where the file has none; "
    "their times are taken by their event loop, ours at the kernel's receive time (docs/compare.md, Other tools)"
)


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
    v = _float(_step_figure(st, "output_tokens_per_s"))
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


def _agents(r: Run) -> dict[str, Any] | None:
    """The run's agents-under-a-tier verdict (ladder.sla.agents, --agent-tier), or None."""
    a = _get(r.ladder, "sla", "agents")
    return a if isinstance(a, dict) else None


def _agents_text(r: Run) -> str:
    """Agents meeting the tier, per GPU and per MW, and the tier: runs with different tiers
    are not comparable figure to figure, so the tier is named in the cell."""
    a = _agents(r)
    if a is None:
        return "- (no --agent-tier)"
    t = a.get("tier") or {}
    tier = f"TTFT p50 <= {_ms(_float(t.get('ttft_s')))}, >= {_num(_float(t.get('speed_tokens_per_s')))} tok/s"
    tier += f", {_pct(_float(t.get('share')))}"
    if a.get("agents") is None:
        return f"none ({tier})"
    parts = [f"{_num(_float(a['agents']))} agents"]
    if a.get("per_gpu") is not None:
        parts.append(f"{_num(_float(a['per_gpu']))}/GPU")
    if a.get("per_megawatt") is not None:
        parts.append(f"{_num(_float(a['per_megawatt']))}/MW")
    return ", ".join(parts) + f" ({tier})"


def _steps_table(c: Comparison) -> Table | None:
    ladders = [r for r in c.runs if r.ladder]
    if not ladders:
        return None
    kinds = {r.offered_kind for r in ladders}
    unit = OFFERED_UNITS.get(next(iter(kinds)), "") if len(kinds) == 1 else ""
    levels = sorted(
        {float(s["offered"]) for r in ladders for s in r.ladder_steps if _float(s.get("offered")) is not None}
    )
    rows = []
    for lv in levels:
        row = [_load(lv, unit) if unit else _num_plain(lv)]
        for r in c.runs:
            st = next((s for s in r.ladder_steps if _float(s.get("offered")) == lv), None)
            if st is None:
                row.append("-")
                continue
            tps = _float(_step_figure(st, "output_tokens_per_s"))
            cell = f"{_num(tps)} / {_ms(_float(_get(st, 'latency', 'ttft', 'p99')))}"
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


def _front_text(r: Run) -> str:
    pts = r.frontier
    if not pts:
        why = (r.verdicts.get("notes") if r.verdicts else None) or []
        return (
            "- ("
            + (
                "no GPU count: give --gpus"
                if any("no GPU count" in n for n in why)
                else "no ladder"
                if not r.ladder
                else "no step with tok/s/GPU and TPOT"
            )
            + ")"
        )
    return ", ".join(f"{_num(x)} / {_num(y)}" for x, y in pts)


def frontier_pairs(c: Comparison) -> list[tuple[Run, Run, str]]:
    """(a, b, verdict of a's frontier against b's) for each pair of runs, in the order given."""
    runs = c.runs
    return [
        (runs[i], runs[j], frontier_verdict(runs[i].frontier, runs[j].frontier))
        for i in range(len(runs))
        for j in range(i + 1, len(runs))
    ]


def _pair_text(a: Run, b: Run, v: str) -> str:
    if v == "dominates":
        return (
            f"{a.label} dominates {b.label}: every point of {b.label}'s frontier is matched or beaten "
            f"by one of {a.label}'s"
        )
    if v == "dominated":
        return (
            f"{b.label} dominates {a.label}: every point of {a.label}'s frontier is matched or beaten "
            f"by one of {b.label}'s"
        )
    if v == "equal":
        return "equal frontiers"
    if v == "crossing":
        return (
            f"crossing: neither dominates; which is better depends on the tokens/s per user wanted "
            f"({_crossing_detail(a, b)})"
        )
    missing = ", ".join(r.label for r in (a, b) if not r.frontier)
    return f"n/a: no frontier for {missing}"


def _crossing_detail(a: Run, b: Run) -> str:
    """Where each run is ahead: the interactivity ranges of the frontier points the other does not cover."""
    parts = []
    for x, y in ((a, b), (b, a)):
        ys = [p[1] for p in x.frontier if not covers(y.frontier, p)]
        if ys:
            parts.append(
                f"{x.label} ahead at {_num(min(ys))}-{_num(max(ys))} tok/s/user"
                if len(ys) > 1
                else f"{x.label} ahead at {_num(ys[0])} tok/s/user"
            )
    return "; ".join(parts)


def dominance_line(c: Comparison) -> str:
    """One line: the run whose frontier dominates every other's, or the pairs' verdicts ("" when
    fewer than two runs have a frontier)."""
    with_front = [r for r in c.runs if r.frontier]
    if len(with_front) < 2:
        return ""
    pairs = [(a, b, v) for a, b, v in frontier_pairs(c) if v != "n/a"]
    for r in with_front:
        if all((v == "dominates" and a is r) or (v == "dominated" and b is r) for a, b, v in pairs if r in (a, b)):
            return f"Pareto frontier: {r.label} dominates {', '.join(x.label for x in with_front if x is not r)}"
    return "Pareto frontier: " + "; ".join(
        f"{a.label} dominates {b.label}"
        if v == "dominates"
        else f"{b.label} dominates {a.label}"
        if v == "dominated"
        else f"{a.label} and {b.label} {'equal' if v == 'equal' else 'cross'}"
        for a, b, v in pairs
    )


def frontier_svg(c: Comparison) -> str:
    """The runs' frontiers on one plot (inline SVG), or "" when no run has one."""
    if not any(r.frontier for r in c.runs):
        return ""
    fronts = []
    for i, r in enumerate(c.runs):
        rows = [
            s
            for s in (r.verdicts.get("steps") if r.verdicts else None) or []
            if s.get("output_tokens_per_s_per_gpu") and s.get("interactivity")
        ]
        pts = [(s["output_tokens_per_s_per_gpu"], s["interactivity"]) for s in rows]
        knee, _note = r.knee()
        ki = next((j for j, s in enumerate(rows) if knee is not None and s.get("step") == knee.get("step")), None)
        fronts.append(
            plots.Front(
                f"run{i}",
                r.label,
                pts,
                frontier=r.frontier,
                knee=ki,
                flagged=[j for j, s in enumerate(rows) if s.get("flags")],
            )
        )
    return plots.pareto("frontiers", fronts, title="Pareto frontiers: throughput per GPU against interactivity")


def _frontier_tables(c: Comparison) -> list[Table]:
    """Each run's frontier, GPUs and price side by side; then the dominance verdict of each pair
    (with the frontiers' plot for HTML)."""
    if not any(r.verdicts and r.verdicts.get("steps") for r in c.runs):
        return []
    rows = [
        ["frontier (tok/s/GPU / tok/s/user)", *[_front_text(r) for r in c.runs]],
        [
            "GPUs",
            *[str((g := r.verdicts.get("gpus") if r.verdicts else None) and g.get("gpus") or "-") for r in c.runs],
        ],
        ["price per GPU-hour", *[f"${r.price:g}" if r.price is not None else "-" for r in c.runs]],
    ]
    note = (
        "a frontier point: a ladder step no other step of the run beats in both output tok/s per GPU and tok/s per "
        "user (1 / TPOT p50), listed by tok/s per GPU (docs/verdicts.md)"
    )
    out = [
        Table(
            "Pareto frontiers: output tok/s per GPU / tok/s per user",
            ["", *[r.label for r in c.runs]],
            rows,
            note=note,
            numeric_from=99,
        )
    ]
    if len(c.runs) > 1:
        pairs = [[f"{a.label} vs {b.label}", _pair_text(a, b, v)] for a, b, v in frontier_pairs(c)]
        out.append(
            Table(
                "Frontier dominance",
                ["runs", "verdict"],
                pairs,
                numeric_from=99,
                svg=frontier_svg(c),
                note="run A dominates B when every point of B's frontier is matched or beaten in both "
                "figures by a point of A's; crossing: each is ahead somewhere",
            )
        )
    else:
        out[0].svg = frontier_svg(c)
    return out


_VERDICT_WHY = (
    ("joules", ("energy",)),
    ("usd", ("price", "GPU count")),
    ("per_gpu", ("GPU count",)),
    ("total", ("input token",)),
)


def _why_none(run: Run, crit: Criterion, cell: Cell) -> str:
    """Why a cell has no value: the matrix's note, else for a verdict figure the verdicts' note."""
    if cell.note:
        return cell.note
    for part, words in _VERDICT_WHY:
        if part in crit.metric.name:
            for n in (run.verdicts.get("notes") if run.verdicts else None) or []:
                if any(w in n for w in words):
                    return n.split(":")[0]
    return "no value"


def _cell_text(run: Run, crit: Criterion, cell: Cell) -> str:
    val = (
        _fmt_value(run, crit.metric, cell.value, cell.bound)
        if cell.value is not None
        else f"n/a ({_why_none(run, crit, cell)})"
    )
    if cell.value is not None and crit.scope == "knee" and cell.note:
        val += " (top step)"
    if cell.value and cell.half is not None:  # the 95% interval (docs/compare.md "Noise")
        val += f" ±{cell.half / abs(cell.value):.1%}" if math.isfinite(cell.half) else " (too few samples)"
    out = f"{val} · {cell.score:.2f}"
    if cell.judged:
        out += f" · {cell.judged}"
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
        rows.append(
            [
                crit.name,
                "higher" if crit.metric.higher_is_better else "lower",
                _num_plain(crit.weight),
                _fmt_pass(crit.metric, crit.pass_line, ref),
                *[_cell_text(r, crit, m.cells[i][j]) for j, r in enumerate(c.runs)],
            ]
        )
    rows.append(
        ["weighted total", "", _num_plain(sum(x.weight for x in m.criteria)), "", *[f"{t:.3f}" for t in m.totals]]
    )
    rows.append(["rank", "", "", "", *[str(k) for k in m.ranks]])
    note = (
        "each cell: value · score · pass line; score: best run 1.0, others value/best (higher is better) or "
        "best/value (lower is better), no value 0; total = sum(weight x score) / sum(weight); "
        "* the figure comes from a ladder step with validity flags; ±: half the figure's 95% interval; "
        "within noise / significant: against the best run, by the interval of the difference "
        "(sqrt(h_a^2 + h_b^2)); a figure within noise of the best scores as the best"
    )
    return Table(
        f"Decision matrix ({c.weights_source})",
        ["criterion", "better", "weight", "pass line", *[r.label for r in c.runs]],
        rows,
        note=note,
        numeric_from=2,
    )


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


def _repeats_table(c: Comparison) -> Table | None:
    """Runs of `llm-locust run --repeat N`: each headline figure's mean +- its 95% half width, and
    for each later run against the first, Welch's verdict: differs (better / worse) or within noise."""
    reps = [_dict_or_none(r.doc.get("repeats")) for r in c.runs]
    if sum(x is not None for x in reps) < 1:
        return None
    header = [
        "figure",
        *[f"{r.label} (n={x['count']})" if x else f"{r.label} (once)" for r, x in zip(c.runs, reps, strict=True)],
    ]
    verdicts = {}
    for j in range(1, len(c.runs)):
        first, other = reps[0], reps[j]
        if first and other:
            header.append(f"{c.runs[j].label} vs {c.runs[0].label}")
            verdicts[j] = {v["figure"]: v for v in noise_verdicts(first, other)}
    rows = []
    for name, _, _ in HEADLINE:
        figs = [((x or {}).get("figures") or {}).get(name) for x in reps]
        if not any(figs):
            continue
        m = METRICS[name]  # every headline figure is a metric
        row = [name]
        for r, f in zip(c.runs, figs, strict=True):
            if not f:
                row.append("-")
            elif f.get("half_width") is None:
                row.append(_fmt_value(r, m, f.get("mean")))
            else:
                row.append(f"{_fmt_value(r, m, f['mean'])} +-{_fmt_value(r, m, f['half_width'])}")
        for vs in verdicts.values():
            v = vs.get(name)
            row.append(
                "-" if v is None else v["verdict"] + (f" ({v['direction']})" if v["differs"] and v["direction"] else "")
            )
        rows.append(row)
    note = (
        "mean +- half width of the 95% t-interval over the repetitions; differs: Welch's t-test at 95% "
        "(docs/verdicts.md); within noise: the difference is not beyond the runs' noise"
    )
    return Table("Repetitions (95% intervals)", header, rows, note=note)


def _dict_or_none(v: Any) -> dict[str, Any] | None:
    """A results section that should be a mapping; None when absent or anything else."""
    return v if isinstance(v, dict) else None


def _stability_table(c: Comparison) -> Table | None:
    """One row per stability verdict any run has (burst, soak): PASS or FAIL and its figure, per run."""
    docs = [_dict_or_none(r.doc.get("stability")) or {} for r in c.runs]
    plans = [k for k in ("burst", "overlong", "kv_pressure", "soak") if any(isinstance(d.get(k), dict) for d in docs)]
    if not plans:
        return None

    def cell(d: dict, plan: str) -> str:
        v = d.get(plan)
        if not isinstance(v, dict):
            return "n/a"
        verdict = "PASS" if v.get("passed") else "FAIL"
        if plan == "burst":
            rec = v.get("recovery_s")
            return f"{verdict} · recovery {'never' if rec is None else f'{rec:g} s'}"
        if plan == "kv_pressure":
            load = v.get("first_load")
            return f"{verdict} · preemption from {'never' if load is None else f'{load:g}'}"
        if plan == "overlong":
            p50 = (v.get("others") or {}).get("ttft_p50")
            return f"{verdict} · {v.get('classified')}/{v.get('overlong')} rejected as overlong, others TTFT p50 " + (
                "-" if p50 is None else f"{p50 * 1000:,.1f} ms"
            )
        rel = (v.get("ttft_drift") or {}).get("relative_per_hour")
        return (
            f"{verdict} · TTFT drift {'-' if rel is None else f'{rel:+.1%}/h'}, "
            f"bursts {len(v.get('error_bursts') or [])}"
        )

    rows = [[plan, *[cell(d, plan) for d in docs]] for plan in plans]
    return Table(
        "Stability verdicts",
        ["plan", *[r.label for r in c.runs]],
        rows,
        note='docs/verdicts.md, "Stability": burst = seconds until TTFT p50 is back within 10% of the base; '
        "soak = drift per hour and error bursts",
        numeric_from=99,
    )


def sections(c: Comparison) -> list[Table]:
    out = [_runs_table(c), _figures_table(c)]
    rt = _repeats_table(c)
    if rt is not None:
        out.append(rt)
    st = _steps_table(c)
    if st is not None:
        out.append(st)
    stab = _stability_table(c)
    if stab is not None:
        out.append(stab)
    out += _frontier_tables(c)
    out += [_matrix_table(c), _ranking_table(c)]
    return [_printable(t) for t in out]


def _printable(t: Table) -> Table:
    """The table with every text terminal-safe (safe/terminal.py): a file's model id, server
    version or error text shows its escapes as text, in every format; a cell stays one line."""
    return replace(
        t,
        title=terminal_safe(t.title),
        header=[terminal_safe(h) for h in t.header],
        rows=[[terminal_safe(x) for x in r] for r in t.rows],
        note=terminal_safe(t.note, lines=True),
    )


def _verdict_line(c: Comparison) -> str:
    m = c.matrix
    best = [c.runs[j].label for j in range(len(c.runs)) if m.ranks[j] == 1]
    if len(best) > 1:  # equal totals: their figures differ only within noise (matrix.judge_noise), or not at all
        line = f"tie: {', '.join(best)} (equal weighted totals: every difference within noise)"
    else:
        line = f"best weighted total: {', '.join(best)}"
    j0 = m.ranks.index(1)
    if m.fails[j0]:
        line += f" (but it fails {len(m.fails[j0])} pass line{'s' if len(m.fails[j0]) > 1 else ''})"
    passing = [c.runs[j].label for j in sorted(range(len(c.runs)), key=lambda j: m.ranks[j]) if not m.fails[j]]
    if any(cr.pass_line for cr in m.criteria):
        line += f"; passing every pass line: {', '.join(passing) if passing else 'none'}"
    front = dominance_line(c)
    if front:
        line += f"; {front}"
    if not c.comparable:
        line += "; WARNING: the runs are not comparable (see above)"
    return line


def _comparability_lines(c: Comparison) -> tuple[str, list[str]]:
    if len(c.runs) < 2:
        return "one run: nothing to compare it with", []
    blocking = [i for i in c.issues if i.blocking]
    mixed = any(getattr(r, "foreign", None) for r in c.runs)
    head = (
        "WARNING: these runs are NOT comparable; their figures measure different things"
        if blocking
        else "comparable: no difference in workload lengths, load plan, model, api or SLOs"
        " (each tool's own definitions: see Key figures)"
        if mixed
        else "comparable: no difference in trace, load plan, model, api, output lengths or SLOs"
    )
    return head, [servers_line(c.runs)] + [i.text() for i in blocking] + [i.text() for i in c.issues if not i.blocking]


def server_texts(runs: list[Run]) -> list[str]:
    """Each run's server: kind and version, and the exported settings in which the runs' servers
    differ (two simulators: "llm-locust-sim (slots 4)" and "llm-locust-sim (slots 16)")."""
    configs = [r.server_config for r in runs]
    differing = sorted({k for cfg in configs for k in cfg if len({c.get(k) for c in configs}) > 1})
    out = []
    for r, cfg in zip(runs, configs, strict=True):
        cells = ", ".join(f"{k} {cfg.get(k, '-')}" for k in differing)
        out.append(f"{r.server} ({cells})" if cells else r.server)
    return out


def servers_line(runs: list[Run]) -> str:
    """What a comparison compares, said first: whether the servers differ, and in what (kind,
    version, the settings a server exports, such as the simulator's slots), or that every run
    measured the same server (then what differs between the figures is the runs, not the servers)."""
    texts = dict(zip((r.label for r in runs), server_texts(runs), strict=True))
    groups: dict[Any, list[Run]] = {}
    for r in runs:
        if r.server_identity != ():  # another tool's run does not record the server
            groups.setdefault(r.server_identity, []).append(r)
    unknown = [r.label for r in runs if r.server_identity == ()]
    tail = f" ({', '.join(unknown)}: not recorded)" if unknown else ""
    if not groups:
        return "the servers are not recorded" + tail
    if len(groups) == 1:
        first = next(iter(groups.values()))[0]
        every = "every run" if not unknown else "every run that records it"
        return f"the same server in {every}: {texts[first.label]}{tail}"
    parts = [f"{', '.join(x.label for x in rs)}: {texts[rs[0].label]}" for rs in groups.values()]
    return "the servers differ: " + "; ".join(parts) + tail
