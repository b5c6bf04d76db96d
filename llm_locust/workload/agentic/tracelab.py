"""TraceLab coding-agent traces (uw-syfi/TraceLab: Claude Code and Codex sessions), as sessions.

Two published shapes, both read here:

``tracelab``: the normalized round trace (the release's ``syfi_coding_trace.jsonl.gz``), one LLM
round (one request) per line::

    {"provider": "claude", "session_id": "claude:92ee...", "round_index": 0, "model": "claude-opus-4-8",
     "input_tokens_total": 32272, "prefix_tokens": 27217, "newly_append_tokens": 5055,
     "output_tokens": 931, "first_input_event_type": "user_message",
     "timing_events": [{"event_type": "user_message", "timestamp": "2026-06-01T05:40:20.151Z"}, ...],
     "tools": [{"tool_name": "Bash", "tool_wall_latency_ms": 860, ...}, ...], ...}

``tracelab-csv``: the canonical multi-round CSV its exporter writes and its session runner replays
(``id,input_len,output_len,arrival_time,round_idx,tool_wait_after_ms,prefix_len``; ``session_id``
may stand for ``id``; ``arrival_time`` and ``tool_wait_after_ms`` optional, in ms).

Mapping (both):

- Sessions by session id (``session_id`` / ``id``), turns in ``round_index`` / ``round_idx`` order
  (file order among equal ones: the corpus repeats some). ``model`` -> the session's model.
- Turns are block mode, block size 64 (AIPerf's for this corpus): the trace records, per round,
  how much of its input the provider served from its prompt cache (``prefix_tokens``, Claude's
  ``cache_read_input_tokens``, Codex's ``cached_input_tokens``; ``prefix_len`` in the CSV) and the
  whole input (``input_tokens_total``; ``prefix_len + input_len``). The blocks are made so that an
  unbounded prefix cache reuses exactly that much: a later round keeps the first
  ``prefix // 64`` blocks of the round before it (at most all of them) and adds new ones; a
  session's first round takes its ``prefix // 64`` leading blocks from one chain shared by every
  session of the same provider and model (the system prompt and tool definitions the provider
  already held), new ones after. A smaller prefix than the previous round's whole prompt
  (compaction, an expired cache) therefore misses as the trace says it did.
- ``output_tokens`` / ``output_len`` -> the turn's output tokens.
- Tool waits: the gap before a round is the tool time after the round before it: the sum of its
  tools' ``tool_wall_latency_ms`` (nulls skipped), as TraceLab's exporter computes
  ``tool_wait_after_ms`` (the CSV's own column there). A round whose first input is a user message
  has the previous round's tool time too (0 when it called none): human waits are not replayed.
- A turn is a tool result (role "tool") when ``first_input_event_type`` is ``tool_result`` (CSV:
  when a tool wait precedes it), else a user message.
- Session start: the earliest ``timing_events`` timestamp of the session, in seconds after the
  file's earliest (0 without timestamps); CSV: ``arrival_time`` (ms) of its first row. Turns carry
  no trace time of their own: each goes after the previous reply and its tool wait.
- Subagents are not nested (the corpus has no parent link): each is its own session.

`recorded_share` gives the trace's own cache-read share, to set beside a replay's ideal and
measured hit ratios.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from llm_locust.workload.agentic._common import json_sid
from llm_locust.workload.formats.reader import (
    Context,
    Source,
    columns_index,
    csv_fields,
    json_count,
    json_seconds,
    json_str,
    jsonl_objects,
    text_count,
    text_seconds,
)
from llm_locust.workload.sessions import SessionBuilder, Turn

NAME = "tracelab"
CSV_NAME = "tracelab-csv"
BLOCK = 64
CSV_REQUIRED = ("round_idx", "prefix_len", "input_len", "output_len")
CSV_OPTIONAL = ("arrival_time", "tool_wait_after_ms")
MAX_TOKENS = 1 << 24  # a round's input beyond any model's context: refused (its blocks would fill memory)
DETECT_KEYS = frozenset({"session_id", "round_index", "input_tokens_total", "prefix_tokens"})


@dataclass(slots=True)
class Round:
    """One round of a session, as read."""

    line: int
    index: int
    total: int  # the whole input's tokens
    prefix: int  # of which the provider served from its cache
    output: int | None
    wait_after: float  # seconds of tool time after this round
    tool_first: bool  # the round's first input is a tool result
    start: float | None = None  # seconds (POSIX) of its earliest event, when it has one


@dataclass(slots=True)
class RoundSession:
    sid: str
    line: int
    model: str | None
    chain_key: str
    rounds: list[Round] = field(default_factory=list)


class BlockMinter:
    """Block ids: fresh ones, and per-key shared chains (a first round's cached prefix)."""

    def __init__(self) -> None:
        self._next = 1
        self._shared: dict[str, list[int]] = {}

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self._next, self._next + max(0, n)))
        self._next += max(0, n)
        return ids

    def shared(self, key: str, n: int) -> list[int]:
        chain = self._shared.setdefault(key, [])
        if len(chain) < n:
            chain.extend(self.fresh(n - len(chain)))
        return chain[:n]


