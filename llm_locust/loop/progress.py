"""Progress you can follow while a headless run goes (the master or the local runner).

A 10-minute replay used to print nothing between its start and its end. Two views of the same
figures, read from the merged totals the hub already keeps (once a second at most, never per
request: the request path pays nothing):

- On a terminal: a live panel at the bottom of the screen (rich), redrawn every second, with a
  bar of the elapsed time against the planned one, the ladder's step k of N and whether it is
  warming up or measuring, a replay's records sent of the trace's planned ones, requests done and
  in flight, output tokens/s over the last seconds, and failures. Log lines print above it.
- Without one (CI logs, a pipe): one plain line every `--progress-interval` (10 s; 0: off):

    progress 0:40/1:00 | step 2/4 (concurrency 8) | sent 412, done 398, in flight 14 | 812 tok/s | 3 failed

The numbers: the time since the test started and the time it will take (-t, a ladder's planned
steps or a replay's last due record; "?" when nothing bounds it; past it, what the run waits for:
`progress 1:20 (0:21 planned, over by 0:59, waiting for 28 in flight)`, a replay's replies still
coming after its schedule ended, bounded by --request-timeout); the ladder's step; requests
sent (of the replay's planned ones), finished (any outcome) and in flight now; output tokens per
second over the last interval; requests failed so far (their kinds are in the summary).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent

from llm_locust.safe.terminal import terminal_safe

DEFAULT_INTERVAL = 10.0
LIVE_REFRESH_S = 1.0


def clock(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class Snapshot:
    """The figures one view shows at one moment."""

    elapsed: float
    total: float | None  # planned seconds, when something bounds the run
    step: str | None  # "step 2/4 (concurrency 8)"
    phase: str | None  # "warm-up" or "measuring" (a ladder's step)
    sent: int
    done: int
    in_flight: int
    planned: int | None  # a replay's records due
    tok_per_s: float
    failed: int


def line(elapsed: float, total: float | None, step: str | None, agg: Any, tok_per_s: float) -> str:
    """One plain progress line (see the module docstring)."""
    return plain(_snapshot(elapsed, total, step, None, agg, None, tok_per_s))


def _snapshot(elapsed, total, step, phase, agg, planned, tok_per_s) -> Snapshot:
    return Snapshot(
        elapsed,
        total,
        step,
        phase,
        agg.sent,
        agg.finished,
        max(0, agg.sent - agg.finished - agg.lost),
        planned,
        tok_per_s,
        agg.failed,
    )


def time_text(s: Snapshot) -> str:
    """Elapsed against planned: "0:40/1:00". Past the plan, the plan is not called wrong ("1:20/0:21"
    read as a bad total): what the run waits for is said instead, e.g. a replay whose schedule (its
    last record due at trace span / speed) has ended, waiting for the replies still in flight:
    "1:20 (0:21 planned, over by 0:59, waiting for 28 in flight)"."""
    if not s.total:
        return f"{clock(s.elapsed)}/?"
    total = math.ceil(s.total)  # a plan of 0.9 s is not "0:00"
    if s.elapsed < total + 1:  # clock() shows whole seconds
        return f"{clock(s.elapsed)}/{clock(total)}"
    what = f"waiting for {s.in_flight} in flight" if s.in_flight else "stopping"
    return f"{clock(s.elapsed)} ({clock(total)} planned, over by {clock(s.elapsed - total)}, {what})"


def plain(s: Snapshot) -> str:
    parts = [f"progress {time_text(s)}"]
    if s.step:
        parts.append(s.step)
    of = f" of {s.planned}" if s.planned else ""
    parts.append(f"sent {s.sent}{of}, done {s.done}, in flight {s.in_flight}")
    parts.append(f"{s.tok_per_s:.0f} tok/s")
    parts.append(f"{s.failed} failed")
    return " | ".join(parts)


def panel(s: Snapshot) -> Any:
    """The live view's renderable (rich): a time bar, then the figures."""
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    done = min(s.elapsed, s.total) if s.total else 0.0
    bar = ProgressBar(total=s.total or None, completed=done, width=30)
    grid.add_row(time_text(s).replace("/", " / ", 1), bar)
    if s.step:
        grid.add_row("ladder", f"{s.step}" + (f", {s.phase}" if s.phase else ""))
    of = f" of {s.planned}" if s.planned else ""
    grid.add_row("requests", f"sent {s.sent}{of}, done {s.done}, in flight {s.in_flight}")
    grid.add_row("output", f"{s.tok_per_s:,.0f} tokens/s")
    grid.add_row("failed", f"[red]{s.failed}[/]" if s.failed else "0")
    return grid


