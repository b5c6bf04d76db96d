"""When each record of a trace is due, relative to the replay's start. Pure functions.

Trace time `a` maps to replay time `(a - start_offset) / speed`. Records before the offset or
past the duration window are left out; with `loops`, the window is replayed again right after
itself (each pass shifted by the window's length), so a 10-minute window looped 3 times is a
30-minute replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplayWindow:
    speed: float = 1.0
    start_offset: float = 0.0  # trace seconds skipped at the start
    duration: float | None = None  # trace seconds replayed per pass; None = to the end
    loops: int = 1  # passes over the window

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")
        if self.start_offset < 0:
            raise ValueError(f"start offset must be >= 0, got {self.start_offset}")
        if self.duration is not None and self.duration <= 0:
            raise ValueError(f"duration must be > 0, got {self.duration}")
        if self.loops < 1:
            raise ValueError(f"loops must be >= 1, got {self.loops}")


def due_times(arrivals: Sequence[float], window: ReplayWindow) -> list[tuple[float, int]]:
    """(seconds after the replay start, record index), in order of due time."""
    lo = window.start_offset
    hi = float("inf") if window.duration is None else lo + window.duration
    picked = [(a - lo, i) for i, a in enumerate(arrivals) if lo <= a < hi]
    if not picked:
        return []
    if window.loops == 1:
        return [(t / window.speed, i) for t, i in picked]
    # a pass lasts the window's length (or, open-ended, up to just after its last arrival)
    span = window.duration if window.duration is not None else picked[-1][0] + _gap(picked)
    out = []
    for k in range(window.loops):
        shift = k * span
        out += [((t + shift) / window.speed, i) for t, i in picked]
    return out


def _gap(picked: list[tuple[float, int]]) -> float:
    """Mean inter-arrival time: the pause between the last record of a pass and the next pass."""
    if len(picked) < 2:
        return 1.0
    return (picked[-1][0] - picked[0][0]) / (len(picked) - 1)
