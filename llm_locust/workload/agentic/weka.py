"""WEKA / SemiAnalysis agentic coding traces (``weka``): kv-cache-tester's trace format, as replayed by
inference-perf (kubernetes-sigs/inference-perf, docs/weka_trace_replay.md,
inference_perf/datagen/replay/weka_trace_replay_datagen.py) and AIPerf (weka_trace_models.py).

One trace (a Claude-Code-style agent session) per object: the Hugging Face ``traces.jsonl`` (one per
line) or a single ``.json`` file (one object, pretty-printed or not)::

    {"id": "t1", "models": ["m"], "block_size": 64, "tool_tokens": 0, "system_tokens": 0,
     "requests": [{"t": 0.1, "type": "n"|"s", "model": "m", "in": 4, "out": 2, "hash_ids": [10, 20],
                   "api_time": 0.5, "think_time": 1.0, "stop": "tool_use", "input_types": [...]},
                  {"t": 3.0, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore",
                   "duration_ms": 4000, "requests": [...normal/streaming requests...]}, ...]}

Mapping:

- A trace is a top-level session (id = ``id``; duplicates refused). Its normal/streaming requests
  are its turns in list order. ``in`` is the whole prompt and ``hash_ids`` its blocks, so turns are
  block mode (`hash_ids`, `input_tokens` = ``in``); ``out`` -> output_tokens; ``model`` -> the
  session's model; the trace's ``block_size`` is the trace's block size (all traces of a file must
  agree).
- Times: ``t`` is seconds from the trace's own start; traces carry no arrival time relative to each
  other, so every top-level session starts at its first request's ``t`` (near 0: when to start one
  is the load shape's business), and no turn gets an absolute `at`. The gap before a turn is its
  ``think_time`` when recorded, else ``t`` minus the end of what it waited for: the previous reply
  (its ``t`` + ``api_time``, or just its ``t`` without api_time) and, after a subagent spawn, the
  subagents' end (``t`` + ``duration_ms``); clamped at 0 (a trace's clock may overlap the recorded
  api_time).
- A turn is a tool result (role "tool") when the previous request stopped with ``tool_use`` or its
  ``input_types`` name a ``tool_result``.
- ``subagent`` entries become child sessions spawned by the parent's last request at or before the
  entry's ``t`` (the parent's first request when none is), joined before the parent's next turn (as
  the spec says: the next outer request happens after the subagent completes). Their requests' ``t``
  is absolute, or relative to the entry when smaller than the entry's ``t`` (inference-perf's rule).
  Requests of one subagent that overlap in time (by api_time) are packed into parallel streams, one
  child session each (``<id>::sa:<agent_id>``, ``:s<k>`` suffix when there are several), as
  inference-perf does. A subagent with no requests is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from llm_locust.workload.formats.reader import (
    Context,
    Source,
    json_count,
    json_hash_ids,
    json_seconds,
    json_str,
    jsonl_objects_in,
)
from llm_locust.workload.sessions import SessionBuilder, Turn

NAME = "weka"


def objects(src: Source, ctx: Context) -> Iterator[tuple[int, dict]]:
    """(line, object): one per line, or the whole file as one object when its first line is not."""
    it = src.line_blocks()
    head: list[tuple[int, list[str]]] = []
    for first, lines in it:
        head.append((first, lines))
        for j, ln in enumerate(lines):
            if ln.strip():
                try:
                    orjson.loads(ln)
                    whole = False
                except orjson.JSONDecodeError:
                    whole = ln.strip().startswith("{")
                start = first + j
                break
        else:
            continue
        break
    else:
        return

    def replay():
        yield from head
        yield from it

    if not whole:
        for first, lines in replay():
            yield from jsonl_objects_in(lines, first, ctx)
        return
    text = "\n".join("\n".join(lines) for _, lines in replay())
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ctx.error(start, f"invalid JSON: {e}") from None
    if type(obj) is not dict:
        raise ctx.error(start, f"expected a JSON object, found {type(obj).__name__}")
    yield start, obj


def _requests(v: Any, ctx: Context, lineno: int, where: str) -> list[dict]:
    if type(v) is not list or not all(type(r) is dict for r in v):
        raise ctx.error(lineno, f"{where}'requests' must be a list of objects")
    return v


@dataclass(slots=True, eq=False)
class _Req:
    """One normal/streaming request of a trace, its fields checked."""

    where: str
    t: float
    inp: int | None
    out: int | None
    hashes: list[int]
    api: float | None
    think: float | None
    stop: str
    types: list | tuple
    model: str | None


def _req(r: dict, ctx: Context, lineno: int, where: str, base: float | None = None) -> _Req:
    t = json_seconds(r, "t", ctx, lineno)
    if base is not None and t + 1e-6 < base:
        t = base + t
    inp = json_count(r, "in", ctx, lineno, required=True)
    out = json_count(r, "out", ctx, lineno, required=True)
    hashes = json_hash_ids(r, "hash_ids", ctx, lineno) or []
    api = json_seconds(r, "api_time", ctx, lineno) if r.get("api_time") is not None else None
    think = json_seconds(r, "think_time", ctx, lineno) if r.get("think_time") is not None else None
    stop = json_str(r, "stop", ctx, lineno) or ""
    types = r.get("input_types")
    model = json_str(r, "model", ctx, lineno)
    return _Req(
        where=where,
        t=t,
        inp=inp,
        out=out,
        hashes=hashes,
        api=api,
        think=think,
        stop=stop,
        types=types if type(types) is list else (),
        model=model,
    )


def _end(x: _Req) -> float:
    return x.t + (x.api or 0.0)


def _streams(reqs: list[_Req]) -> list[list[_Req]]:
    """Requests packed into non-overlapping streams, earliest first (inference-perf's packing)."""
    streams: list[list[_Req]] = []
    ends: list[float] = []
    for r in sorted(reqs, key=lambda r: r.t):
        for i, e in enumerate(ends):
            if e <= r.t:
                streams[i].append(r)
                ends[i] = _end(r)
                break
        else:
            streams.append([r])
            ends.append(_end(r))
    return streams


def _turns(
    b: SessionBuilder, sid: str, reqs: list[_Req], src: str, waits: dict[int, float], spawns: dict[int, list[str]]
) -> None:
    prev: _Req | None = None
    for i, x in enumerate(reqs):
        if prev is None:
            gap = 0.0
        elif x.think is not None:
            gap = x.think
        else:
            gap = max(0.0, x.t - max(_end(prev), waits.get(i - 1, 0.0)))
        tool = prev is not None and (prev.stop == "tool_use" or "tool_result" in x.types)
        b.turn(
            sid,
            Turn(
                new_tokens=None,
                output_tokens=x.out,
                gap=gap,
                role="tool" if tool else "user",
                hash_ids=tuple(x.hashes),
                input_tokens=x.inp,
                children=tuple(spawns.get(i, ())),
                source=src,
            ),
        )
        prev = x


def _block_size(obj: dict, ctx: Context, lineno: int) -> None:
    """Check the trace's block_size and keep it on ctx: every trace of a file must agree."""
    bs = json_count(obj, "block_size", ctx, lineno, required=True)
    if bs == 0:
        raise ctx.error(lineno, "'block_size' must be positive")
    if ctx.block_size is None:
        ctx.block_size = bs
    elif bs != ctx.block_size:
        raise ctx.error(
            lineno, f"'block_size' {bs} differs from {ctx.block_size} of an earlier trace (one block size per file)"
        )


def _split_requests(obj: dict, ctx: Context, lineno: int) -> tuple[list[_Req], list[tuple[int, dict, str]]]:
    """The trace's own requests, and its subagent entries as (index of the spawning turn, entry, where)."""
    top: list[_Req] = []
    subs: list[tuple[int, dict, str]] = []
    for k, r in enumerate(_requests(obj.get("requests"), ctx, lineno, ""), 1):
        w = f"requests[{k - 1}]: "
        kind = r.get("type")
        if kind in ("n", "s"):
            top.append(_req(r, ctx, lineno, w))
        elif kind == "subagent":
            subs.append((len(top) - 1, r, w))
        else:
            raise ctx.error(lineno, f"{w}'type' must be 'n', 's' or 'subagent', found {kind!r}")
    return top, subs


def _subagent(
    b: SessionBuilder,
    tid: str,
    idx: int,
    e: dict,
    w: str,
    ctx: Context,
    lineno: int,
    waits: dict[int, float],
    spawns: dict[int, list[str]],
    children: list[tuple[str, list[_Req], str | None]],
) -> None:
    """One subagent entry: its end joins the spawning turn (waits), its streams become child sessions."""
    et = json_seconds(e, "t", ctx, lineno)
    agent = e.get("agent_id")
    if type(agent) is not str or not agent:
        raise ctx.error(lineno, f"{w}a subagent needs a string 'agent_id'")
    inner = [_req(r, ctx, lineno, w, base=et) for r in _requests(e.get("requests", []), ctx, lineno, w)]
    for r in e.get("requests", []):
        if r.get("type") not in ("n", "s"):
            raise ctx.error(lineno, f"{w}a subagent's requests must be of type 'n' or 's', found {r.get('type')!r}")
    spawn = max(idx, 0)
    dur = e.get("duration_ms")
    end = (
        et + json_seconds(e, "duration_ms", ctx, lineno, scale=0.001)
        if dur is not None
        else max((_end(x) for x in inner), default=et)
    )
    waits[spawn] = max(waits.get(spawn, 0.0), end)
    streams = _streams(inner)
    for s_i, stream in enumerate(streams):
        cid = f"{tid}::sa:{agent}" + (f":s{s_i}" if len(streams) > 1 else "")
        if cid in b.sessions or any(cid == c for c, _, _ in children):
            raise ctx.error(lineno, f"{w}subagent {agent!r} appears twice in trace {tid!r}")
        children.append((cid, stream, next((x.model for x in stream if x.model), None)))
        spawns.setdefault(spawn, []).append(cid)


def read(src: Source, ctx: Context, b: SessionBuilder) -> int | None:
    name = ctx.name
    for lineno, obj in objects(src, ctx):
        where = f"{name}:{lineno}"
        tid = obj.get("id")
        if type(tid) is not str or not tid:
            raise ctx.error(lineno, "a WEKA trace needs a string 'id'; found keys: " + (", ".join(obj) or "(none)"))
        if tid in b.sessions:
            raise ctx.error(lineno, f"trace id {tid!r} appears twice (also at {b.sessions[tid].source})")
        _block_size(obj, ctx, lineno)
        top, subs = _split_requests(obj, ctx, lineno)
        if not top:
            raise ctx.error(lineno, f"trace {tid!r} has no requests of its own (type 'n' or 's')")
        model = next((x.model for x in top if x.model), None)
        b.session(tid, start=top[0].t, source=where, model=model)
        waits: dict[int, float] = {}
        spawns: dict[int, list[str]] = {}
        children: list[tuple[str, list[_Req], str | None]] = []
        for idx, e, w in subs:
            _subagent(b, tid, idx, e, w, ctx, lineno, waits, spawns, children)
        _turns(b, tid, top, where, waits, spawns)
        for cid, stream, cmodel in children:
            b.session(cid, start=stream[0].t, source=where, parent=tid, model=cmodel)
            _turns(b, cid, stream, where, {}, {})
    return ctx.block_size
