"""Our own session JSON Lines (``llm-locust-sessions``): one turn per line, every `Turn` field writable.

    {"session": "a", "t": 0.0, "new_tokens": 1800, "output_tokens": 120}
    {"session": "a", "gap": 2.5, "role": "tool", "new_tokens": 4000, "output_tokens": 80}
    {"session": "a/1", "parent": "a", "spawned_by_turn": 2, "new_tokens": 900, "output_tokens": 60}

Keys (docs/agentic.md, section Formats, is the reference):

- ``session`` (string or integer, required): the session the turn belongs to; its turns are the
  lines naming it, in file order (lines of different sessions may interleave).
- ``parent`` (id): the session is a subagent of ``parent``; ``spawned_by_turn`` (integer >= 1) is the
  parent's turn that spawns it (1-based; default: the parent's first turn). Either may be on any
  line of the child; two different parents are refused. ``children`` (list of ids) on a turn is the
  other way to say the same thing.
- ``t`` (seconds >= 0): the turn's trace time (`Turn.at`; the turn is never sent before it); the
  first turn's ``t`` is the session's start. ``start`` (seconds) gives the start when the first turn
  has no ``t``; otherwise a top-level session starts at 0 and a subagent at its parent's start.
- ``gap`` (seconds >= 0, default 0): tool or think time before the turn.
- ``new_tokens`` (integer), ``text`` (string), ``messages`` (the turn's chat messages, sent after the history),
  ``role`` ("user" or "tool"), ``output_tokens``, ``input_tokens`` (the whole prompt's length),
  ``hash_ids`` (block mode: the whole prompt's blocks; needs ``input_tokens`` and, once per file,
  ``block_size``), ``model`` (string; the session's model is its first turn's).
At least one of new_tokens, text, messages, hash_ids. Unknown keys are ignored. A session is all
block mode or all history mode.
"""

from __future__ import annotations

from llm_locust.workload.agentic._common import ROLES, check_messages, json_sid
from llm_locust.workload.formats.reader import (
    Context,
    Source,
    json_block_size,
    json_count,
    json_hash_ids,
    json_seconds,
    json_str,
    jsonl_objects,
)
from llm_locust.workload.sessions import Session, SessionBuilder, Turn

NAME = "llm-locust-sessions"
KEYS = frozenset(
    {
        "session",
        "parent",
        "spawned_by_turn",
        "t",
        "start",
        "gap",
        "new_tokens",
        "text",
        "messages",
        "role",
        "output_tokens",
        "input_tokens",
        "hash_ids",
        "block_size",
        "model",
        "children",
    }
)


def _children(obj: dict, ctx: Context, lineno: int) -> tuple[str, ...]:
    v = obj.get("children")
    if v is None:
        return ()
    if type(v) is not list or not all(type(x) in (str, int) and type(x) is not bool for x in v):
        raise ctx.error(lineno, "'children' must be a list of session ids (strings or integers)")
    return tuple(str(x) for x in v)


def read(src: Source, ctx: Context, b: SessionBuilder) -> int | None:
    name = ctx.name
    pending: dict[str, tuple[str, int | None, str]] = {}  # child -> (parent, turn, source)
    for lineno, obj in jsonl_objects(src, ctx):
        src_ = f"{name}:{lineno}"
        sid = json_sid(obj, "session", ctx, lineno, required=True)
        parent = json_sid(obj, "parent", ctx, lineno)
        k = json_count(obj, "spawned_by_turn", ctx, lineno)
        if k is not None and parent is None:
            raise ctx.error(lineno, "'spawned_by_turn' without 'parent'")
        if k == 0:
            raise ctx.error(lineno, "'spawned_by_turn' is 1-based (the parent's first turn is 1)")
        if parent == sid:
            raise ctx.error(lineno, f"session {sid!r} names itself as its parent")
        turn = _turn(obj, ctx, lineno, src_)
        model = json_str(obj, "model", ctx, lineno)
        s = _session(b, obj, ctx, lineno, sid, parent, turn.at, model, src_)
        if s.turns and (s.turns[0].hash_ids is None) != (turn.hash_ids is None):
            raise ctx.error(lineno, f"session {sid!r} mixes block mode (hash_ids) and history mode turns")
        if parent is not None:
            _pend(pending, sid, parent, k, src_, ctx, lineno)
        turn.children = _children(obj, ctx, lineno)
        b.turn(sid, turn)
    for child, (parent, k, src_) in pending.items():
        if k is not None:
            b.spawn(parent, k, child, src_)
    return ctx.block_size


