"""Alibaba Bailian / Qwen usage traces (alibaba-edu/qwen-bailian-usagetraces-anon).

``{"chat_id": int, "parent_chat_id": int (-1 = root), "timestamp": s, "input_length": n,
"output_length": n, "type": "text"|..., "turn": n, "hash_ids": [...]}`` per line.
``timestamp`` is float seconds from the trace start (kept); ``hash_ids`` are 16-token blocks.
The conversation id is the root ``chat_id`` of the chain (followed through ``parent_chat_id``), as
decimal text; a parent not seen earlier in the file is taken as the root. ``turn`` is the file's
(1 = first). ``type`` is not kept.

Memory: resolving chains keeps one dict entry (chat_id -> root) per row of the file.
"""

from __future__ import annotations

from collections.abc import Iterator

from llm_locust.workload.formats.reader import (
    Context,
    Format,
    Source,
    blocks_from_rows,
    json_count,
    json_hash_ids,
    json_seconds,
    jsonl_objects,
)

REQUIRED = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length")


def _int_id(obj: dict, key: str, ctx: Context, lineno: int, default: int | None = None) -> int:
    v = obj.get(key, default)
    if type(v) is int:
        return v
    if type(v) is str and len(v) < 100:
        try:
            return int(v)
        except ValueError:
            pass
    if v is None:
        raise ctx.error(lineno, f"missing {key!r}; found keys: {', '.join(obj) or '(none)'}")
    raise ctx.error(lineno, f"{key!r} must be an integer id, found {type(v).__name__} {str(v)[:60]!r}")


def _rows(src: Source, ctx: Context) -> Iterator[tuple]:
    root_of: dict[int, int] = {}
    for lineno, obj in jsonl_objects(src, ctx):
        chat = _int_id(obj, "chat_id", ctx, lineno)
        parent = _int_id(obj, "parent_chat_id", ctx, lineno, default=-1)
        root = chat if parent < 0 else root_of.get(parent, parent)
        root_of[chat] = root
        t = json_seconds(obj, "timestamp", ctx, lineno)
        inp = json_count(obj, "input_length", ctx, lineno, required=True)
        out = json_count(obj, "output_length", ctx, lineno, required=True)
        turn = json_count(obj, "turn", ctx, lineno)
        yield lineno, t, inp, out, str(root), turn, json_hash_ids(obj, "hash_ids", ctx, lineno)


def read(src: Source, ctx: Context):
    return blocks_from_rows(_rows(src, ctx))


FORMAT = Format(
    name="bailian",
    read=read,
    columns=("conversation_id", "turn", "hash_ids"),
    origin="zero",
    block_size=16,
    required=REQUIRED,
    summary=(
        "Bailian/Qwen JSONL: chat_id, parent_chat_id, timestamp (s), input_length, output_length, "
        "turn, hash_ids (16-token blocks)"
    ),
)
