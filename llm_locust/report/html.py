"""`llm-locust report RESULTS.json [-o OUT.html]`: one self-contained HTML page from a results file.

The page needs no network: the CSS is inline, the plots are inline SVG (plots.py), no script, no
font, no image is fetched, and a Content-Security-Policy says so to the browser. Every text from
the results is HTML-escaped. `render(results)` is pure and deterministic (same results, same
bytes); `main(argv)` reads, renders, then writes atomically, so a bad input leaves no file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import math
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, cast

import orjson
import yaml

from llm_locust.analysis.agents import format_agents
from llm_locust.analysis.efficiency import has_figures, verdicts_for_results
from llm_locust.analysis.repeats import unit_of
from llm_locust.analysis.steps import OFFERED_UNITS, parse_slo_name
from llm_locust.metrics.aggregate import NOT_FAILED, client_line, validity_rule
from llm_locust.report import plots
from llm_locust.report.files import check_outputs, write_atomic
from llm_locust.report.plots import Line, Panel
from llm_locust.report.precision import target_text_line
from llm_locust.report.results import ResultsError, read_results
from llm_locust.report.summary import PHASE_ROWS, ttft_parts, warmup_line
from llm_locust.report.summary import ROWS as LATENCY_ROWS
from llm_locust.safe.terminal import terminal_safe
from llm_locust.schema import (
    CacheFigures,
    ClientFigures,
    Figures,
    ItlFigures,
    KneePoint,
    LadderDoc,
    LadderStep,
    LatencyStats,
    OverlongOthers,
    Plan,
    ResultsDoc,
    Run,
    Step,
    Verdicts,
    Warmup,
)

FLAG_TEXT = {
    "client_saturated": "the load generator may have distorted the figures. " + validity_rule(),
    "errors": "error rate above the limit ({limit}): the server failed requests",
    "length_mismatch": "some replies did not have the number of output tokens asked for: per-token figures are "
    "not comparable",
    "no_data": "no request succeeded in the step's measurement window: no latency figures",
    "over_ceiling": "a sending process read more tokens/s than one process holds (validity.ceiling names it, "
    "with its peak against its ceiling): its figures may be late; run more --workers",
    "usage_rejected": "the server's output token counts were far from the count read from the stream: not "
    "used (the count read is); the run fails its server_counts gate",
}
GIB = 2**-30  # bytes -> GiB
MAX_POINTS = 7200  # per time-series line: longer runs are averaged over buckets of whole seconds
# a LatencyStats' keys (Literal: mypy checks each read of them)
Pct = Literal["count", "p50", "p90", "p95", "p99", "p99.9", "mean", "min", "max"]
PCTS: tuple[Pct, ...] = ("count", "p50", "p90", "p95", "p99", "p99.9", "mean", "min", "max")
P50_P99: tuple[Pct, ...] = ("p50", "p99")
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
# a backslash at the end of a line joins it to the next: long lines wrapped, the CSS unchanged
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212529;margin:0;background:#f8f9fa}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px;background:#fff}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:18px;border-bottom:1px solid #dee2e6;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:20px 0 6px}.sub{color:#495057}nav a{margin-right:12px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #dee2e6;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f1f3f5}\
td.l,th.l,#steps-table td:nth-last-child(-n+2),#steps-table th:nth-last-child(-n+2){text-align:left}
tr.knee td,tr.v-knee td{background:#fff4e6;font-weight:600}tr.v-flagged td{background:#fff5f5}\
tr.flagged td{background:#fff5f5}tr.knee.flagged td{background:#ffe8cc}\
tr.cut td{background:repeating-linear-gradient(45deg,#fff,#fff 6px,#f1f3f5 6px,#f1f3f5 12px)}
.flag,.mark{display:inline-block;border-radius:3px;padding:0 5px;margin:1px;font-size:11px;font-weight:600;\
white-space:nowrap}
.flag{background:#c92a2a;color:#fff}.mark-knee{background:#d9480f;color:#fff}.mark-slo{background:#fab005;color:#000}
.mark-ok{background:#2b8a3e;color:#fff}.mark-cut{background:#495057;color:#fff}\
.warn{background:#fff5f5;border-left:4px solid #c92a2a;padding:6px 10px}
.verdict{background:#fff4e6;border-left:4px solid #d9480f;padding:8px 12px}
figure{margin:8px 0 16px}figure svg{width:100%;height:auto;display:block}figcaption{color:#495057;font-size:12px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:12px}\
pre{background:#f1f3f5;padding:8px;overflow-x:auto;font-size:12px}
pre{white-space:pre-wrap;word-break:break-all}\
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
dl.legend dt{float:left;clear:left;margin-right:8px}dl.legend dd{margin:0 0 4px 0}
"""


class H(str):
    """Text that is already HTML (never escaped again)."""


def esc(v: Any) -> str:
    return v if isinstance(v, H) else html.escape("-" if v is None else str(v), quote=True)


def num(v: Any, digits: int = 3) -> str:
    """A figure for a table: 3 significant digits, thousands separated, '-' when missing."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-" if v is None or not isinstance(v, (int, float)) else str(v)
    if isinstance(v, int) or abs(v) >= 10**digits:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def ms(v: float | None) -> str:
    return "-" if v is None else num(v * 1000)


def pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v * 100:.{digits}f}"


def slo_text(name: str, limit: Any) -> str:
    """One SLO with its unit, as every page shows it: "ttft <= 500 ms", "error_rate <= 1.0%"
    (a latency limit is kept in seconds, an error rate as a fraction)."""
    if not isinstance(limit, (int, float)) or isinstance(limit, bool):
        return f"{name} <= {limit}"
    return f"{name} <= {pct(limit)}%" if name == "error_rate" else f"{name} <= {ms(limit)} ms"


def table(
    head: Sequence[Any] | None,
    rows: Iterable[Sequence[Any]],
    *,
    left: int = 1,
    id: str = "",
    row_attrs: Sequence[dict[str, str]] | None = None,
) -> H:
    """A table; the first `left` columns left-aligned; cells escaped unless H; no header row when head is None."""
    id_attr = f' id="{esc(id)}"' if id else ""
    out = [f"<table{id_attr}>"]
    if head is not None:
        out += [
            "<thead><tr>",
            *(f"<th{' class=l' if i < left else ''}>{esc(h)}</th>" for i, h in enumerate(head)),
            "</tr></thead>",
        ]
    out.append("<tbody>")
    for n, row in enumerate(rows):
        attrs = "".join(f' {k}="{esc(v)}"' for k, v in (row_attrs[n] if row_attrs else {}).items())
        out.append(
            f"<tr{attrs}>"
            + "".join(f"<td{' class=l' if i < left else ''}>{esc(c)}</td>" for i, c in enumerate(row))
            + "</tr>"
        )
    out.append("</tbody></table>")
    return H("".join(out))


def kv_table(pairs: Iterable[tuple[str, Any]], id: str = "") -> H:
    return table(None, [(k, v) for k, v in pairs], left=2, id=id)


def figure(svg: str, id: str, caption: str = "") -> H:
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return H(f'<figure id="{esc(id)}">{svg}{cap}</figure>')


def badge(cls: str, text: str, title: str = "") -> H:
    title_attr = f' title="{esc(title)}"' if title else ""
    return H(f'<span class="{esc(cls)}"{title_attr}>{esc(text)}</span>')


# ---- the sections ----


def _flag_text(flag: str, limit: float | None) -> str:
    return FLAG_TEXT.get(flag, flag).format(limit="-" if limit is None else f"{limit:.0%}")


def _plan(r: ResultsDoc) -> Plan:
    """The results' effective plan; {} when absent or not a mapping (older or hand-made files)."""
    plan = r.get("plan")
    return plan if isinstance(plan, dict) else Plan()


def _slos(r: ResultsDoc) -> dict[str, float]:
    settings = r["run"].get("settings") or {}
    plan = _plan(r)
    steps = _ladder_steps(r)
    # (a plan's large latency limits are "Ns" text; run.settings.slos, in seconds, comes first)
    plan_slos = cast("dict[str, float] | None", plan.get("slos"))
    return settings.get("slos") or plan_slos or (steps[0].get("slos") if steps else None) or {}


def _ladder_steps(r: ResultsDoc) -> list[LadderStep]:
    """The ladder's steps: none in a run without a ladder (or a file whose ladder kept none)."""
    ladder = r.get("ladder")
    return (ladder.get("steps") or []) if ladder else []


def _lat(step: LadderStep, metric: str, stat: str) -> float | None:
    stats = (step.get("latency") or {}).get(metric)
    v = stats.get(stat) if stats else None  # a stat's name is data (an SLO's): read by .get
    return v if isinstance(v, (int, float)) else None


def _knee(ladder: LadderDoc) -> KneePoint | None:
    verdict = ladder.get("saturation")
    return verdict.get("saturation") if verdict else None


def section_header(r: ResultsDoc) -> H:
    run, env = r["run"], r.get("environment")  # environment: see section_environment
    plan = _plan(r)
    title = plan.get("name") or "llm-locust report"
    server = (env.get("server") if env else None) or {}
    model = server.get("model") or (run.get("server") or {}).get("model")
    ladder = (run.get("settings") or {}).get("ladder") or {}
    facts = [f"started {_started(run)}", f"{num(_duration(r))} s"]
    targets = _targets(r)
    if len(targets) > 1:
        route = (plan.get("route") or (run.get("settings") or {}).get("route")) or ""
        facts.append(f"targets {', '.join(targets)}" + (f" ({route})" if route else ""))
    else:
        facts.append(f"target {targets[0] if targets else '-'}")
    facts.append(f"model {model or '-'}")
    if ladder.get("spec"):
        facts.append(f"ladder {ladder['spec']}")
    out = [f"<h1>{esc(title)}</h1>", f'<p class="sub">{esc(" · ".join(facts))}</p>']
    if plan.get("description"):
        out.append(f"<p>{esc(plan['description'])}</p>")
    if r.get("partial"):
        out.append(f'<div class="warn" id="partial"><b>Partial results:</b> {esc(partial_line(r))}</div>')
    flags = r["validity"]["flags"]
    if flags:
        limit = r["validity"]["max_error_rate"]
        items = "".join(f"<li>{badge('flag', f)} {esc(_flag_text(f, limit))}</li>" for f in flags)
        out.append(f'<div class="warn" id="run-validity"><b>The run\'s figures are suspect:</b><ul>{items}</ul></div>')
    return H("".join(out))


