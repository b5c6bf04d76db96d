"""AIPerf / genai-perf custom datasets: ``mooncake_trace`` and ``multi_turn``.

mooncake_trace, one request per line: ``input_length`` (tokens) or ``text_input`` (prompt text),
optional ``output_length``, ``hash_ids`` (512-token blocks, AIPerf's default block size),
``timestamp`` (ms from the trace start) or ``delay`` (ms after the previous request of the same
``session_id``, or after the previous line when there is no session), ``session_id``.

multi_turn, one conversation per line: ``{"session_id": ..., "turns": [{"text"|"texts": ...,
"timestamp"|"delay": ms, ...}, ...]}``; one record per turn, turn = 1-based position, conversation
id = ``session_id`` (or ``line-N`` when absent). ``output_length`` / ``max_tokens`` on a turn, when
present, give its output length; ``image``/``images`` give the image count. Image entries that
are strings (``images: ["a.png", ...]`` or ``[{"name": ..., "contents": [...]}]``) name the images:
a path is relative to the trace's folder and read when the turn is first sent (a file that cannot be
read then is a TraceError naming the line); paths and URLs (``http(s)://``, ``data:``) make the turn
a chat message with image parts (paths as ``file://`` URLs, read and sent as ``data:`` URLs by
workload.specs).

A request with neither timestamp nor delay arrives with the one before it (same session if any).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from llm_locust.workload.formats.reader import (
    Context,
    Format,
    Source,
    blocks_from_rows,
    json_count,
    json_hash_ids,
    json_id,
    json_seconds,
    json_str,
    jsonl_objects,
)


def _arrival(obj: dict, prev: float, ctx: Context, lineno: int) -> float:
    if obj.get("timestamp") is not None:
        return json_seconds(obj, "timestamp", ctx, lineno, scale=0.001)
    if obj.get("delay") is not None:
        return prev + json_seconds(obj, "delay", ctx, lineno, scale=0.001)
    return prev


def _mooncake_rows(src: Source, ctx: Context) -> Iterator[tuple]:
    last_in: dict[str, float] = {}
    last = 0.0
    for lineno, obj in jsonl_objects(src, ctx):
        sess = json_id(obj, "session_id", ctx, lineno)
        prev = last_in.get(sess, 0.0) if sess is not None else last
        t = _arrival(obj, prev, ctx, lineno)
        if sess is not None:
            last_in[sess] = t
        last = t
        inp = json_count(obj, "input_length", ctx, lineno)
        text = json_str(obj, "text_input", ctx, lineno)
        if inp is None and text is None:
            raise ctx.error(lineno, "needs 'input_length' or 'text_input'; found keys: " + (", ".join(obj) or "(none)"))
        out = json_count(obj, "output_length", ctx, lineno)
        yield lineno, t, inp, out, text, sess, json_hash_ids(obj, "hash_ids", ctx, lineno)


def _texts(turn: dict, ctx: Context, lineno: int) -> str | None:
    if turn.get("text") is not None:
        return json_str(turn, "text", ctx, lineno)
    texts = turn.get("texts")
    if texts is None:
        return None
    if type(texts) is not list:
        raise ctx.error(lineno, "'texts' must be a list")
    parts: list[str] = []
    for x in texts:
        if type(x) is str:
            parts.append(x)
        elif type(x) is dict and type(x.get("contents")) is list:
            parts.extend(c for c in x["contents"] if type(c) is str)
        else:
            raise ctx.error(lineno, "'texts' entries must be strings or {name, contents} objects")
    return "\n".join(parts)


def _count_media(turn: dict) -> int | None:
    n = 0
    if turn.get("image"):
        n += 1
    imgs: Any = turn.get("images")
    if type(imgs) is list:
        n += len(imgs)
    return n or None


_URL_PREFIXES = ("http://", "https://", "data:", "file://")


def _image_refs(turn: dict, ctx: Context, lineno: int, k: int) -> list[str]:
    """The image URLs a turn names (paths as absolute file:// URLs)."""
    names: list[str] = []
    one = turn.get("image")
    if type(one) is str and one:
        names.append(one)
    imgs: Any = turn.get("images")
    if type(imgs) is list:
        for x in imgs:
            if type(x) is str and x:
                names.append(x)
            elif type(x) is dict and type(x.get("contents")) is list:
                names.extend(c for c in x["contents"] if type(c) is str and c)
    urls = []
    base = os.path.dirname(os.path.abspath(ctx.name))
    for name in names:
        if name.startswith(_URL_PREFIXES[:3]):
            urls.append(name)
            continue
        if len(name) > 1024:  # inline base64 (AIPerf accepts it bare), not a path
            urls.append("data:image/png;base64," + name)
            continue
        path = name[7:] if name.startswith("file://") else name
        # an absolute path stays as it is; read when first sent (workload.specs), so a trace whose
        # image files are elsewhere still loads for its counts; one that cannot be read then is a
        # TraceError naming this line
        urls.append("file://" + os.path.join(base, path))
    return urls


def _multi_turn_rows(src: Source, ctx: Context) -> Iterator[tuple]:
    for lineno, obj in jsonl_objects(src, ctx):
        turns = obj.get("turns")
        if type(turns) is not list or not turns:
            raise ctx.error(lineno, "multi_turn line needs a non-empty 'turns' list; found keys: " + ", ".join(obj))
        sess = json_id(obj, "session_id", ctx, lineno) or f"line-{lineno}"
        t = 0.0
        for k, turn in enumerate(turns, 1):
            if type(turn) is not dict:
                raise ctx.error(lineno, f"turn {k} is not a JSON object")
            t = _arrival(turn, t, ctx, lineno)
            text = _texts(turn, ctx, lineno)
            inp = json_count(turn, "input_length", ctx, lineno)
            if text is None and inp is None:
                raise ctx.error(lineno, f"turn {k} has no 'text'/'texts'; found keys: " + ", ".join(turn))
            out = json_count(turn, "output_length", ctx, lineno)
            if out is None:
                out = json_count(turn, "max_tokens", ctx, lineno)
            messages = None
            refs = _image_refs(turn, ctx, lineno, k) if text is not None else ()
            if refs:
                parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
                parts.extend({"type": "image_url", "image_url": {"url": u}} for u in refs)
                messages = [{"role": "user", "content": parts}]  # the prompt stays for text-only routes
            yield lineno, t, inp, out, text, sess, k, _count_media(turn), messages


def _read_mooncake(src: Source, ctx: Context):
    return blocks_from_rows(_mooncake_rows(src, ctx))


def _read_multi_turn(src: Source, ctx: Context):
    return blocks_from_rows(_multi_turn_rows(src, ctx))


MOONCAKE_TRACE = Format(
    name="aiperf-mooncake",
    read=_read_mooncake,
    columns=("prompt", "conversation_id", "hash_ids"),
    origin="zero",
    block_size=512,
    required=("input_length|text_input",),
    summary=(
        "AIPerf mooncake_trace JSONL: input_length|text_input, output_length, hash_ids, timestamp|delay (ms), "
        "session_id"
    ),
)
MULTI_TURN = Format(
    name="aiperf-multi-turn",
    read=_read_multi_turn,
    columns=("prompt", "conversation_id", "turn", "images", "messages"),
    origin="zero",
    required=("turns",),
    summary="AIPerf multi_turn JSONL: session_id, turns: [{text|texts, timestamp|delay (ms)}]",
)
FORMATS = (MOONCAKE_TRACE, MULTI_TURN)
