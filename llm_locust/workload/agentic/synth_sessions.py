"""Synthetic agentic workloads: seeded sessions of tool-calling turns and subagents, written as our
session JSONL (``llm-locust-sessions``, docs/agentic.md) so the exact workload can be replayed.

    llm-locust trace synth --agentic sessions=200,rate=0.5,subagent_p=0.2 --out agentic.jsonl

A session: a first turn (system prompt + task: ``first_input`` tokens), then ``turns - 1`` more
turns, each a tool result (``new_tokens``, heavy-tailed; a user message of ``user_tokens`` instead with probability
``user_p``) after a tool/think ``gap``; every turn replies ``output`` tokens. After a turn (not the
last), with probability ``subagent_p`` it spawns ``fanout`` subagents of ``subagent_turns`` turns
each (their first turn ``subagent_input`` tokens), joined before the parent's next turn; subagents
spawn subagents of their own down to ``max_depth``. Top-level sessions arrive at ``rate`` per second
(Poisson, or constant), all at 0 when the rate is 0.

Distributions (integers are rounded, at least 1; seconds at least 0):
  `N`                        fixed
  `uniform:LO:HI`            uniform in [LO, HI]
  `normal:MEAN:STD`
  `lognormal:MEAN:STD`       of the values themselves (not of their log)
  `exponential:MEAN`
  `pareto:ALPHA:MIN[:MAX]`   heavy-tailed from MIN (shape ALPHA), capped at MAX when given
Same spec and seed, same bytes.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal, overload

import orjson

from llm_locust.workload.arrivals import arrival_problem, interval_draw
from llm_locust.workload.output import write_out

PROG = "llm-locust trace synth --agentic"


@overload
def parse_dist(text: str, integer: Literal[True] = True) -> Callable[[random.Random], int]: ...
@overload
def parse_dist(text: str, integer: Literal[False]) -> Callable[[random.Random], float]: ...
def parse_dist(text: str, integer: bool = True) -> Callable[[random.Random], float]:
    """A sampler from a distribution spec (module doc). ValueError names what is wrong."""
    kind, _, rest = str(text).strip().partition(":")
    args = rest.split(":") if rest else []
    fix = (lambda v: max(1, round(v))) if integer else (lambda v: max(0.0, float(v)))
    try:
        if not rest:
            v = float(kind)
            if not math.isfinite(v) or v < 0 or (integer and v < 1):
                raise ValueError
            c = fix(v)
            return lambda rng: c
        a = [float(x) for x in args]
        if not all(math.isfinite(x) for x in a):
            raise ValueError
        if kind == "uniform":
            lo, hi = a
            if not 0 <= lo <= hi:
                raise ValueError
            if integer:
                ilo, ihi = max(1, round(lo)), max(1, round(hi))
                return lambda rng: rng.randint(ilo, ihi)
            return lambda rng: rng.uniform(lo, hi)
        if kind == "normal":
            mean, std = a
            return lambda rng: fix(rng.gauss(mean, std))
        if kind == "lognormal":
            mean, std = a
            if mean <= 0 or std < 0:
                raise ValueError
            s2 = math.log(1 + (std / mean) ** 2)
            mu, sigma = math.log(mean) - s2 / 2, math.sqrt(s2)
            return lambda rng: fix(rng.lognormvariate(mu, sigma))
        if kind == "exponential":
            (mean,) = a
            if mean <= 0:
                raise ValueError
            return lambda rng: fix(rng.expovariate(1.0 / mean))
        if kind == "pareto":
            alpha, lo, *cap_ = a
            cap = cap_[0] if cap_ else math.inf
            if alpha <= 0 or lo <= 0 or cap < lo or len(cap_) > 1:
                raise ValueError
            return lambda rng: fix(min(cap, lo * rng.paretovariate(alpha)))
    except ValueError:
        raise ValueError(f"bad distribution {text!r} (see `{PROG} --help`)") from None
    raise ValueError(f"unknown distribution {kind!r} in {text!r}: N, uniform, normal, lognormal, exponential, pareto")


@dataclass(frozen=True, slots=True)
class AgenticSpec:
    sessions: int = 100  # top-level sessions
    turns: str = "lognormal:12:8"  # turns per top-level session
    first_input: str = "lognormal:4000:1500"  # first turn: system prompt + task, tokens
    new_tokens: str = "pareto:1.3:200:30000"  # each later turn: a tool result (heavy-tailed), tokens
    user_p: float = 0.05  # probability a later turn is a user message instead of a tool result
    user_tokens: str = "lognormal:150:100"  # such a user message, tokens
    output: str = "lognormal:250:200"  # reply tokens per turn
    gap: str = "lognormal:1.5:2"  # seconds of tool run / think time before a later turn
    subagent_p: float = 0.1  # probability a turn (not the last) spawns subagents
    fanout: str = "uniform:1:3"  # subagents per spawn
    subagent_turns: str = "lognormal:5:3"  # turns per subagent
    subagent_input: str = "lognormal:2500:1000"  # a subagent's first turn, tokens
    max_depth: int = 1  # subagents of subagents, down to this depth
    rate: float = 1.0  # top-level sessions per second; 0: all at 0
    arrivals: str = "poisson"  # or "constant"
    seed: int = 0


_TYPES = {"sessions": int, "user_p": float, "subagent_p": float, "max_depth": int, "rate": float, "seed": int}
KEYS = tuple(f.name for f in fields(AgenticSpec))


def parse_spec_text(text: str) -> AgenticSpec:
    """`sessions=200,turns=uniform:5:30,rate=0.5` -> AgenticSpec (unknown keys and bad values refused)."""
    vals: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in KEYS:
            raise ValueError(f"bad agentic workload item {part!r}; keys: {', '.join(KEYS)}")
        try:
            vals[key] = _TYPES.get(key, str)(value.strip())
        except ValueError:
            raise ValueError(f"bad value for {key}: {value!r}") from None
    spec = AgenticSpec(**vals)
    _check(spec)
    return spec


def _check(spec: AgenticSpec) -> None:
    if spec.sessions < 1:
        raise ValueError("sessions must be >= 1")
    for k in ("user_p", "subagent_p"):
        if not 0 <= getattr(spec, k) <= 1:
            raise ValueError(f"{k} must be in [0, 1]")
    if spec.max_depth < 0:
        raise ValueError("max_depth must be >= 0")
    if not (spec.rate >= 0 and math.isfinite(spec.rate)):
        raise ValueError("rate must be >= 0")
    problem = arrival_problem(spec.arrivals)  # the one definition (workload/arrivals.py)
    if problem:
        raise ValueError(problem)


def generate(spec: AgenticSpec) -> list[dict]:
    """The turn lines, session by session (a session's subagents right after it)."""
    _check(spec)
    rng = random.Random(spec.seed)
    d_turns, d_first, d_new = parse_dist(spec.turns), parse_dist(spec.first_input), parse_dist(spec.new_tokens)
    d_out, d_gap, d_user = parse_dist(spec.output), parse_dist(spec.gap, integer=False), parse_dist(spec.user_tokens)
    d_fan, d_sturns, d_sin = parse_dist(spec.fanout), parse_dist(spec.subagent_turns), parse_dist(spec.subagent_input)
    rows: list[dict] = []

    def session(sid: str, n: int, first: int, depth: int, t: float | None, parent: str | None, by: int | None):
        mine: list[dict] = []
        later: list[tuple] = []
        for k in range(1, n + 1):
            row: dict = {"session": sid}
            if k == 1:
                if parent is not None:
                    row["parent"], row["spawned_by_turn"] = parent, by
                if t is not None:
                    row["t"] = round(t, 6)
                row["new_tokens"] = first
            else:
                row["gap"] = round(d_gap(rng), 3)
                if rng.random() < spec.user_p:
                    row["new_tokens"] = d_user(rng)
                else:
                    row["role"] = "tool"
                    row["new_tokens"] = d_new(rng)
            row["output_tokens"] = d_out(rng)
            mine.append(row)
            if k < n and depth < spec.max_depth and rng.random() < spec.subagent_p:
                for j in range(1, d_fan(rng) + 1):
                    later.append((f"{sid}/{k}.{j}", d_sturns(rng), d_sin(rng), k))
        rows.extend(mine)
        for cid, cn, cfirst, k in later:
            session(cid, cn, cfirst, depth + 1, None, sid, k)

    t = 0.0
    width = len(str(spec.sessions))
    gap = interval_draw(spec.arrivals, spec.rate, 1.0, rng) if spec.rate > 0 else None
    for i in range(spec.sessions):
        if i and gap is not None:
            t += gap()
        session(f"s{i + 1:0{width}d}", d_turns(rng), d_first(rng), 0, t, None, None)
    return rows


def write(rows: list[dict], path: str | Path, spec: AgenticSpec | None = None) -> None:
    with open(path, "wb") as f:
        f.write(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    if spec is not None:  # the recipe beside the trace, so it can be made again
        Path(f"{path}.spec.json").write_bytes(orjson.dumps(asdict(spec), option=orjson.OPT_INDENT_2))


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0, 1 (cannot write), 2 (bad arguments, or --out exists without --force)."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="keys and defaults: " + ", ".join(f"{k}={getattr(AgenticSpec(), k)}" for k in KEYS),
    )
    p.add_argument("--agentic", required=True, metavar="KEY=VALUE,...", help="the workload (empty: all defaults)")
    p.add_argument("--out", required=True, help="trace file to write (session JSONL)")
    p.add_argument("--force", action="store_true", help="overwrite --out when it exists and is not empty")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    try:
        spec = parse_spec_text(a.agentic)
        rows = generate(spec)
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    rc = write_out(write, rows, a.out, spec, a.force, PROG)
    if rc:
        return rc
    n = len({r["session"] for r in rows})
    print(
        f"wrote {len(rows)} turns of {n} sessions ({spec.sessions} top-level) to {a.out} (recipe in {a.out}.spec.json)"
    )
    return 0