def chain_blocks(rounds: list[Round], minter: BlockMinter, key: str, block: int = BLOCK) -> list[tuple[int, ...]]:
    """Each round's blocks: the recorded prefix reused (from the round before, or the shared chain
    for a first round), the rest new; floor(total / block) blocks, the partial tail unhashed."""
    out: list[tuple[int, ...]] = []
    prev: list[int] | None = None
    for r in rounds:
        n = r.total // block
        want = min(r.prefix, r.total) // block
        keep = minter.shared(key, min(want, n)) if prev is None else prev[: min(want, len(prev), n)]
        ids = keep + minter.fresh(n - len(keep))
        out.append(tuple(ids))
        prev = ids
    return out


def recorded_share(rounds: list[Round]) -> float | None:
    """The trace's own cache-read share: recorded prefix tokens over input tokens."""
    total = sum(r.total for r in rounds)
    return sum(min(r.prefix, r.total) for r in rounds) / total if total else None


def iso_time(v: Any, key: str, ctx: Context, lineno: int) -> float:
    if not isinstance(v, str):
        raise ctx.error(lineno, f"{key!r} must be an ISO-8601 time string, found {type(v).__name__}")
    try:
        dt = datetime.fromisoformat(v)
        return (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).timestamp()  # naive: UTC
    except (ValueError, OverflowError, OSError) as e:
        raise ctx.error(lineno, f"{key!r} is not an ISO-8601 time: {v[:40]!r} ({e})") from None


def _first_time(obj: dict, ctx: Context, lineno: int) -> float | None:
    events = obj.get("timing_events")
    if events is None:
        return None
    if type(events) is not list:
        raise ctx.error(lineno, "'timing_events' must be a list")
    times = []
    for e in events:
        if type(e) is not dict:
            raise ctx.error(lineno, "'timing_events' must hold objects")
        if e.get("timestamp") is not None:
            times.append(iso_time(e["timestamp"], "timing_events[].timestamp", ctx, lineno))
    return min(times) if times else None


def _tool_wait(obj: dict, ctx: Context, lineno: int) -> float:
    tools = obj.get("tools")
    if tools is None:
        return 0.0
    if type(tools) is not list or not all(type(t) is dict for t in tools):
        raise ctx.error(lineno, "'tools' must be a list of objects")
    return sum(json_seconds(t, "tool_wall_latency_ms", ctx, lineno, scale=0.001, default=0.0) for t in tools)


def _round(obj: dict, ctx: Context, lineno: int) -> Round:
    total = json_count(obj, "input_tokens_total", ctx, lineno, required=True)
    prefix = json_count(obj, "prefix_tokens", ctx, lineno, required=True)
    assert total is not None and prefix is not None
    if prefix > total:
        raise ctx.error(lineno, f"'prefix_tokens' ({prefix}) exceeds 'input_tokens_total' ({total})")
    if total > MAX_TOKENS:
        raise ctx.error(lineno, f"'input_tokens_total' of {total} is beyond any model's context (at most {MAX_TOKENS})")
    first = json_str(obj, "first_input_event_type", ctx, lineno)
    return Round(
        line=lineno,
        index=json_count(obj, "round_index", ctx, lineno) or 0,
        total=total,
        prefix=prefix,
        output=json_count(obj, "output_tokens", ctx, lineno),
        wait_after=_tool_wait(obj, ctx, lineno),
        tool_first=first == "tool_result",
        start=_first_time(obj, ctx, lineno),
    )


def read_rounds(src: Source, ctx: Context) -> list[RoundSession]:
    """The sessions of a round trace, in first-appearance order, rounds as read."""
    sessions: dict[str, RoundSession] = {}
    for lineno, obj in jsonl_objects(src, ctx):
        sid = json_sid(obj, "session_id", ctx, lineno, required=True)
        s = sessions.get(sid)
        if s is None:
            model = json_str(obj, "model", ctx, lineno)
            provider = json_str(obj, "provider", ctx, lineno) or ""
            s = sessions[sid] = RoundSession(sid, lineno, model, f"{provider}\x00{model or ''}")
        s.rounds.append(_round(obj, ctx, lineno))
    return list(sessions.values())


