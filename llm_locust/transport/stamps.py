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


def clock_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now: turns a kernel timestamp into perf_counter time."""
    return time.time_ns() - time.perf_counter_ns()


def arrival(anc: list, now: float, t_sent: float, off_ns: int) -> float:
    """The read's arrival time from recvmsg's control messages `anc`, as perf_counter seconds,
    kept within [t_sent, now); `now` (the time the read returned) when there is none."""
    if anc:
        level, kind, payload = anc[0]
        if kind == SO_TIMESTAMPNS and level == _SOL_SOCKET:
            sec, nsec = _unpack(payload)
            t = (sec * 1_000_000_000 + nsec - off_ns) / 1e9
            if t_sent <= t < now:
                return t
    return now
