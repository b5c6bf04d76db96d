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
# How long a request's accounting or send lets the work on streams' reads that waited for a
# turn go first (a stream's head or first token: it reads again only once that is done). Bounded,
# so that a flood of reads cannot hold a request's accounting for longer. At 10 ms, 100 users that
# restart together still read 22-34 of their first tokens with the second; at 50 ms, 0-4.
READS_FIRST = 0.05
# A timer, not sleep(0): gevent's sleep(0) only runs the hub's callbacks, not a loop iteration.
_WAIT = 1e-6


class _Turn:
    __slots__ = ("loop", "iteration", "since", "reads_waiting")

    def __init__(self) -> None:
        self.loop = None
        self.iteration = -1
        self.since = 0.0
        self.reads_waiting = 0  # greenlets whose work on a read waits for a turn (turn_after_read)


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


def take_turn(reads_first: bool = True) -> None:
    """Before a request's own work (its accounting, a send): wait for the next loop iteration
    when this one has run for TURN seconds already, and, with `reads_first`, for up to
    READS_FIRST while work on streams' reads waits for its turn: the streams' reads, and what
    they brought, come first. Where the wait would count as the request's send delay (a send at
    its scheduled time: StreamClient's exchange) only the first: a closed loop's user takes its
    whole turn before its next request is due (runtime/closed_loop.py)."""
    t = _TURN
    perf_counter = time.perf_counter
    start = now = perf_counter()
    limit = READS_FIRST if reads_first else 0.0
    while seen(now) > TURN or (t.reads_waiting and now - start < limit):
        gevent.sleep(_WAIT)
        now = perf_counter()


def turn_after_read(now: float, busy_from: float) -> float:
    """After a read that returned at `now` (its bytes in, its time taken): wait for the next
    iteration when this one has run past TURN, so that what the read brought is worked on after
    the other streams' reads (and before requests' accountings and sends: take_turn). Returns the
    reader's new `busy_from` (transport/reads.py): the time after the wait, or `busy_from`
    unchanged when there was none."""
    if seen(now) <= TURN:
        return busy_from
    t = _TURN
    t.reads_waiting += 1
    try:
        while seen(time.perf_counter()) > TURN:
            gevent.sleep(_WAIT)
    finally:
        t.reads_waiting -= 1
    return time.perf_counter()
