"""The end-of-run summary, from `figures()` output: 80 columns unless the terminal (or COLUMNS)
is wider; every term it prints is defined in docs/metrics.md, and the latency rows under the table."""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from llm_locust.metrics.aggregate import NOT_FAILED, client_line
from llm_locust.report.precision import pm, precision_lines
from llm_locust.safe.terminal import terminal_safe
from llm_locust.schema import CacheFigures, Figures, Warmup

ROWS = (
    ("TTFT", "ttft"),
    ("TTFT incl. queue", "ttft_queue"),
    ("ITL", "itl"),
    ("Inter-chunk", "inter_chunk"),
    ("TPOT", "tpot"),
    ("E2E", "e2e"),
    ("Schedule lag", "schedule_lag"),
)
COLS = ("p50", "p90", "p99", "p99.9", "mean", "max")


# What each row is, printed under the table (docs/metrics.md has the full definitions).
LEGEND = {
    "ttft": "TTFT: request sent -> first token",
    "ttft_queue": "TTFT incl. queue: the time it was due -> first token (an open loop's wait to send)",
    "ttft_tool": "TTFT tool call: sent -> first tool-call token",
    "itl": "ITL: between tokens (a chunk's tokens spread over its gap)",
    "inter_chunk": "Inter-chunk: between chunks as read",
    "tpot": "TPOT: (E2E - TTFT) / (output tokens - 1)",
    "e2e": "E2E: sent -> last byte",
    "schedule_lag": "Schedule lag: how late a request was sent against its due time",
}
# The request phases (docs/metrics.md, "Request phases"), in the order a request goes through them.
# (label, Phases key): Literal, so that a read of a phase by its key is checked (mypy)
PHASE_ROWS: tuple[tuple[str, Literal["connect", "send", "wait", "first_token", "receive"]], ...] = (
    ("Connect", "connect"),
    ("Send", "send"),
    ("Wait (headers)", "wait"),
    ("First token", "first_token"),
    ("Receive", "receive"),
)
OPEN_LOOP_ONLY = ("ttft_queue", "schedule_lag")  # equal to TTFT and 0 in a closed loop: not printed there
MIN_WIDTH = 80


def width() -> int:
    """80 columns, or the terminal's (or COLUMNS') when wider."""
    return max(MIN_WIDTH, shutil.get_terminal_size((MIN_WIDTH, 24)).columns)


def fit(lines: list[str], cols: int) -> list[str]:
    """Each line of prose within `cols`, wrapped at spaces, continuations indented two spaces; a
    table (a header, a rule of dashes under each column, its rows up to a blank line) wider than
    `cols` is dealt into blocks of its columns, each repeating the first (split_table); other
    aligned lines are left whole: wrapping one breaks its columns."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and _is_rule(lines[i + 1]):
            end = next((k for k in range(i + 2, len(lines)) if not lines[k].strip()), len(lines))
            out += split_table(lines[i:end], cols)
            i = end
            continue
        line = lines[i]
        i += 1
        if len(line) <= cols or "  " in line.strip():
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out += textwrap.wrap(line, cols, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    return out


_RULE = re.compile(r"^\s*-+(\s+-+)+\s*$")


def _is_rule(line: str) -> bool:
    """A table's rule: runs of dashes, one under each column, spaces between (two columns at least)."""
    return bool(_RULE.match(line))


def split_table(table: list[str], cols: int) -> list[str]:
    """A table (header, rule, rows) within `cols`: as it is when it fits, else its columns (found
    from the rule's runs of dashes) dealt into blocks side by side that fit, each block repeating
    the first column, blocks apart by a blank line. A column wider than `cols` stays whole."""
    if max(len(x) for x in table) <= cols:
        return table
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", table[1])]
    spans[-1] = (spans[-1][0], max(spans[-1][1], *(len(x) for x in table)))  # the last column's cells run on
    first, rest = spans[0], spans[1:]
    blocks: list[list[tuple[int, int]]] = [[]]
    used = first[1] - first[0]
    for a, b in rest:
        if blocks[-1] and used + 2 + (b - a) > cols:
            blocks.append([])
            used = first[1] - first[0]
        blocks[-1].append((a, b))
        used += 2 + (b - a)
    out: list[str] = []
    for n, block in enumerate(blocks):
        if n:
            out.append("")
        for line in table:
            cells = [line[first[0] : first[1]].ljust(first[1] - first[0])]
            cells += [line[a:b].ljust(b - a) for a, b in block]
            out.append("  ".join(cells).rstrip())
    return out


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def latency_rows(fig: Figures, open_loop: bool = True) -> list[tuple[str, str]]:
    """The table's rows: TTFT tool call when tool calls were timed; the queue rows in an open loop."""
    rows = [r for r in ROWS if open_loop or r[1] not in OPEN_LOOP_ONLY]
    if fig["latency"].get("ttft_tool", {"count": 0})["count"]:
        rows.insert(1, ("TTFT tool call", "ttft_tool"))
    return rows


