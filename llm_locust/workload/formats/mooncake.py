"""Mooncake traces (kvcache-ai/Mooncake, FAST'25 release and the arxiv trace).

``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`` per line.
``timestamp`` is integer milliseconds from the trace start (kept as the origin, /1000 -> seconds);
``hash_ids`` are prefix-block ids of 512 tokens (``ceil(input_length / 512) == len(hash_ids)``).

Speed: a block of lines is parsed with one ``map(orjson.loads, ...)`` and the fields taken with
``map(dict.get, ...)``; a block that does not check out is re-read line by line to name the bad line.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from itertools import chain, repeat
from typing import Any

import orjson

from llm_locust.workload.formats.reader import (
    Context,
    Format,
    Source,
    json_count,
    json_hash_ids,
    json_seconds,
    jsonl_objects_in,
)

REQUIRED = ("timestamp", "input_length", "output_length")
_INT_MAX = 2**31 - 1
_ID_MAX = 2**63 - 1
_TIME_MAX_MS = 1e15  # beyond this json_seconds refuses the time (base._TIME_MAX, in ms)


def _fast(lines: list[str], first: int):
    n = len(lines)
    if not n or "" in lines:
        return None
    try:
        objs = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        return None
    try:
        # JSON values of any type (None when absent) until the type checks below
        ts: list[Any] = list(map(dict.get, objs, repeat("timestamp")))
        ins: list[Any] = list(map(dict.get, objs, repeat("input_length")))
        outs: list[Any] = list(map(dict.get, objs, repeat("output_length")))
        hs: list[Any] = list(map(dict.get, objs, repeat("hash_ids")))
    except TypeError:  # a line that is not an object
        return None
    if set(map(type, ts)) - {int, float} or set(map(type, ins)) != {int} or set(map(type, outs)) != {int}:
        return None
    if min(ts) < 0 or min(ins) < 0 or min(outs) < 0 or max(ins) > _INT_MAX or max(outs) > _INT_MAX:
        return None
    if set(map(type, hs)) - {list, type(None)}:
        return None
    ids = list(chain.from_iterable(filter(None, hs)))
    if ids and (set(map(type, ids)) - {int} or min(ids) < 0 or max(ids) > _ID_MAX):
        return None  # the slow path names the line
    if max(ts) > _TIME_MAX_MS:
        return None
    times = list(map(operator.truediv, ts, repeat(1000.0)))
    return range(first, first + n), times, ins, outs, (hs,)


def _slow_rows(lines: list[str], first: int, ctx: Context) -> Iterator[tuple]:
    for lineno, obj in jsonl_objects_in(lines, first, ctx):
        t = json_seconds(obj, "timestamp", ctx, lineno, scale=0.001)
        inp = json_count(obj, "input_length", ctx, lineno, required=True)
        out = json_count(obj, "output_length", ctx, lineno, required=True)
        yield lineno, t, inp, out, json_hash_ids(obj, "hash_ids", ctx, lineno)


def read(src: Source, ctx: Context):
    for first, lines in src.line_blocks():
        block = _fast(lines, first)
        if block is None:
            rows = list(_slow_rows(lines, first, ctx))
            if not rows:
                continue
            cols = list(zip(*rows, strict=True))  # _slow_rows' rows are all of one arity
            block = cols[0], cols[1], cols[2], cols[3], (cols[4],)
        yield block


FORMAT = Format(
    name="mooncake",
    read=read,
    columns=("hash_ids",),
    origin="zero",
    block_size=512,
    required=REQUIRED,
    summary="Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)",
)
