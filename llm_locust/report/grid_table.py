"""An ISL/OSL grid's figures (`llm-locust run --grid`, llm_locust.grid_runs): one row per cell, read
from each cell's results file, the grid results file, the printed table and the HTML page with
its heatmaps.

Pure: plain dicts in, text out (the page's SVG heatmaps are drawn here, one `<rect>` per cell
carrying its value, so a reader and the tests find each cell's figure). A cell's figures are its
own results' (the ladder's knee, the highest load meeting every SLO, the cost verdicts at both):
nothing here measures or recomputes them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from llm_locust.analysis.steps import OFFERED_UNITS
from llm_locust.report.html import CSP, CSS, H, esc, figure, kv_table, num, slo_text, table
from llm_locust.schema import LadderDoc, ResultsDoc, Saturation

GRID_SCHEMA = "llm-locust/grid"
GRID_VERSION = 1

# (key, heading, heatmap title; {unit} is the ladder's load unit)
FIGURES = (
    ("knee_load", "knee ({unit})", "knee: offered load ({unit})"),
    ("knee_output_tokens_per_s", "tok/s at knee", "output tokens/s at the knee"),
    ("sla_load", "SLA load ({unit})", "highest load meeting every SLO ({unit})"),
    ("sla_output_tokens_per_s", "tok/s at SLA", "output tokens/s at the SLA load"),
    ("max_output_tokens_per_s", "max tok/s", "highest steady-state output tokens/s of any step"),
    ("knee_tokens_per_s_per_gpu", "tok/s/GPU knee", "output tokens/s per GPU at the knee"),
    ("sla_tokens_per_s_per_gpu", "tok/s/GPU SLA", "output tokens/s per GPU at the SLA load"),
    ("knee_usd_per_mtok", "$/Mtok knee", "$ per million output tokens at the knee"),
    ("sla_usd_per_mtok", "$/Mtok SLA", "$ per million output tokens at the SLA load"),
)


def _m(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _n(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _sla(ladder: LadderDoc | None, verdict: Saturation | None) -> tuple[float | None, int | None, str, bool]:
    """(load, step, how, lower bound) of the highest load meeting every SLO: the search's answer
    (its probe at that level that met them) or the ladder verdict's highest such step. A lower
    bound when no higher load was measured to break an SLO (the search found none that broke one,
    or no step of the ladder ran above it): the limit is at least that load, the ladder's top."""
    search = ladder.get("sla") if ladder else None
    if search:
        answer = _n(search["answer"])
        probe = next((p for p in search["probes_detail"] if p["met"] and _n(p["level"]) == answer), None)
        lower = answer is not None and search["bracket"][1] is None
        return answer, probe["step"] if probe else None, f"search ({search['reached']})", lower
    if verdict is None:
        return None, None, "ladder", False
    load = _n(verdict["max_slo_load"])
    above = [
        s for s in (ladder["steps"] if ladder else []) if not s.get("cut") and load is not None and s["offered"] > load
    ]
    return load, verdict["max_slo_step"], "ladder", load is not None and not above


