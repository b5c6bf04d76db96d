"""The comparison as aligned plain text (the default format)."""

from __future__ import annotations

from .comparison import Comparison
from .sections import Table, _comparability_lines, _verdict_line, sections


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
