"""Repetitions of one plan: each headline figure's mean, standard deviation and 95% confidence
interval over the repetitions, and whether two repeated runs differ beyond their noise.

- The interval: mean +- t(0.975, n-1) * sd / sqrt(n), sd the sample standard deviation (n-1 in
  the denominator), t Student's t quantile with n-1 degrees of freedom (`metrics.intervals.t975`).
- Two runs differ when Welch's t-test (unequal variances, Welch-Satterthwaite degrees of freedom)
  rejects equal means at 95% (two-sided): |mean_a - mean_b| / sqrt(sd_a^2/n_a + sd_b^2/n_b) >
  t(0.975, dof). Welch's test, not "the intervals do not overlap": two 95% intervals may overlap
  while the means differ significantly (non-overlap is a test at about 99.5%, too strict).

Core code: plain Python, no Locust (docs/verdicts.md, "Repetitions").
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any, Literal, cast, get_args

from llm_locust.metrics.intervals import t975
from llm_locust.schema import Figures, RepeatFigure, Repeats, ResultsDoc, Steady


def interval(values: list[float]) -> dict[str, Any]:
    """n, mean, sd (sample, n-1) and the 95% t-interval [low, high] with its half width."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None, "half_width": None}
    mean = sum(xs) / n
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None, "half_width": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci95": [mean - half, mean + half], "half_width": half}


def welch(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Welch's t-test of two `interval` results at 95%: {t, dof, critical, differs}."""
    if a.get("sd") is None or b.get("sd") is None or a["n"] < 2 or b["n"] < 2:
        raise ValueError("Welch's test needs at least 2 repetitions on each side")
    va, vb = a["sd"] ** 2 / a["n"], b["sd"] ** 2 / b["n"]
    diff = b["mean"] - a["mean"]
    se2 = va + vb
    if se2 == 0:  # no noise at all on either side: any difference is a difference
        return {
            "t": math.inf if diff else 0.0,
            "dof": a["n"] + b["n"] - 2,
            "critical": t975(a["n"] + b["n"] - 2),
            "differs": diff != 0,
        }
    dof = se2**2 / ((va**2 / (a["n"] - 1) if va else 0.0) + (vb**2 / (b["n"] - 1) if vb else 0.0))
    t = diff / math.sqrt(se2)
    crit = t975(max(dof, 1.0))
    return {"t": t, "dof": dof, "critical": crit, "differs": abs(t) > crit}


# ---- the headline figures: (name as in compare's metric table, where it is read, direction) ----
# the summary's own figures among them, by their results names: each path is made by `_summary`
# and read by `_summary_figure`, which indexes the schema's `Figures` with the name, so that a
# renamed figure fails mypy here
SummaryFigure = Literal[
    "output_tokens_per_s", "requests_per_s", "error_rate", "goodput_requests_per_s", "goodput_tokens_per_s"
]


def _summary(name: SummaryFigure) -> tuple[str, ...]:
    return ("summary", name)


HEADLINE: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("ttft_p50", ("summary", "latency", "ttft", "p50"), False),
    ("ttft_p99", ("summary", "latency", "ttft", "p99"), False),
    ("itl_p50", ("summary", "latency", "itl", "p50"), False),
    ("tpot_p50", ("summary", "latency", "tpot", "p50"), False),
    ("e2e_p50", ("summary", "latency", "e2e", "p50"), False),
    ("e2e_p99", ("summary", "latency", "e2e", "p99"), False),
    ("output_tokens_per_s", _summary("output_tokens_per_s"), True),
    ("requests_per_s", _summary("requests_per_s"), True),
    ("error_rate", _summary("error_rate"), False),
    ("goodput_requests_per_s", _summary("goodput_requests_per_s"), True),
    ("goodput_tokens_per_s", _summary("goodput_tokens_per_s"), True),
    ("saturation_load", ("ladder", "saturation", "saturation", "offered"), True),
    ("max_slo_load", ("ladder", "saturation", "max_slo_load"), True),
)
HIGHER_IS_BETTER = {name: higher for name, _, higher in HEADLINE}
UNITS = {
    "output_tokens_per_s": "tok/s",
    "requests_per_s": "req/s",
    "goodput_requests_per_s": "req/s",
    "goodput_tokens_per_s": "tok/s",
    "error_rate": "fraction",
    "saturation_load": "load",
    "max_slo_load": "load",
}


