"""vLLM benchmark "custom" dataset (``vllm bench serve --dataset-name custom``).

``{"prompt": "..."}`` per line, optionally ``"output_tokens": n``. No timestamps: arrival 0.
"""

from __future__ import annotations

from collections.abc import Iterator

from llm_locust.workload.formats.reader import Context, Format, Source, blocks_from_rows, json_count, jsonl_objects


def _rows(src: Source, ctx: Context) -> Iterator[tuple]:
    for lineno, obj in jsonl_objects(src, ctx):
        prompt = obj.get("prompt")
        if type(prompt) is not str:
            if prompt is None:
                raise ctx.error(lineno, "missing 'prompt'; found keys: " + (", ".join(obj) or "(none)"))
            raise ctx.error(lineno, f"'prompt' must be a string, found {type(prompt).__name__}")
        yield lineno, 0.0, None, json_count(obj, "output_tokens", ctx, lineno), prompt


def read(src: Source, ctx: Context):
    return blocks_from_rows(_rows(src, ctx))


FORMAT = Format(
    name="vllm",
    read=read,
    columns=("prompt",),
    origin="zero",
    required=("prompt",),
    summary='vLLM bench custom JSONL: {"prompt": ..., "output_tokens": n?}',
)
