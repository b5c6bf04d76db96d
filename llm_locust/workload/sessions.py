"""Sessions: conversations and agentic trajectories, turn by turn. Pure.

A `Session` is a list of `Turn`s sent one after the other, each only after the previous reply.
What a turn sends depends on what the trace says about it:

- **history mode** (no hash ids): the conversation so far (every earlier message, each reply as
  the server wrote it) plus the turn's new message: its text, or `new_tokens` synthesised tokens
  (a user message, or a tool result for `role="tool"`). The input grows by the previous reply plus
  the new tokens, as an agent's context does.
- **block mode** (the turn has `hash_ids`, as Mooncake / AIPerf traces do): the whole prompt is
  given by its blocks (`input_tokens` long), and turns share whatever blocks they share; nothing
  is appended by the client.

A turn may spawn subagent sessions (`children`): they start when the turn's reply is in, run in
parallel, and the parent's next turn waits until every one of them has ended. `gap` is the tool
or think time between the previous reply and the turn (capped by --max-idle at run time); `at`, when
the trace has it, is the turn's trace time, which the turn is never sent before (open loop).

A `SessionTrace` holds the sessions of a file; `SessionBuilder` is how loaders make one, and it
refuses a missing parent or child, a cycle of subagent links, negative gaps, turns whose times
go backwards and subagents that start before the turn spawning them, naming the file and line.

`IdealCache` computes, per request, the prompt tokens an unbounded prefix cache would have held:
the blocks seen before (block mode) or the session's previous prompt and reply (history mode).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llm_locust.workload.formats.reader import TraceError


@dataclass(slots=True)
class Turn:
    """One request of a session."""

    new_tokens: int | None = None  # tokens the turn adds (history mode, when it has no text)
    output_tokens: int | None = None
    gap: float = 0.0  # seconds between the previous reply (or the parent's start) and this turn
    text: str | None = None  # the new message's text, when the trace has it
    role: str = "user"  # "user", or "tool": the new tokens are a tool's result
    hash_ids: tuple[int, ...] | None = None  # block mode: the whole prompt's blocks
    input_tokens: int | None = None  # the whole prompt's length, when the trace gives it
    children: tuple[str, ...] = ()  # subagent sessions this turn spawns, joined before the next turn
    at: float | None = None  # the turn's trace time, when the trace has one
    messages: list[dict[str, Any]] | None = None  # the whole request as chat messages (a trace's own)
    whole: bool = False  # `messages` already hold the conversation: sent as they are, no history before them
    source: str = ""  # "file:line"


@dataclass(slots=True)
class Session:
    id: str
    start: float  # trace seconds of its first turn
    turns: list[Turn] = field(default_factory=list)
    parent: str | None = None  # the session whose turn spawned it
    model: str | None = None
    source: str = ""  # "file:line" where it is declared (its first turn)

    @property
    def block_mode(self) -> bool:
        return bool(self.turns) and self.turns[0].hash_ids is not None


class SessionTrace:
    """The sessions of one trace (or of one worker's share): roots in start order, children by id."""

    def __init__(
        self,
        *,
        path: str,
        format: str,
        sha256: str,
        sessions: dict[str, Session],
        block_size: int | None = None,
        share: tuple[int, int] | None = None,
    ) -> None:
        self.path = path
        self.format = format
        self.sha256 = sha256
        self.sessions = sessions
        self.block_size = block_size
        self.share = share
        self.roots = sorted((s for s in sessions.values() if s.parent is None), key=lambda s: (s.start, s.id))
        self.turns = sum(len(s.turns) for s in sessions.values())

    def __len__(self) -> int:
        return len(self.roots)

    def __iter__(self) -> Iterator[Session]:
        return iter(self.roots)

    def __repr__(self) -> str:
        return f"<SessionTrace {self.path} format={self.format} sessions={len(self.roots)} turns={self.turns}>"

    @property
    def arrivals(self) -> list[float]:
        """Start times of the root sessions, in order (what the open loop schedules)."""
        return [s.start for s in self.roots]

    @property
    def duration(self) -> float:
        return self.roots[-1].start if self.roots else 0.0

    def tree(self, root: Session) -> list[Session]:
        """A root and every session below it."""
        out, todo = [], [root]
        while todo:
            s = todo.pop()
            out.append(s)
            for t in s.turns:
                todo.extend(self.sessions[c] for c in t.children)
        return out

    def take_share(self, share: tuple[int, int] | None) -> SessionTrace:
        """Worker i's share of k: root sessions whose crc32(id) % k == i, each with its subagents."""
        if share is None or share[1] == 1:
            return self
        i, k = share
        keep: dict[str, Session] = {}
        for root in self.roots:
            if zlib.crc32(root.id.encode()) % k == i:
                for s in self.tree(root):
                    keep[s.id] = s
        return SessionTrace(
            path=self.path,
            format=self.format,
            sha256=self.sha256,
            sessions=keep,
            block_size=self.block_size,
            share=share,
        )


class SessionBuilder:
    """What loaders fill: sessions and their turns, checked at `finish`."""

    def __init__(self, name: str) -> None:
        self.name = name  # the path as the user gave it: every message starts with it
        self.sessions: dict[str, Session] = {}
        self._child_refs: list[tuple[str, str]] = []  # (child id, source of the referring turn)
        self._spawns: list[tuple[str, int, str, str]] = []  # (parent id, 1-based turn, child id, source)

    def error(self, source: str, msg: str) -> TraceError:
        return TraceError(f"{source or self.name}: {msg}")

    def session(
        self, sid: str, *, start: float, source: str, parent: str | None = None, model: str | None = None
    ) -> Session:
        """The session `sid`, created on first sight."""
        s = self.sessions.get(sid)
        if s is None:
            if start < 0:
                raise self.error(source, f"session {sid!r} starts at a negative time ({start:g} s)")
            s = self.sessions[sid] = Session(id=sid, start=start, parent=parent, model=model, source=source)
        elif parent is not None and s.parent is not None and s.parent != parent:
            raise self.error(source, f"session {sid!r} has two parents: {s.parent!r} ({s.source}) and {parent!r}")
        elif parent is not None:
            s.parent = parent
        return s

    def turn(self, sid: str, turn: Turn) -> None:
        s = self.sessions.get(sid)
        if s is None:
            raise self.error(turn.source, f"turn of an unknown session {sid!r}")
        if turn.gap < 0:
            raise self.error(turn.source, f"negative gap ({turn.gap:g} s) before a turn of session {sid!r}")
        if (
            turn.new_tokens is not None
            and turn.new_tokens < 0
            or turn.output_tokens is not None
            and turn.output_tokens < 0
        ):
            raise self.error(turn.source, "negative token count")
        if turn.at is not None and s.turns and s.turns[-1].at is not None and turn.at < s.turns[-1].at:
            raise self.error(
                turn.source,
                f"turn of session {sid!r} at {turn.at:g} s, before its previous turn "
                f"({s.turns[-1].at:g} s, {s.turns[-1].source}): a session's turns go one after the other",
            )
        for c in turn.children:
            self._child_refs.append((c, turn.source))
        s.turns.append(turn)

    def spawn(self, parent: str, turn: int, child: str, source: str) -> None:
        """Child session `child` is spawned by turn `turn` (1-based) of `parent`; resolved at `finish`,
        so the parent's turns may come later in the file."""
        self._spawns.append((parent, turn, child, source))

    def finish(self, *, path: str, format: str, sha256: str, block_size: int | None = None) -> SessionTrace:
        sessions = self.sessions
        self._resolve_spawns()
        for sid, s in sessions.items():
            if not s.turns:
                raise self.error(s.source, f"session {sid!r} has no turns")
            if s.parent is not None and s.parent not in sessions:
                raise self.error(s.source, f"session {sid!r} names a parent {s.parent!r} that is not in the trace")
        spawned = self._link_children()
        for sid, s in sessions.items():  # a parent link with no turn spawning it: joined after the parent's first turn
            if s.parent is not None and sid not in spawned:
                p = sessions[s.parent]
                first = p.turns[0]
                first.children = first.children + (sid,)
                spawned[sid] = first.source
        _check_acyclic(sessions, self.error)
        _check_spawn_times(sessions, self.error)
        if not any(s.parent is None for s in sessions.values()):
            raise TraceError(f"{self.name}: no top-level session (every session is a subagent of another)")
        return SessionTrace(path=path, format=format, sha256=sha256, sessions=sessions, block_size=block_size)

    def _resolve_spawns(self) -> None:
        """Add the children named by `spawn` to their turns, now that every parent turn is read."""
        sessions = self.sessions
        for parent, k, child, src in self._spawns:
            p = sessions.get(parent)
            if p is None:
                raise self.error(src, f"session {child!r} names a parent {parent!r} that is not in the trace")
            if not 1 <= k <= len(p.turns):
                raise self.error(
                    src, f"session {child!r} is spawned by turn {k} of {parent!r}, which has {len(p.turns)} turn(s)"
                )
            t = p.turns[k - 1]
            t.children = t.children + (child,)
            self._child_refs.append((child, src))
        self._spawns.clear()

    def _link_children(self) -> dict[str, str]:
        """{child id: source of the turn spawning it}; each child exists, is spawned once, knows its parent."""
        sessions = self.sessions
        spawned: dict[str, str] = {}
        for c, src in self._child_refs:
            if c not in sessions:
                raise self.error(src, f"a turn spawns subagent session {c!r}, which is not in the trace")
            if c in spawned:
                raise self.error(src, f"subagent session {c!r} is spawned twice (also at {spawned[c]})")
            spawned[c] = src
            kid = sessions[c]
            if kid.parent is None:
                kid.parent = _owner(sessions, c)
        return spawned


def _owner(sessions: dict[str, Session], child: str) -> str | None:
    for sid, s in sessions.items():
        for t in s.turns:
            if child in t.children:
                return sid
    return None


def _check_acyclic(sessions: dict[str, Session], error) -> None:
    """A cycle of subagent links (a session below itself) would never end: refused."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in sessions:
        if state.get(root):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(root, _kids(sessions[root]))]
        state[root] = 1
        while stack:
            sid, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[sid] = 2
                stack.pop()
                continue
            st = state.get(nxt)
            if st == 1:
                path = [x for x, _ in stack] + [nxt]
                raise error(sessions[nxt].source, "a cycle of subagent links: " + " -> ".join(path[path.index(nxt) :]))
            if st is None:
                state[nxt] = 1
                stack.append((nxt, _kids(sessions[nxt])))


def _check_spawn_times(sessions: dict[str, Session], error: Callable[[str, str], TraceError]) -> None:
    """A subagent cannot start (by trace time) before the turn that spawns it: refused."""
    for sid, s in sessions.items():
        for t in s.turns:
            if t.at is None:
                continue
            for c in t.children:
                first = sessions[c].turns[0]
                if first.at is not None and first.at < t.at:
                    raise error(
                        first.source,
                        f"subagent session {c!r} starts at {first.at:g} s, before the "
                        f"turn of {sid!r} that spawns it ({t.at:g} s, {t.source})",
                    )


def _kids(s: Session) -> Iterator[str]:
    for t in s.turns:
        yield from t.children


def sessions_from_trace(trace) -> SessionTrace:
    """A Trace's conversations as sessions (history mode, or block mode for turns with hash ids);
    records outside a conversation become one-turn sessions. Turns keep their trace times (`at`)."""
    b = SessionBuilder(trace.path)
    convs = trace.conversations()
    in_conv = set()
    order: list[tuple[float, str, list[int]]] = []
    for cid, idx in convs.items():
        in_conv.update(idx)
        order.append((trace.arrivals[idx[0]], f"c:{cid}", idx))
    for i in range(len(trace)):
        if i not in in_conv:
            order.append((trace.arrivals[i], f"r:{i}", [i]))
    for _, sid, idx in order:
        first = trace[idx[0]]
        b.session(sid, start=first.arrival, source=first.source, model=first.model)
        for i in idx:
            r = trace[i]
            text = r.prompt
            b.turn(
                sid,
                Turn(
                    new_tokens=r.input_tokens,
                    output_tokens=r.output_tokens,
                    text=text,
                    hash_ids=r.hash_ids,
                    input_tokens=r.input_tokens if r.hash_ids else None,
                    at=r.arrival,
                    messages=r.messages,
                    source=r.source,
                ),
            )
    return b.finish(path=trace.path, format=trace.format, sha256=trace.sha256, block_size=trace.block_size)


class IdealCache:
    """The prompt tokens an unbounded prefix cache would have served, request by request.

    Block mode: the leading blocks of the prompt already seen in any earlier request (chained: a
    block counts only when every block before it does), times the block size, at most the prompt.
    History mode: the session's previous prompt and reply, which this request repeats word for
    word (`history_tokens`), at most the prompt. One per worker process: blocks another worker
    sent are not counted."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[tuple[int, ...] | int] = set()

    def blocks(self, hash_ids: tuple[int, ...], block_size: int, prompt_tokens: int) -> int:
        seen = self._seen
        hit = 0
        chain = 0
        for k, h in enumerate(hash_ids):
            chain = zlib.crc32(
                h.to_bytes(8, "little", signed=True), chain
            )  # a block is its prefix, as a server hashes it
            key = (chain, k)
            if hit == k and key in seen:
                hit += 1
            seen.add(key)
        return min(hit * block_size, prompt_tokens)

    @staticmethod
    def history(history_tokens: int, prompt_tokens: int) -> int:
        return max(0, min(history_tokens, prompt_tokens))