def cell_row(doc: ResultsDoc, isl: int, osl: int, path: str = "", code: int = 0) -> dict[str, Any]:
    """One cell's row from its results: the knee, the SLA load, the highest throughput, and the
    cost verdicts (per GPU, $/Mtok; present when the run had --gpus / a price) at both. A part the
    run did not write (no ladder, no verdicts, no knee) leaves its figures None."""
    ladder = doc.get("ladder")
    verdict = ladder["saturation"] if ladder else None
    knee = verdict["saturation"] if verdict else None
    steps = ladder["steps"] if ladder else []
    by_step = {s["step"]: s for s in steps}
    kind = (
        (knee["offered_kind"] if knee else None)
        or (verdict["offered_kind"] if verdict else None)
        or next((s["offered_kind"] for s in steps), "")
    )
    sla_load, sla_step, sla_how, sla_lower = _sla(ladder, verdict)
    cost = doc.get("verdicts")
    cost_steps = {r["step"]: r for r in cost["steps"]} if cost else {}
    knee_cost = cost["knee"] if cost else None
    sla_cost = cost_steps.get(sla_step) if sla_step is not None else None
    sla_row = by_step.get(sla_step) if sla_step is not None else None
    rates = [x for x in (_n(s["output_tokens_per_s"]) for s in steps) if x is not None]
    return {
        "isl": isl,
        "osl": osl,
        "results": path,
        "exit_code": code,
        "kind": kind,
        "unit": OFFERED_UNITS.get(str(kind), ""),
        "steps": len(steps),
        "knee_load": _n(knee["offered"]) if knee else None,
        "knee_step": knee["step"] if knee else None,
        "knee_by": verdict["knee_by"] if verdict else None,
        "knee_output_tokens_per_s": _n(knee["output_tokens_per_s"]) if knee else None,
        "knee_requests_per_s": _n(knee["requests_per_s"]) if knee else None,
        "knee_ttft_p50": _n(knee["latency"].get("ttft_p50")) if knee else None,
        "sla_load": sla_load,
        "sla_step": sla_step,
        "sla_how": sla_how,
        "sla_lower_bound": sla_lower,  # no higher load broke an SLO: the limit is at least sla_load
        "sla_output_tokens_per_s": _n(sla_row["output_tokens_per_s"]) if sla_row else None,
        "max_output_tokens_per_s": max(rates) if rates else None,
        "knee_tokens_per_s_per_gpu": _n(knee_cost.get("output_tokens_per_s_per_gpu")) if knee_cost else None,
        "knee_usd_per_mtok": _n(knee_cost.get("usd_per_million_output_tokens")) if knee_cost else None,
        "sla_tokens_per_s_per_gpu": _n(sla_cost.get("output_tokens_per_s_per_gpu")) if sla_cost else None,
        "sla_usd_per_mtok": _n(sla_cost.get("usd_per_million_output_tokens")) if sla_cost else None,
        "flags": sorted(doc["validity"]["flags"]),
        "stop_reason": ladder["stop_reason"] if ladder else None,
        "interrupted": bool((doc.get("run") or {}).get("interrupted")),  # the cell's own run was cut
    }


def grid_doc(spec: str, cells: list[dict[str, Any]], context: Mapping[str, Any]) -> dict[str, Any]:
    """The grid results file: the spec, its axes, one row per cell, and `context` (ladder, SLOs,
    GPUs, price, the command, the effective plan)."""
    isl = sorted({c["isl"] for c in cells})
    osl = sorted({c["osl"] for c in cells})
    return {
        "schema": GRID_SCHEMA,
        "version": GRID_VERSION,
        "created": time.time(),
        "grid": {"spec": spec, "isl": isl, "osl": osl, **{k: v for k, v in context.items() if k != "plan"}},
        "cells": cells,
        "plan": context.get("plan"),
    }


