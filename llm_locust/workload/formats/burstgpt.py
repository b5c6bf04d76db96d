"""BurstGPT (HPMLL/BurstGPT), v1 and v2, columns read by name.

v1: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
v2 inserts ``Session ID`` and ``Elapsed time`` (-> conversation id; elapsed time is not used).
``Timestamp`` is in seconds; files cover later periods too (v2 starts at ~1.9e7 s), so arrivals are
rebased to the earliest row. ``Response tokens == 0`` marks a failed request: skipped and counted
(``skipped["failed"]``) unless ``keep_failed``. The model filter keeps one ``Model`` (case-insensitive);
other rows are counted in ``skipped["model"]``.
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

REQUIRED = ("Timestamp", "Model", "Request tokens", "Response tokens")
OPTIONAL = ("Session ID", "Elapsed time", "Total tokens", "Log Type")


def _rows(src: Source, ctx: Context) -> Iterator[tuple]:
    header, hline, blocks = src.csv_blocks(ctx)
    col = columns_index(header, REQUIRED, OPTIONAL, ctx, hline, "burstgpt")
    ncols = len(header)
    its, imod, iin, iout = (col[c] for c in REQUIRED)
    isess = col.get("Session ID")
    keep_failed = ctx.keep_failed
    want = ctx.wants_model
    for first, lines in blocks:
        for lineno, line in enumerate(lines, first):
            if not line or line.isspace():
                continue
            f = csv_fields(line, ctx, lineno)
            if len(f) != ncols:
                raise ctx.error(lineno, f"expected {ncols} fields ({','.join(header)}), found {len(f)}: {line[:80]!r}")
            t = text_seconds(f[its], "Timestamp", ctx, lineno)
            inp = text_count(f[iin], "Request tokens", ctx, lineno)
            out = text_count(f[iout], "Response tokens", ctx, lineno)
            model = f[imod].strip()
            if not want(model):
                ctx.skip("model")
                continue
            if out == 0 and not keep_failed:
                ctx.skip("failed")
                continue
            sess = f[isess].strip() or None if isess is not None else None
            yield lineno, t, inp, out, sess, model


def read(src: Source, ctx: Context):
    return blocks_from_rows(_rows(src, ctx))


FORMAT = Format(
    name="burstgpt",
    read=read,
    columns=("conversation_id", "model"),
    origin="first",
    required=REQUIRED,
    summary="BurstGPT v1/v2 CSV: Timestamp,[Session ID,Elapsed time,]Model,Request tokens,Response tokens,...",
)
