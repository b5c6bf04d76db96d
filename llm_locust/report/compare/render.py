"""The comparison written out: aligned plain text (the default), Markdown (GitHub tables, every
text escaped) and one self-contained HTML page."""

from __future__ import annotations

import html
from typing import Any

from llm_locust.report.compare.comparison import Comparison
from llm_locust.report.compare.sections import Table, _comparability_lines, _verdict_line, sections


def _text_table(t: Table) -> str:
    cols = len(t.header)
    widths = [max(len(t.header[k]), *(len(r[k]) for r in t.rows)) if t.rows else len(t.header[k]) for k in range(cols)]

    def line(cells: list[str]) -> str:
        parts = [(s.rjust(widths[k]) if k >= t.numeric_from else s.ljust(widths[k])) for k, s in enumerate(cells)]
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
        s.replace("&", "&amp;")
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace("\r", " ")
        .replace("\n", " ")
        .replace("*", "\\*")
        .replace("`", "\\`")
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
        if t.note:  # a line each (the key figures' footnotes)
            out += ["", "  \n".join(_md(x) for x in t.note.split("\n"))]
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
figure.plot{margin:.8em 0;max-width:900px}figure.plot svg{width:100%;height:auto;display:block}
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
        if t.svg:
            out.append(f'<figure class="plot">{t.svg}</figure>')  # drawn by report/plots.py: no external resource
        if t.note:
            out.append(f'<p class="note">{"<br>".join(_h(x) for x in t.note.split(chr(10)))}</p>')
    out.append(f"<p><strong>{_h(_verdict_line(c))}</strong></p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
