"""Azure LLM inference traces (Azure/AzurePublicDataset), 2023, 2024 and 2025.

``TIMESTAMP,ContextTokens,GeneratedTokens`` (2025: ``TIMESTAMP,NumImages,ContextTokens,GeneratedTokens``).
TIMESTAMP is a wall-clock time: 2023 naive with 7 fractional digits (``2023-11-16 18:17:03.9799600``),
2024 UTC in mixed forms (``2024-05-12 00:00:00.001163+00:00`` and ``2024-05-12 00:00:00+00:00``),
2025 ISO with ``Z`` (``2024-10-15T12:00:00.269Z``). Arrivals are seconds from the earliest row.

Speed: ``datetime.fromisoformat`` (C) reads all of these forms (the 7th fractional digit, 100 ns,
is dropped) and is faster than parsing the fields by hand in Python; a block of lines is split into
columns with one ``join``/``split`` and converted with ``map``, so no Python bytecode runs per row.
A block that does not convert cleanly is re-read row by row to name the bad line.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import repeat

from llm_locust.workload.formats.reader import Context, Format, Source, columns_index, csv_fields, text_count

_iso = datetime.fromisoformat
_secs = timedelta.total_seconds
_sub = operator.sub

REQUIRED = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _reader(name: str, required: tuple[str, ...]):
    def read(src: Source, ctx: Context) -> Iterator[tuple]:
        header, hline, blocks = src.csv_blocks(ctx)
        col = columns_index(header, required, ("NumImages",), ctx, hline, name)
        ncols = len(header)
        it, ic, ig = col["TIMESTAMP"], col["ContextTokens"], col["GeneratedTokens"]
        ii = col.get("NumImages")
        state = [None]  # the first row's datetime: the time origin
        for first, lines in blocks:
            block = _fast(lines, first, ncols, it, ic, ig, ii, state)
            if block is None:
                block = _slow(lines, first, ncols, header, it, ic, ig, ii, state, ctx)
            if block is not None:
                yield block

    return read


def _fast(lines, first, ncols, it, ic, ig, ii, state):
    n = len(lines)
    if not n or "" in lines:
        return None
    flat = ",".join(lines).split(",")
    if len(flat) != n * ncols:
        return None
    try:
        dts = list(map(_iso, flat[it::ncols]))
        t0 = state[0]
        if t0 is None:
            t0 = dts[0]
        times = list(map(_secs, map(_sub, dts, repeat(t0))))
        ins = list(map(int, flat[ic::ncols]))
        outs = list(map(int, flat[ig::ncols]))
        imgs = list(map(int, flat[ii::ncols])) if ii is not None else None
    except (ValueError, TypeError):
        return None
    if min(ins) < 0 or min(outs) < 0 or max(ins) > 2**31 - 1 or max(outs) > 2**31 - 1:
        return None
    if imgs is not None and (min(imgs) < 0 or max(imgs) > 2**31 - 1):
        return None
    state[0] = t0
    return range(first, first + n), times, ins, outs, (imgs if imgs is not None else [None] * n,)


def _slow(lines, first, ncols, header, it, ic, ig, ii, state, ctx):
    out_lines, times, ins, outs, imgs = [], [], [], [], []
    for lineno, line in enumerate(lines, first):
        if not line or line.isspace():
            continue
        f = csv_fields(line, ctx, lineno)
        if len(f) != ncols:
            raise ctx.error(lineno, f"expected {ncols} fields ({','.join(header)}), found {len(f)}: {line[:80]!r}")
        ts = f[it].strip()
        try:
            dt = _iso(ts)
        except ValueError:
            raise ctx.error(lineno, f"unparseable TIMESTAMP {ts!r}") from None
        if state[0] is None:
            state[0] = dt
        try:
            t = _secs(dt - state[0])
        except TypeError:
            raise ctx.error(
                lineno, f"TIMESTAMP {ts!r} mixes time-zone-aware and naive times with the first row"
            ) from None
        out_lines.append(lineno)
        times.append(t)
        ins.append(text_count(f[ic], "ContextTokens", ctx, lineno))
        outs.append(text_count(f[ig], "GeneratedTokens", ctx, lineno))
        imgs.append(text_count(f[ii], "NumImages", ctx, lineno) if ii is not None else None)
    if not times:
        return None
    return out_lines, times, ins, outs, (imgs,)


def _detect_year(first_timestamp: str) -> str:
    """azure2024 for time-zone-aware times (``+00:00``, ``Z``), azure2023 for naive ones."""
    s = first_timestamp.strip()
    return "azure2024" if s.endswith("Z") or "+" in s[10:] or "-" in s[19:] else "azure2023"


AZURE2023 = Format(
    name="azure2023",
    read=_reader("azure2023", REQUIRED),
    required=REQUIRED,
    summary="Azure LLM inference trace 2023: TIMESTAMP (naive),ContextTokens,GeneratedTokens",
    columns=("images",),
    origin="first",
)
AZURE2024 = Format(
    name="azure2024",
    read=_reader("azure2024", REQUIRED),
    required=REQUIRED,
    summary="Azure LLM inference trace 2024 (week): TIMESTAMP (UTC, +00:00),ContextTokens,GeneratedTokens",
    columns=("images",),
    origin="first",
)
REQUIRED_2025 = ("TIMESTAMP", "NumImages", "ContextTokens", "GeneratedTokens")
AZURE2025 = Format(
    name="azure2025",
    read=_reader("azure2025", REQUIRED_2025),
    required=REQUIRED_2025,
    summary="Azure multimodal trace 2025: TIMESTAMP (ISO Z),NumImages,ContextTokens,GeneratedTokens",
    columns=("images",),
    origin="first",
)
FORMATS = (AZURE2023, AZURE2024, AZURE2025)
