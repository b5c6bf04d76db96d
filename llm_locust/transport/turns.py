"""The hub's turn: how long one event-loop iteration may run before a request's own work waits.

Reads are timed by the kernel (transport/stamps.py), so a read taken late is still timed right,
unless the stream's next token came before it: the two are then read together and the first
takes the second's time. The loop must therefore poll again well within one token interval.

Requests of one closed loop move in groups: a server's batch gives a group their last token in
one iteration (users that started together stay in step), and the group's accountings, next
sends, heads and first reads (the general way, a template learnt) then come together too, each
of them run to its end by the greenlet the loop woke. At 100 streams x 100 tokens/s (10 ms
apart), one process at a fifth of a core held its reads 10-30 ms at such groups, and one first
token in ten was read with the second: the first tokens of a group arrive together, and the
greenlets woken last read theirs after the whole group's work (benchmarks/README.md, "First
tokens read with the second").

`take_turn` is called where a request's own work is about to begin (before its accounting, before
a send, after a read whose bytes it is to work on: `turn_after_read`): when the current iteration
has already run for TURN seconds, the greenlet waits for the next one (a timer: the hub then
polls, so the pump and every waiting stream read first). The iteration is told by the loop's own
count of its iterations, read at every call; its start is when a request's work first saw it.
So each iteration runs at least one piece of request work, and TURN more after whatever reads
came first (the pump's): under any load the work goes on.
"""

from __future__ import annotations

import time

import gevent
from gevent import get_hub

# How long one loop iteration may run before request work waits for the next: a fifth of the
# shortest token interval worth timing (10 ms: 100 tokens/s) keeps every stream read in time.
TURN = 0.002
# A timer, not sleep(0): gevent's sleep(0) only runs the hub's callbacks, not a loop iteration.
_WAIT = 1e-6


class _Turn:
    __slots__ = ("loop", "iteration", "since")

    def __init__(self) -> None:
        self.loop = None
        self.iteration = -1
        self.since = 0.0


_TURN = _Turn()


def seen(now: float) -> float:
    """Note the loop's iteration at `now`; how long it has run so far (0 when it is new)."""
    t = _TURN
    loop = t.loop
    if loop is None:
        loop = t.loop = get_hub().loop
    it = loop.iteration
    if it != t.iteration:
        t.iteration, t.since = it, now
        return 0.0
    return now - t.since


def take_turn() -> None:
    """Before a request's own work: wait for the next loop iteration when this one has run for
    TURN seconds already, so that the streams' reads come first."""
    while seen(time.perf_counter()) > TURN:
        gevent.sleep(_WAIT)


def turn_after_read(now: float, busy_from: float) -> float:
    """After a read that returned at `now` (its bytes in, its time taken): wait for the next
    iteration when this one has run past TURN, so that what the read brought is worked on after
    the other streams' reads. Returns the reader's new `busy_from` (transport/reads.py): the time
    after the wait, or `busy_from` unchanged when there was none."""
    if seen(now) <= TURN:
        return busy_from
    take_turn()
    return time.perf_counter()