def build(sessions: list[RoundSession], ctx: Context, b: SessionBuilder, starts: dict[str, float]) -> int:
    minter = BlockMinter()
    for s in sessions:
        s.rounds.sort(key=lambda r: r.index)  # stable: file order among equal indexes
        blocks = chain_blocks(s.rounds, minter, s.chain_key)
        b.session(s.sid, start=starts[s.sid], source=f"{ctx.name}:{s.line}", model=s.model)
        prev: Round | None = None
        for r, ids in zip(s.rounds, blocks, strict=True):
            b.turn(
                s.sid,
                Turn(
                    output_tokens=r.output,
                    gap=prev.wait_after if prev is not None else 0.0,
                    role="tool" if r.tool_first else "user",
                    hash_ids=ids,
                    input_tokens=r.total,
                    source=f"{ctx.name}:{r.line}",
                ),
            )
            prev = r
    return BLOCK


def read(src: Source, ctx: Context, b: SessionBuilder) -> int:
    sessions = read_rounds(src, ctx)
    firsts = {s.sid: min((r.start for r in s.rounds if r.start is not None), default=None) for s in sessions}
    known = [t for t in firsts.values() if t is not None]
    origin = min(known) if known else 0.0
    starts = {sid: (t - origin if t is not None else 0.0) for sid, t in firsts.items()}
    return build(sessions, ctx, b, starts)


def read_csv_rounds(src: Source, ctx: Context) -> tuple[list[RoundSession], dict[str, float]]:
    """The sessions of a TraceLab multi-round CSV and their start times (s)."""
    header, hline, blocks = src.csv_blocks(ctx)
    sid_col = "id" if "id" in header else "session_id"
    col = columns_index(header, (sid_col, *CSV_REQUIRED), CSV_OPTIONAL, ctx, hline, CSV_NAME)
    ncols = len(header)
    sessions: dict[str, RoundSession] = {}
    starts: dict[str, float] = {}
    for first, lines in blocks:
        for lineno, line in enumerate(lines, first):
            if not line or line.isspace():
                continue
            f = csv_fields(line, ctx, lineno)
            if len(f) != ncols:
                raise ctx.error(lineno, f"expected {ncols} fields ({','.join(header)}), found {len(f)}: {line[:80]!r}")
            sid = f[col[sid_col]].strip()
            if not sid:
                raise ctx.error(lineno, f"empty {sid_col}")
            prefix = text_count(f[col["prefix_len"]], "prefix_len", ctx, lineno)
            new = text_count(f[col["input_len"]], "input_len", ctx, lineno)
            if prefix + new > MAX_TOKENS:
                raise ctx.error(
                    lineno,
                    f"prefix_len + input_len = {prefix + new} is beyond any model's context (at most {MAX_TOKENS})",
                )
            wait = 0.0
            if "tool_wait_after_ms" in col:
                wait = text_seconds(f[col["tool_wait_after_ms"]], "tool_wait_after_ms", ctx, lineno) / 1000
            s = sessions.get(sid)
            if s is None:
                s = sessions[sid] = RoundSession(sid, lineno, None, "")
                at = f[col["arrival_time"]] if "arrival_time" in col else ""
                starts[sid] = text_seconds(at, "arrival_time", ctx, lineno) / 1000 if at.strip() else 0.0
            s.rounds.append(
                Round(
                    line=lineno,
                    index=text_count(f[col["round_idx"]], "round_idx", ctx, lineno),
                    total=prefix + new,
                    prefix=prefix,
                    output=text_count(f[col["output_len"]], "output_len", ctx, lineno),
                    wait_after=wait,
                    tool_first=False,  # set once the session's rounds are in order
                )
            )
    return list(sessions.values()), starts


def read_csv(src: Source, ctx: Context, b: SessionBuilder) -> int:
    sessions, starts = read_csv_rounds(src, ctx)
    for s in sessions:  # the CSV's rows are already in replay order; roles follow the waits in it
        s.rounds.sort(key=lambda r: r.index)
        for prev, r in zip(s.rounds, s.rounds[1:], strict=False):
            r.tool_first = prev.wait_after > 0
    return build(sessions, ctx, b, starts)


def is_csv_header(first_line: str) -> bool:
    """The first line of a TraceLab multi-round CSV."""
    cols = {c.strip() for c in first_line.split(",")}
    return set(CSV_REQUIRED) <= cols and bool(cols & {"id", "session_id"})