def latency_table(fig: Figures, open_loop: bool = True) -> list[str]:
    """The latency table in milliseconds (77 columns), and the rows' meanings under it."""
    head = f"{'latency (ms)':<16}{'count':>7}" + "".join(f"{c:>9}" for c in COLS)
    lines = [head, "-" * len(head)]
    rows = latency_rows(fig, open_loop)
    for label, key in rows:
        s: Mapping[str, Any] = fig["latency"].get(key) or {}
        lines.append(f"{label:<16}{s.get('count', 0):>7}" + "".join(f"{_ms(s.get(c)):>9}" for c in COLS))
    lines += ["  " + LEGEND[key] for _, key in rows]
    return lines


def ttft_parts(ph: Mapping[str, Any]) -> list[tuple[str, float]]:
    """TTFT's parts (send, wait, first token) as (word, mean seconds), those timed: their means
    add up to TTFT's mean (the phases of each request add up to its TTFT)."""
    out = []
    for word, key in (("send", "send"), ("wait", "wait"), ("first token", "first_token")):
        mean = (ph.get(key) or {}).get("mean")
        if isinstance(mean, (int, float)):
            out.append((word, float(mean)))
    return out


def phase_lines(ph: Mapping[str, Any] | None) -> list[str]:
    """The request phases' table (ms), what each is, and TTFT as the sum of its parts' means
    (means add up; percentiles do not); nothing when the run timed no phases."""
    if not ph:
        return []
    head = f"{'phases (ms)':<16}{'count':>7}" + "".join(f"{c:>9}" for c in COLS)
    lines = [head, "-" * len(head)]
    for label, key in PHASE_ROWS:
        s = ph.get(key) or {}
        lines.append(f"{label:<16}{s.get('count', 0):>7}" + "".join(f"{_ms(s.get(c)):>9}" for c in COLS))
    lines += [
        "  Connect: opening the connection, before the send (0 when kept alive)",
        "  Send: writing the request; Wait: written -> response headers",
        "  First token: headers -> first token; Receive: first token -> last byte",
    ]
    parts = ttft_parts(ph)
    ttft = sum(v for _, v in parts)
    lines.append(f"  TTFT mean {_ms(ttft)} ms = " + " + ".join(f"{w} {_ms(v)}" for w, v in parts) + " (phase means)")
    conn = ph.get("connections") or {}
    new = ph.get("connect_new") or {}
    if not (ph.get("connect") or {}).get("count"):
        return lines + ["  connect: not timed by this API's client"]
    lines.append(
        f"  connections: {conn.get('new', 0)} new (connect p50 {_ms(new.get('p50'))} ms,"
        f" max {_ms(new.get('max'))} ms), {conn.get('reused', 0)} kept alive"
    )
    return lines


def step_phase_lines(steps: Sequence[tuple[int, Mapping[str, Any] | None]]) -> list[str]:
    """A ladder's request phases per step, p50/p99 in ms (docs/metrics.md "Request phases"); none
    when no step timed them."""
    rows = [(k, ph) for k, ph in steps if ph]
    if not rows:
        return []
    names = [label for label, _ in PHASE_ROWS]
    cells = [[str(k), *(f"{_ms((ph.get(key) or {}).get('p50'))}/{_ms((ph.get(key) or {}).get('p99'))}"
                         for _, key in PHASE_ROWS)] for k, ph in rows]  # fmt: skip
    head = ["step", *(f"{n} p50/p99" for n in names)]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]

    def line(c: list[str]) -> str:
        return "  ".join(x.rjust(w) for x, w in zip(c, widths, strict=True)).rstrip()

    return ["request phases per step (ms)", line(head), line(["-" * w for w in widths]), *map(line, cells)]


def cancel_line(c: Mapping[str, Any]) -> str:
    """--cancel's draws against what they did: a share of 30% may cancel 16%, as a request that
    ends before its cancel time is not cancelled (figures `client_cancel`)."""
    rest = [f"{c['ended_first']} ended before their cancel time"]
    if c.get("stopped"):
        rest.append(f"{c['stopped']} stopped in flight by the run's end")
    return f"client cancellations (--cancel): {c['cancelled']} of {c['drawn']} drawn took effect; " + ", ".join(rest)


