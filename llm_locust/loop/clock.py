"""One clock across hosts: each worker's offset to the master's wall clock.

A distributed replay agrees on one wall-clock start (the master's t0), and every worker places
its per-second series by wall clock. A worker whose clock is 200 ms ahead of the master's would
send its share 200 ms early and put its seconds in the wrong place. So each worker measures its
offset over the master-worker channel it already has, NTP-style:

    worker  t1 --PING-->  t2 master
    worker  t4 <--PONG--  t3 master

The master's clock minus the worker's, theta, satisfies t3 - t4 <= theta <= t2 - t1 whatever the
delays each way (they are >= 0): each round trip gives an interval of width its delay (round trip
less the master's hold). `estimate` takes the fastest round trips of the recent ones (the least
queueing: a busy event loop on either side only widens a round trip) and intersects their
intervals; its uncertainty is half the width left (the worst error of its midpoint, clock drift
between the round trips aside). A worker measures when it starts, again before it says it is ready
to replay (so the offset is fresh at the start), and every SYNC_PERIOD s during the run.

`estimate` is a pure function; `ClockSync` is a worker's state (its round trips, the offset now)
and is free of Locust: runtime/hub.py carries the messages. The master's and a local runner's
offset is 0.

Test-only hooks, read here and nowhere else:
- LLM_LOCUST_TEST_CLOCK_SHIFT=S: this process's wall clock (time.time) reads S seconds ahead
  (negative: behind), as a host whose clock is off would. For the tests of the alignment; never
  for a real run.
- LLM_LOCUST_TEST_CLOCK_ALIGN=0: measure and report the offset, but do not apply it (the replay's
  start and the series stay on this process's own clock): the tests show it then fails.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.event import Event
from gevent.lock import Semaphore

log = logging.getLogger(__name__)

PING, PONG = "llm_locust_clock_ping", "llm_locust_clock_pong"  # worker -> master, master -> worker
SHIFT_ENV = "LLM_LOCUST_TEST_CLOCK_SHIFT"  # test-only: see the module's docstring
ALIGN_ENV = "LLM_LOCUST_TEST_CLOCK_ALIGN"  # test-only: "0" measures without applying
FASTEST = 4  # the round trips of the recent ones whose intervals are intersected
RECENT = 24  # round trips kept (bounded): the last bursts' (drift makes older ones wrong)
BURST = 8  # round trips per measurement at start and before a replay's start
REPEAT_BURST = 4  # round trips per measurement during the run
SYNC_PERIOD = 10.0  # s between measurements during the run
PONG_TIMEOUT = 2.0  # s a worker waits for one answer before it gives the round trip up
SPACING = 0.002  # s between the round trips of a burst: one late loop turn does not spoil them all
BOUND_S = 0.005  # an uncertainty above this would move a replay's schedule: the run flags the worker


@dataclass(frozen=True)
class RoundTrip:
    """One ping and its answer: t1, t4 on the worker's clock; t2, t3 on the master's."""

    t1: float
    t2: float
    t3: float
    t4: float

    @property
    def delay(self) -> float:
        """The time on the wire, both ways (the master's hold taken out)."""
        return (self.t4 - self.t1) - (self.t3 - self.t2)

    @property
    def low(self) -> float:
        """The least the offset (master - worker) can be: the answer took no time to come back."""
        return self.t3 - self.t4

    @property
    def high(self) -> float:
        """The most the offset can be: the ping took no time to arrive."""
        return self.t2 - self.t1


@dataclass(frozen=True)
class Estimate:
    """master clock - worker clock, within +- uncertainty_s, from `samples` round trips."""

    offset_s: float
    uncertainty_s: float
    samples: int
    rtt_s: float  # the fastest round trip's delay

    def as_dict(self, aligned: bool, bound: float = BOUND_S) -> dict:
        """The results' form (workers' clock): rounded to the microsecond, and flagged when the
        uncertainty exceeds `bound` (the schedule could be off by as much)."""
        return {
            "offset_s": round(self.offset_s, 6),
            "uncertainty_s": round(self.uncertainty_s, 6),
            "samples": self.samples,
            "rtt_s": round(self.rtt_s, 6),
            "aligned": aligned,
            "bound_s": bound,
            "flagged": self.uncertainty_s > bound,
        }


def estimate(trips: Iterable[RoundTrip], fastest: int = FASTEST) -> Estimate | None:
    """The offset from the `fastest` round trips (smallest delay): the middle of where their
    intervals overlap, give or take half the overlap. Where they do not overlap (the clocks moved
    apart between them: drift, a step), the fastest one alone. None without a usable round trip
    (a negative delay: a clock stepped during it)."""
    good = sorted((t for t in trips if t.delay >= 0), key=lambda t: t.delay)
    if not good:
        return None
    best = good[:fastest]
    low, high = max(t.low for t in best), min(t.high for t in best)
    if low > high:
        low, high = best[0].low, best[0].high
    return Estimate((low + high) / 2, (high - low) / 2, len(good), best[0].delay)


def align_enabled() -> bool:
    """Whether the measured offset is applied (LLM_LOCUST_TEST_CLOCK_ALIGN=0: test-only, off)."""
    return os.environ.get(ALIGN_ENV, "1").strip() != "0"


_real_time = time.time


def apply_test_shift() -> float:
    """Test-only (LLM_LOCUST_TEST_CLOCK_SHIFT): shift this process's time.time by the seconds
    given, once, as a host whose clock is off; perf_counter is untouched (the kernel's monotonic
    clock, shared by every process of a machine: the tests read the true schedule from it).
    Returns the shift (0: none). A value that is not a number is said in one line and ignored."""
    raw = os.environ.get(SHIFT_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        shift = float(raw)
    except ValueError:
        log.error("%s=%r is not a number of seconds: the clock is not shifted", SHIFT_ENV, raw)
        return 0.0
    setattr(time, "time", lambda: _real_time() + shift)  # noqa: B010 - every later time.time() here
    log.warning("test hook %s: this process's wall clock reads %+.3f s off", SHIFT_ENV, shift)
    return shift


class ClockSync:
    """A worker's round trips to the master and the offset they give (0 until the first).

    `ping` makes a round trip's first half (the caller sends it), `pong` completes it; `offset`
    is what `master_time` adds to this process's clock (0 when alignment is off)."""

    def __init__(self, aligned: bool = True) -> None:
        self.aligned = aligned
        self.trips: deque[RoundTrip] = deque(maxlen=RECENT)
        self.measured = 0  # round trips completed, all told
        self.current: Estimate | None = None
        self._pending: dict[int, float] = {}  # ping number -> t1
        self._n = 0
        self._answered = Event()
        self._lock = Semaphore()  # one burst at a time (the periodic one, a replay's before ready)

    def ping(self) -> dict:
        """A ping's message: its number and t1, now on this clock."""
        self._n += 1
        self._pending = {self._n: time.time()}  # one ping at a time: an older one's answer is dropped
        return {"n": self._n, "t1": self._pending[self._n]}

    def pong(self, data: dict) -> bool:
        """The master's answer: the round trip is complete (False: not the ping waited for)."""
        t4 = time.time()
        t1 = self._pending.pop(data.get("n", -1), None)
        if t1 is None:
            return False
        self.trips.append(RoundTrip(t1, float(data["t2"]), float(data["t3"]), t4))
        self.measured += 1
        self._answered.set()
        est = estimate(self.trips)
        if est is not None:
            self.current = Estimate(est.offset_s, est.uncertainty_s, self.measured, est.rtt_s)
        return True

    def burst(self, send: Callable[[dict], Any], n: int = BURST) -> int:
        """`n` round trips, one after the other, each waited for (PONG_TIMEOUT at most; a lost
        one is given up). `send` sends a ping's message to the master. Returns how many came back."""
        done = 0
        with self._lock:
            for _ in range(n):
                self._answered.clear()
                send(self.ping())
                done += bool(self._answered.wait(PONG_TIMEOUT))
                gevent.sleep(SPACING)
        return done

    @property
    def offset(self) -> float:
        return self.current.offset_s if self.current is not None and self.aligned else 0.0

    def master_time(self) -> float:
        """Now, on the master's clock as far as this worker knows it."""
        return time.time() + self.offset

    def figures(self) -> dict | None:
        """What a report carries to the master (None before the first round trip)."""
        return self.current.as_dict(self.aligned) if self.current is not None else None


def answer(data: dict) -> dict:
    """The master's side of a round trip: the ping's number and t1 back, with its t2 and t3."""
    t2 = time.time()
    return {"n": data.get("n"), "t1": data.get("t1"), "t2": t2, "t3": time.time()}