def unit_of(name: str) -> str:
    return UNITS.get(name, "s")


def _summary_figure(doc: Any, name: SummaryFigure) -> Any:
    """doc["summary"][name], by a name of `Figures` (None: absent)."""
    fig = doc.get("summary") if isinstance(doc, dict) else None
    return cast(Figures, fig)[name] if isinstance(fig, dict) and name in fig else None


def _read(doc: Any, path: tuple[str, ...]) -> float | None:
    if len(path) == 2 and path[0] == "summary" and path[1] in get_args(SummaryFigure):
        doc = _summary_figure(doc, cast(SummaryFigure, path[1]))
    else:
        for k in path:
            if not isinstance(doc, dict):
                return None
            doc = doc.get(k)
    if isinstance(doc, bool) or not isinstance(doc, (int, float)) or not math.isfinite(doc):
        return None
    return float(doc)


def headline_values(doc: ResultsDoc) -> dict[str, float]:
    """The headline figures a results document has (a figure it lacks is left out)."""
    out = {}
    for name, path, _ in HEADLINE:
        v = _read(doc, path)
        if v is not None:
            out[name] = v
    return out


NOT_RESET = "server state was not reset between repetitions (no --reset-hook)"
FRESH_SIM = "a fresh built-in simulator per repetition"


def repeats_section(docs: Sequence[ResultsDoc], files: list[str], reset: str) -> Repeats:
    """results["repeats"]: the count, each repetition's file and values, and per figure its
    mean, sd and 95% t-interval (a figure only when every repetition has it)."""
    per = [headline_values(d) for d in docs]
    names = [n for n, _, _ in HEADLINE if per and all(n in p for p in per)]
    figures: dict[str, RepeatFigure] = {}
    for n in names:
        figures[n] = {
            **cast(RepeatFigure, interval([p[n] for p in per])),  # n, mean, sd, ci95, half_width
            "values": [p[n] for p in per],
            "unit": unit_of(n),
            "higher_is_better": HIGHER_IS_BETTER[n],
        }
    incomplete = {
        n: [k + 1 for k, p in enumerate(per) if n not in p]
        for n, _, _ in HEADLINE
        if any(n in p for p in per) and not all(n in p for p in per)
    }
    return {
        "incomplete": incomplete,  # a figure some repetitions lack (no request succeeded ...): no interval
        "count": len(docs),
        "confidence": 0.95,
        "method": "Student t interval, mean +- t(0.975, n-1) * sd / sqrt(n) (docs/verdicts.md)",
        "reset": reset,
        "files": list(files),
        "figures": figures,
    }


# Counts in a summary, summed over the repetitions; the maps of counts (by outcome, cause, source)
# summed key by key. `duration_s` is summed too: the time measured over the whole series.
SUMMED = (
    "sent",
    "finished",
    "ok",
    "failed",
    "cancelled",
    "client_cancelled",
    "lost",
    "workers_lost",
    "tokens_in",
    "tokens_out",
    "tokens_out_failed",
    "length_checked",
    "length_mismatch",
    "duration_s",
)
SUMMED_MAPS = ("outcomes", "causes", "n_out_sources", "n_in_sources")
# Rates not among the headline figures: their means, as the headline figures'
MEANS = ("concurrency",)
SUMMARY_NOTE = (
    "summary: counts (sent, ok, failed by kind, cancelled, client_cancelled, lost, tokens, ...) and "
    "duration_s summed over the repetitions; rates and latency percentiles the means of the "
    "repetitions' (each latency's count summed, its mean weighted by count, its min and max the "
    "extremes); validity flags those of any repetition; client, phases, kinds, media, cache, "
    "distributions, steps and series are the last repetition's; no one-run intervals (the "
    "repetitions' t-intervals are in `repeats`) and no steady window (each repetition's is in its file)"
)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _sum_map(maps: Sequence[Any]) -> dict[str, Any]:
    """{key: sum} of maps of counts; a map of maps (errors: {outcome: {text: count}}) key by key."""
    out: dict[str, Any] = {}
    for m in maps:
        for k, v in (m or {}).items():
            if isinstance(v, dict):
                out[k] = _sum_map([out.get(k) or {}, v])
            elif _number(v):
                out[k] = out.get(k, 0) + v
    return out