def _present(cells: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """The figures at least one cell has, headings and titles with the load unit filled in."""
    unit = next((c.get("unit") for c in cells if c.get("unit")), "") or "load"
    return [
        (k, h.format(unit=unit), t.format(unit=unit)) for k, h, t in FIGURES if any(c.get(k) is not None for c in cells)
    ]


def _fmt(v: Any) -> str:
    return "-" if v is None else num(v)


LOWER_BOUND_NOTE = (
    ">= X: no load above X was measured to break an SLO (the ladder's top step, or the search's "
    "highest probe, met every SLO): the highest load meeting every SLO is at least X; raise the "
    "ladder's top to find it"
)


def _show(c: Mapping[str, Any], key: str) -> str:
    """A cell's figure as shown: the SLA load as ">= X" when it is a lower bound (LOWER_BOUND_NOTE)."""
    v = c.get(key)
    if v is not None and key == "sla_load" and c.get("sla_lower_bound"):
        return f">= {num(v)}"
    return _fmt(v)


def _flags(c: Mapping[str, Any], sep: str) -> str:
    flags = list(c.get("flags") or []) + (["interrupted"] if c.get("interrupted") else [])
    return sep.join(flags) or "-"


def interrupted_line(doc: Mapping[str, Any]) -> str:
    """ "INTERRUPTED by SIGINT (where): k of N cells ..." for a grid a signal stopped, else ""."""
    g = _m(doc.get("grid"))
    stop = _m(g.get("interrupted"))
    if not stop:
        return ""
    n = len(doc.get("cells") or [])
    return (
        f"INTERRUPTED by {stop.get('signal')} ({stop.get('phase')}): {n} of {g.get('planned_cells', n)} cells "
        "wrote results; figures kept, not judged"
    )


def format_grid(doc: Mapping[str, Any]) -> str:
    """The printed table: one line per cell, the figures any cell has; a lower-bound SLA load as
    ">= X" with the note below; an interrupted grid's line above."""
    cells = doc.get("cells") or []
    cols = _present(cells)
    head = ["ISL", "OSL"] + [h for _, h, _ in cols] + ["flags"]
    rows = [[str(c["isl"]), str(c["osl"])] + [_show(c, k) for k, _, _ in cols] + [_flags(c, ",")] for c in cells]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join
    out = [f"ISL/OSL grid {_m(doc.get('grid')).get('spec', '')}"]
    out += [x for x in (interrupted_line(doc),) if x]
    out.append(line(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    out.append("-" * len(out[-1]))
    out += [line(x.rjust(w) for x, w in zip(r, widths, strict=True)) for r in rows]
    if any(c.get("sla_lower_bound") and c.get("sla_load") is not None for c in cells):
        out.append(LOWER_BOUND_NOTE)
    return "\n".join(out)


# ---- the heatmap ----

CELL_W, CELL_H, LEFT, TOP = 96, 40, 64, 44
TITLE_PX = 8.0  # a 12 px bold title's width per character, at most (DejaVu Sans Bold ~7.1, Verdana ~8)
LOW, HIGH = (231, 245, 255), (24, 100, 171)  # light to dark blue: low to high


def _color(t: float) -> str:
    return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(LOW, HIGH, strict=True))


def heatmap(cells: Sequence[Mapping[str, Any]], key: str, title: str) -> str:
    """An SVG heatmap of one figure: input lengths down, output lengths across, each cell a
    `<rect id="heat-KEY-isl128-osl64" data-value="V">` shaded from the lowest value (light) to the
    highest (dark), its value written on it (">= X" for a lower bound); a cell without the figure is
    grey with "-"."""
    isl = sorted({c["isl"] for c in cells})
    osl = sorted({c["osl"] for c in cells})
    vals = [v for v in (_n(c.get(key)) for c in cells) if v is not None]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 0.0)
    # as wide as its title too: a grid of one or two output lengths clipped it (issue 35)
    w = max(LEFT + CELL_W * len(osl) + 8, LEFT + math.ceil(TITLE_PX * len(title)) + 8)
    h = TOP + CELL_H * len(isl) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
        # its own size (shrunk only to fit): heatmaps of unlike widths share one type size
        f'style="width:{w}px;max-width:100%;height:auto" '
        f'id="heat-{esc(key)}" role="img" font-family="sans-serif" font-size="12">',
        f"<title>{esc(title)}</title>",
        f'<text x="{LEFT}" y="14" font-weight="600">{esc(title)}</text>',
        f'<text x="{LEFT + CELL_W * len(osl) / 2}" y="30" text-anchor="middle" fill="#495057">'
        "output tokens (OSL)</text>",
        f'<text x="4" y="{TOP - 4}" fill="#495057">ISL</text>',
    ]
    out += [
        f'<text x="{LEFT + CELL_W * j + CELL_W / 2}" y="{TOP - 4}" text-anchor="middle">{o}</text>'
        for j, o in enumerate(osl)
    ]
    by = {(c["isl"], c["osl"]): c for c in cells}
    for i, n_in in enumerate(isl):
        y = TOP + CELL_H * i
        out.append(f'<text x="{LEFT - 6}" y="{y + CELL_H / 2 + 4}" text-anchor="end">{n_in}</text>')
        for j, n_out in enumerate(osl):
            cell = by.get((n_in, n_out), {})
            v = _n(cell.get(key))
            t = (v - lo) / (hi - lo) if v is not None and hi > lo else 1.0
            fill, ink = ("#e9ecef", "#495057") if v is None else (_color(t), "#fff" if t > 0.55 else "#212529")
            x = LEFT + CELL_W * j
            out.append(
                f'<rect id="heat-{esc(key)}-isl{n_in}-osl{n_out}" data-value="{"" if v is None else repr(v)}" '
                f'x="{x}" y="{y}" width="{CELL_W}" height="{CELL_H}" fill="{fill}" stroke="#fff"/>'
                f'<text x="{x + CELL_W / 2}" y="{y + CELL_H / 2 + 4}" text-anchor="middle" fill="{ink}">'
                f"{esc(_show(cell, key) if v is not None else '-')}</text>"
            )
    out.append("</svg>")
    return "".join(out)