def partial_line(r: ResultsDoc) -> str:
    """What a checkpoint's file holds (`partial`: written while its run went on, --checkpoint-every),
    in one line: the page's banner and `llm-locust report`'s output."""
    c = r.get("checkpoint")
    if not c:
        return "written while the run went on; its end's file never replaced it"
    t = dt.datetime.fromtimestamp(c["at"], dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    until = c["at"] - c["counted_until"]  # 0 in a local process: it counts as it goes
    upto = f"up to {num(until)} s before it" if until > 0 else "before it"
    missing = f"; {c['workers_missing']} worker(s) missing" if c.get("workers_missing") else ""
    return (
        f"a checkpoint written at {t} while the run went on (every {num(c['every_s'])} s), never replaced by its "
        f"end's file: the run was killed or is still going. Every request that finished {upto} is counted; "
        f"{c['in_flight']} were in flight (no outcome known){missing}"
    )


def _dialect(r: ResultsDoc) -> str | None:
    """The metric names the server speaks (the simulator: vLLM's), as its scraper read them."""
    sm = r.get("server_metrics")
    return (sm["source"] or {}).get("dialect") if sm else None


def _targets(r: ResultsDoc) -> list[str]:
    """Every server the run sent to, --host first: the host, the plan's endpoints (a run over
    --host A --host B, or --endpoints), and the endpoints the senders reported; each once."""
    run, plan = r["run"], _plan(r)
    found: list[Any] = [run.get("host"), plan.get("host")]
    for more in (plan.get("endpoints"), (run.get("settings") or {}).get("endpoints")):
        found += more.split(",") if isinstance(more, str) else list(more) if isinstance(more, list) else []
    reported = run.get("endpoints")
    if isinstance(reported, dict):
        found += list(reported)
    out: list[str] = []
    for t in found:
        t = str(t).strip().rstrip("/") if t else ""
        if t and t not in out:
            out.append(t)
    return out


def _started(run: Run) -> str:
    utc, started = run.get("started_at_utc"), run.get("started_at")
    if utc:
        return utc
    if isinstance(started, (int, float)):
        return dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds")
    return "-"


def _duration(r: ResultsDoc) -> float | None:
    started, ended = r["run"].get("started_at"), r["run"].get("ended_at")
    if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
        return ended - started
    return r["summary"]["duration_s"]


def _load_axis(steps: Sequence[LadderStep]) -> tuple[list[float], str, bool]:
    """Offered loads, the axis label, and whether to draw it on a log scale (a wide, growing ladder)."""
    kind = steps[0].get("offered_kind", "") if steps else ""
    x = [float(s["offered"]) for s in steps]
    log_x = len(x) >= 3 and x[0] > 0 and x[-1] / x[0] >= 8
    return x, f"offered load ({OFFERED_UNITS.get(kind) or kind or 'level'})", log_x


def _throughput_panels(steps: Sequence[LadderStep]) -> list:
    panels = []
    for key, title, unit, rates, good in (
        (
            "tokens",
            "output tokens/s",
            "tokens/s",
            [s.get("output_tokens_per_s") for s in steps],
            [s.get("goodput_tokens_per_s") for s in steps],
        ),
        (
            "requests",
            "requests/s",
            "requests/s",
            [s.get("requests_per_s") for s in steps],
            [s.get("goodput_requests_per_s") for s in steps],
        ),
    ):
        lines = [Line("output" if key == "tokens" else "requests", title, rates)]
        if any(v is not None for v in good):  # goodput exists only with a per-request SLO
            lines.append(Line("goodput", f"goodput {unit}", good, dashed=True))
        panels.append(Panel(key, f"{title} (steady state)", unit, lines))
    return panels


def _step_interval(ivs: Mapping[Any, Any], step: LadderStep, metric: str, stat: str) -> tuple[float, float] | None:
    """A ladder step's 95% interval of a latency figure in ms (results `steps[].intervals`), or None."""
    iv = (((ivs.get(step.get("step")) or {}).get("latency") or {}).get(metric) or {}).get(stat) or {}
    low, high = iv.get("low"), iv.get("high")
    return (low * 1000, high * 1000) if isinstance(low, (int, float)) and isinstance(high, (int, float)) else None


def _latency_panels(
    steps: Sequence[LadderStep], slos: dict[str, float], ivs: Mapping[Any, Any] | None = None
) -> tuple[list, list[str]]:
    """TTFT, ITL + TPOT and E2E panels (ms) with a line per SLO on their metrics; the SLOs not drawn.
    ivs: {step: its `intervals`}: each point's 95% interval as an error bar."""
    wanted = {
        "ttft": [("ttft", "p50"), ("ttft", "p99")],
        "itl": [("itl", "p50"), ("itl", "p99"), ("tpot", "p50")],
        "e2e": [("e2e", "p50"), ("e2e", "p99")],
    }
    home = {"ttft": "ttft", "itl": "itl", "tpot": "itl", "e2e": "e2e"}
    limits: dict[str, list[tuple[str, str, float]]] = {k: [] for k in wanted}
    undrawn = []
    for name, limit in slos.items():
        try:
            metric, stat = parse_slo_name(name)
        except ValueError:
            metric, stat = name, None
        if metric not in home or stat is None or not isinstance(limit, (int, float)):
            undrawn.append(f"{name} {limit:g}" if isinstance(limit, (int, float)) else name)
            continue
        if (metric, stat) not in wanted[home[metric]]:
            wanted[home[metric]].append((metric, stat))  # an SLO on a stat not plotted: plot it
        limits[home[metric]].append((name.replace(".", "_"), f"SLO {name} {limit * 1000:g} ms", limit * 1000))
    panels = []
    for key, title in (("ttft", "TTFT"), ("itl", "ITL and TPOT"), ("e2e", "E2E")):
        lines = []
        for metric, stat in wanted[key]:
            vals = [_lat(s, metric, stat) for s in steps]
            lines.append(
                Line(
                    f"{metric}-{stat.replace('.', '_')}",
                    f"{metric.upper()} {stat}",
                    [None if v is None else v * 1000 for v in vals],
                    dashed=stat != "p50",
                    intervals=[_step_interval(ivs or {}, s, metric, stat) for s in steps],
                )
            )
        ys = [v for line in lines for v in line.values if v] + [y for *_, y in limits[key] if y]
        panels.append(Panel(key, title, "ms", lines, limits[key], log_y=bool(ys) and max(ys) / min(ys) > 50))
    return panels, undrawn


def _cache_panels(steps: Sequence[LadderStep]) -> list:
    """Hit ratios (%) and TTFT hit vs miss p50 (ms) per step; none when no step reported a cache figure."""
    caches = [s.get("cache") for s in steps]
    if not any(caches):
        return []

    def pct_of(vals: list[float | None]) -> list[float | None]:
        return [None if v is None else v * 100 for v in vals]

    def p50_ms(stats: LatencyStats | None) -> float | None:
        v = stats.get("p50") if stats else None
        return None if v is None else v * 1000

    # each column read by its literal key, so that the type check knows every one of them
    cols = {
        "achieved_vs_ideal": [c.get("achieved_vs_ideal") if c else None for c in caches],
        "hit_ratio": [c.get("hit_ratio") if c else None for c in caches],
        "ideal_hit_ratio": [c.get("ideal_hit_ratio") if c else None for c in caches],
    }
    ttfts = {
        "ttft_hit": [p50_ms(c.get("ttft_hit")) if c else None for c in caches],
        "ttft_miss": [p50_ms(c.get("ttft_miss")) if c else None for c in caches],
    }
    ratios = [
        Line(k, label, pct_of(cols[k]), dashed=dashed)
        for k, label, dashed in (
            ("achieved_vs_ideal", "achieved / ideal", False),
            ("hit_ratio", "cached / prompt", True),
            ("ideal_hit_ratio", "ideal / prompt", True),
        )
        if any(v is not None for v in cols[k])
    ]
    panels = []
    if ratios:
        panels.append(Panel("cache-ratio", "prompt-cache hit ratio", "%", ratios))
    lines = [
        Line(k, label, ttfts[k], dashed=k == "ttft_miss")
        for k, label in (("ttft_hit", "TTFT p50, hit"), ("ttft_miss", "TTFT p50, miss"))
    ]
    if any(v is not None for line in lines for v in line.values):
        panels.append(Panel("cache-ttft", "TTFT: cache hit vs miss", "ms", lines))
    return panels


def _accuracy_panels(steps: Sequence[LadderStep]) -> list:
    """Accuracy of the graded items (%) per step (--graded); none when no step graded any."""
    accs = [a.get("accuracy") if (a := s.get("accuracy")) else None for s in steps]
    if all(a is None for a in accs):
        return []
    return [
        Panel(
            "accuracy",
            "accuracy of graded items",
            "%",
            [Line("accuracy", "right / graded", [None if a is None else a * 100 for a in accs])],
        )
    ]


def section_ladder(r: ResultsDoc) -> H:
    ladder = r.get("ladder")
    steps = _ladder_steps(r)
    if ladder is None or not steps:
        return H("")
    x, xlabel, log_x = _load_axis(steps)
    unit = OFFERED_UNITS.get(steps[0].get("offered_kind", ""), "")
    knee = _knee(ladder)
    ki = next((i for i, s in enumerate(steps) if knee and s.get("step") == knee.get("step")), None)
    kw: dict[str, Any] = {
        "xlabel": xlabel,
        "knee": ki,
        "flagged": [i for i, s in enumerate(steps) if s.get("flags")],
        "log_x": log_x,
        "cut": next((i for i, s in enumerate(steps) if s.get("cut")), None),
    }
    slos = _slos(r)
    tput = plots.vs_load("load-throughput", x, _throughput_panels(steps), **kw)
    ivs = {s.get("step"): s.get("intervals") for s in r.get("steps") or []}
    panels, undrawn = _latency_panels(steps, slos, ivs)
    lat = plots.vs_load("load-latency", x, panels, width=12.0, **kw)
    cache_panels = _cache_panels(steps)
    cache_fig = ""
    if cache_panels:
        cache_fig = figure(
            plots.vs_load("load-cache", x, cache_panels, **kw),
            "plot-cache",
            "Prompt-cache reuse per step: the share of prompt tokens the server served from its cache, "
            "what an unbounded prefix cache could have served, and achieved/ideal (left); TTFT p50 of "
            "cache hits (at least half the prompt cached) and misses (right). See docs/metrics.md.",
        )

    acc_panels = _accuracy_panels(steps)
    if acc_panels:
        cache_fig += figure(
            plots.vs_load("load-accuracy", x, acc_panels, **kw),
            "plot-accuracy",
            "Accuracy under load: the share of graded items (--graded) answered right in each step; "
            "a server that gets faster by answering worse shows here. See docs/verdicts.md.",
        )

    knee_txt = (
        f"The saturation point (knee) is step {knee['step']}, {knee['offered']:g} {unit}: marked ◆ and by "
        "the dashed line."
        if knee
        else "No saturation point was found: no knee is marked."
    )
    verdict = ladder.get("saturation")
    kr = verdict.get("knee_range") if verdict else None
    if kr and kr.get("text"):  # the knee with its margin (docs/verdicts.md "The knee's margin")
        knee_txt += f" {kr['text'][0].upper()}{kr['text'][1:]}."
    cut_txt = "".join(f" {cut_note(s, unit)}." for s in steps if s.get("cut"))
    knee_txt += cut_txt
    lat_txt = "Latency percentiles per step (ms)." + cut_txt
    lat_txt += " SLO limits are the grey dashed and dotted lines." if slos else " No SLO was set."
    if undrawn:
        lat_txt += f" SLOs not drawn: {', '.join(undrawn)}."
    return H(
        "".join(
            [
                "<h2 id='load'>Throughput and latency against offered load</h2>",
                figure(
                    tput,
                    "plot-throughput",
                    "Steady-state rates of each step's measurement window (warm-up excluded). "
                    f"{knee_txt} Ringed points are flagged steps (see the table).",
                ),
                figure(lat, "plot-latency", lat_txt),
                cache_fig,
                section_verdict(ladder, unit),
                section_steps(r, steps, unit, knee),
            ]
        )
    )


def _verdicts(r: ResultsDoc) -> tuple[Verdicts | None, bool]:
    """(the run's verdicts, computed here): results["verdicts"] as the run wrote them, else
    computed from the results (older files, or a run that did not write them)."""
    v = r.get("verdicts")
    if isinstance(v, dict) and isinstance(v.get("steps"), list):
        return v, False
    return verdicts_for_results(r), True


# the verdicts' per-step figures shown beside the step (column head, key)
_VERDICT_COLUMNS = (
    ("tok/s/GPU", "output_tokens_per_s_per_gpu"),
    ("total tok/s/GPU", "total_tokens_per_s_per_gpu"),
    ("tok/s/user", "interactivity"),
    ("GPU W", "gpu_power_watts"),
    ("J/out tok", "joules_per_output_token"),
    ("J/tok (in+out)", "joules_per_total_token"),
    ("$/M out tok", "usd_per_million_output_tokens"),
    ("$/M tok (in+out)", "usd_per_million_total_tokens"),
)


def section_verdicts(r: ResultsDoc) -> H:
    """Per-GPU throughput against interactivity (the Pareto plot), J/token and $/Mtok per step."""
    v, computed = _verdicts(r)
    if not v or not (v.get("steps") or has_figures(v)):
        return H("")
    rows_v = v.get("steps") or []
    lsteps: dict[Any, LadderStep] = {s.get("step"): s for s in _ladder_steps(r)}
    first = next(iter(lsteps.values()), None)
    unit = OFFERED_UNITS.get(first.get("offered_kind", "") if first else "", "")
    knee_row = v.get("knee")
    knee = knee_row.get("step") if knee_row else None
    out = ["<h2 id='verdicts'>Efficiency, energy and cost</h2>"]
    pareto = _pareto_figure(rows_v, unit, knee)
    if pareto:
        out.append(pareto)
    if rows_v:
        out.append(_verdicts_table(rows_v, knee, v.get("energy_rule") or ""))
    out.append(kv_table(_verdicts_facts(v), id="verdicts-facts"))
    notes = list(v.get("notes") or [])
    if computed:
        notes.append("computed by the report from the results file (the run did not store its verdicts)")
    if notes:
        out.append("<ul class='sub' id='verdicts-notes'>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    out.append("<p class='sub'>Formulas, units and sources: docs/verdicts.md.</p>")
    return H("".join(out))


def _pareto_figure(rows_v: Sequence[Mapping[str, Any]], unit: str, knee: Any) -> str:
    """Part of section_verdicts: the Pareto plot of the steps with both figures; "" when none has them."""
    pts = [(i, e) for i, e in enumerate(rows_v) if e.get("output_tokens_per_s_per_gpu") and e.get("interactivity")]
    if not pts:
        return ""
    on = {e["step"]: e for e in rows_v if e.get("pareto")}
    front = sorted((e["output_tokens_per_s_per_gpu"], e["interactivity"]) for e in on.values())
    labels = [f"step {e['step']} ({num(e.get('offered'))} {unit})".replace(" )", ")") for _, e in pts]
    svg = plots.pareto(
        "pareto",
        [
            plots.Front(
                "run",
                "this run",
                [(e["output_tokens_per_s_per_gpu"], e["interactivity"]) for _, e in pts],
                labels,
                front,
                next((j for j, (_, e) in enumerate(pts) if e["step"] == knee), None),
                [j for j, (_, e) in enumerate(pts) if e.get("flags")],
            )
        ],
    )
    return figure(
        svg,
        "plot-pareto",
        "Each step's output tokens/s per GPU against its tokens/s per user "
        "(1 / TPOT p50). The line joins the Pareto frontier: the steps no other step beats in both. "
        "◆ the knee; ringed: flagged steps.",
    )


def _verdicts_table(rows_v: Sequence[Mapping[str, Any]], knee: Any, energy_rule: str) -> H:
    """Part of section_verdicts: one row per step, with the figures some step has and its marks."""
    present = [c for c in _VERDICT_COLUMNS if any(e.get(c[1]) is not None for e in rows_v)]
    trs, attrs = [], []
    for e in rows_v:
        marks = []
        if e.get("pareto"):
            marks.append(
                badge(
                    "mark mark-ok",
                    "frontier",
                    "on the Pareto frontier: no other step has both more tok/s/GPU and more tok/s/user",
                )
            )
        if e.get("step") == knee:
            marks.append(badge("mark mark-knee", "knee"))
        for f in e.get("energy_flags") or []:
            marks.append(badge("flag", f, energy_rule))
        for f in e.get("flags") or []:
            marks.append(badge("flag", f))
        trs.append(
            (
                e.get("step"),
                num(e.get("offered")),
                num(e.get("output_tokens_per_s")),
                *(num(e.get(k)) for _, k in present),
                H("".join(marks)),
            )
        )
        cls = " ".join(c for c, on_ in (("v-knee", e.get("step") == knee), ("v-flagged", bool(e.get("flags")))) if on_)
        attrs.append({"class": cls} if cls else {})
    return table(
        ("step", "offered", "out tok/s", *(c[0] for c in present), "marks"),
        trs,
        id="verdicts-table",
        row_attrs=attrs,
    )


def _verdicts_facts(v: Verdicts) -> list[tuple[str, Any]]:
    """Part of section_verdicts: the GPUs, price, knee, whole-run figures and rules, as key-value rows."""
    facts: list[tuple[str, Any]] = []
    g = v.get("gpus")
    if g:
        facts.append(
            (
                "GPUs",
                f"{g['gpus']} ({g['prefill_gpus']} prefill, {g['decode_gpus']} decode: output tokens per "
                "decode GPU, input tokens per prefill GPU)"
                if g.get("disaggregated")
                else g["gpus"],
            )
        )
    p = v.get("price")
    if p:
        facts.append(
            (
                "price",
                f"${p['usd_per_gpu_hour']:g} per GPU-hour ({p['source']}"
                + (f", {p['gpu_type']})" if p.get("gpu_type") else ")"),
            )
        )
    k = v.get("knee")
    if k:
        facts.append(
            (
                "at the knee",
                f"step {k['step']}: {num(k.get('output_tokens_per_s_per_gpu'))} tok/s/GPU, "
                f"{num(k.get('interactivity'))} tok/s/user, {num(k.get('joules_per_output_token'))} J/token, "
                f"${num(k.get('usd_per_million_output_tokens'))} per million output tokens",
            )
        )
    run: Mapping[str, Any] = v.get("run") or {}  # read by column name
    cols = _VERDICT_COLUMNS
    if any(run.get(key) is not None for _, key in cols):
        facts.append(
            ("whole run", ", ".join(f"{num(run.get(key))} {label}" for label, key in cols if run.get(key) is not None))
        )
    if v.get("frontier"):
        facts.append(("Pareto frontier", "steps " + ", ".join(str(s) for s in v["frontier"])))
    facts.append(("tok/s per user", v.get("interactivity_from") or "1 / TPOT p50"))
    facts.append(("energy validity", v.get("energy_rule") or "-"))
    return facts


def section_verdict(ladder: LadderDoc, unit: str) -> H:
    v = ladder.get("saturation")
    out = ["<h3 id='verdict'>Saturation verdict</h3><div class='verdict'>"]
    if not v:
        out.append("<p>No verdict (no step was measured).</p>")
    else:
        s = v.get("saturation")
        if s:
            lat = s.get("latency") or {}
            load = f"{s['offered']:g} {unit}".strip()
            out.append(
                f"<p><b>Saturation at {esc(load)}</b> (step {esc(s['step'])},"
                f" by {esc(v.get('knee_by'))}): {esc(num(s.get('output_tokens_per_s')))} tok/s,"
                f" {esc(num(s.get('requests_per_s')))} req/s, TTFT p50/p99 {esc(ms(lat.get('ttft_p50')))}/"
                f"{esc(ms(lat.get('ttft_p99')))} ms, E2E p99 {esc(ms(lat.get('e2e_p99')))} ms.</p>"
            )
        else:
            out.append("<p><b>No saturation point found.</b></p>")
        if v.get("max_slo_load") is not None:
            load = f"{v['max_slo_load']:g} {unit}".strip()
            out.append(
                f"<p>Highest load meeting every SLO: <b>{esc(load)}</b> (step {esc(v.get('max_slo_step'))}).</p>"
            )
        if v.get("reasons"):
            out.append("<ul>" + "".join(f"<li>{esc(t)}</li>" for t in v["reasons"]) + "</ul>")
        cands = v.get("candidates") or {}
        if cands:
            out.append(
                "<p class='sub'>Candidates: "
                + esc(", ".join(f"{k} {'-' if c is None else f'{c:g}'}" for k, c in cands.items()))
                + f"<br>Method: {esc(v.get('method'))}</p>"
            )
    reason = ladder.get("stop_reason")
    if reason:
        early = reason != "ladder complete"
        out.append(f"<p>{'Ladder stopped early' if early else 'Ladder ended'}: {esc(reason)}</p>")
    sla = ladder.get("sla")
    agents = sla.get("agents") if sla else None
    if agents:
        out.append(section_agents(agents))
    out.append("</div>")
    return H("".join(out))


def section_agents(a: Mapping[str, Any]) -> str:
    """--agent-tier: the most agents meeting the tier, per GPU and per megawatt (docs/verdicts.md)."""
    att = a.get("attainment") or {}
    met = f" ({att['met']} of {att['sessions']} sessions met it at that load)" if att.get("sessions") else ""
    return (
        f"<h4 id='agents'>Agents under an SLO tier</h4><p><b>{esc(format_agents(a).strip())}</b>{esc(met)}</p>"
        f"<p class='sub'>{esc(a.get('rule'))}</p>"
    )


def cut_note(s: LadderStep, unit: str) -> str:
    """What the page says of a step an interruption cut short: after how long of its planned
    length, on how many requests, and that its figures are drawn apart and not judged."""
    ran, planned = s.get("ran_seconds"), s.get("planned_seconds")
    if ran is None:  # an older file: the measured part of the window
        ran = float(s.get("warmup") or 0.0) + float(s.get("window") or 0.0)
    of = f" of its planned {planned:g} s" if planned else ""
    return (
        f"Step {s.get('step')} ({num(s.get('offered'))} {unit}) was cut short by the interrupt after "
        f"{ran:.1f} s{of}, {s.get('sent', 0):,} request{'' if s.get('sent') == 1 else 's'}: its hollow point "
        "stands apart from the line, "
        "and it is left out of the knee and the verdicts"
    )


def section_steps(r: ResultsDoc, steps: Sequence[LadderStep], unit: str, knee: KneePoint | None) -> H:
    limit = ((r["run"].get("settings") or {}).get("ladder") or {}).get("max_error_rate")
    limit = limit if limit is not None else r["validity"]["max_error_rate"]
    head: tuple[str, ...] = (
        "step",
        f"offered ({unit})",
        "req/s",
        "tok/s",
        "goodput req/s",
        "TTFT p50 / p99 ms",
        "ITL p50 / p99 ms",
        "TPOT p50 ms",
        "E2E p99 ms",
        "err %",
        "SLOs",
        "marks",
    )
    graded = any(s.get("accuracy") for s in steps)
    if graded:  # --graded: accuracy per step beside latency
        head = (*head[:10], "acc % (right/graded)", *head[10:])
    rows: list[tuple[Any, ...]] = []
    attrs = []
    for s in steps:
        flags = s.get("flags") or []
        is_knee = bool(knee and s.get("step") == knee.get("step"))
        marks = [badge(f"flag flag-{f}", f, _flag_text(f, limit)) for f in flags]
        if is_knee:
            marks.insert(0, badge("mark mark-knee", "knee", "the saturation point"))
        if s.get("cut"):
            marks.insert(0, H(badge("mark mark-cut", "cut short", cut_note(s, unit)) + " " + esc(cut_note(s, unit))))
        broken = s.get("slo_broken") or []
        slo = (
            badge("mark mark-slo", "broken", "; ".join(broken)) + H(" " + esc("; ".join(broken)))
            if broken
            else badge("mark mark-ok", "met")
            if s.get("slos_met")
            else "-"
        )
        if s.get("cut"):
            slo = "not judged"
        rows.append(
            (
                s.get("step"),
                num(s.get("offered")),
                num(s.get("requests_per_s")),
                num(s.get("output_tokens_per_s")),
                num(s.get("goodput_requests_per_s")),
                f"{ms(_lat(s, 'ttft', 'p50'))} / {ms(_lat(s, 'ttft', 'p99'))}",
                f"{ms(_lat(s, 'itl', 'p50'))} / {ms(_lat(s, 'itl', 'p99'))}",
                ms(_lat(s, "tpot", "p50")),
                ms(_lat(s, "e2e", "p99")),
                pct(s.get("error_rate")),
                H(slo),
                H("".join(marks) or "-"),
            )
        )
        if graded:
            a = s.get("accuracy")
            cell = "-" if not a or a.get("accuracy") is None else f"{pct(a['accuracy'])} ({a['correct']}/{a['graded']})"
            rows[-1] = (*rows[-1][:10], cell, *rows[-1][10:])
        attrs.append(
            {
                "data-step": str(s.get("step")),
                "data-flags": " ".join(flags),
                "class": " ".join(
                    c
                    for c in ("knee" if is_knee else "", "flagged" if flags else "", "cut" if s.get("cut") else "")
                    if c
                ),
            }
        )
    legend = "".join(f"<dt>{badge(f'flag flag-{f}', f)}</dt><dd>{esc(_flag_text(f, limit))}</dd>" for f in FLAG_TEXT)
    legend += (
        f"<dt>{badge('mark mark-knee', 'knee')}</dt><dd>the saturation point of the verdict (highlighted row)</dd>"
        f"<dt>{badge('mark mark-slo', 'broken')}</dt><dd>the step broke an SLO (which, and by how much, beside it)</dd>"
        f"<dt>{badge('mark mark-cut', 'cut short')}</dt><dd>an interruption cut the step short: its figures are of "
        "the part that ran, drawn apart and not judged (hatched row)</dd>"
    )
    return H(
        "<h3 id='steps'>Per step</h3>"
        + table(head, rows, id="steps-table", row_attrs=attrs)
        + f"<dl class='legend' id='flags-legend'>{legend}</dl>"
        "<p class='sub'>Rates are steady state over each step's measurement window; latencies are of the requests"
        " sent in it. A flagged step's figures are suspect: read them with its mark in mind.</p>"
    )


def _per_second(rows: Sequence[Sequence[Any]]) -> dict[int, Sequence[float]]:
    """The results' series rows (sorted) by second. A row folded into a wider bucket (a run older
    than the series keeps second by second: [first second, tokens, ok, failed, width]) is spread
    evenly over its seconds, up to the next row's."""
    out: dict[int, Sequence[float]] = {}
    for i, row in enumerate(rows):
        s = int(row[0])
        width = int(row[4]) if len(row) > 4 and isinstance(row[4], (int, float)) and row[4] > 1 else 1
        if i + 1 < len(rows):
            width = max(1, min(width, int(rows[i + 1][0]) - s))
        for k in range(s, s + width):
            out[k] = (k, *(row[j] / width for j in (1, 2, 3)))
    return out


def section_timeseries(r: ResultsDoc) -> H:
    series = sorted((row for row in r["series"] if len(row) >= 4), key=lambda row: row[0])
    if not series:
        return H("")
    first, last = int(series[0][0]), int(series[-1][0])
    by_sec = _per_second(series)
    seconds = range(first, last + 1)  # seconds with nothing in them are zeros, not gaps
    secs: list[float] = list(seconds)  # averaged over buckets below for a long run
    t0 = r["run"].get("started_at")
    t0 = float(t0) if isinstance(t0, (int, float)) and t0 <= first + 1 else float(first)
    fill: list[Sequence[float]] = [by_sec.get(s, (s, 0, 0, 0)) for s in seconds]
    width = math.ceil(len(secs) / MAX_POINTS)  # a day-long soak: averaged over buckets of `width` seconds
    if width > 1:
        secs = [sum(secs[i : i + width]) / len(secs[i : i + width]) for i in range(0, len(secs), width)]
        fill = [
            [0.0, *(sum(f[k] for f in fill[i : i + width]) / len(fill[i : i + width]) for k in (1, 2, 3))]
            for i in range(0, len(fill), width)
        ]
    steps = {s.get("step"): s for s in _ladder_steps(r)}
    ladder = r.get("ladder")
    windows = []
    for w in (ladder.get("windows") or []) if ladder else []:
        if w.get("started") is None:
            continue
        end = w.get("ended") or r["run"].get("ended_at") or last + 1
        windows.append(
            plots.Window(
                f"{w.get('step')}",
                w["started"] - t0,
                (w.get("measured_from") or w["started"]) - t0,
                end - t0,
                step.get("output_tokens_per_s") if (step := steps.get(w.get("step"))) else None,
            )
        )
    minutes = (last - first) > 1200
    svg = plots.timeseries(
        "timeseries",
        [s - t0 + 0.5 for s in secs],
        [f[1] for f in fill],
        [f[2] for f in fill],
        [f[3] for f in fill],
        windows,
        minutes=minutes,
    )
    cap = (
        "Per wall-clock second: output tokens by the second their chunk arrived, requests by the second they ended"
        " (requests still in flight when the test stopped end as cancelled, with the failed)."
    )
    if width > 1:
        cap += f" Each point is the mean of {width} seconds."
    if windows:
        cap += (
            " Vertical lines start each ladder step (numbered); shaded: its warm-up (discarded); orange: the step's"
            " steady-state tokens/s over its measurement window."
        )
    return H("<h2 id='timeline'>Over the run</h2>" + figure(svg, "plot-timeseries", cap))


def section_distributions(r: ResultsDoc) -> H:
    dist = r.get("distributions") or {}
    lat = r["summary"]["latency"]
    figs = []
    for key, title in (("ttft", "TTFT"), ("itl", "ITL (per token)")):
        bins = dist.get(key) or []
        if not bins:
            continue
        st = lat.get(key)
        marks = [("p50", st.get("p50") if st else None), ("p99", st.get("p99") if st else None)]
        svg = plots.histogram(f"hist-{key}", bins, title=f"{title}: {sum(b[2] for b in bins):,} samples", marks=marks)
        note = (
            " The first bin also holds gaps of 0 (tokens that arrived in the same read)."
            if key == "itl" and bins[0][0] <= 1e-6
            else ""
        )
        figs.append(
            figure(
                svg, f"plot-hist-{key}", f"{title} of ok requests, {len(bins)} log-spaced bins (10 per decade).{note}"
            )
        )
    if not figs:
        return H("")
    return H("<h2 id='distributions'>Latency distributions</h2><div class='grid'>" + "".join(figs) + "</div>")


def section_summary(r: ResultsDoc) -> H:
    s = r["summary"]
    lat = s["latency"]
    rows = []
    for label, key in (
        *LATENCY_ROWS[:1],
        ("TTFT (content)", "ttft_content"),
        ("TTFT (tool call)", "ttft_tool"),
        *LATENCY_ROWS[1:],
        ("E2E incl. queue", "e2e_queue"),
    ):
        if key in lat and (key != "ttft_tool" or lat[key]["count"]):
            st = lat[key]
            rows.append((label, num(st["count"]), *(ms(st.get(c)) for c in PCTS[1:])))
    out = ["<h2 id='summary'>Whole run</h2><h3>Latency (ms)</h3>", table(("latency",) + PCTS, rows, id="latency-table")]
    good = s["goodput_requests_per_s"]
    acc, warmup = s.get("accuracy"), r.get("warmup")
    facts = [
        (
            "requests sent / ok / failed / cancelled at stop",
            f"{num(s['sent'])} / {num(s['ok'])} / {num(s['failed'])} / {num(s['cancelled'])}",
        ),
        # client_cancelled: not in a file from before --cancel
        *([("cancelled by the client (--cancel)", num(s["client_cancelled"]))] if s.get("client_cancelled") else []),
        ("error rate", f"{pct(s['error_rate'], 2)} %"),
        ("duration", f"{num(s['duration_s'])} s"),
        ("output tokens/s, requests/s", f"{num(s['output_tokens_per_s'])}, {num(s['requests_per_s'])}"),
        ("goodput requests/s, tokens/s", "-" if good is None else f"{num(good)}, {num(s['goodput_tokens_per_s'])}"),
        ("concurrency (Little's law)", num(s["concurrency"])),
        ("tokens in / out", f"{num(s['tokens_in'])} / {num(s['tokens_out'])}"),
        (
            "output token counts from",
            ", ".join(f"{k} {v}" for k, v in sorted(s["n_out_sources"].items())) or "-",
        ),
        ("length mismatches / checked", f"{num(s['length_mismatch'])} / {num(s['length_checked'])}"),
        *(
            [
                (
                    "accuracy of graded items (right / graded)",
                    f"{pct(acc['accuracy'])} % ({acc['correct']} / {acc['graded']})",
                )
            ]
            if acc and acc["graded"]
            else []
        ),
        ("client", _client_text(s["client"])),
        *([("warm-up (not in these figures)", _warmup_text(warmup))] if warmup else []),
        *([("precision targets (--precision)", _precision_text(r))] if r.get("precision") else []),
    ]
    out += ["<h3>Requests and throughput</h3>", kv_table(facts, id="run-facts")]
    out.append(section_phases(s, r["steps"]))
    out.append(section_cache(s))
    out.append(section_groups(s))
    out.append(section_failures(s))
    return H("".join(out))


def _precision_text(r: ResultsDoc) -> str:
    """--precision's targets met or not, the run's or each step's (docs/load-shapes.md)."""
    return target_text_line(r.get("precision") or {})


STEADY_METRICS = (("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2E", "e2e"))
# Literal keys: a rate renamed in schema.Rates fails mypy here, where the steady window's is read
STEADY_RATES: tuple[tuple[str, Literal["output_tokens_per_s", "requests_per_s"]], ...] = (
    ("output tokens/s", "output_tokens_per_s"),
    ("requests/s", "requests_per_s"),
)


def _with_rel(value: Any, iv: Any, scale: float = 1000.0) -> str:
    """A figure and its interval as the summary prints it: "412 ± 3.1%", or "insufficient (needs N
    samples)" ("-" when missing)."""
    if value is None:
        return "-"
    if isinstance(iv, Mapping) and iv.get("needs"):  # too few samples: said, not printed as a number
        return f"insufficient (needs {iv['needs']} samples)"
    rel = iv.get("rel") if isinstance(iv, Mapping) else None
    return num(value * scale) + (f" ± {rel * 100:.1f}%" if rel is not None else "")


def section_steady(r: ResultsDoc) -> H:
    """The steady window (results `steady`, docs/metrics.md "Steady window"): the window, its ramp
    and drain, and its figures beside the whole run's; absent when it was not assessed."""
    st = r.get("steady")
    if not st or (not st["found"] and str(st.get("reason") or "").startswith("not assessed")):
        return H("")
    out = ["<h2 id='steady'>Steady window</h2>"]
    if not st["found"]:
        out.append(f"<p>{esc(st['reason'])}; the figures of this report are the whole run's.</p>")
        return H("".join(out))
    w, ramp, drain, f = st["window"], st["ramp"], st["drain"], st["figures"]
    assert w is not None and ramp is not None and drain is not None and f is not None  # found
    t0 = r["run"].get("started_at")
    facts = [
        ("rule", st["rule"]),
        (
            "window",
            f"{num(w['seconds'])} s ({clock(w['start'], t0)} to {clock(w['end'], t0)}), {num(w['requests'])} requests",
        ),
        ("ramp", f"{num(ramp['seconds'])} s, {num(ramp['requests'])} requests"),
        ("drain", f"{num(drain['seconds'])} s, {num(drain['requests'])} requests"),
        ("headline figures", f"the {st['headline']}'s (the other sections); the window's: below"),
    ]
    summary: Mapping[str, Any] = r["summary"]
    whole: Mapping[str, Any] = summary["latency"]
    ivs: Mapping[str, Any] = f.get("intervals") or {}
    s_ivs: Mapping[str, Any] = summary.get("intervals") or {}
    rows = []
    for label, m in STEADY_METRICS:
        for stat in ("mean", "p50", "p99"):
            rows.append(
                (
                    f"{label} {stat} (ms)",
                    _with_rel(whole.get(m, {}).get(stat), s_ivs.get("latency", {}).get(m, {}).get(stat)),
                    _with_rel(f["latency"][m][stat], ivs.get("latency", {}).get(m, {}).get(stat)),
                )
            )
    for label, key in STEADY_RATES:
        whole_rate = summary.get(key)
        rows.append(
            (
                label,
                _with_rel(whole_rate, s_ivs.get("rates", {}).get(key), 1.0),
                _with_rel(f["rates"][key], ivs.get("rates", {}).get(key), 1.0),
            )
        )
    out += [
        kv_table(facts, id="steady-facts"),
        table(("figure", "whole run", f"steady window ({num(f['ok'])} ok)"), rows, id="steady-table"),
    ]
    return H("".join(out))


def section_phases(s: Figures, steps: list[Step]) -> H:
    """The request phases (docs/metrics.md, "Request phases"): the whole run's table, TTFT as the
    sum of its parts' means, the connections; and each step's p50 / p99 when there are steps."""
    ph = s.get("phases")
    if not ph:
        return H("")
    # every phase, connect_new and connections came together (a file has all of them or no phases)
    rows = [(label, num(ph[k]["count"]), *(ms(ph[k].get(c)) for c in PCTS[1:])) for label, k in PHASE_ROWS]
    parts = ttft_parts(ph)
    conn, new = ph["connections"], ph["connect_new"]
    text = (
        f"TTFT mean {ms(sum(v for _, v in parts))} ms = "
        + " + ".join(f"{w} {ms(v)}" for w, v in parts)
        + " (phase means; percentiles do not add up). Connect comes before the send (schedule lag, not TTFT): "
        + f"{num(conn['new'])} new connections (p50 {ms(new.get('p50'))} ms), "
        + f"{num(conn['reused'])} kept alive (0 ms)."
    )
    out = [
        "<h3 id='phases'>Request phases (ms)</h3>",
        str(table(("phase",) + PCTS, rows, id="phases-table")),
        f"<p>{esc(text)}</p>",
    ]
    # a step's warm-up (-k) just above the step (k) it warmed up
    timed = sorted(((st["step"], p) for st in steps if (p := st.get("phases"))), key=lambda t: (abs(t[0]), t[0] > 0))
    if len(timed) > 1:
        head = ("step", *(f"{label} p{q}" for label, _ in PHASE_ROWS for q in (50, 99)), "new conn.")
        step_rows = [
            (
                step_name(step),
                *(ms(p[k].get(q)) for _, k in PHASE_ROWS for q in P50_P99),
                num(p["connections"]["new"]),
            )
            for step, p in timed
        ]
        out.append(str(table(head, step_rows, id="phases-steps-table")))
    return H("".join(out))


def step_name(step: int) -> str:
    """A row of the results' `steps` by what it holds: ladder step k is k, its warm-up is -k (a
    bare "-2" read as a step of its own), step 0 (shapes.DRAIN_STEP) the requests sent outside
    any step's window: while the last step drains."""
    if step > 0:
        return num(step)
    return f"{-step} warm-up" if step < 0 else "outside any step"


def _warmup_text(w: Warmup) -> str:
    """The warm-up's rule and how it went, as the summary's warm-up line says it."""
    return warmup_line(w).removeprefix("warm-up: ")


def _client_text(client: ClientFigures) -> str:
    """The client's verdict and what each check measured, as the summary prints it (results with
    checks); an older results file's verdict and loop lag (checks: not in a file from before them)."""
    if client.get("checks"):
        return client_line(client).removeprefix("client: ")
    return (
        ("unknown" if client.get("verdict") == "unknown" else "valid")
        if client["valid"]
        else "SUSPECT (client saturated)"
    ) + f"; loop lag p99 {ms(client['loop_lag'].get('p99'))} ms, CPU max {num(client['cpu_max_percent'])} %"


def section_repeats(r: ResultsDoc) -> H:
    """`llm-locust run --repeat N`: each headline figure's mean, sd and 95% t-interval."""
    rep = r.get("repeats")
    if not isinstance(rep, dict) or not isinstance(rep.get("figures"), dict):
        return H("")

    def shown(name: str, v: Any) -> str:
        u = unit_of(name)
        if v is None:
            return "-"
        return f"{ms(v)} ms" if u == "s" else f"{pct(v, 2)} %" if u == "fraction" else f"{num(v)} {u}"

    rows = []
    for name, f in rep["figures"].items():
        if not isinstance(f, dict):
            continue
        ci = f.get("ci95")
        rows.append(
            (
                name,
                shown(name, f.get("mean")),
                shown(name, f.get("sd")),
                f"{shown(name, ci[0])} .. {shown(name, ci[1])}" if ci else "-",
                "" if f.get("half_width") is None else "±" + shown(name, f["half_width"]),
                ", ".join(shown(name, v) for v in f.get("values") or []),
            )
        )
    n = rep.get("count")
    head = (
        f"<h2 id='repeats'>Repetitions: {esc(n)} runs, 95% intervals</h2>"
        f"<p>{esc(rep.get('reset'))}. Mean ± t(0.975, {esc((n or 1) - 1)} dof) × sd / √n over the repetitions "
        f"(docs/verdicts.md). {esc(rep.get('summary_note', ''))}.</p>"
    )
    return H(
        head + table(("figure", "mean", "sd", "95% interval", "half width", "per repetition"), rows, id="repeats-table")
    )


def section_cache(s: Figures) -> H:
    """The whole run's prompt-cache figures (docs/metrics.md, "Prompt cache"); nothing without them.
    Every key of them came together: a file has all of them or no cache figures."""
    c: CacheFigures | None = s.get("cache")
    if not c:
        return H("")
    hit, miss = c["ttft_hit"], c["ttft_miss"]
    facts = [
        ("requests with a cached count reported", num(c["requests_reported"])),
        (
            "cached / prompt tokens (hit ratio)",
            f"{num(c['cached_tokens'])} / {num(c['prompt_tokens'])} ({pct(c['hit_ratio'])} %)",
        ),
        (
            "ideal cached / prompt tokens (unbounded prefix cache)",
            f"{num(c['ideal_cached_tokens'])} / {num(c['ideal_prompt_tokens'])} "
            f"({pct(c['ideal_hit_ratio'])} %)"
            f" over {num(c['ideal_requests'])} requests",
        ),
        ("achieved / ideal", f"{pct(c['achieved_vs_ideal'])} % over {num(c['both_requests'])} requests"),
        (
            f"hits / misses (hit: at least {c['hit_threshold']:.0%} of the prompt cached)",
            f"{num(c['hit_requests'])} / {num(c['miss_requests'])}",
        ),
        ("TTFT p50 / p99, hit", f"{ms(hit.get('p50'))} / {ms(hit.get('p99'))} ms"),
        ("TTFT p50 / p99, miss", f"{ms(miss.get('p50'))} / {ms(miss.get('p99'))} ms"),
    ]
    return H("<h3 id='cache'>Prompt cache</h3>" + kv_table(facts, id="cache-facts"))


GROUP_HEAD = (
    "finished",
    "ok",
    "failed",
    "failures",
    "tokens in",
    "tokens out",
    "output tok/s",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "TPOT p50 ms",
    "E2E p50 ms",
    "E2E p99 ms",
    "cached / prompt",
    "achieved / ideal",
)


def section_groups(s: Figures) -> H:
    """A table per endpoint and per model (only when the run had more than one of either)."""
    out = []
    for label, groups in (("endpoint", s.get("by_endpoint")), ("model", s.get("by_model"))):
        if not groups:
            continue
        dim = f"by_{label}"
        rows = []
        for key, g in groups.items():
            lat = g.get("latency") or {}
            cache = g.get("cache") or {}
            failures = ", ".join(f"{k} {v}" for k, v in (g.get("failures") or {}).items()) or "-"
            rows.append(
                (
                    key,
                    num(g.get("finished")),
                    num(g.get("ok")),
                    num(g.get("failed")),
                    failures,
                    num(g.get("tokens_in")),
                    num(g.get("tokens_out")),
                    num(g.get("output_tokens_per_s")),
                    ms((lat.get("ttft") or {}).get("p50")),
                    ms((lat.get("ttft") or {}).get("p99")),
                    ms((lat.get("tpot") or {}).get("p50")),
                    ms((lat.get("e2e") or {}).get("p50")),
                    ms((lat.get("e2e") or {}).get("p99")),
                    "-" if cache.get("hit_ratio") is None else f"{pct(cache['hit_ratio'])} %",
                    "-" if cache.get("achieved_vs_ideal") is None else f"{pct(cache['achieved_vs_ideal'])} %",
                )
            )
        out.append(f"<h3 id='{dim}'>Per {label}</h3>" + str(table((label,) + GROUP_HEAD, rows, id=f"{dim}-table")))
    return H("".join(out))


def section_failures(s: Figures) -> H:
    failures = {k: v for k, v in s["outcomes"].items() if k not in ("ok", *NOT_FAILED) and v}
    if not failures:
        return H("<h3 id='failures'>Failures</h3><p>None.</p>")
    rows = []
    for kind, n in sorted(failures.items(), key=lambda kv: -kv[1]):
        texts = sorted((s["errors"].get(kind) or {}).items(), key=lambda kv: -kv[1])
        samples = "".join(f"<li><code>{esc(t[:500])}</code> × {n_}</li>" for t, n_ in texts)
        rows.append((kind, num(n), H(f"<ul>{samples}</ul>" if samples else "-")))
    out = "<h3 id='failures'>Failures by kind</h3>" + table(
        ("kind", "requests", "sample error texts (count)"), rows, id="failures-table", left=1
    )
    causes = s.get("causes") or {}  # not in a file from before causes were named
    if causes:  # from the servers' own words (protocols/causes.py); a failure they do not name has none
        failed = sum(failures.values())
        crow = [
            (c, num(n), f"{pct(n / failed if failed else 0)} %", _CAUSE_MEANING.get(c, ""))
            for c, n in sorted(causes.items(), key=lambda kv: -kv[1])
        ]
        named = sum(causes.values())
        if failed > named:
            crow.append(
                (
                    "(not named)",
                    num(failed - named),
                    f"{pct((failed - named) / failed)} %",
                    "the server's words name no known cause",
                )
            )
        out += "<h3 id='causes'>Failures by cause</h3>" + table(
            ("cause", "requests", "of failures", "what the server said"), crow, id="causes-table", left=1
        )
    return H(out)


_CAUSE_MEANING = {
    "overlong": "the prompt (plus max tokens) does not fit the model's context",
    "overloaded": "HTTP 429 / 503, or the server said it is busy",
    "oom": "the server ran out of memory",
}


def _resource_panels(order: list, sv: dict, gp: dict, eff: Mapping[str, Any]) -> list:
    """Per-step panels of what the GPU sidecar and the server's /metrics gave (none without data)."""

    def q(src: dict, name: str, stat: str, scale: float = 1.0) -> list[float | None]:
        vals = [((src.get(n) or {}).get(name) or {}).get(stat) for n in order]
        return [None if v is None else v * scale for v in vals]

    def pair(src: dict, name: str, scale: float) -> list:
        return [Line("mean", "mean", q(src, name, "mean", scale)), Line("max", "max", q(src, name, "max", scale), True)]

    def has(*vals: list) -> bool:
        return any(v is not None for vs in vals for v in vs)

    panels = []
    if has(q(gp, "gpu_memory_used_bytes", "mean")):
        limits = []
        total = [v for v in q(gp, "gpu_memory_total_bytes", "max", GIB) if v]
        if total:
            limits.append(("total", f"total {max(total):.0f} GiB", max(total)))
        idle = eff.get("baseline_gpu_memory_gib")
        if idle is not None:
            limits.append(("idle", f"idle before load {idle:.1f} GiB", idle))
        panels.append(Panel("gpumem", "GPU memory used", "GiB", pair(gp, "gpu_memory_used_bytes", GIB), limits))
    if has(q(gp, "gpu_utilization", "mean")):
        panels.append(Panel("gpuutil", "GPU utilisation", "%", pair(gp, "gpu_utilization", 100)))
    if has(q(sv, "kv_cache_usage", "max")):
        panels.append(Panel("kv", "server KV cache use", "%", pair(sv, "kv_cache_usage", 100)))
    if has(q(sv, "running", "mean"), q(sv, "waiting", "mean")):
        panels.append(
            Panel(
                "queue",
                "server requests",
                "requests",
                [
                    Line("running", "running (mean)", q(sv, "running", "mean")),
                    Line("waiting", "waiting (mean)", q(sv, "waiting", "mean")),
                ],
            )
        )
    return panels


def _efficiency_table(eff: Mapping[str, Any]) -> H:
    cols = (
        ("GPU mem GiB", "gpu_memory_used_gib", 1),
        ("beyond idle GiB", "gpu_memory_beyond_baseline_gib", 1),
        ("tok/s per GiB", "output_tokens_per_s_per_gib", 1),
        ("GPU util %", "gpu_utilization_mean", 100),
        ("KV max %", "kv_cache_usage_max", 100),
        ("preempted", "preemptions", 1),
    )
    present = [c for c in cols if any(c[1] in row for row in eff["steps"])]
    rows = [
        (
            e.get("step"),
            num(e.get("offered")),
            num(e.get("output_tokens_per_s")),
            *(num(None if e.get(k) is None else e[k] * scale) for _, k, scale in present),
            "KV saturated" if e.get("kv_saturated") else "",
        )
        for e in eff["steps"]
    ]
    most = eff.get("max_load_before_kv_saturation")
    return H(
        "<h3>Memory efficiency per step</h3>"
        + table(("step", "offered", "tok/s", *(c[0] for c in present), ""), rows, id="efficiency-table")
        + "<p>Highest load before KV-cache saturation or preemption: "
        f"<b>{esc('-' if most is None else f'{most:g}')}</b></p>"
    )


def clock(t: Any, t0: Any = None) -> str:
    """A Unix time as the time of day (UTC), and its seconds after `t0` (the run's start) when
    given: "23:27:35.3 UTC (+12.4 s)". Never a number with thousands separators."""
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        return "-"
    try:
        day = dt.datetime.fromtimestamp(t, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return str(t)
    out = day.strftime("%H:%M:%S.") + f"{day.microsecond // 100_000} UTC"
    if isinstance(t0, (int, float)) and not isinstance(t0, bool) and math.isfinite(t0):
        out += f" (+{t - t0:.1f} s)"
    return out


TIME_KEYS = ("t_from", "t_to")  # Unix times in a scrape window


def _window_rows(w: Mapping[str, Any], t0: Any = None) -> list[tuple[str, str, str]]:
    """A scrape window (ServerSeries.window): gauges as mean / max, counters as increase / rate,
    the times its counters span as clock times (`t0`: the run's start)."""
    rows = []
    for k, v in w.items():
        if k in TIME_KEYS:
            rows.append((k, clock(v, t0), ""))
            continue
        if isinstance(v, dict) and "mean" in v:
            scale, unit = (
                (100, " %")
                if k in ("kv_cache_usage", "gpu_utilization")
                else (GIB, " GiB")
                if k.endswith("_bytes")
                else (1, "")
            )
            rows.append(
                (
                    k,
                    f"mean {num(None if v['mean'] is None else v['mean'] * scale)}{unit}",
                    f"max {num(None if v.get('max') is None else v['max'] * scale)}{unit}",
                )
            )
        elif isinstance(v, dict) and "increase" in v:
            rows.append((k, f"increase {num(v['increase'])}", f"per s {num(v.get('per_s'))}"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            rows.append((k, num(v), ""))
    return rows


def section_resources(r: ResultsDoc) -> H:
    server, gpu = r.get("server_metrics"), r.get("gpu_metrics")
    eff: Mapping[str, Any] = r.get("efficiency") or {}  # the table and the panels read it by column name
    if not (server or gpu or eff):
        return H("")
    out = ["<h2 id='resources'>Server and GPU</h2>"]
    ladder = r.get("ladder")
    lsteps = _ladder_steps(r)
    sv = {w.get("step"): w for w in server.get("steps") or []} if server else {}
    gp = {w.get("step"): w for w in gpu.get("steps") or []} if gpu else {}
    if lsteps and (sv or gp):
        order = [s.get("step") for s in lsteps]
        panels = _resource_panels(order, sv, gp, eff)
        if panels:
            x, xlabel, log_x = _load_axis(lsteps)
            knee = _knee(ladder) if ladder else None
            ki = next((i for i, n in enumerate(order) if knee and n == knee.get("step")), None)
            svg = plots.vs_load(
                "resources", x, panels, xlabel=xlabel, knee=ki, log_x=log_x, width=min(4.0 * len(panels), 13.0)
            )
            out.append(
                figure(
                    svg,
                    "plot-resources",
                    "Per ladder step, over its measurement window: the GPU sidecar's "
                    "memory and utilisation (all GPUs), and the server's own KV-cache use and request queue.",
                )
            )
    if eff.get("steps"):
        out.append(_efficiency_table(eff))
    for label, src in (("server", server), ("GPU", gpu)):
        if not src:
            continue
        source = src["source"] or {}
        if src["run"]:
            head = (
                f"{label} over the whole run ({source.get('server') or 'unknown'}, "
                f"{num(src['run'].get('samples'))} scrapes of {source.get('url') or '-'})"
            )
            rows = _window_rows(src["run"], r["run"].get("started_at"))
            out.append(f"<h3>{esc(head)}</h3>" + table(("quantity", "", ""), rows))
        if source.get("error"):
            failed = source.get("failed")  # absent in results from before it was counted
            what = f"{failed} read(s) failed, the last with " if failed else ""
            out.append(f"<p class='warn'>{esc(label)} metrics: {esc(what)}{esc(source['error'])}</p>")
    return H("".join(out))


def section_workers(r: ResultsDoc) -> H:
    workers = r.get("workers") or []  # as environment (section_environment)
    if not workers:
        return H("")
    rows = [
        (
            w.get("index"),
            w.get("id"),
            num(w.get("reports")),
            num(w.get("sent")),
            num(w.get("finished")),
            "lost" if w.get("lost_at") else "",
            "rejoined" if w.get("rejoined_at") else "",
        )
        for w in workers
    ]
    return H(
        "<h3 id='workers'>Workers</h3>" + table(("index", "id", "reports", "sent", "finished", "", ""), rows, left=2)
    )


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", orjson.dumps(v).decode() if isinstance(v, (list, dict)) else v))
    return out


def section_environment(r: ResultsDoc) -> H:
    # environment and workers: always written, but not required on reading (read_results.REQUIRED):
    # a synthetic file (tests/test_repeat.py's) has neither, and its page leaves them out
    env, run = r.get("environment"), r["run"]
    server = (env.get("server") if env else None) or {}
    out = ["<h2 id='reproduce'>Reproduce this run</h2>"]
    cmd = run.get("command")
    if cmd:
        text = shlex.join(map(str, cmd)) if isinstance(cmd, list) else str(cmd)
        out.append(f"<h3>Command</h3><pre id='command'>{esc(text)}</pre>")
    name = Path(r.get("_path") or "RESULTS.json").name
    if isinstance(r.get("plan"), dict):
        out.append(
            f"<p>The effective plan below runs again with <code>llm-locust run {esc(shlex.quote(name))}</code>"
            " (or saved as a YAML file: <code>llm-locust run plan.yaml</code>).</p>"
        )
    seed = run.get("seed", (run.get("settings") or {}).get("seed"))
    facts = [
        ("started (UTC)", _started(run)),
        ("duration", f"{num(_duration(r))} s"),
        ("random seed", seed),
        *(
            [
                ("llm-locust", env["llm_locust"]),
                ("Locust", env["locust"]),
                ("Python", env["python"]),
                ("platform", env["platform"]),
                ("load generator host", env["hostname"]),
                ("CPUs", env["cpu_count"]),
            ]
            if env
            else [(k, None) for k in ("llm-locust", "Locust", "Python", "platform", "load generator host", "CPUs")]
        ),
        ("runner", run.get("runner")),
        ("workers", len(r.get("workers") or []) or "-"),
        ("target" if len(_targets(r)) < 2 else "targets", ", ".join(_targets(r)) or server.get("url")),
        ("server", server.get("kind")),
        ("server metrics dialect", _dialect(r) or server.get("kind")),
        ("server version", ", ".join(f"{k} {v}" for k, v in (server.get("version") or {}).items()) or "-"),
        ("server version from", server.get("version_endpoint")),
        ("model", server.get("model") or (run.get("server") or {}).get("model")),
    ]
    trace = (env.get("trace") if env else None) or {}
    if trace:
        facts += [
            ("trace file", trace.get("path")),
            ("trace format", trace.get("format") or "detected"),
            ("trace bytes", num(trace.get("bytes"))),
            ("trace sha256", H(f"<span class='mono' id='trace-sha256'>{esc(trace.get('sha256'))}</span>")),
        ]
        if trace.get("error"):
            facts.append(("trace error", trace["error"]))
    elif (run.get("settings") or {}).get("trace"):
        facts.append(("trace file", run["settings"]["trace"]))
    out.append(kv_table(facts, id="environment"))
    models = server.get("models") or []
    if models:
        first = ("id", "owned_by", "root", "max_model_len", "created")
        keys = sorted({k for m in models for k in m}, key=lambda k: (first.index(k) if k in first else 99, k))
        out.append(
            "<h3>Models (/v1/models)</h3>" + table(keys, [[m.get(k) for k in keys] for m in models], id="models")
        )
    gpus = (env.get("gpus") if env else None) or []
    if gpus:
        wanted = ("gpu", "model_name", "uuid", "pci_bus_id", "gpu_instance_id", "driver_version", "cuda_version")
        gpu_keys = [k for k in wanted if any(g.get(k) for g in gpus)]
        out.append("<h3>GPUs</h3>" + table(gpu_keys, [[g.get(k) for k in gpu_keys] for g in gpus], id="gpus"))
    settings = run.get("settings") or {}
    if settings:
        out.append(
            "<h3>Options (run.settings)</h3>" + table(("option", "value"), _flatten(settings), left=2, id="settings")
        )
    plan = r.get("plan")
    if plan is not None:
        text = yaml.safe_dump(plan, sort_keys=False, allow_unicode=True) if isinstance(plan, dict) else str(plan)
        out.append("<h3>Effective plan</h3><pre id='plan'>" + esc(text) + "</pre>")
    out.append(f"<p class='sub'>Results file {esc(name)}: schema {esc(r['schema'])} version {esc(r['version'])}.</p>")
    return H("".join(out))


def _version() -> str:
    try:
        return metadata.version("llm-locust")
    except metadata.PackageNotFoundError:
        return "unknown"


def _ms_or_dash(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:,.1f} ms"


def section_stability(r: ResultsDoc) -> H:
    """The stability plans' verdicts (burst, soak), pass or fail each (docs/verdicts.md, "Stability")."""
    st = r.get("stability") or {}
    if not isinstance(st, dict) or not st:
        return H("")
    rows = []
    b = st.get("burst")
    if isinstance(b, dict):
        rows.append(
            (
                "burst",
                "PASS" if b.get("passed") else "FAIL",
                f"base TTFT p50 {_ms_or_dash(b.get('base_ttft_p50'))}, peak {_ms_or_dash(b.get('peak_ttft_p50'))}, "
                f"recovery {'-' if b.get('recovery_s') is None else num(b['recovery_s'])} s"
                + (f" (limit {num(b['limit'])} s)" if b.get("limit") else ""),
                b.get("reason", ""),
            )
        )
    ov = st.get("overlong")
    if isinstance(ov, dict):
        none: OverlongOthers = {"ok": 0, "failed": 0, "ttft_p50": None, "e2e_p50": None}  # a file without it
        o, bl = ov.get("others") or none, ov.get("baseline")
        rows.append(
            (
                "overlong mix",
                "PASS" if ov.get("passed") else "FAIL",
                f"{ov.get('overlong')} overlong ({ov.get('tokens')} tokens, "
                f"{ov.get('classified')} classified overlong, "
                f"{ov.get('served')} served); others TTFT p50 {_ms_or_dash(o.get('ttft_p50'))}, E2E p50 "
                f"{_ms_or_dash(o.get('e2e_p50'))}"
                + (f"; clean run {_ms_or_dash(bl.get('ttft_p50'))}, {_ms_or_dash(bl.get('e2e_p50'))}" if bl else ""),
                ov.get("reason", ""),
            )
        )
    kv = st.get("kv_pressure")
    if isinstance(kv, dict):
        no_itl: ItlFigures = {"p50": None, "p99": None, "max": None}
        bf, at = kv.get("itl_before") or no_itl, kv.get("itl_after") or no_itl
        rows.append(
            (
                "KV pressure",
                "PASS" if kv.get("passed") else "FAIL",
                f"preemption from {'-' if kv.get('first_load') is None else num(kv['first_load'])}; ITL p50/p99 "
                f"{_ms_or_dash(bf.get('p50'))}/{_ms_or_dash(bf.get('p99'))} before, "
                f"{_ms_or_dash(at.get('p50'))}/{_ms_or_dash(at.get('p99'))} at it",
                kv.get("reason", ""),
            )
        )
    so = st.get("soak")
    if isinstance(so, dict):

        def rel(d):
            d = d or {}
            return "-" if d.get("relative_per_hour") is None else f"{d['relative_per_hour']:+.1%}/h"

        rows.append(
            (
                "soak",
                "PASS" if so.get("passed") else "FAIL",
                f"{so.get('windows')} windows of {so.get('window')} s; TTFT p50 drift {rel(so.get('ttft_drift'))}, "
                f"ITL p50 drift {rel(so.get('itl_drift'))}, error bursts {len(so.get('error_bursts') or [])}",
                so.get("reason", ""),
            )
        )
    if not rows:
        return H("")
    out = [
        "<h2 id='stability'>Stability</h2>",
        table(("plan", "verdict", "figures", "why"), rows, left=4, id="stability-table"),
    ]
    if isinstance(b, dict) and b.get("curve"):
        out.append(
            table(
                ("s after the burst", "TTFT p50 (2 s window)"),
                [(num(t), _ms_or_dash(p)) for t, p in b["curve"]],
                id="burst-curve",
            )
        )
    out.append("<p class='sub'>Formulas, units and pass rules: docs/verdicts.md, \"Stability\".</p>")
    return H("".join(out))


def render(results: ResultsDoc) -> str:
    """The whole page (a str), from a loaded results dict (v1 or v2; missing parts are left out)."""
    body = [
        section_header(results),
        section_repeats(results),
        section_ladder(results),
        section_stability(results),
        section_verdicts(results),
        section_timeseries(results),
        section_distributions(results),
        section_summary(results),
        section_steady(results),
        section_resources(results),
        section_workers(results),
        section_environment(results),
    ]
    toc = [
        ("repeats", "repetitions"),
        ("load", "load"),
        ("steps", "steps"),
        ("stability", "stability"),
        ("verdicts", "efficiency & cost"),
        ("timeline", "timeline"),
        ("distributions", "distributions"),
        ("summary", "whole run"),
        ("phases", "request phases"),
        ("cache", "prompt cache"),
        ("by_endpoint", "per endpoint"),
        ("by_model", "per model"),
        ("failures", "failures"),
        ("steady", "steady window"),
        ("resources", "server & GPU"),
        ("reproduce", "reproduce"),
    ]
    text = "".join(body)
    nav = " ".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in toc if f"id='{a}'" in text)
    title = (results.get("plan") or {}).get("name") if isinstance(results.get("plan"), dict) else None
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<meta name='generator' content='llm-locust {esc(_version())}'>"
        f"<title>{esc(title or 'llm-locust report')}</title><style>{CSS}</style></head>"
        f"<body><main><nav>{nav}</nav>{text}</main></body></html>\n"
    )


def _mask(text: str, results: ResultsDoc) -> str:
    """Belt and braces: the API key of this shell (the variable the run read) never goes in the page."""
    var = (results["run"].get("settings") or {}).get("api_key_env") or "OPENAI_API_KEY"
    for name in {var, "OPENAI_API_KEY"}:
        secret = os.environ.get(name, "")
        if len(secret) >= 8:
            text = text.replace(secret, "***").replace(html.escape(secret, quote=True), "***")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="llm-locust report", description="One self-contained HTML report from a results JSON file."
    )
    p.add_argument("results", help="the results JSON written by `llm-locust run --results`")
    p.add_argument("-o", "--output", default="", help="the HTML file to write (default: RESULTS with .html)")
    args = p.parse_args(argv)
    src = Path(args.results)
    out = Path(args.output) if args.output else src.with_suffix(".html")
    try:  # before reading anything: the output is never the results file, a folder, a link, unwritable
        check_outputs({"-o": str(out)}, {"RESULTS": str(src)})
    except ValueError as e:
        print(f"llm-locust report: {e}", file=sys.stderr)
        return 2
    try:
        results = read_results(src)
    except ResultsError as e:  # it may quote the file: terminal-safe (safe/terminal.py)
        print(f"llm-locust report: {terminal_safe(e)}", file=sys.stderr)
        return 2
    try:
        page = render(results)
    except ImportError as e:
        print(f"llm-locust report: {e.name or e} is needed to draw the plots (pip install matplotlib)", file=sys.stderr)
        return 1
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as e:
        print(
            f"llm-locust report: {src}: malformed results file ({type(e).__name__}: {terminal_safe(e)})",
            file=sys.stderr,
        )
        return 2
    try:
        write_atomic(out, _mask(page, results))
    except OSError as e:
        print(f"llm-locust report: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"report written to {out} ({len(page.encode()) / 1024:,.0f} KiB)")
    if results.get("partial"):
        print(f"partial results: {partial_line(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
