"""One greenlet that reads every paced stream's one-token reads, many to a wake-up.

With one token per read (a paced server, the real case), a stream read by its own greenlet costs
a trip through the hub and a switch to that greenlet per token, and the read's code then runs
with caches another 127 streams and the kernel have just evicted: a 128-stream run spent most of
its CPU there (benchmarks/README.md). Once a stream's token reads can be told without parsing
(protocols/token_reads.py), its greenlet hands the socket to the pump and waits. The pump waits
on one epoll set of all such sockets; at each wake-up it reads every ready socket once, counts a
token read where the stream's greenlet would have (its kernel receive time, as read_stamped
takes it), and hands any other read (the last events, an escape, an end of stream, an error)
back to the stream's greenlet, which goes on with it the general way. The stream's greenlet
stays in charge of everything else: its total timeout or a kill ends its wait (and takes the
socket back), the watchdog's close hands it an error.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent
from gevent.hub import Waiter, get_hub
from gevent.monkey import get_original

from llm_locust.transport.stamps import CMSG_SPACE, arrival

if TYPE_CHECKING:
    from select import epoll

# the real epoll: under Locust, gevent's monkey patching has replaced the select module's
_epoll, _EPOLLIN = get_original("select", ["epoll", "EPOLLIN"])

READ_SIZE = 65536
_MAX_EVENTS = 1024
_FIRED = "closed: no data within the no-progress timeout"


class _Stream:
    __slots__ = ("fd", "recvmsg", "count", "times", "watch", "t_sent", "off_ns", "waiter", "tokens")

    def __init__(self, raw, count, times: list[float], watch, t_sent: float, off_ns: int) -> None:
        self.fd = raw.fileno()
        self.recvmsg = raw.recvmsg
        self.count = count
        self.times = times
        self.watch = watch
        self.t_sent = t_sent
        self.off_ns = off_ns
        self.waiter = Waiter()
        self.tokens = 0


class TokenPump:
    """The process's pump (PUMP): `read` takes a stream in until a read that is not a token read."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self._ep: epoll | None = None
        self._watcher = None
        self._greenlet = None
        self._streams: dict[int, _Stream] = {}

    def _ready(self) -> epoll:
        """This process's epoll set (made on first use, and anew in a forked child), its greenlet running."""
        ep = self._ep
        if ep is None or self._pid != os.getpid():  # first use, or a forked child: its own epoll set and watcher
            ep = self._ep = _epoll()
            self._watcher = get_hub().loop.io(ep.fileno(), 1, ref=False)  # never keeps a process alive
            self._streams = {}
            self._greenlet = None
            self._pid = os.getpid()
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)
        return ep

    def read(
        self, raw, count_token_events: Callable[[bytes], int], times: list[float], watch, t_sent: float, off_ns: int
    ) -> tuple[bytes, float, int]:
        """Read `raw` (a non-blocking socket with kernel receive timestamps on) in the pump until
        a read in which `count_token_events` finds none: each token event's time (its read's
        arrival time) goes to `times`, and `watch.last` is kept, as the stream's own reads would.
        Returns (that read, its arrival time, token events taken). Raises what that read raised;
        OSError(EBADF) when the watchdog closed the socket meanwhile, or had fired before this
        call. A timeout or kill of the caller takes the socket back.

        The watchdog wakes a stream that waits here (`watch.on_fire`); one that fired before the
        wait began must be seen here, or nothing ever wakes it: the watchdog fires once, and its
        close of the socket can come after the register (gevent defers the close of a socket a
        greenlet was waiting on until that wait is cancelled, while the socket's data may wake
        that greenlet first), dropping it from the epoll set unseen. Nothing yields between this
        check and the wait, so the fire is either seen here or wakes the wait."""
        if watch.fired or raw.fileno() < 0:
            raise OSError(errno.EBADF, _FIRED)
        ep = self._ready()
        s = _Stream(raw, count_token_events, times, watch, t_sent, off_ns)
        ep.register(s.fd, _EPOLLIN)
        self._streams[s.fd] = s
        watch.on_fire = lambda: self._hand_back(s, OSError(errno.EBADF, _FIRED))
        try:
            out = s.waiter.get()
        finally:
            watch.on_fire = None
            self._drop(s)
        if isinstance(out, BaseException):
            raise out
        data, t = out
        return data, t, s.tokens

    def _drop(self, s: _Stream) -> None:
        ep = self._ep
        if self._streams.get(s.fd) is s and ep is not None:  # a stream is only taken in with the set made
            del self._streams[s.fd]
            try:
                ep.unregister(s.fd)
            except OSError:
                pass  # closed meanwhile (the watchdog): the kernel dropped it from the set

    def _hand_back(self, s: _Stream, out) -> None:
        self._drop(s)
        get_hub().loop.run_callback(s.waiter.switch, out)

    def _run(self) -> None:
        """The pump's greenlet. Should it ever end (killed, or an error of its own), every stream
        waiting in it is handed the error at once: none waits for reads nobody takes (the next
        read starts a new pump)."""
        try:
            self._serve()
        except BaseException as e:
            why = f"the token pump stopped ({type(e).__name__}{f': {e}' if str(e) else ''})"
            for s in list(self._streams.values()):
                self._hand_back(s, OSError(errno.EIO, why))
            raise

    def _serve(self) -> None:
        wait = get_hub().wait
        ep = self._ep
        assert ep is not None, "the pump runs once _ready made its epoll set"
        watcher, poll, streams = self._watcher, ep.poll, self._streams
        perf_counter = time.perf_counter
        while True:
            wait(watcher)
            for fd, _events in poll(0, _MAX_EVENTS):
                s = streams.get(fd)
                if s is None:
                    continue
                try:
                    data, anc, _flags, _addr = s.recvmsg(READ_SIZE, CMSG_SPACE)
                except BlockingIOError:
                    continue
                except OSError as e:
                    self._hand_back(s, e)
                    continue
                s.watch.last = now = perf_counter()
                t = s.watch.arrived = arrival(anc, now, s.t_sent, s.off_ns, s.watch.arrived)
                try:
                    n = s.count(data)
                    if n:
                        if n == 1:
                            s.times.append(t)
                        else:
                            s.times += [t] * n
                        s.tokens += n
                        continue
                except Exception as e:  # noqa: BLE001 - the stream's to classify, never the pump's end
                    self._hand_back(s, e)
                    continue
                self._hand_back(s, (data, t))


PUMP = TokenPump()
