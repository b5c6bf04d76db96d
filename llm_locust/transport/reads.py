"""Reads of one socket, stamped: what every HTTP/1.1 body and head is read with.

`socket_reader` makes, for one request's socket, a function that returns (bytes read, arrival
time): the kernel's receive time where the socket gives one (plain TCP on Linux), else the time
the read returned. Every read loop lets the other greenlets run at least every YIELD_AFTER
seconds of back-to-back reads, so that timers (the total timeout) and the no-progress watchdog
fire on time even under a flood of bytes. The watchdog (one greenlet a process) closes the socket
of a request that received nothing for its no-progress timeout. Knows nothing of HTTP.
"""

from __future__ import annotations

import errno
import socket
import ssl
import time
from collections.abc import Callable

import gevent
import gevent.ssl

from llm_locust.transport.pump import PUMP
from llm_locust.transport.stamps import CMSG_SPACE, SO_TIMESTAMPNS, arrival, clock_offset_ns
from llm_locust.transport.turns import turn_after_read

# (bytes read, arrival time as perf_counter seconds); b"" at the connection's end
Read = Callable[[], tuple[bytes, float]]

# What one read asks for: 124 KiB, so that a 256-token OpenAI-style reply (~67 KB) sent at once
# comes in the read that brings its head; at 64 KiB it took a second read, most often one that
# waited in the hub, and reading nginx's burst cost ~11% more CPU a token (benchmarks/README.md).
# Below glibc's default mmap threshold (128 KiB with malloc's overhead): the buffer of a read that
# finds a token or two (a paced server) comes from the heap and shrinks in place, never mapped
# and unmapped (strace: no mmap a read).
READ_SIZE = 126976
# After a read that filled READ_SIZE (more is likely waiting: a server sending faster than we
# read), the next read may ask for up to this much: a 256-token SGLang stream (376 KB, its text
# repeated in every event) then takes 1-2 reads, not 6, which raised its burst ingest by ~20% at
# 256 KiB and ~15% more at 512 KiB (each read has its kernel and per-read costs). How much more:
# as much as the caller got through in READ_BUDGET at the pace it took the last full read, so
# that one read's bytes never keep the other greenlets waiting much past YIELD_AFTER (a flood of
# bytes that decode slowly, e.g. comment-only events, keeps READ_SIZE). Reads that find a token or
# two (a paced server) stay at READ_SIZE (see above). Memory: only what was received is kept, and
# a stream's pending bytes are bounded by Limits.event_bytes, far above this.
BULK_READ_SIZE = 524288
READ_BUDGET = 0.002

ERROR_BODY_LIMIT = 4096
# A read loop that has found data waiting (never had to wait in the hub) for this long yields
# to the other greenlets: timers (the total timeout), the watchdog and other requests run.
YIELD_AFTER = 0.005
# How it yields: a timer of this length, not sleep(0). gevent's sleep(0) only runs the hub's
# callbacks, not a loop iteration, so timers (the total timeout, other greenlets' sleeps) and
# IO of other sockets could still wait for hundreds of milliseconds.
_YIELD_SLEEP = 1e-6
# A TLS read that took longer than this is taken to have waited in the hub (yielded).
_WAITED = 0.0005
# A stream's first reads (its head, a role event, its first tokens) keep how long their newest
# data had waited in the socket when the read returned (its kernel receive time against the
# read's): a first token read with the second in a read whose newest data had itself waited was
# read late by the client (RequestRecord.first_wait, the client-validity check); a server's two
# tokens written at once, read by a client that kept up, waited microseconds. Not the token reads
# after them (the pump's). A per-read stamp of the oldest data is not to be had: Linux merges the
# segments waiting in a socket's queue, the merged one keeping the newest's time (a two-part
# read, one byte then the rest, gave both parts the same stamp).
WAIT_READS = 4


def next_read_size(last: int, spent: float) -> int:
    """The buffer for the read after one that brought `last` bytes (a full buffer) and whose
    bytes the caller took `spent` seconds to get through."""
    if spent <= 0:
        return BULK_READ_SIZE
    return max(READ_SIZE, min(BULK_READ_SIZE, int(last * READ_BUDGET / spent)))


