"""SIGINT and SIGTERM as an outcome of the run, not an accident.

Installed on the master or the local runner when the plugin starts (before the preflight and
before a ladder's shape starts: Locust installs its own SIGTERM handler only once the shape has
run, so a SIGTERM during a ladder used to kill the process with nothing written).

- Before the test starts (the preflight, a master waiting for its workers): one line, nothing was
  sent, exit 130 / 143.
- While it runs: the run stops the way its end would (the workers' final reports collected, the
  summary printed, the results and the report written), marked interrupted (the signal, when, the
  phase: ramp-up, running, step k of N), the step it cut left out of every verdict, exit 130 / 143.
- A second signal while it shuts down is noted and ignored (the results are being written); a
  third exits at once with what has been written.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.hub import get_hub

from llm_locust.report.outcome import SIGNAL_EXIT, Interruption


class Stopper:
    """The process's signal handling for one Locust environment (master or local runner)."""

    def __init__(self, environment: Any, ladder: Callable[[], Any] = lambda: None) -> None:
        self.env = environment
        self.ladder = ladder  # the ladder's controller now (the runtime's), or None
        self.interruption: Interruption | None = None
        self.signals = 0
        self.started = False  # the test has started: a signal stops it gracefully
        self.phase = "before the test"

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            _REGISTER(sig, self._on_signal, sig)
        # Locust's main registers its own SIGTERM handler once a headless test (or a ladder's shape)
        # has started: a second SIGTERM would then run its shutdown beside ours (the summary twice,
        # the process ended mid-write). Ours handles SIGTERM: later registrations of it are dropped.
        gevent.signal_handler = _without_sigterm

    def _on_signal(self, sig: int) -> None:
        """Runs in the hub: records, says what happens, and hands the stop to a greenlet."""
        name = signal.Signals(sig).name
        self.signals += 1
        if self.signals == 1:
            self.interruption = Interruption(name, time.time(), self.current_phase())
            if not self.started:
                _say(f"interrupted by {name} {self.phase}: nothing was sent, no results written")
                get_hub().loop.run_callback(_exit_main, SIGNAL_EXIT.get(name, 130))
                return
            _say(f"{name}: stopping the run ({self.interruption.phase}); writing what was measured")
            gevent.spawn(self._stop)
        elif self.signals == 2:
            _say(f"{name} again: already stopping, the results are being written (a third {name} exits at once)")
        else:
            _say(f"{name} a third time: exiting now; what was written so far stays")
            os._exit(SIGNAL_EXIT.get(name, 130))

    def current_phase(self) -> str:
        """Where the run is: before the test, ramp-up, step k of N, running, shutdown."""
        if not self.started:
            return self.phase
        ctl = self.ladder()
        if ctl is not None and ctl.windows:
            w = ctl.windows[-1]
            part = "warm-up" if w.measured_from is None else "measurement"
            total = len(ctl.ladder.levels) if ctl.search is None else None
            return f"step {w.index}{f' of {total}' if total else ''} ({part}, level {w.level:g})"
        runner = self.env.runner
        state = getattr(runner, "state", "")
        return "ramp-up" if state == "spawning" else "shutdown" if state in ("stopping", "stopped") else "running"

    def _stop(self) -> None:
        """Stop the runner (its users, a ladder's shape) and the web UI: Locust's main then runs
        its shutdown, which fires quitting and quit (the plugin's end of run)."""
        runner = self.env.runner
        try:
            runner.quit()
        finally:
            if self.env.web_ui is not None:
                self.env.web_ui.stop()


_REGISTER = gevent.signal_handler  # gevent's own, kept before _without_sigterm replaces it


def _without_sigterm(sig: int, handler: Any, *args: Any, **kwargs: Any) -> Any:
    """gevent.signal_handler, except that a SIGTERM handler is not added (Stopper handles it)."""
    if sig == signal.SIGTERM:
        return None
    return _REGISTER(sig, handler, *args, **kwargs)


def _say(line: str) -> None:
    print(f"llm-locust: {line}", file=sys.stderr, flush=True)


def _exit_main(code: int) -> None:
    """Before the test: end the process from its main greenlet (where the preflight or the wait
    for workers blocks), without a traceback."""
    get_hub().parent.throw(SystemExit(code))
