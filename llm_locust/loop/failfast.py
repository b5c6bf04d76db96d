"""Stop a run that cannot succeed.

Watched on the master (or the local runner) once a second from the merged figures:
- the first `fail_fast_after` finished requests all failed, in one way: the target is not
  serving this API (a dead port, a 404 on every path, a non-LLM server): stop, exit 3;
- `fail_fast_after` connection failures since the last check and no request succeeded: the
  server went away mid-run: stop, exit 3.
The line printed says why, with the first error text. `--no-fail-fast` turns both off. The run's
exit code (3 after such a stop) is the end of the run's (report/outcome.py), which asks
`FailFast.reason` for the reason. The runtime wires it to Locust (runtime/plugin.py
`_install_fail_fast`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import gevent

from llm_locust.metrics.aggregate import NOT_FAILED, Aggregate

log = logging.getLogger(__name__)
CHECK_S = 1.0
CONNECT = "connect_error"


def _failed_by_kind(agg) -> dict[str, int]:
    return {k: n for k, n in agg.outcomes.items() if n and k not in ("ok", *NOT_FAILED)}


def _first_text(agg, kind: str) -> str:
    texts = agg.errors.get(kind) or {}
    return next(iter(texts), "") if texts else ""


def verdict(agg, after: int, last: dict[str, int] | None) -> str | None:
    """Why to stop now, or None. `last`: the outcome counts at the previous check."""
    ok = agg.outcomes.get("ok", 0)
    failed = _failed_by_kind(agg)
    total_failed = sum(failed.values())
    if ok == 0 and total_failed >= after and len(failed) == 1:
        kind = next(iter(failed))
        text = _first_text(agg, kind)
        return f"the first {total_failed} requests all failed ({kind}{': ' + text if text else ''})"
    if last is not None:
        new_ok = ok - last.get("ok", 0)
        new_connect = agg.outcomes.get(CONNECT, 0) - last.get(CONNECT, 0)
        if new_ok == 0 and new_connect >= after:
            text = _first_text(agg, CONNECT)
            return f"{new_connect} connection failures in a row and no reply{': ' + text if text else ''}"
    return None


class FailFast:
    """The watch, once a second while a test runs, over the merged figures `total()` returns.
    `stop` ends the run (the runtime picks quit or stop); `reason` says why it was stopped early
    (None when it was not). The runtime hooks `start` and `stop_watching` to the test's start and
    stop: this module knows no Locust."""

    def __init__(self, total: Callable[[], Aggregate], after: int, enabled: bool, stop: Callable[[], Any]) -> None:
        self.total, self.after, self.enabled, self.stop = total, after, enabled, stop
        self.greenlet: gevent.Greenlet | None = None
        self.reason: str | None = None

    def watch(self) -> None:
        last = None
        while True:
            gevent.sleep(CHECK_S)
            total = self.total()
            reason = verdict(total, self.after, last)
            last = dict(total.outcomes)
            if reason:
                self.reason = reason
                print(f"llm-locust: stopping early: {reason} (--no-fail-fast to run on)", file=sys.stderr, flush=True)
                gevent.spawn(self.stop)
                return

    def start(self, **_kw: Any) -> None:
        self.reason = None
        if self.enabled and self.greenlet is None:
            self.greenlet = gevent.spawn(self.watch)

    def stop_watching(self, **_kw: Any) -> None:
        g, self.greenlet = self.greenlet, None
        if g is not None and g is not gevent.getcurrent():
            g.kill(block=False)