def socket_reader(sock, t_sent: float, watch: Watch) -> Read:
    """A function returning (bytes read, arrival time as perf_counter seconds) per call.

    With kernel timestamps (plain TCP on Linux) the arrival time is when the data reached the
    socket, kept within [t_sent, now]; otherwise (TLS, other systems) the time the read returned.

    A gevent socket read that finds data waiting returns without yielding to the hub, so a
    server that sends faster than we parse would starve every other greenlet (and the timers
    that end requests). Each read therefore yields when the reads since the last wait in the
    hub took more than YIELD_AFTER seconds.

    The stamped reader carries `via_pump` (an attribute of the function): the token-read body
    reader (transport/bodies.py) hands such a stream's token reads to the process's pump.
    """
    raw = _stamping(sock)
    if raw is None:
        return _plain_reader(sock, t_sent, watch)
    return _stamped_reader(sock, raw, t_sent, watch)


def _stamping(sock):
    """The raw non-blocking socket under gevent's, with kernel receive stamps turned on; None
    where there is none (TLS, other systems, a blocking socket)."""
    raw = getattr(sock, "_sock", None)
    if (
        raw is None
        or not hasattr(sock, "recvmsg")
        or not hasattr(raw, "recvmsg")
        or isinstance(sock, (ssl.SSLSocket, gevent.ssl.SSLSocket))
        or raw.gettimeout() != 0.0  # non-blocking: a read with nothing there cannot block the process
    ):
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return None
    return raw


def _plain_reader(sock, t_sent: float, watch: Watch) -> Read:
    """Reads stamped with the time each returned (TLS)."""
    perf_counter = time.perf_counter
    sleep = gevent.sleep
    recv = sock.recv
    busy_from = t_sent  # when this request's reads last waited in the hub (or yielded)
    size = READ_SIZE
    full_at = 0.0  # when the last read returned, if it filled its buffer

    def read_plain() -> tuple[bytes, float]:
        nonlocal busy_from, size, full_at
        t0 = perf_counter()
        if full_at:
            size = next_read_size(size, t0 - full_at)
        try:
            data = recv(size)
        except ValueError:  # a TLS socket the watchdog closed between reads says so this way
            raise OSError(errno.EBADF, "read on a closed socket") from None
        watch.last = now = perf_counter()
        if len(data) >= size:
            full_at = now
        elif full_at:
            full_at, size = 0.0, READ_SIZE
        if now - t0 > _WAITED:
            busy_from = now  # the read waited: the hub ran
        elif now - busy_from > YIELD_AFTER:
            sleep(_YIELD_SLEEP)
            busy_from = perf_counter()
        busy_from = turn_after_read(now, busy_from)  # read and timed: the other streams read first
        return data, now

    return read_plain


