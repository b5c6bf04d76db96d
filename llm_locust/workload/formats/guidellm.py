"""GuideLLM file datasets, JSON Lines or CSV.

A ``prompt`` column/key (the text) plus, optionally, ``prompt_tokens_count`` (-> input_tokens) and
``output_tokens_count`` (-> output_tokens). No timestamps: arrival 0. CSV fields may be quoted and
span lines (the record's first line is reported).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

from llm_locust.workload.formats.reader import (
    Context,
    Format,
    Source,
    blocks_from_rows,
    columns_index,
    json_count,
    jsonl_objects,
    text_count,
)

COUNT_KEYS = ("prompt_tokens_count", "output_tokens_count")


def _jsonl_rows(src: Source, ctx: Context) -> Iterator[tuple]:
    for lineno, obj in jsonl_objects(src, ctx):
        prompt = obj.get("prompt")
        if type(prompt) is not str:
            if prompt is None:
                raise ctx.error(lineno, "missing 'prompt'; found keys: " + (", ".join(obj) or "(none)"))
            raise ctx.error(lineno, f"'prompt' must be a string, found {type(prompt).__name__}")
        inp = json_count(obj, "prompt_tokens_count", ctx, lineno)
        out = json_count(obj, "output_tokens_count", ctx, lineno)
        yield lineno, 0.0, inp, out, prompt


def _csv_rows(src: Source, ctx: Context) -> Iterator[tuple]:
    header, hline, blocks = src.csv_blocks(ctx)
    col = columns_index(header, ("prompt",), COUNT_KEYS, ctx, hline, "guidellm")
    ip, ii, io = col["prompt"], col.get("prompt_tokens_count"), col.get("output_tokens_count")

    def lines():
        for _first, block in blocks:
            for ln in block:
                yield ln + "\n"

    reader = csv.reader(lines())
    at = hline  # line number of the last line the reader consumed
    while True:
        start = at + 1
        try:
            f = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise ctx.error(hline + reader.line_num, f"bad CSV: {e}") from None
        at = hline + reader.line_num
        if not f or (len(f) == 1 and not f[0].strip()):
            continue
        if len(f) != len(header):
            raise ctx.error(start, f"expected {len(header)} fields ({','.join(header)}), found {len(f)}")
        inp = text_count(f[ii], "prompt_tokens_count", ctx, start) if ii is not None and f[ii].strip() else None
        out = text_count(f[io], "output_tokens_count", ctx, start) if io is not None and f[io].strip() else None
        yield start, 0.0, inp, out, f[ip]


def read(src: Source, ctx: Context):
    head = src.head().lstrip()
    rows = _jsonl_rows(src, ctx) if head.startswith("{") else _csv_rows(src, ctx)
    return blocks_from_rows(rows)


FORMAT = Format(
    name="guidellm",
    read=read,
    columns=("prompt",),
    origin="zero",
    required=("prompt",),
    summary="GuideLLM JSONL/CSV: prompt, prompt_tokens_count, output_tokens_count",
)