def _mean(values: Sequence[Any]) -> float | None:
    xs = [float(v) for v in values if _number(v)]
    return sum(xs) / len(xs) if xs else None


def _latency(stats: Sequence[Any]) -> dict[str, Any]:
    """One latency over the repetitions: the counts summed, the mean weighted by count, min and max
    the extremes, each percentile the mean of the repetitions' that have samples."""
    have = [s for s in stats if isinstance(s, dict) and _number(s.get("count")) and s["count"] > 0]
    count = sum(int(s["count"]) for s in have)
    out: dict[str, Any] = {"count": count}
    if not count:
        return out
    if all(_number(s.get("mean")) for s in have):
        out["mean"] = sum(s["mean"] * s["count"] for s in have) / count
    for key, pick in (("min", min), ("max", max)):
        values = [s[key] for s in have if _number(s.get(key))]
        if values:
            out[key] = pick(values)
    for p in sorted({k for s in have for k in s if k.startswith("p")}):
        mean = _mean([s.get(p) for s in have])
        if mean is not None:
            out[p] = mean
    return out


def combined_summary(summaries: Sequence[dict[str, Any]], last: dict[str, Any]) -> dict[str, Any]:
    """The combined summary (SUMMARY_NOTE): `last` (a copy of the last repetition's) with its counts,
    rates and latencies made those of every repetition."""
    out = dict(last)
    for k in SUMMED:
        if any(k in s for s in summaries):
            out[k] = sum(s.get(k, 0) for s in summaries if _number(s.get(k, 0)))
    for k in SUMMED_MAPS:
        out[k] = _sum_map([s.get(k) for s in summaries])
    out["errors"] = _sum_map([s.get("errors") for s in summaries])
    for k in MEANS:
        mean = _mean([s.get(k) for s in summaries])
        if mean is not None:
            out[k] = mean
    metrics = {m for s in summaries for m in (s.get("latency") or {})}
    out["latency"] = {m: _latency([(s.get("latency") or {}).get(m) for s in summaries]) for m in sorted(metrics)}
    return out


def combine(docs: Sequence[ResultsDoc], files: list[str], reset: str, planned: int | None = None) -> ResultsDoc:
    """The combined results: the last repetition's document (plan, provenance, distributions,
    steps, series) with the summary made the series' (SUMMARY_NOTE: counts summed, headline figures
    their means), the validity flags of any repetition, and the `repeats` section (`planned`: the
    repetitions asked for, when fewer were combined). Its counts add up when each repetition's do
    (report.accounting, checked by the writer)."""
    out = copy.deepcopy(docs[-1])
    out.pop("_path", None)
    out.pop("count_problems", None)  # the last repetition's: the writer checks the combined file anew
    rep = repeats_section(docs, files, reset)
    if planned is not None:
        rep["planned"] = planned
    summaries = [cast(dict[str, Any], d["summary"]) for d in docs]
    summary = combined_summary(summaries, cast(dict[str, Any], out["summary"]))
    # the headline figures' means, written by their paths (HEADLINE)
    for name, f in rep["figures"].items():
        path = dict((n, p) for n, p, _ in HEADLINE)[name]
        if path[0] != "summary":
            continue
        target = summary
        for k in path[1:-1]:
            target = target.setdefault(k, {})
        target[path[-1]] = f["mean"]
    # one repetition's intervals do not measure the means above: the series' t-intervals do
    summary.pop("intervals", None)
    out["summary"] = cast(Any, summary)
    if out.get("steady"):  # one repetition's window would hold a third of the combined requests
        out["steady"] = _steady_not_assessed(out["steady"], len(docs))
    flags = sorted({f for d in docs for f in (d.get("validity") or {}).get("flags", [])})
    out["validity"] = {**out["validity"], "flags": flags}
    rep["summary_note"] = SUMMARY_NOTE
    out["repeats"] = rep
    return out