def _stamped_reader(sock, raw, t_sent: float, watch: Watch) -> Read:  # noqa: C901 (the per-read hot path: closures over locals)
    """Reads stamped with the kernel's receive time (plain TCP on Linux)."""
    perf_counter = time.perf_counter
    sleep = gevent.sleep
    raw_recvmsg = raw.recvmsg  # never waits: raises BlockingIOError when nothing is there
    recvmsg = sock.recvmsg  # gevent's: waits in the hub until data comes
    # What gevent's recvmsg does when a read finds nothing: wait in the hub for the socket's
    # read event (under the socket's own timeout, None here), then read again. Done here, so
    # that a read that found nothing costs one failed recvmsg, not two (gevent's would try
    # again first) and one exception, not two: at a paced server's one token per read, nearly
    # every read waits.
    wait = sock._wait
    off_ns = clock_offset_ns()

    # A read that had to wait (the hub ran for over _WAITED) makes the next one wait first: at
    # a paced server's one token per read, trying first would fail (EAGAIN, an exception)
    # nearly every time. A read that finds its data at once goes back to trying first.
    waited = False
    busy_from = t_sent  # when this request's reads last waited in the hub (or yielded)
    size = READ_SIZE
    full_at = 0.0  # when the last read returned, if it filled its buffer
    first_reads = WAIT_READS  # first reads left to keep their data's wait (watch.waits)

    def wait_and_read(size: int):
        """Wait in the hub for the socket's read event, then read, as gevent's recvmsg does."""
        while True:
            event = sock._read_event
            if event is None:  # closed meanwhile (the watchdog): gevent's read raises EBADF
                return recvmsg(size, CMSG_SPACE)
            wait(event)
            try:
                return raw_recvmsg(size, CMSG_SPACE)
            except BlockingIOError:  # woken with nothing to read: wait again, as gevent does
                pass

    def read_stamped() -> tuple[bytes, float]:
        nonlocal busy_from, waited, size, full_at, first_reads
        if full_at:
            size = next_read_size(size, perf_counter() - full_at)
        data = None
        if not waited:
            try:
                data, anc, _flags, _addr = raw_recvmsg(size, CMSG_SPACE)
            except BlockingIOError:
                pass
            else:
                watch.last = now = perf_counter()
                if now - busy_from > YIELD_AFTER:
                    sleep(_YIELD_SLEEP)
                    busy_from = perf_counter()
        if data is None:
            t0 = perf_counter()
            data, anc, _flags, _addr = wait_and_read(size)
            watch.last = now = busy_from = perf_counter()
            waited = now - t0 > _WAITED
        if len(data) >= size:
            full_at = now
        elif full_at:
            full_at, size = 0.0, READ_SIZE
        t = watch.arrived = arrival(anc, now, t_sent, off_ns, watch.arrived)
        if first_reads:
            first_reads -= 1
            watch.waits.append((t, now - t))
        busy_from = turn_after_read(now, busy_from)  # read and timed: the other streams read first
        return data, t

    def via_pump(count_token_events, times: list[float]) -> tuple[bytes, float, int]:
        """Reads taken by the process's pump while they are token reads (transport/pump.py); the
        read it hands back (a stream's end, most often) waits for its turn like any other."""
        out = PUMP.read(raw, count_token_events, times, watch, t_sent, off_ns)
        turn_after_read(perf_counter(), 0.0)
        return out

    vars(read_stamped)["via_pump"] = via_pump
    return read_stamped


class Watch:
    __slots__ = ("sock", "limit", "last", "fired", "on_fire", "arrived", "waits")

    def __init__(self, sock, limit: float) -> None:
        self.sock = sock
        self.limit = limit
        self.last = time.perf_counter()
        self.fired = False
        self.arrived = 0.0  # the stream's last arrival time (stamps.arrival): its reads' and the pump's
        self.on_fire = None  # set while the stream waits in the pump (transport/pump.py): wakes it
        # (arrival time, seconds its data waited in the socket) of the stream's first reads (WAIT_READS)
        self.waits: list[tuple[float, float]] = []

    def wait_at(self, t: float | None) -> float | None:
        """How long the newest data of the first read that arrived at `t` (a record's t_first: the
        read that brought its first token) had waited in the socket; None: not one of them."""
        for at, waited in self.waits:
            if at == t:
                return waited
        return None


class Watchdog:
    """One greenlet per process ends requests that received nothing for their no-progress
    timeout, by closing their socket: the blocked read raises, and the request sees `fired`.
    Closing (rather than throwing into the greenlet) cannot reach a later request by mistake."""

    def __init__(self) -> None:
        self.active: set[Watch] = set()
        self._greenlet = None

    def watch(self, sock, limit: float) -> Watch:
        w = Watch(sock, limit)
        self.active.add(w)
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)
        return w

    def unwatch(self, w: Watch) -> None:
        self.active.discard(w)

    def _run(self) -> None:
        while self.active:
            # checked every tenth of the shortest limit, at most every 100 ms: a timeout fires
            # within 10% (or 100 ms) of its value
            period = min(0.1, min(w.limit for w in self.active) / 10)
            gevent.sleep(max(period, 0.005))
            now = time.perf_counter()
            for w in [w for w in self.active if now - w.last > w.limit]:
                w.fired = True
                self.active.discard(w)
                w.sock.close()
                if w.on_fire is not None:
                    w.on_fire()


WATCHDOG = Watchdog()
