"""Stop when precise (--precision), on the master or the local runner: never on a worker.

A run that is not a ladder is judged once a second (CHECK_S, or less often: Pace) from the hub's
totals, which on a master are the exact merge of every worker's reported time blocks
(metrics/blocks.py), by analysis.precision_targets.check over the window the summary's
`intervals` use (first request sent to last one ended; on a master cut at `merged_until`). Once
every target is met the run stops as the fail-fast does (headless: quit; with the web UI: stop),
its requests in flight ending as cancelled. Not met by -t: the run ends on time and is judged
once more on its final figures. A ladder judges each step itself (runtime/shapes.py
LadderController, with Pace). Either way the results get `precision` (schema.py
Precision) and the summary its lines (report/precision.py).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import gevent
from locust.env import Environment

from llm_locust.analysis.precision_targets import check, target_text
from llm_locust.runtime.context import Role, run_context
from llm_locust.runtime.hub import hub
from llm_locust.schema import Precision, PrecisionCheck

log = logging.getLogger(__name__)
CHECK_S = 1.0
# A check waits at least PACE times the last one's cost: a long run's blocks hold many histogram
# buckets (benchmarks/bench_precision_check.py: 200,000 requests over 10 minutes, one target
# 60-240 ms a check, four 600 ms), and the local runner's loop also sends the load: the checks
# hold it at most 1/PACE (2%) of the time, well within the client's loop-lag check (5%).
PACE = 50.0


class Pace:
    """When the next check is due: CHECK_S after the last one, or PACE times its cost if longer."""

    def __init__(self) -> None:
        self.next_at = 0.0  # time.monotonic()

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def check(self, *args: Any, **kw: Any) -> PrecisionCheck:
        """`check(*args, **kw)`, timed: the next one is due CHECK_S (or PACE times its cost) later."""
        t0 = time.monotonic()
        c = check(*args, **kw)
        now = time.monotonic()
        self.next_at = now + max(CHECK_S, PACE * (now - t0))
        return c


def merged_until(env: Environment) -> float | None:
    """On a master, the moment up to which every connected worker's figures are merged: the oldest
    of their last reports (a report carries every request the worker had finished by then). A
    stop judged on the merged figures past it would rest on some workers' requests without the
    others'. None on a local runner: its figures are all in."""
    run = run_context(env)
    if run.role is not Role.MASTER:
        return None
    runner = run.master_runner()
    workers = hub(env).workers
    live = [c.id for c in list(runner.clients.values()) if c.state != "missing"]
    return min((workers[cid].last_report if cid in workers else 0.0 for cid in live), default=0.0)


def met_text(c: PrecisionCheck) -> str:
    """ "ttft.p99 ± 1.8% (target 2%), itl.mean ± 0.7% (target 1%)"."""
    return ", ".join(target_text(name, f) for name, f in c["figures"].items())


class Watch:
    """The run's judge: a greenlet from test_start to test_stop, and the stop's check."""

    def __init__(self, env: Environment, targets: dict[str, float]) -> None:
        self.env = env
        self.targets = targets
        self.stop_check: PrecisionCheck | None = None  # the check that stopped the run
        self.greenlet: gevent.Greenlet | None = None

    def seconds(self) -> float:
        started = hub(self.env).started_at
        return time.time() - started if started is not None else 0.0

    def start(self, **_kw: Any) -> None:
        self.stop_check = None
        if self.greenlet is None:
            self.greenlet = gevent.spawn(self._watch)

    def stop(self, **_kw: Any) -> None:
        g, self.greenlet = self.greenlet, None
        if g is not None and g is not gevent.getcurrent():
            g.kill(block=False)

    def _watch(self) -> None:
        h = hub(self.env)
        pace = Pace()
        pace.next_at = time.monotonic() + CHECK_S
        while True:
            gevent.sleep(max(pace.next_at - time.monotonic(), 0.0))
            c = pace.check(h.total, self.targets, self.seconds(), until=merged_until(self.env))
            if c["met"]:
                c["stopped"] = True
                self.stop_check = c
                print(
                    f"llm-locust: precise after {c['seconds']:.1f} s ({c['requests']} requests): {met_text(c)}; "
                    "stopping",
                    file=sys.stderr,
                    flush=True,
                )
                runner = self.env.runner
                assert runner is not None, "a watch runs on a runner's environment"
                headless = getattr(self.env.parsed_options, "headless", False) or self.env.web_ui is None
                self.greenlet = None  # stopping kills the watch: not this greenlet, which ends here
                gevent.spawn(runner.quit if headless else runner.stop)
                return

    def report(self) -> Precision:
        """The results' `precision`: the stop's check, or one on the final figures."""
        c = self.stop_check or check(hub(self.env).total, self.targets, self.seconds())
        return {"targets": dict(self.targets), "met": c["met"], "checks": [c]}


def install(env: Environment, settings) -> None:
    """On the master or the local runner, for a run with --precision that is not a ladder (a
    ladder's controller judges its steps)."""
    if not settings.precision or settings.ladder:
        return
    watch = run_context(env).precision = Watch(env, dict(settings.precision))
    env.events.test_start.add_listener(watch.start)
    env.events.test_stop.add_listener(watch.stop)


def report(env: Environment) -> Precision | None:
    """The results' `precision` (None without --precision): the run's, or the ladder's steps'."""
    ctx = run_context(env)
    if ctx.ladder is not None:
        return ctx.ladder.precision_report()
    return ctx.precision.report() if ctx.precision is not None else None
