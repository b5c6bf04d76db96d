"""Kernel receive timestamps of socket reads: the time a read's data reached the socket, not the
time this process got round to reading it. Under load (a thousand streams whose tokens land
together) the difference is tens of milliseconds; see docs/metrics.md. Used by a stream's own
reads (transport/http.py, read_stamped) and the pump's (transport/pump.py)."""

from __future__ import annotations

import socket
import struct
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python does not export it
CMSG_SPACE = 64  # recvmsg's room for the timestamp's control message
_SOL_SOCKET = socket.SOL_SOCKET
_unpack = struct.Struct("qq").unpack


# A wall-clock read between two monotonic reads further apart than this was interrupted (the
# three reads take well under a microsecond); the offset is read again, at most this many times.
OFFSET_SPREAD_NS = 20_000
OFFSET_TRIES = 5


def clock_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now: turns a kernel timestamp into perf_counter time.

    The wall clock is read between two monotonic reads, and read again when those were far apart:
    a process preempted between its two clock reads (a loaded machine) took an offset off by the
    time it waited, and every kernel stamp of the stream with it. A stamp pushed past the read's
    return was then replaced by the return's time and the next one kept, so the stream's chunk
    times went backwards (test_sglang_in_place failed so in a CI run's fast tier)."""
    best_spread, best = None, 0
    for _ in range(OFFSET_TRIES):
        a = time.perf_counter_ns()
        wall = time.time_ns()
        b = time.perf_counter_ns()
        if best_spread is None or b - a < best_spread:
            best_spread, best = b - a, wall - (a + b) // 2
        if b - a <= OFFSET_SPREAD_NS:
            break
    return best


def arrival(anc: list, now: float, t_sent: float, off_ns: int, last: float = 0.0) -> float:
    """The read's arrival time from recvmsg's control messages `anc`, as perf_counter seconds,
    kept within [t_sent, now); `now` (the time the read returned) when there is none. Never
    before `last`, the stream's previous arrival: a stamp past its read's return (an offset a
    preempted clock read left off) was replaced by that return's time, and the next read's true
    stamp could come before it (a stream's chunk times went backwards in CI's fast tier, in
    test_sglang_in_place, after the offset's own fix)."""
    if anc:
        level, kind, payload = anc[0]
        if kind == SO_TIMESTAMPNS and level == _SOL_SOCKET:
            sec, nsec = _unpack(payload)
            t = (sec * 1_000_000_000 + nsec - off_ns) / 1e9
            if t_sent <= t < now:
                return t if t >= last else last
    return now
