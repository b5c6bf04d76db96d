"""Another tool's results, read as a run beside ours: what a reader (aiperf_results.py, guidellm_results.py,
vllm_bench.py) makes of a file, in our terms (docs/metrics.md, seconds), with the figures that
do not mean what ours mean marked, and the ones that do but are measured a little differently
footnoted. Plain data and helpers; no reader imports another (docs/compare.md, "Other tools")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

STATS = ("mean", "min", "max", "p50", "p90", "p95", "p99", "p99.9")

# why a figure differs a little from ours while meaning the same thing: the footnotes' texts
CONNECT = "starts before the TCP connect (ours: once the connection is ready)"
CLIENT_TOKENS = "output tokens counted by the tool's tokenizer re-reading the text (ours: server usage)"


@dataclass
class Foreign:
    """What a reader made of another tool's results file. `summary` holds our figures under our
    names and units (seconds, tok/s), only those that mean what ours mean; `not_comparable`
    says, per figure ("itl", or "itl.p50" for one statistic), what the tool's figure of that name
    means instead; `caveats` says, per figure, how it is measured differently though it means the
    same (shown as footnotes)."""

    tool: str  # "AIPerf"
    version: str  # "0.13.0"; "" when the file does not say
    summary: dict[str, Any]
    not_comparable: dict[str, str] = field(default_factory=dict)
    caveats: dict[str, str] = field(default_factory=dict)
    model: str = "unknown"
    api: str = "?"
    load: str = "?"  # in our words: "closed loop, 4 users", "rate 2 req/s (poisson arrivals)"
    timing: str = "?"  # "40 requests", "60 s"
    input_len: float | None = None  # input tokens asked for per request (None: not recorded)
    output_len: float | None = None  # output tokens asked for per request
    forced: bool | None = None  # whether the output length was forced (ignore_eos); None: not recorded
    prompts: str = "?"  # where the prompt texts came from
    started: str = "?"
    seed: Any = "?"
    server: str = ""  # the URL the tool loaded, when recorded

    def mark(self, figure: str, stat: str = "") -> str | None:
        """Why `figure` (and `stat` of it) is not comparable, or None when it is."""
        return self.not_comparable.get(f"{figure}.{stat}") or self.not_comparable.get(figure)

    def caveat(self, figure: str, stat: str = "") -> str | None:
        return self.caveats.get(f"{figure}.{stat}") or self.caveats.get(figure)


def num(v: Any) -> float | None:
    """A finite number, else None (a missing or null field, a string)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def dig(d: Any, *keys: Any) -> Any:
    """d[k0][k1]... or None where a step is missing (lists by index)."""
    for k in keys:
        if isinstance(d, dict):
            d = d.get(k)
        elif isinstance(d, list) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return None
    return d


def latency(values: dict[str, Any], scale: float, count: Any = None, only: tuple[str, ...] = STATS) -> dict[str, Any]:
    """Our latency summary ({count, mean, p50, ...} in seconds) from a tool's statistics, `values`
    naming each of our STATS's value in the tool's unit (scale: to seconds). Missing ones are left out."""
    out: dict[str, Any] = {}
    c = num(count)
    if c is not None:
        out["count"] = int(c)
    for s in only:
        v = num(values.get(s))
        if v is not None:
            out[s] = v * scale
    return out


def ratio(a: Any, b: Any) -> float | None:
    x, y = num(a), num(b)
    return x / y if x is not None and y else None


def closed_loop(users: Any) -> str:
    """A closed loop in the words of our runs (runs.Run.load), so that the loads compare."""
    n = num(users)
    return f"closed loop, {int(n) if n is not None and n == int(n) else users} users"


def error_class(text: str) -> str:
    """A Python traceback's last line, `module.Class: message`, as `Class: message` (120 chars)."""
    lines = [x.strip() for x in str(text).strip().splitlines() if x.strip()]
    last = lines[-1] if lines else str(text)
    head, sep, rest = last.partition(":")
    name = head.rsplit(".", 1)[-1] if " " not in head else head
    return f"{name}{sep}{rest}"[:120]
