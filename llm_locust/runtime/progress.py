"""A plain progress line every few seconds in a headless run (the master or the local runner).

A 10-minute replay used to print nothing between its start and its end. Every `interval` seconds
(10 by default) one line goes to stderr, from the merged figures the hub already keeps, so it
costs the request path nothing:

    progress 0:40/1:00 | step 2/4 (concurrency 8) | sent 412, done 398, in flight 14 | 812 tok/s | 3 failed

The numbers: the time since the test started and the time it will take (-t, or a ladder's planned
steps; "?" when neither bounds it); the ladder's step; requests sent, finished (any outcome) and in
flight now; output tokens per second over the last interval; requests failed so far (their kinds
are in the summary).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import gevent

DEFAULT_INTERVAL = 10.0


def clock(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def line(elapsed: float, total: float | None, step: str | None, agg: Any, tok_per_s: float) -> str:
    """One progress line (see the module docstring)."""
    parts = [f"progress {clock(elapsed)}/{clock(total) if total else '?'}"]
    if step:
        parts.append(step)
    in_flight = max(0, agg.sent - agg.finished - agg.lost)
    parts.append(f"sent {agg.sent}, done {agg.finished}, in flight {in_flight}")
    parts.append(f"{tok_per_s:.0f} tok/s")
    parts.append(f"{agg.failed} failed")
    return " | ".join(parts)


class Progress:
    """Prints the line while a test runs; started at test_start, stopped at test_stop."""

    def __init__(self, environment: Any, hub: Any, run_time: float | None, interval: float = DEFAULT_INTERVAL) -> None:
        self.env, self.hub, self.run_time, self.interval = environment, hub, run_time, interval
        self._greenlet: gevent.Greenlet | None = None

    def start(self, **_kw: Any) -> None:
        if self.interval > 0 and self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self, **_kw: Any) -> None:
        g, self._greenlet = self._greenlet, None
        if g is not None:
            g.kill(block=False)

    def _run(self) -> None:
        t0 = time.monotonic()
        last_t, last_tokens = t0, self.hub.total.tokens_out
        while True:
            gevent.sleep(self.interval)
            now, agg = time.monotonic(), self.hub.total
            rate = (agg.tokens_out - last_tokens) / (now - last_t) if now > last_t else 0.0
            last_t, last_tokens = now, agg.tokens_out
            step, total = self._ladder()
            print(line(now - t0, total or self.run_time, step, agg, rate), file=sys.stderr, flush=True)

    def _ladder(self) -> tuple[str | None, float | None]:
        """The ladder's step ("step k/N (kind level)") and its planned seconds, or (None, None)."""
        ctl = getattr(self.env, "llm_ladder", None)
        if ctl is None or not ctl.windows:
            return None, None
        w = ctl.windows[-1]
        n = "" if ctl.search is not None else f"/{len(ctl.ladder.levels)}"
        return f"step {w.index}{n} ({ctl.ladder.kind} {w.level:g})", ctl.ladder.planned_time()[0]
