"""Our own JSON Lines trace (schema in docs/traces.md).

One object per line: ``timestamp`` (seconds from the trace start; default 0), ``input_tokens``,
``output_tokens``, ``prompt`` or ``messages``, ``conversation_id``, ``turn``, ``hash_ids`` with
``block_size``, ``model``, ``images``. At least one of prompt / messages / input_tokens. Unknown keys
are ignored.
"""

from __future__ import annotations

from collections.abc import Iterator

from llm_locust.workload.formats.reader import (
    Context,
    Format,
    Source,
    blocks_from_rows,
    json_block_size,
    json_count,
    json_hash_ids,
    json_id,
    json_messages,
    json_seconds,
    json_str,
    jsonl_objects,
)

COLUMNS = ("prompt", "messages", "conversation_id", "turn", "hash_ids", "images", "model")
KEYS = (
    "timestamp",
    "input_tokens",
    "output_tokens",
    "prompt",
    "messages",
    "conversation_id",
    "turn",
    "hash_ids",
    "block_size",
    "model",
    "images",
)


def _rows(src: Source, ctx: Context) -> Iterator[tuple]:
    for lineno, obj in jsonl_objects(src, ctx):
        t = json_seconds(obj, "timestamp", ctx, lineno, default=0.0)
        inp = json_count(obj, "input_tokens", ctx, lineno)
        out = json_count(obj, "output_tokens", ctx, lineno)
        prompt = json_str(obj, "prompt", ctx, lineno)
        messages = json_messages(obj.get("messages"), "messages", ctx, lineno)
        if prompt is None and messages is None and inp is None:
            raise ctx.error(
                lineno,
                "needs one of prompt, messages, input_tokens; found keys: " + (", ".join(obj) or "(none)"),
            )
        hash_ids = json_hash_ids(obj, "hash_ids", ctx, lineno)
        json_block_size(obj, ctx, lineno)
        if hash_ids and ctx.block_size is None:
            raise ctx.error(lineno, "'hash_ids' without 'block_size' (tokens per block)")
        model = json_str(obj, "model", ctx, lineno)
        if not ctx.wants_model(model):
            ctx.skip("model")
            continue
        turn = json_count(obj, "turn", ctx, lineno)
        yield (
            lineno,
            t,
            inp,
            out,
            prompt,
            messages,
            json_id(obj, "conversation_id", ctx, lineno),
            turn,
            hash_ids,
            json_count(obj, "images", ctx, lineno),
            model,
        )


def read(src: Source, ctx: Context):
    return blocks_from_rows(_rows(src, ctx))


FORMAT = Format(
    name="jsonl",
    read=read,
    columns=COLUMNS,
    origin="zero",
    required=(),
    summary="llm-locust JSON Lines: timestamp, input_tokens, output_tokens, prompt|messages, ...",
)
