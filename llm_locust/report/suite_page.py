"""The stress suite's page (`llm-locust suite stress`, docs/stress-suite.md): every case on one
page, its verdict (PASS, FAIL, SKIP) with its reason, the figures the verdict read, and its own
run's report and results linked (each written by `llm-locust run --report`). Built from the run
report's parts (report/html.py: CSS, tables, escaping), self-contained as it is."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from llm_locust.report.html import CSP, CSS, H, badge, esc, kv_table, num, table

BADGE = {"PASS": "mark mark-ok", "FAIL": "flag", "SKIP": "mark mark-cut"}


def _link(path: str, base: str) -> H:
    if not path:
        return H("-")
    rel = os.path.relpath(path, base) if base and os.path.isabs(path) else path
    return H(f'<a href="{esc(rel)}">{esc(os.path.basename(path))}</a>')


def _figure(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(_figure(x) for x in v) or "-"
    if isinstance(v, float):
        return num(v)
    return "-" if v is None else str(v)


def _label(key: str) -> str:
    """A figure's name with its unit: the latencies and times the verdicts read are in seconds."""
    return f"{key} (s)" if "ttft" in key or key.endswith("_s") else key


def _clock(t: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if isinstance(t, (int, float)) else "-"


def _case_section(row: Mapping[str, Any], base: str) -> str:
    figures = [(_label(k), _figure(v)) for k, v in (row.get("figures") or {}).items()]
    facts = [
        ("plan", row.get("plan")),
        ("faults injected", ", ".join(row.get("faults") or []) or "none"),
        ("seconds", num(row.get("seconds"))),
        ("run exit status", row.get("code")),
        ("results", _link(row.get("results", ""), base)),
        ("report", _link(row.get("report", ""), base)),
    ]
    return (
        f"<section id='case-{esc(row['case'])}'><h2>{esc(row['case'])} "
        f"{badge(BADGE.get(row['status'], 'mark'), row['status'])}</h2>"
        f"<p class=sub>{esc(row.get('what'))}</p><p class=verdict>{esc(row['reason'])}</p>"
        f"{kv_table(facts + figures, id='case-' + str(row['case']) + '-facts')}</section>"
    )


def render(doc: Mapping[str, Any], base: str = "") -> str:
    """The page: the suite's facts, one table row per case, then a section per case."""
    rows = list(doc.get("cases") or [])
    head = ["case", "verdict", "reason", "seconds", "report"]
    table_rows = [
        [
            H(f"<a href='#case-{esc(r['case'])}'>{esc(r['case'])}</a>"),
            badge(BADGE.get(r["status"], "mark"), r["status"]),
            r["reason"],
            num(r.get("seconds")),
            _link(r.get("report", ""), base),
        ]
        for r in rows
    ]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("PASS", "FAIL", "SKIP")}
    sim = doc.get("simulator") or {}
    facts = [
        (
            "server",
            doc.get("host") or f"the built-in simulator, started per case ({sim.get('context'):,}-token context)",
        ),
        ("started", _clock(doc.get("started_at"))),
        ("ended", _clock(doc.get("ended_at"))),
        (
            "cases",
            f"{len(rows)} of {len(doc.get('planned') or rows)} run: "
            + ", ".join(f"{n} {s}" for s, n in counts.items()),
        ),
        ("command", " ".join(doc.get("command") or [])),
    ]
    stop = doc.get("interrupted")
    warn = (
        f"<div class=warn id=suite-interrupted><b>INTERRUPTED by {esc(stop.get('signal'))} "
        f"({esc(stop.get('phase'))}): the cases that finished are kept</b></div>"
        if stop
        else ""
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>llm-locust stress suite</title><style>{CSS}</style></head><body><main>"
        f"<h1>Stress suite</h1>{warn}{kv_table(facts, id='suite-facts')}"
        f"<h2>Cases</h2>{table(head, table_rows, left=3, id='suite-table')}"
        + "".join(_case_section(r, base) for r in rows)
        + "</main></body></html>\n"
    )