def _turn(obj: dict, ctx: Context, lineno: int, src_: str) -> Turn:
    """The line's turn (children still to set), its fields checked in the order errors are reported."""
    at = json_seconds(obj, "t", ctx, lineno) if obj.get("t") is not None else None
    gap = json_seconds(obj, "gap", ctx, lineno, default=0.0)  # refuses a negative gap, naming the line
    new = json_count(obj, "new_tokens", ctx, lineno)
    text = json_str(obj, "text", ctx, lineno)
    messages = check_messages(obj.get("messages"), "messages", ctx, lineno)
    role = json_str(obj, "role", ctx, lineno) or "user"
    if role not in ROLES:
        raise ctx.error(lineno, f"'role' must be 'user' or 'tool', found {role!r}")
    out = json_count(obj, "output_tokens", ctx, lineno)
    inp = json_count(obj, "input_tokens", ctx, lineno)
    hashes = json_hash_ids(obj, "hash_ids", ctx, lineno)
    json_block_size(obj, ctx, lineno)
    if hashes is not None:
        if ctx.block_size is None:
            raise ctx.error(lineno, "'hash_ids' without 'block_size' (tokens per block, once per file)")
        if inp is None:
            raise ctx.error(lineno, "'hash_ids' without 'input_tokens' (the whole prompt's length)")
    if new is None and text is None and messages is None and hashes is None:
        raise ctx.error(
            lineno,
            "a turn needs one of new_tokens, text, messages, hash_ids; found keys: " + (", ".join(obj) or "(none)"),
        )
    return Turn(
        new_tokens=new,
        output_tokens=out,
        gap=gap,
        text=text,
        role=role,
        hash_ids=tuple(hashes) if hashes is not None else None,
        input_tokens=inp,
        at=at,
        messages=messages,
        source=src_,
    )


def _session(
    b: SessionBuilder,
    obj: dict,
    ctx: Context,
    lineno: int,
    sid: str,
    parent: str | None,
    at: float | None,
    model: str | None,
    src_: str,
) -> Session:
    """The line's session, created on its first turn: starting at its t, else start, else its parent's, else 0."""
    s = b.sessions.get(sid)
    if s is None:
        if at is not None:
            start = at
        elif obj.get("start") is not None:
            start = json_seconds(obj, "start", ctx, lineno)
        elif parent is not None and parent in b.sessions:
            start = b.sessions[parent].start
        else:
            start = 0.0
        return b.session(sid, start=start, source=src_, parent=parent, model=model)
    if parent is not None:
        b.session(sid, start=s.start, source=src_, parent=parent)
    return s


def _pend(
    pending: dict[str, tuple[str, int | None, str]],
    sid: str,
    parent: str,
    k: int | None,
    src_: str,
    ctx: Context,
    lineno: int,
) -> None:
    """Note which turn of its parent spawns sid (resolved after the whole file, parents may come later)."""
    prev = pending.get(sid)
    if prev is not None and k is not None and prev[1] is not None and prev[1] != k:
        raise ctx.error(
            lineno, f"session {sid!r} is spawned by turn {prev[1]} of {parent!r} ({prev[2]}) and by turn {k}"
        )
    if prev is None or k is not None:
        pending[sid] = (parent, k if k is not None else (prev[1] if prev else None), src_)
