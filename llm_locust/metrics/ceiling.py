"""One process's token rate against what one process can hold (its ceiling, settings/workers.py).

    w = CeilingWatch(14_000, "built-in")
    w.add_tokens(n)                      # a request ended with n tokens read (any outcome)
    w.sample(now, cpu_percent, True)     # once a second (the CPU probe): the rate over WINDOW_S
    w.over                               # its peak rate was over the ceiling
    w.to_wire()                          # what a worker reports; the master keeps one per worker

What a process can hold is a token rate (docs/load-shapes.md, "Worker processes"): past it, its
reads queue behind each other and the figures it takes are late. The rate is the tokens of the
requests that ended in the last WINDOW_S seconds, over those seconds (a request's tokens counted as
it ends: a window of several seconds holds requests of a second or two whole), sampled once a
second; the peak is the highest sample taken while the run measured (not its ramp or drain).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

WINDOW_S = 5  # seconds of ended requests one rate sample spans


class CeilingWatch:
    """A process's token rate, its peak, and whether that peak went over its ceiling."""

    __slots__ = ("ceiling", "source", "tokens", "_marks", "rate", "peak", "peak_at", "cpu_max", "said")

    def __init__(self, ceiling: int, source: str) -> None:
        self.ceiling = ceiling
        self.source = source
        self.tokens = 0  # tokens read by requests that ended, since the start
        self._marks: deque[tuple[float, int]] = deque(maxlen=WINDOW_S + 1)  # (time, tokens) a second apart
        self.rate = 0.0  # the last sample
        self.peak = 0.0  # the highest sample while measuring
        self.peak_at: float | None = None
        self.cpu_max = 0.0  # the highest CPU sample while measuring (percent of a core)
        self.said = False  # the live warning was given

    def add_tokens(self, n: int) -> None:
        self.tokens += n

    def sample(self, now: float, cpu_percent: float | None, measuring: bool) -> float:
        """One sample (a second after the last): the rate over the window; the peak and the CPU
        kept while the run measures."""
        self._marks.append((now, self.tokens))
        t0, n0 = self._marks[0]
        self.rate = (self.tokens - n0) / (now - t0) if now > t0 else 0.0
        if measuring and len(self._marks) > 1:
            if self.rate > self.peak:
                self.peak, self.peak_at = self.rate, now
            if cpu_percent is not None:
                self.cpu_max = max(self.cpu_max, cpu_percent)
        return self.rate

    @property
    def over(self) -> bool:
        return self.peak > self.ceiling

    def to_wire(self) -> dict[str, Any]:
        return {
            "rate": round(self.rate, 1),
            "peak": round(self.peak, 1),
            "ceiling": self.ceiling,
            "source": self.source,
            "cpu_max": round(self.cpu_max, 1),
        }


def row(process: str, wire: dict[str, Any], cpu_limit: float, suspect: bool) -> dict[str, Any]:
    """The results' `validity.ceiling` row of one process: its peak token rate against its
    ceiling, and whether it was over: the peak above the ceiling, or its CPU saturated (a sample
    at or above cpu_limit) while the client-validity verdict is suspect."""
    peak, ceil, cpu = float(wire.get("peak") or 0.0), int(wire.get("ceiling") or 0), float(wire.get("cpu_max") or 0.0)
    why = None
    if ceil and peak > ceil:
        why = f"peak {peak:,.0f} tokens/s over the ceiling of {ceil:,} tokens/s"
    elif suspect and cpu >= cpu_limit:
        why = f"CPU {cpu:.0f}% (at or above {cpu_limit:g}%) while the client validity is suspect"
    return {
        "process": process,
        "peak_tokens_per_s": round(peak, 1),
        "ceiling_tokens_per_s": ceil,
        "ceiling_source": str(wire.get("source") or ""),
        "cpu_max_percent": round(cpu, 1),
        "over": why is not None,
        "why": why,
    }


def live_line(process: str, rate: float, ceiling: int, source: str) -> str:
    """The live warning, said once per process."""
    return (
        f"{process} reads {rate:,.0f} tokens/s, over what one process holds ({ceiling:,} tokens/s, {source}): "
        "its figures may be late; more --workers (or `llm-locust calibrate`) - see docs/load-shapes.md"
    )


def live_reason(process: str, wire: dict[str, Any], cpu_limit: float, suspect: Callable[[], bool]) -> str | None:
    """What a process over its ceiling says while the run goes, or None: its peak over the
    ceiling, or its CPU at or above cpu_limit while the client's figures are suspect (`suspect`
    is asked only then: it reads the figures)."""
    peak, ceil = float(wire.get("peak") or 0.0), int(wire.get("ceiling") or 0)
    if ceil and peak > ceil:
        return live_line(process, peak, ceil, str(wire.get("source") or ""))
    cpu = float(wire.get("cpu_max") or 0.0)
    if cpu >= cpu_limit and suspect():
        return (
            f"{process}'s CPU reached {cpu:.0f}% while the client's figures are suspect: it is over what one "
            f"process holds (reading {float(wire.get('rate') or 0.0):,.0f} tokens/s); more --workers - see "
            "docs/load-shapes.md"
        )
    return None


def summary_line(rows: list[dict[str, Any]]) -> str | None:
    """The summary's line naming the processes over their ceiling, or None."""
    over = [r for r in rows if r["over"]]
    if not over:
        return None
    sources = sorted({r["ceiling_source"] for r in over})
    if len(sources) == 1:
        return "over ceiling: " + "; ".join(f"{r['process']}: {r['why']}" for r in over) + f" ({sources[0]})"
    return "over ceiling: " + "; ".join(f"{r['process']}: {r['why']} ({r['ceiling_source']})" for r in over)
