"""tests/alone.py: a `timing` test of a tier whose shards run side by side runs alone.

Threads stand for the shards: flock's locks belong to an open file, so two threads that open the
lock each hold their own, as two processes would. What a broken lock would get wrong: the timing
test entering while an ordinary one runs, an ordinary test slipping in ahead of a timing test that
is waiting (flock alone lets shared holders in), or anything waiting when no directory is given.

The threads are the operating system's and they signal over pipes, whether or not gevent has
patched this process (a test that imported Locust did, in the same pytest process): flock blocks
the whole thread, and a greenlet blocked in it would block every other (the first version hung).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

import alone
import pytest
from gevent import monkey

_start_thread = monkey.get_original("_thread", "start_new_thread")
_select = monkey.get_original("select", "select")


class Signal:
    """A one-shot event over a pipe: set from any thread, waited on without gevent."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()

    def set(self) -> None:
        os.write(self._w, b"1")

    def wait(self, timeout: float) -> bool:
        return bool(_select([self._r], [], [], timeout)[0])

    def is_set(self) -> bool:
        return self.wait(0)


class Shard:
    """One side of the tier: a thread that takes its turn, notes when it is in, and leaves when told."""

    def __init__(self, directory, name: str, timing: bool, events: list[str]) -> None:
        self.name, self.timing, self.events, self.directory = name, timing, events, str(directory)
        self.inside, self.leave, self.done = Signal(), Signal(), Signal()
        _start_thread(self._run, ())

    def _run(self) -> None:
        try:
            with alone.turn(self.timing, self.directory):
                self.events.append(f"{self.name} in")  # list.append: one bytecode, atomic
                self.inside.set()
                self.leave.wait(30)
                self.events.append(f"{self.name} out")
        finally:
            self.done.set()


def _turnstile_taken(directory) -> bool:
    """Whether someone holds the turnstile (a timing test waiting for its turn)."""
    fd = os.open(directory / "turnstile", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        assert e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        return True
    finally:
        os.close(fd)
    return False


def _until(cond, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_timing_test_waits_for_the_test_in_progress_and_goes_before_the_next(tmp_path):
    events: list[str] = []
    a = Shard(tmp_path, "ordinary-1", False, events)
    assert a.inside.wait(10)
    b = Shard(tmp_path, "timing", True, events)
    _until(lambda: _turnstile_taken(tmp_path))  # the timing test is waiting, the turnstile held
    c = Shard(tmp_path, "ordinary-2", False, events)
    # a negative: the next ordinary test does not get in beside the first (a broken lock lets it in
    # at once: flock grants a shared lock beside a shared one, whoever waits for an exclusive one)
    assert not c.inside.wait(0.3) and not b.inside.is_set()
    a.leave.set()
    assert b.inside.wait(10)
    assert not c.inside.is_set()
    b.leave.set()
    assert c.inside.wait(10)
    c.leave.set()
    assert all(s.done.wait(10) for s in (a, b, c))
    expected = ["ordinary-1 in", "ordinary-1 out", "timing in", "timing out", "ordinary-2 in", "ordinary-2 out"]
    assert events == expected


def test_ordinary_tests_run_side_by_side(tmp_path):
    events: list[str] = []
    a, b = Shard(tmp_path, "a", False, events), Shard(tmp_path, "b", False, events)
    assert a.inside.wait(10) and b.inside.wait(10)  # both inside at once
    a.leave.set()
    b.leave.set()
    assert a.done.wait(10) and b.done.wait(10)
    assert sorted(events[:2]) == ["a in", "b in"]


@pytest.mark.parametrize("timing", [True, False])
def test_without_a_directory_nothing_waits(tmp_path, monkeypatch, timing):
    monkeypatch.delenv(alone.ALONE_DIR, raising=False)
    fd = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held elsewhere: a test that took any lock here would block
    try:
        with alone.turn(timing):
            pass
    finally:
        os.close(fd)
    monkeypatch.setenv(alone.ALONE_DIR, str(tmp_path / "other"))
    with alone.turn(timing):  # the environment's directory, nobody else in it
        assert (tmp_path / "other" / "lock").exists()