def format_summary(
    fig: Figures, title: str = "llm-locust summary", *, open_loop: bool = True, cols: int | None = None
) -> str:
    """The summary's text; `cols`: wrapped to that width (printing passes width())."""
    lines = [title, ""] + latency_table(fig, open_loop) + [""]
    lines += precision_lines(fig)  # each headline figure's precision, and a blank line; none without
    if fig.get("phases"):
        lines += phase_lines(fig["phases"]) + [""]
    lines.append(
        f"requests: sent {fig['sent']}, ok {fig['ok']}, failed {fig['failed']} ({fig['error_rate'] * 100:.1f}%),"
        f" cancelled at stop {fig['cancelled']},"
        + (f" cancelled by the client {fig['client_cancelled']}," if fig.get("client_cancelled") else "")
        + (f" lost {fig.get('lost', 0)}," if fig.get("lost") or fig.get("workers_lost") else "")
        + f" over {fig['duration_s']:.1f} s"
    )
    if fig.get("client_cancel"):
        lines.append(cancel_line(fig["client_cancel"]))
    if fig.get("lost") or fig.get("workers_lost"):
        lines.append(
            f"workers lost: {fig.get('workers_lost', 0)}; the {fig.get('lost', 0)} request(s) they had in flight"
            " at their last report have no outcome, and what they sent after it is missing from these figures"
        )
    lines.append(
        f"throughput: {fig['output_tokens_per_s']:.1f} output tokens/s, {fig['requests_per_s']:.2f} requests/s,"
        f" {fig['concurrency']:.1f} in flight (mean)"
    )
    lines.append(
        f"tokens: in {fig['tokens_in']}, out {fig['tokens_out']} (counted from {_kv(fig['n_out_sources'])}),"
        f" length mismatches {fig['length_mismatch']}/{fig['length_checked']}"
    )
    if fig.get("goodput_requests_per_s"):
        lines.append(
            f"goodput: {fig['goodput_requests_per_s']:.2f} requests/s, {fig['goodput_tokens_per_s']:.1f} tokens/s"
        )
    for api, k in (fig.get("kinds") or {}).items():
        lat = k["latency"]
        lines.append(
            f"{api}: {k['ok']} ok, {k['failed']} failed; "
            f"latency p50 {_ms(lat.get('p50'))} ms, p99 {_ms(lat.get('p99'))} ms;"
            f" {k['items_per_s']:.1f} items/s, {k['input_tokens_per_s']:.1f} input tokens/s"
        )
    img = fig.get("images")
    if img and img["sent"]:
        lines.append(f"images: {img['sent']} sent ({img['per_request']:.2f} a request), {img['bytes'] / 1e6:.1f} MB")
    aud = fig.get("audio")
    if aud and aud["sent"]:
        lines.append(
            f"audio: {aud['sent']} clips sent ({aud['per_request']:.2f} a request), {aud['bytes'] / 1e6:.1f} MB"
        )
    so = fig.get("structured_output")
    if so and so["checked"]:
        lines.append(
            f"structured output: {so['valid_rate']:.1%} valid against the schema, "
            f"{so['parse_rate']:.1%} parse as JSON ({so['checked']} checked)"
        )
    acc = fig.get("accuracy")
    if acc and acc["graded"]:
        lines.append(
            f"accuracy: {acc['accuracy']:.1%} of graded items answered right "
            f"({acc['correct']}/{acc['graded']} graded, ok replies only)"
        )
    lines += cache_lines(fig.get("cache"))
    for groups, label in ((fig.get("by_endpoint"), "endpoint"), (fig.get("by_model"), "model")):
        if groups:
            lines += group_lines(groups, label)
    failures = {k: v for k, v in fig["outcomes"].items() if k not in ("ok", *NOT_FAILED) and v}
    if failures:
        lines.append("failures by kind:")
        for kind, n in sorted(failures.items(), key=lambda kv: -kv[1]):
            first = terminal_safe(next(iter(fig["errors"].get(kind, {})), ""))  # a server's words: printable
            lines.append(f"  {terminal_safe(kind):<14}{n:>7}  {first[:100]}")
    if fig.get("causes"):
        lines.append(
            "causes: "
            + ", ".join(f"{terminal_safe(c)} {n}" for c, n in sorted(fig["causes"].items(), key=lambda kv: -kv[1]))
        )
    lines.append(client_line(fig["client"]))  # the rule's checks against their limits (docs/metrics.md)
    return "\n".join(fit(lines, cols) if cols else lines)


