"""AIPerf's agentic DAG JSONL (``aiperf-dag``; ai-dynamo/aiperf, src/aiperf/dataset/loader/dag_jsonl.py
and dag_jsonl_models.py): one session per line, turns that spawn or fork other sessions::

    {"session_id": "root", "turns": [
        {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
         "max_tokens": 200, "spawns": ["sub1", {"children": ["sub2"], "join_at": 2}]},
        {"messages": [{"role": "tool", "content": "..."}], "delay": 1500, "forks": ["f1"]}]}
    {"session_id": "sub1", "turns": [{"messages": [...], "max_tokens": 50}]}

Mapping:

- A line is a session (id = ``session_id``, duplicates refused); its ``turns`` are its turns.
- ``messages``: by default (context mode ``deltas_without_responses``) a turn's messages are appended
  to the conversation, so they are the turn's *new* messages: `text` = their text, role "tool" when
  every one is a tool result, and the client keeps the history (history mode). With
  ``context_mode: "message_array_with_responses"`` each turn is its own complete request: `messages`.
- ``max_tokens`` -> output_tokens; ``model`` -> the session's model (first turn's); ``delay`` (ms) ->
  gap; ``tools`` / ``extra`` are request parameters, not workload shape: not kept.
- ``spawns`` (ids, or ``{"children": [...], "join_at": k}``) and ``forks`` (ids, or ``{"child": id,
  "background": bool}``) -> the turn's children. Approximations, since a session here joins every
  child before its next turn: a delayed join (``join_at``) joins at the next turn, a background fork
  is waited for, and a fork's child starts a fresh history instead of inheriting the parent's.
- ``pre_session_spawns`` children are fire-and-forget with no parent link in AIPerf: they stay
  top-level sessions. ``orchestrator`` lines send no request of their own: they are skipped, and the
  sessions they (or their ``rounds``) spawn are top-level sessions.
- The format has no arrival times: every top-level session starts at 0.
"""

from __future__ import annotations

from typing import Any

from llm_locust.workload.agentic._common import check_messages, delta_role, json_sid, message_text
from llm_locust.workload.formats.reader import Context, Source, json_count, json_seconds, json_str, jsonl_objects
from llm_locust.workload.sessions import SessionBuilder, Turn

NAME = "aiperf-dag"
WHOLE = "message_array_with_responses"


def _ids(v: Any, ctx: Context, lineno: int, where: str) -> list[str]:
    if v is None:
        return []
    if type(v) is not list:
        raise ctx.error(lineno, f"{where} must be a list")
    out: list[str] = []
    for x in v:
        if type(x) is str and x:
            out.append(x)
        elif type(x) is dict and type(x.get("children")) is list and all(type(c) is str and c for c in x["children"]):
            out.extend(x["children"])
        elif type(x) is dict and type(x.get("child")) is str and x["child"]:
            out.append(x["child"])
        else:
            raise ctx.error(
                lineno, f"{where} entries must be session ids, {{children: [...]}} or {{child: id}}, found {x!r}"[:200]
            )
    return out


def read(src: Source, ctx: Context, b: SessionBuilder) -> int | None:
    name = ctx.name
    for lineno, obj in jsonl_objects(src, ctx):
        where = f"{name}:{lineno}"
        sid = json_sid(obj, "session_id", ctx, lineno, required=True)
        if sid in b.sessions:
            raise ctx.error(lineno, f"session {sid!r} appears twice (also at {b.sessions[sid].source})")
        if obj.get("orchestrator"):
            continue
        turns = obj.get("turns")
        if type(turns) is not list or not turns:
            raise ctx.error(lineno, f"session {sid!r} needs a non-empty 'turns' list")
        mode = json_str(obj, "context_mode", ctx, lineno)
        whole = mode == WHOLE
        model = None
        b.session(sid, start=0.0, source=where)
        for k, turn in enumerate(turns, 1):
            w = f"turn {k}: "
            if type(turn) is not dict:
                raise ctx.error(lineno, f"{w}not a JSON object")
            msgs = check_messages(turn.get("messages"), "messages", ctx, lineno, w)
            if not msgs:
                raise ctx.error(lineno, f"{w}needs a non-empty 'messages' list")
            m = json_str(turn, "model", ctx, lineno)
            model = model or m
            out = json_count(turn, "max_tokens", ctx, lineno)
            gap = json_seconds(turn, "delay", ctx, lineno, scale=0.001, default=0.0)
            kids = _ids(turn.get("spawns"), ctx, lineno, f"{w}'spawns'") + _ids(
                turn.get("forks"), ctx, lineno, f"{w}'forks'"
            )
            if whole:
                t = Turn(
                    output_tokens=out,
                    gap=gap,
                    messages=msgs,
                    whole=True,
                    role=delta_role(msgs[-1:]),
                    children=tuple(kids),
                    source=where,
                )
            else:
                t = Turn(
                    output_tokens=out,
                    gap=gap,
                    text=message_text(msgs),
                    role=delta_role(msgs),
                    children=tuple(kids),
                    source=where,
                )
            b.turn(sid, t)
        b.sessions[sid].model = model
    return None