def _steady_not_assessed(last: Steady, n: int) -> Steady:
    """The combined results' `steady`: not assessed (the html report leaves it out), each
    repetition's window in its own file; counts of one repetition do not add up to the series'."""
    return {
        **last,
        "found": False,
        "reason": f"not assessed for the {n} repetitions together: each repetition's window is in its own results",
        "window": None,
        "ramp": None,
        "drain": None,
        "figures": None,
        "in_flight": [],
    }


def _fmt(name: str, v: float | None) -> str:
    if v is None:
        return "-"
    u = unit_of(name)
    if u == "s":
        return f"{v * 1000:.1f} ms"
    if u == "fraction":
        return f"{v:.2%}"
    return f"{v:.2f} {u}" if u != "load" else f"{v:g}"


def format_repeats(rep: Repeats) -> str:
    """The combined summary, one line per figure: mean, sd and the 95% interval."""
    lines = [
        f"repeats: {rep['count']} repetitions; {rep['reset']}",
        f"  {'figure':24} {'mean':>14} {'sd':>14}   95% interval (t, {rep['count'] - 1} dof)",
    ]
    for name, f in rep["figures"].items():
        ci = f.get("ci95")
        ci_text = f"[{_fmt(name, ci[0])}, {_fmt(name, ci[1])}]  +-{_fmt(name, f['half_width'])}" if ci else "-"
        lines.append(f"  {name:24} {_fmt(name, f['mean']):>14} {_fmt(name, f['sd']):>14}   {ci_text}")
    for name, missing in (rep.get("incomplete") or {}).items():
        lines.append(
            f"  {name:24} no interval: repetition{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(str, missing))} lack{'' if len(missing) > 1 else 's'} it"
        )
    return "\n".join(lines)


def rep_line(k: int, n: int, doc: ResultsDoc, path: str) -> str:
    v = headline_values(doc)
    return (
        f"repetition {k}/{n}: TTFT p50 {_fmt('ttft_p50', v.get('ttft_p50'))}, "
        f"output {_fmt('output_tokens_per_s', v.get('output_tokens_per_s'))}, "
        f"{_fmt('requests_per_s', v.get('requests_per_s'))}, errors {_fmt('error_rate', v.get('error_rate'))} -> {path}"
    )


def noise_verdicts(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Per headline figure both `repeats` sections have: Welch's test of b against a, with
    "differs" / "within noise" and whether b is better or worse."""
    out = []
    fa, fb = (a or {}).get("figures") or {}, (b or {}).get("figures") or {}
    for name, _, higher in HEADLINE:
        if name not in fa or name not in fb or fa[name].get("sd") is None or fb[name].get("sd") is None:
            continue
        w = welch(fa[name], fb[name])
        diff = fb[name]["mean"] - fa[name]["mean"]
        better = (diff > 0) == higher if diff else None
        out.append(
            {
                "figure": name,
                "a": fa[name],
                "b": fb[name],
                "change": diff,
                **w,
                "verdict": "differs" if w["differs"] else "within noise",
                "direction": None if not diff else ("better" if better else "worse"),
            }
        )
    return out