def warmup_line(w: Warmup) -> str:
    """The summary's warm-up line: what was left out of the figures above, and how it went."""
    ttft = w["latency"]["ttft"].get("p50")
    cold = f", TTFT p50 {ttft * 1000:.0f} ms" if ttft is not None else ""
    names = (("client_cancelled", "cancelled by the client"), ("lost", "lost"))
    more = "".join(f", {words} {n}" for name, words in names if (n := w.get(name)))
    return (
        f"warm-up: {w['rule']}: sent {w['sent']}, ok {w['ok']}, failed {w['failed']}, cancelled {w['cancelled']}"
        f"{more}{cold}; not in the figures above"
    )


def _kv(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def cache_lines(c: CacheFigures | None) -> list[str]:
    """The prompt-cache lines (docs/metrics.md, "Prompt cache"); none when nothing was reported."""
    if not c:
        return []
    lines = []
    if c.get("requests_reported"):
        lines.append(
            f"prompt cache: {c['cached_tokens']} of {c['prompt_tokens']} prompt tokens served from the server's cache"
            f" ({_ratio(c.get('hit_ratio'))}) over {c['requests_reported']} requests;"
            f" hits {c.get('hit_requests', 0)}, misses {c.get('miss_requests', 0)}"
            f" (hit: at least {c.get('hit_threshold', 0.5):.0%} of the prompt cached)"
        )
        hit, miss = c.get("ttft_hit") or {}, c.get("ttft_miss") or {}
        if hit.get("count") or miss.get("count"):
            lines.append(
                f"  TTFT p50 hit {_ms(hit.get('p50'))} ms, miss {_ms(miss.get('p50'))} ms;"
                f" p99 hit {_ms(hit.get('p99'))} ms, miss {_ms(miss.get('p99'))} ms"
            )
    if c.get("ideal_requests"):
        lines.append(
            f"  ideal (unbounded prefix cache): {c['ideal_cached_tokens']} of {c['ideal_prompt_tokens']} prompt tokens"
            f" ({_ratio(c.get('ideal_hit_ratio'))}); achieved/ideal {_ratio(c.get('achieved_vs_ideal'))}"
            f" over {c.get('both_requests', 0)} requests with both"
        )
    return lines


GROUP_COLS = ("ok", "failed", "tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "E2E p50", "cached")


def group_lines(groups: dict[str, dict[str, Any]], label: str) -> list[str]:
    """A table of the per-endpoint or per-model figures (latencies in ms); a model's name is the
    server's (/v1/models) or a trace's: printed terminal-safe."""
    groups = {terminal_safe(k): g for k, g in groups.items()}
    width = max([len(label) + 4, *(len(k) for k in groups)]) + 2
    head = f"{'by ' + label:<{width}}" + "".join(f"{c:>10}" for c in GROUP_COLS)
    lines = [head]
    for key, g in groups.items():
        lat = g.get("latency") or {}
        cache = g.get("cache") or {}
        cells = (
            str(g.get("ok", 0)),
            str(g.get("failed", 0)),
            f"{g.get('output_tokens_per_s', 0.0):.1f}",
            _ms((lat.get("ttft") or {}).get("p50")),
            _ms((lat.get("ttft") or {}).get("p99")),
            _ms((lat.get("tpot") or {}).get("p50")),
            _ms((lat.get("e2e") or {}).get("p50")),
            _ratio(cache.get("hit_ratio")),
        )
        lines.append(f"{key:<{width}}" + "".join(f"{c:>10}" for c in cells))
        lines += _group_precision(g.get("intervals"))
    return lines


def _group_precision(iv: dict[str, Any] | None) -> list[str]:
    """A group row's 95% intervals, under it: the table's figures that have one ("±") or say
    how many samples they need."""
    if not iv:
        return []
    lat = iv.get("latency") or {}
    cells = [("tok/s", (iv.get("rates") or {}).get("output_tokens_per_s"))]
    cells += [(f"{m} {p}", (lat.get(m) or {}).get(p)) for m, p in (("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"))]
    cells += [("e2e p50", (lat.get("e2e") or {}).get("p50"))]
    said = [f"{name}{pm(doc)}" for name, doc in cells if doc]
    return [f"  95%: {', '.join(said)}"] if said else []
