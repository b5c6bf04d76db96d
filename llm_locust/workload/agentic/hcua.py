"""H Company's computer-use agent traces, H CUA Perf (Hugging Face ``Hcompany/h_cua_perf``,
``h_cua.jsonl.zst``), as AIPerf replays them (``--public-dataset h_cua_perf``), as sessions.

One recorded chat-completion request per line, a trajectory's requests one after the other::

    {"session_id": "traj-1", "messages": [{"role": "system", ...}, {"role": "user", "content": [
        {"type": "text", ...}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."},
         "uuid": "..."}]}, {"role": "assistant", "tool_calls": [...]}, {"role": "tool", ...}, ...],
     "tools": [...10 tool definitions...], "output_length": 57, "delay": 2400,
     "extra": {"tool_choice": "auto"}}

Mapping:

- A trajectory (``session_id``) is a session; its requests, in file order, its turns. Sessions
  start at 0 (the trace has no absolute times): when to start one is the load shape's business.
- ``messages`` is each request whole: the history as the agent recorded it (its own assistant
  tool calls, earlier screenshots already replaced by the placeholder text
  ``[Image omitted by context cleaning]``, the latest one kept). The turn sends exactly those
  messages (`Turn.messages`, `whole`), never the model's replies: the trajectory follows the recorded
  agent, as AIPerf replays it.
- ``output_length`` -> the turn's output tokens (a cap on what the server writes).
- ``delay`` (ms, absent on a trajectory's first request) -> the gap before the turn: the agent's
  think time since the previous response, tool execution included.
- A turn is a tool result (role "tool") when its last message is one.
- ``tools`` and ``extra`` (tool_choice, response format) are checked for shape but not sent:
  llm-locust's requests carry no tool definitions.

`shared_prefix_share` gives the trace's own reuse: per request, the part of its messages equal to
the previous request's (by characters of their text; screenshots count nothing), the prefix a
cache holding the previous request could serve.
"""

from __future__ import annotations

import os
from typing import Any

from llm_locust.workload.agentic._common import check_messages, delta_role, json_sid
from llm_locust.workload.formats.reader import Context, Source, json_count, json_seconds, jsonl_objects
from llm_locust.workload.sessions import SessionBuilder, Turn

NAME = "h-cua-perf"
DETECT_KEYS = frozenset({"session_id", "messages", "output_length"})


def _check_tools(obj: dict, ctx: Context, lineno: int) -> None:
    tools = obj.get("tools")
    if tools is not None and (type(tools) is not list or not all(type(t) is dict for t in tools)):
        raise ctx.error(lineno, "'tools' must be a list of tool definitions (objects)")
    extra = obj.get("extra")
    if extra is not None and type(extra) is not dict:
        raise ctx.error(lineno, "'extra' must be an object")


def read(src: Source, ctx: Context, b: SessionBuilder) -> None:
    for lineno, obj in jsonl_objects(src, ctx):
        sid = json_sid(obj, "session_id", ctx, lineno, required=True)
        msgs = check_messages(obj.get("messages"), "messages", ctx, lineno)
        if not msgs:
            raise ctx.error(lineno, "needs a non-empty 'messages' list")
        _check_tools(obj, ctx, lineno)
        where = f"{ctx.name}:{lineno}"
        b.session(sid, start=0.0, source=where)
        b.turn(
            sid,
            Turn(
                output_tokens=json_count(obj, "output_length", ctx, lineno),
                gap=json_seconds(obj, "delay", ctx, lineno, scale=0.001, default=0.0),
                messages=msgs,
                whole=True,
                role=delta_role(msgs[-1:]),
                source=where,
            ),
        )
    return None


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    """Each message's text (string content, or its text parts joined by spaces; images count nothing)."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
        out.append(c if isinstance(c, str) else "")
    return out


def common_prefix_chars(prev: list[str], cur: list[str]) -> int:
    """Characters of two requests' message texts equal from the start (whole messages, then a part of one)."""
    n = 0
    for a, c in zip(prev, cur, strict=False):
        if a != c:
            return n + len(os.path.commonprefix([a, c]))
        n += len(a)
    return n


def shared_prefix_share(turns: list[Turn]) -> float | None:
    """The trace's own reuse in a session: the share of its requests' text (characters) equal, from
    the start, to the request before it: what a cache holding each previous request could serve."""
    prev: list[str] = []
    hit = total = 0
    for t in turns:
        cur = _texts(t.messages or [])
        hit += common_prefix_chars(prev, cur)
        total += sum(len(c) for c in cur)
        prev = cur
    return hit / total if total else None
