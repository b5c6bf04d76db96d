"""The comparison as Markdown (GitHub tables), every text escaped."""

from __future__ import annotations

from .comparison import Comparison
from .sections import Table, _comparability_lines, _verdict_line, sections


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
