"""The comparison written out: aligned plain text (the default), Markdown (GitHub tables, every
text escaped) and one self-contained HTML page."""

from __future__ import annotations

import html
import textwrap
from typing import Any

from llm_locust.report.compare.comparison import Comparison
from llm_locust.report.compare.sections import Table, _comparability_lines, _verdict_line, sections

# A cell wider than this is wrapped when the table must fit a width (a "not comparable: ..." mark)
CELL_WRAP = 28


def _text_table(t: Table, width: int | None = None) -> str:
    """The table aligned in columns; with `width`, within it: long cells wrapped onto more lines
    and the runs' columns dealt into blocks side by side, each repeating the row names."""
    cols = len(t.header)
    widths = _widths(t)
    if width is None or sum(widths) + 2 * (cols - 1) <= width:
        return _aligned(t, list(range(cols)), widths)
    t = Table(t.title, t.header, [_wrapped(r) for r in t.rows], t.note, t.numeric_from)
    widths = _widths(t)
    blocks: list[list[int]] = []
    block: list[int] = []
    used = widths[0]
    for k in range(1, cols):
        if block and used + 2 + widths[k] > width:
            blocks.append(block)
            block, used = [], widths[0]
        block.append(k)
        used += 2 + widths[k]
    blocks.append(block)
    return "\n\n".join(_aligned(t, [0, *b], widths) for b in blocks)


def _widths(t: Table) -> list[int]:
    return [max([len(t.header[k])] + [len(x) for r in t.rows for x in r[k].split("\n")]) for k in range(len(t.header))]


def _wrapped(row: list[str]) -> list[str]:
    """The row's value cells of more than CELL_WRAP characters wrapped at spaces (one cell, lines
    joined by newlines); the row's name is left whole."""
    out = [row[0]]
    for s in row[1:]:
        wrapped = textwrap.wrap(s, CELL_WRAP, break_long_words=False, break_on_hyphens=False)
        out.append("\n".join(wrapped) if len(s) > CELL_WRAP else s)
    return out


def _aligned(t: Table, keep: list[int], widths: list[int]) -> str:
    """The columns `keep` of the table, a wrapped cell's lines on lines of their own."""

    def lines(cells: list[str]) -> list[str]:
        parts = [cells[k].split("\n") for k in keep]
        height = max(len(p) for p in parts)
        out = []
        for i in range(height):
            row = []
            for k, p in zip(keep, parts, strict=True):
                s = p[i] if i < len(p) else ""
                row.append(s.rjust(widths[k]) if k >= t.numeric_from else s.ljust(widths[k]))
            out.append("  ".join(row).rstrip())
        return out

    out = lines([t.header[k] if k in keep else "" for k in range(len(t.header))])
    out.append("  ".join("-" * widths[k] for k in keep))
    for r in t.rows:
        out += lines(r)
    return "\n".join(out)


def _prose(line: str, width: int | None, indent: str = "") -> list[str]:
    """A line of prose within `width` (None: as it is), continuations indented."""
    if width is None or len(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def render_text(c: Comparison, width: int | None = None) -> str:
    """Aligned plain text; with `width` (the terminal's, or COLUMNS), no line wider than it except
    a word longer than it (a path)."""
    out = [f"llm-locust compare: {len(c.runs)} run{'s' if len(c.runs) != 1 else ''}", ""]
    head, lines = _comparability_lines(c)
    out += _prose(head, width, "  ")
    for x in lines:
        out += _prose(f"  ! {x}" if x.startswith("not comparable") else f"  - {x}", width, "    ")
    for t in sections(c):
        out += ["", t.title, "", _text_table(t, width)]
        if t.note:
            for note in t.note.splitlines():
                out += _prose(note, width, "    ")
    out += ["", *_prose(_verdict_line(c), width, "  ")]
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