class Progress:
    """Started at test_start, stopped at test_stop; the live panel on a terminal, else the line."""

    def __init__(
        self,
        environment: Any,
        hub: Any,
        run_time: float | None,
        interval: float = DEFAULT_INTERVAL,
        planned: tuple[int, float] | None = None,
        live: bool | None = None,
        ladder: Callable[[], Any] = lambda: None,
    ) -> None:
        self.env, self.hub, self.run_time, self.interval = environment, hub, run_time, interval
        self.ladder = ladder  # the ladder's controller now (the runtime's), or None
        self.planned = planned  # a replay's (records due, seconds until the last is due)
        self.live = sys.stderr.isatty() if live is None else live
        self._greenlet: gevent.Greenlet | None = None

    def start(self, **_kw: Any) -> None:
        if self.interval > 0 and self._greenlet is None:
            self._greenlet = gevent.spawn(self._run_live if self.live else self._run_plain)

    def stop(self, **_kw: Any) -> None:
        g, self._greenlet = self._greenlet, None
        if g is not None:
            g.kill(block=True)  # the live view takes its panel down as it ends

    def snapshot(self, t0: float, rate: float) -> Snapshot:
        step, phase, ladder_s = self._ladder()
        total = ladder_s or self.run_time or (self.planned[1] if self.planned else None)
        planned = self.planned[0] if self.planned else None
        return _snapshot(time.monotonic() - t0, total, step, phase, self.hub.total, planned, rate)

    def _run_plain(self) -> None:
        t0 = time.monotonic()
        rate = _Rate(self.hub)
        while True:
            gevent.sleep(self.interval)
            print(plain(self.snapshot(t0, rate.now())), file=sys.stderr, flush=True)

    def _run_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        t0 = time.monotonic()
        rate = _Rate(self.hub)
        live = Live(console=Console(stderr=True), auto_refresh=False, transient=True, redirect_stdout=False)
        with live, _logs_above(live):
            while True:
                live.update(panel(self.snapshot(t0, rate.now())), refresh=True)
                gevent.sleep(LIVE_REFRESH_S)

    def _ladder(self) -> tuple[str | None, str | None, float | None]:
        """The ladder's step ("step k/N (kind level)"), its phase and planned seconds, or Nones."""
        ctl = self.ladder()
        if ctl is None or not ctl.windows:
            return None, None, None
        w = ctl.windows[-1]
        n = "" if ctl.search is not None else f"/{len(ctl.ladder.levels)}"
        if ctl.search is None and w.index > len(ctl.ladder.levels):  # --refine: a point around the knee
            n = f" (refine {w.index - len(ctl.ladder.levels)}/{getattr(ctl, 'refine', 0)})"
        phase = "warm-up" if w.measured_from is None else "measuring"
        return f"step {w.index}{n} ({ctl.ladder.kind} {w.level:g})", phase, ctl.ladder.planned_time()[0]


class _Rate:
    """Output tokens per second since the last reading."""

    def __init__(self, hub: Any) -> None:
        self.hub, self.t, self.tokens = hub, time.monotonic(), hub.total.tokens_out

    def now(self) -> float:
        t, tokens = time.monotonic(), self.hub.total.tokens_out
        rate = (tokens - self.tokens) / (t - self.t) if t > self.t else 0.0
        self.t, self.tokens = t, tokens
        return rate


class _logs_above:  # noqa: N801 - a context manager named for what it does
    """While the live panel shows: the log handlers that write to stderr write through the live
    console instead, so a log line prints above the panel rather than through it."""

    def __init__(self, live: Any) -> None:
        self.live = live
        self.swapped: list[tuple[logging.StreamHandler, Any]] = []

    def __enter__(self) -> None:
        proxy = _ConsoleStream(self.live.console)
        for logger in (logging.getLogger(), *(logging.getLogger(n) for n in list(logging.root.manager.loggerDict))):
            for h in getattr(logger, "handlers", []):
                if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is sys.stderr:
                    self.swapped.append((h, h.setStream(proxy)))

    def __exit__(self, *exc: Any) -> None:
        for h, stream in self.swapped:
            h.setStream(stream)


class _ConsoleStream:
    """A file-like object printing whole lines through a rich console (above a live view)."""

    def __init__(self, console: Any) -> None:
        self.console, self._part = console, ""

    def write(self, text: str) -> int:
        self._part += text
        *lines, self._part = self._part.split("\n")
        for ln in lines:  # a log line may quote a server: printed terminal-safe (safe/terminal.py)
            self.console.print(terminal_safe(ln), markup=False, highlight=False, soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        pass
