"""Claude Code and Codex session logs, read as TraceLab's extractors read them (uw-syfi/TraceLab
``scripts/extract_claude_rounds.py``, ``extract_codex_rounds.py``; the raw shapes are documented in
its ``example_sessions/*/explanation.md``), into the rounds of `tracelab` and replayed the same way.

``claude-code``: a ``~/.claude/projects/<dir>/<uuid>.jsonl`` file, one record per line::

    {"type": "assistant", "sessionId": "...", "timestamp": "2026-...Z", "message": {"id": "msg_...",
     "role": "assistant", "model": "...", "content": [{"type": "tool_use", "id": "toolu_...", ...}],
     "usage": {"input_tokens": 2, "cache_creation_input_tokens": 310, "cache_read_input_tokens": 18000,
               "output_tokens": 95}}}
    {"type": "user", "timestamp": "...", "message": {"role": "user", "content": [{"type": "tool_result",
     "tool_use_id": "toolu_...", "content": "..."}]}}

- A round is an assistant message id (``<synthetic>`` ones skipped); Claude Code writes one record
  per content block, each repeating the usage: the round keeps the fullest (most output tokens,
  then most input). Its input is ``input_tokens + cache_creation_input_tokens +
  cache_read_input_tokens``, of which ``cache_read_input_tokens`` were served from the cache.
- A tool's wall latency is its ``tool_result`` record's timestamp minus its ``tool_use`` record's;
  the round's tool wait is their sum. A round is a tool result when the user record before it
  carries tool results, a user message otherwise. The session is ``sessionId``.

``codex``: a ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`` file, ``{"timestamp", "type",
"payload"}`` per line:

- ``session_meta`` gives the session id (``payload.id``); ``turn_context`` the model.
- A round is an ``event_msg`` ``token_count`` with ``info.last_token_usage`` (``input_tokens``,
  ``cached_input_tokens``, ``output_tokens``); one whose ``total_token_usage`` repeats the previous
  one's is the same round reported again and skipped.
- Tools: ``response_item`` ``function_call`` / ``custom_tool_call`` (``call_id``) up to a round's
  ``token_count`` are that round's; a matching ``*_output`` record's timestamp minus the call's is
  the latency. A round is a tool result when a tool output came after the round before it.
"""

from __future__ import annotations

from typing import Any

from llm_locust.workload.agentic.tracelab import MAX_TOKENS, Round, RoundSession, build, iso_time
from llm_locust.workload.formats.reader import Context, Source, json_count, jsonl_objects
from llm_locust.workload.sessions import SessionBuilder

CLAUDE = "claude-code"
CODEX = "codex"
_CODEX_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
_CODEX_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_CODEX_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


def _obj(v: Any, key: str, ctx: Context, lineno: int) -> dict:
    if v is None:
        return {}
    if type(v) is not dict:
        raise ctx.error(lineno, f"{key!r} must be an object, found {type(v).__name__}")
    return v


def _usage_round(usage: dict, keys: tuple[str, str, str], ctx: Context, lineno: int) -> tuple[int, int, int]:
    """(total input, cached input, output) from a usage object; `keys` = (uncached+..., cached, output)."""
    return tuple(json_count(usage, k, ctx, lineno) or 0 for k in keys)  # type: ignore[return-value]


def _check_total(total: int, ctx: Context, lineno: int) -> None:
    if total > MAX_TOKENS:
        raise ctx.error(lineno, f"a round's input of {total} tokens is beyond any model's context (max {MAX_TOKENS})")


# -- Claude Code ----------------------------------------------------------------------------------


class _Claude:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.sessions: dict[str, RoundSession] = {}
        self.rounds: dict[str, tuple[Round, tuple[int, int]]] = {}  # message id -> (round, usage score)
        self.tool_at: dict[str, tuple[Round, float]] = {}  # tool_use id -> (its round, emitted at)
        self.tool_input = False  # the last user record carried tool results

    def assistant(self, obj: dict, msg: dict, lineno: int) -> None:
        ctx = self.ctx
        mid = msg.get("id")
        if not isinstance(mid, str) or mid == "<synthetic>" or msg.get("model") == "<synthetic>":
            return
        t = iso_time(obj["timestamp"], "timestamp", ctx, lineno) if obj.get("timestamp") is not None else None
        usage = _obj(msg.get("usage"), "usage", ctx, lineno)
        fresh, write, read, out = (
            json_count(usage, k, ctx, lineno) or 0
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
        )
        total = fresh + write + read
        _check_total(total, ctx, lineno)
        got = self.rounds.get(mid)
        if got is None:
            sid = obj.get("sessionId")
            sid = sid if isinstance(sid, str) and sid else ctx.name
            s = self.sessions.get(sid)
            if s is None:
                model = msg.get("model") if isinstance(msg.get("model"), str) else None
                s = self.sessions[sid] = RoundSession(sid, lineno, model, f"claude\x00{model or ''}")
            r = Round(lineno, len(s.rounds), total, read, out, 0.0, self.tool_input, t)
            s.rounds.append(r)
            self.rounds[mid] = (r, (out, total))
        else:
            r, score = got
            if (out, total) > score:
                r.total, r.prefix, r.output = total, read, out
                self.rounds[mid] = (r, (out, total))
        content = msg.get("content")
        if t is None or not isinstance(content, list):
            return
        for block in content:
            if type(block) is dict and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                self.tool_at.setdefault(block["id"], (r, t))

    def user(self, obj: dict, msg: dict, lineno: int) -> None:
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if type(b) is dict and b.get("type") == "tool_result"]
        self.tool_input = bool(results)
        if not results or obj.get("timestamp") is None:
            return
        t = iso_time(obj["timestamp"], "timestamp", self.ctx, lineno)
        for b in results:
            tid = b.get("tool_use_id")
            got = self.tool_at.pop(tid, None) if isinstance(tid, str) else None
            if got is not None:
                r, emitted = got
                r.wait_after += max(0.0, t - emitted)


