"""Splitwise simulator request traces (Mutinynet/splitwise-sim ``traces/*.csv``).

``request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size``:
``arrival_timestamp`` in seconds from the trace start (kept), ``prompt_size`` -> input tokens,
``token_size`` -> output tokens; the other columns are not used.
"""

from __future__ import annotations

from collections.abc import Iterator

from llm_locust.workload.formats.reader import (
    Context,
    Format,
    Source,
    blocks_from_rows,
    columns_index,
    csv_fields,
    text_count,
    text_seconds,
)

REQUIRED = ("arrival_timestamp", "prompt_size", "token_size")
OPTIONAL = ("request_id", "request_type", "application_id", "batch_size")


def _rows(src: Source, ctx: Context) -> Iterator[tuple]:
    header, hline, blocks = src.csv_blocks(ctx)
    col = columns_index(header, REQUIRED, OPTIONAL, ctx, hline, "splitwise")
    ncols = len(header)
    it, ii, io = (col[c] for c in REQUIRED)
    for first, lines in blocks:
        for lineno, line in enumerate(lines, first):
            if not line or line.isspace():
                continue
            f = csv_fields(line, ctx, lineno)
            if len(f) != ncols:
                raise ctx.error(lineno, f"expected {ncols} fields ({','.join(header)}), found {len(f)}: {line[:80]!r}")
            yield (
                lineno,
                text_seconds(f[it], "arrival_timestamp", ctx, lineno),
                text_count(f[ii], "prompt_size", ctx, lineno),
                text_count(f[io], "token_size", ctx, lineno),
            )


def read(src: Source, ctx: Context):
    return blocks_from_rows(_rows(src, ctx))


FORMAT = Format(
    name="splitwise",
    read=read,
    columns=(),
    origin="zero",
    required=REQUIRED,
    summary=(
        "Splitwise simulator CSV: request_id,request_type,application_id,"
        "arrival_timestamp (s),batch_size,prompt_size,token_size"
    ),
)