# ---- the page ----


def _link(path: str, base: str) -> H | str:
    """A link to a cell's file, relative to the page's folder (the files lie beside it)."""
    if not path:
        return "-"
    rel = os.path.relpath(path, base) if base else path
    return H(f'<a href="{esc(rel)}">{esc(os.path.basename(path))}</a>')


def _facts(g: Mapping[str, Any]) -> list[tuple[str, Any]]:
    slos = ", ".join(slo_text(k, v) for k, v in _m(g.get("slos")).items()) or "none"
    facts = [("grid", g.get("spec")), ("ladder in each cell", g.get("ladder")), ("SLOs", slos)]
    facts += [(k, g.get(k)) for k in ("synthetic", "gpus", "gpu_hour_price") if g.get(k) not in (None, "")]
    return facts


def render(doc: Mapping[str, Any], base: str = "") -> str:
    """The grid's HTML page: its facts, the table (each cell's results and report linked) and one
    heatmap per figure that any cell has. `base`: the page's folder, for the links."""
    g = _m(doc.get("grid"))
    cells = list(doc.get("cells") or [])
    cols = _present(cells)
    head = ["ISL", "OSL"] + [h for _, h, _ in cols] + ["flags", "results", "report"]
    rows = [
        [c["isl"], c["osl"]]
        + [_show(c, k) for k, _, _ in cols]
        + [_flags(c, ", "), _link(c.get("results", ""), base), _link(c.get("report", ""), base)]
        for c in cells
    ]
    maps = "".join(figure(heatmap(cells, k, t), f"fig-heat-{k}") for k, _, t in cols)
    stop = interrupted_line(doc)
    warn = f'<div class="warn" id="grid-interrupted"><b>{esc(stop)}</b></div>' if stop else ""
    lower = any(c.get("sla_lower_bound") and c.get("sla_load") is not None for c in cells)
    note = f'<p id="grid-lower-bound">{esc(LOWER_BOUND_NOTE)}</p>' if lower else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>llm-locust grid {esc(g.get('spec'))}</title><style>{CSS}</style></head><body><main>"
        f"<h1>ISL/OSL grid</h1><p class=sub>{esc(g.get('spec'))}: {len(cells)} cells, one ladder run each</p>"
        f"{warn}{kv_table(_facts(g), id='grid-facts')}"
        f"<h2>Cells</h2>{table(head, rows, left=2, id='grid-table')}{note}"
        f'<h2>Heatmaps</h2><div class="grid">{maps}</div></main></body></html>\n'
    )
