"""When a run empties the server's prefix cache (--reset-cache): once before the load, and for
`step` between two ladder steps, after the ended step's requests finish and while the server is
idle (LadderReset, on the ladder controller in runtime/shapes.py). The exchanges with each engine
are the transport's (transport/server_cache.py, which says why and how per engine). What stays
here is Locust glue: the reset hooks Locust's test_start and drives the ladder's LoadTestShape
controller (its users, its runner) between steps.
"""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment

from llm_locust.protocols import GRPC_APIS, get_adapter
from llm_locust.protocols.base import request_headers
from llm_locust.runtime.context import run_context
from llm_locust.runtime.hub import hub
from llm_locust.transport.server_cache import Target

log = logging.getLogger(__name__)
QUIET_S = 30.0  # between steps: how long the ladder asks a busy server again before going on


def install(env: Environment, settings) -> None:
    """--reset-cache repeat|step: the reset before the load (at test start, after the preflight),
    and for `step` the ladder's resets between steps (LadderReset, on the ladder controller)."""
    mode = getattr(settings, "reset_cache", "off")
    if mode == "off" or not env.host:
        return
    if settings.api in GRPC_APIS:
        return  # refused by the settings' check: the reset endpoints are HTTP
    target = Target(env.host, request_headers(get_adapter(settings.api), settings.api_key))
    resets = LadderReset(target, between_steps=mode == "step")
    run_context(env).cache_reset = resets

    def at_start(**_kw: Any) -> None:
        r = target.reset("before the run")
        resets.run = r.to_dict()
        ladder = run_context(env).ladder
        if ladder is not None and ladder.windows and ladder.windows[0].cache_reset is None:
            ladder.windows[0].cache_reset = r.to_dict()  # the first step started before test_start fired
        else:
            resets.last = r.to_dict()

    env.events.test_start.add_listener(at_start)


def resets(env: Environment) -> LadderReset | None:
    """The run's resets (--reset-cache; None: off), made by `install` only."""
    r = run_context(env).cache_reset
    assert r is None or isinstance(r, LadderReset), "run.cache_reset is made here only"
    return r


class LadderReset:
    """--reset-cache step on the ladder controller (runtime.shapes): between two steps, the ended
    step's requests finish (a rate ladder sends nothing new; a concurrency ladder's users go on in
    no step), then the users stop, the cache is reset (asked again while the server is busy, up to
    QUIET_S), and the next step starts, its window carrying the outcome."""

    def __init__(self, target: Target, between_steps: bool) -> None:
        self.target = target
        self.between_steps = between_steps  # `step`; `repeat`: the reset before the run only
        self.run: dict[str, Any] | None = None  # the reset before the run
        self.last: dict[str, Any] | None = None  # the outcome for the next window (take)
        self.pending: tuple[int, float | None] | None = None  # the step to start: index, level
        self.drain_until = 0.0
        self.quiet_until: float | None = None

    def take(self) -> dict[str, Any] | None:
        out, self.last = self.last, None
        return out

    def begin(self, ctl, i: int, level: float | None, now: float, until: float, drain_step: int) -> tuple | None:
        """Step i's turn (0-based) after the window that just ended: stop sending, and wait until
        `until` at most for the ended step's requests (new ones are tagged `drain_step`: no step)."""
        self.pending = (i, level)
        cur = ctl.windows[-1]
        self.drain_until = until
        self.quiet_until = None
        if ctl.ladder.kind == "rate":
            ctl._broadcast(drain_step, 0.0)  # share 0: the open-loop pass stops
        else:
            ctl._broadcast(drain_step, cur.level, drain=True)
        return self.tick(ctl, now)

    def tick(self, ctl, now: float) -> tuple | None:
        assert self.pending is not None
        i, level = self.pending
        cur = ctl.windows[-1]
        if self.quiet_until is None:
            if not hub(ctl.env).step_drained(cur.index) and now < self.drain_until:
                return ctl._users(cur.level)
            self.quiet_until = now + QUIET_S
            return _stopped(ctl)
        if ctl.ladder.kind == "concurrency" and ctl.env.runner.user_count > 0 and now < self.quiet_until:
            return _stopped(ctl)  # a user between two requests would send one more after the reset
        r = self.target.reset(f"before step {i + 1}")
        if r.busy and now < self.quiet_until:
            log.info("the server is still busy: the cache reset is asked again")
            return _stopped(ctl)
        self.last = r.to_dict()
        self.pending = None
        ctl._start_step(i, now, level)
        return ctl._users(ctl.windows[-1].level)


def _stopped(ctl) -> tuple:
    """The load between two steps: a concurrency ladder's users all stop at once (a request in
    flight, sent after the step's window, in no step, ends cancelled); a rate ladder's pass is
    already at rate 0."""
    users, rate, classes = ctl._users(0)
    return users, max(rate, 1000), classes


def summary(windows) -> str:
    """One line under the ladder's table: how the resets went (those not ok named)."""
    done = [(w.index, w.cache_reset) for w in windows if getattr(w, "cache_reset", None)]
    if not done:
        return ""
    bad = [
        f"step {i}: {d['outcome'].replace('_', ' ')}" + (f" (HTTP {d['status']})" if d.get("status") else "")
        for i, d in done
        if d["outcome"] != "ok"
    ]
    head = f"cache reset before {len(done)} of {len(windows)} steps"
    return head + (": ok" if not bad else ": " + "; ".join(bad))
