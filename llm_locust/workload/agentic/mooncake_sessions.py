"""Mooncake conversation / tool-agent traces as sessions (``mooncake-sessions``, ``mooncake-toolagent``;
kvcache-ai/Mooncake FAST'25 ``conversation_trace.jsonl``, ``toolagent_trace.jsonl``)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ..., 2353]}

The lines are requests with no session id; sessions are rebuilt by **prefix chaining**:

- Requests are taken in timestamp order (file order among equal times).
- A request *continues* a session when the whole ``hash_ids`` list of that session's *latest* turn
  is a proper prefix of its own (shorter, and equal element by element): a follow-up turn
  re-sends the conversation so far and adds to it. Otherwise it starts a new session.
- Ambiguities: when several sessions' latest turns are prefixes of it, the longest prefix wins (the
  most specific conversation), and among equally long ones the session whose latest turn is the most
  recent. A request that extends an *earlier* turn of a session whose latest turn it does not
  extend (a branch), one equal to a latest turn (a retry: no new blocks), and one with no
  ``hash_ids`` start new sessions; their shared blocks still show as shared (block mode), so
  nothing is lost for the prefix cache. Requests of different sessions sharing only a system
  prompt are not chained: the shared blocks are not all of an earlier request's blocks.
- Turns are block mode: `hash_ids` and `input_tokens` = ``input_length`` (the whole prompt), block
  size 512 as Mooncake's; ``output_length`` -> output_tokens. ``timestamp`` (ms) -> the turn's
  `at` (never sent before it); a session starts at its first turn's time. The trace does not say
  how long a reply took, so there is no think time: gap 0, the wait comes from `at`.
- ``mooncake-toolagent``: every turn after a session's first is a tool result (role "tool"); in
  ``mooncake-sessions`` every turn is a user message.

These files are also the request-level ``mooncake`` format (the same lines): detection always picks
that one; these session readings are chosen by name (--trace-format).
"""

from __future__ import annotations

from llm_locust.workload.formats import mooncake as _mc
from llm_locust.workload.formats.reader import Context, Source
from llm_locust.workload.sessions import SessionBuilder, Turn

NAME = "mooncake-sessions"
TOOLAGENT = "mooncake-toolagent"
BLOCK = 512


def chain(rows: list[tuple[int, float, int, int, list[int] | None]]) -> list[int]:
    """The session number of each row (rows in time order): prefix chaining as the module says."""
    tails: dict[tuple[int, int], list[int]] = {}  # (length, last block id) -> sessions whose latest turn it is
    last: list[tuple[int, ...]] = []  # per session: its latest turn's hash ids
    out: list[int] = []
    for _line, _t, _inp, _out, h in rows:
        sess = -1
        if h:
            for k in range(len(h) - 1, 0, -1):
                cands = tails.get((k, h[k - 1]))
                if cands:
                    for s in reversed(cands):
                        if list(last[s]) == h[:k]:
                            sess = s
                            break
                    if sess >= 0:
                        cands.remove(sess)
                        break
        if sess < 0:
            sess = len(last)
            last.append(())
        hid = tuple(h) if h else ()
        last[sess] = hid
        if hid:
            tails.setdefault((len(hid), hid[-1]), []).append(sess)
        out.append(sess)
    return out


def read_as(fmt: str):
    def read(src: Source, ctx: Context, b: SessionBuilder) -> int | None:
        rows: list[tuple] = []
        for lines, times, ins, outs, (hs,) in _mc.read(src, ctx):
            rows.extend(zip(lines, times, ins, outs, hs, strict=True))  # the columns of one block
        if any(rows[i][1] > rows[i + 1][1] for i in range(len(rows) - 1)):
            rows.sort(key=lambda r: r[1])  # stable: file order among equal times
        tool = fmt == TOOLAGENT
        name = ctx.name
        for (line, t, inp, out, h), s in zip(rows, chain(rows), strict=True):  # a session per row
            sid = f"s{s + 1}"
            where = f"{name}:{line}"
            first = sid not in b.sessions
            if first:
                b.session(sid, start=t, source=where)
            b.turn(
                sid,
                Turn(
                    output_tokens=out,
                    role="tool" if tool and not first else "user",
                    hash_ids=tuple(h) if h is not None else (),
                    input_tokens=inp,
                    at=t,
                    source=where,
                ),
            )
        return BLOCK

    return read