def read_claude(src: Source, ctx: Context, b: SessionBuilder) -> int:
    c = _Claude(ctx)
    for lineno, obj in jsonl_objects(src, ctx):
        msg = obj.get("message")
        if type(msg) is not dict:
            continue  # summaries, titles, snapshots: no request of their own
        if obj.get("type") == "assistant" and msg.get("role") == "assistant":
            c.assistant(obj, msg, lineno)
        elif obj.get("type") == "user":
            c.user(obj, msg, lineno)
    return _finish(list(c.sessions.values()), ctx, b)


# -- Codex ----------------------------------------------------------------------------------------


class _Codex:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.sid: str | None = None
        self.model: str | None = None
        self.rounds: list[Round] = []
        self.first_line: int | None = None
        self.pending: dict[str, float] = {}  # call id -> emitted at, of calls not yet in a round
        self.calls: dict[str, tuple[Round, float]] = {}  # call id -> (its round, emitted at)
        self.last_total: Any = None
        self.tool_input = False  # a tool output came since the last round

    def record(self, obj: dict, lineno: int) -> None:
        ctx = self.ctx
        kind = obj.get("type")
        p = _obj(obj.get("payload"), "payload", ctx, lineno)
        ptype = p.get("type")
        t = iso_time(obj["timestamp"], "timestamp", ctx, lineno) if obj.get("timestamp") is not None else None
        if kind == "session_meta" and isinstance(p.get("id"), str) and self.sid is None:
            self.sid = p["id"]
        elif kind == "turn_context" and isinstance(p.get("model"), str):
            self.model = self.model or p["model"]
        elif kind == "response_item" and ptype in _CODEX_CALLS and isinstance(p.get("call_id"), str):
            if t is not None:
                self.pending[p["call_id"]] = t
        elif kind == "response_item" and ptype in _CODEX_OUTPUTS and isinstance(p.get("call_id"), str):
            self.tool_input = True
            got = self.calls.pop(p["call_id"], None)
            if got is not None and t is not None:
                got[0].wait_after += max(0.0, t - got[1])
        elif kind == "event_msg" and ptype == "token_count":
            self.token_count(p, t, lineno)

    def token_count(self, p: dict, t: float | None, lineno: int) -> None:
        ctx = self.ctx
        info = _obj(p.get("info"), "info", ctx, lineno)
        last = _obj(info.get("last_token_usage"), "last_token_usage", ctx, lineno)
        if not last or info.get("total_token_usage") == self.last_total:
            return
        self.last_total = info.get("total_token_usage")
        total, cached, out = _usage_round(last, ("input_tokens", "cached_input_tokens", "output_tokens"), ctx, lineno)
        if cached > total:
            raise ctx.error(lineno, f"'cached_input_tokens' ({cached}) exceeds 'input_tokens' ({total})")
        _check_total(total, ctx, lineno)
        r = Round(lineno, len(self.rounds), total, cached, out, 0.0, self.tool_input, t)
        self.rounds.append(r)
        self.first_line = self.first_line or lineno
        self.tool_input = False
        for cid, emitted in self.pending.items():
            self.calls[cid] = (r, emitted)
        self.pending.clear()


def read_codex(src: Source, ctx: Context, b: SessionBuilder) -> int:
    c = _Codex(ctx)
    for lineno, obj in jsonl_objects(src, ctx):
        c.record(obj, lineno)
    if not c.rounds:
        return _finish([], ctx, b)
    s = RoundSession(c.sid or ctx.name, c.first_line or 1, c.model, f"codex\x00{c.model or ''}")
    s.rounds = c.rounds
    return _finish([s], ctx, b)


def _finish(sessions: list[RoundSession], ctx: Context, b: SessionBuilder) -> int:
    """Sessions start at their first round's time, from the file's earliest (0 without times)."""
    firsts = {s.sid: min((r.start for r in s.rounds if r.start is not None), default=None) for s in sessions}
    known = [t for t in firsts.values() if t is not None]
    origin = min(known) if known else 0.0
    return build(sessions, ctx, b, {sid: (t - origin if t is not None else 0.0) for sid, t in firsts.items()})
