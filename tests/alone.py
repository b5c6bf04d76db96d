"""Tests marked `timing` run alone even inside a tier whose shards run side by side.

The real-server tier runs two shards at once. Most of its
tests only need a server; a few assert figures that move with the CPU they get (a knee, an SLA
answer, a send's lateness, per-window counters), and beside the other shard each of those broke in
turn on 2 cores. They used to run in a step of their own after the tier, which started their
servers (vLLM, vLLM's gRPC front) a second time. Now they run in their module, among the tests
that share its servers, and the shards take turns around them: scripts/suite.py gives every shard
of the tier one directory (ALONE_DIR), and each test holds a lock on it while it runs:

- a shared lock for an ordinary test (the shards run side by side);
- an exclusive lock for a `timing` test: it waits until the other shard's test in progress has
  ended, and the other shard waits until it has ended. The other shard's servers stay up and idle.

A turnstile keeps a `timing` test from waiting for ever: it takes the turnstile before the lock and
holds it while it waits, and an ordinary test passes through the turnstile before it takes its
shared lock. So once a `timing` test asks, the other shard starts no new test until it has run
(flock alone lets new shared holders in ahead of a waiting exclusive one).

The lock covers a test's whole protocol (its fixtures' set-up and tear-down too: a module's server
starts inside the lock of its first test). Without ALONE_DIR (a single pytest process) nothing
waits.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ALONE_DIR = "LLM_LOCUST_ALONE_DIR"


def _open(directory: Path, name: str) -> int:
    return os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600)


@contextmanager
def turn(alone: bool, directory: str | None = None) -> Iterator[None]:
    """Hold the tier's lock for one test: exclusive when `alone`, shared otherwise; nothing when no
    directory is given (the environment's ALONE_DIR when None)."""
    where = directory if directory is not None else os.environ.get(ALONE_DIR)
    if not where:
        yield
        return
    d = Path(where)
    d.mkdir(parents=True, exist_ok=True)
    gate, lock = _open(d, "turnstile"), _open(d, "lock")
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the turnstile held: no new test starts beside it
            fcntl.flock(gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        yield
    finally:
        os.close(lock)  # closing releases both locks
        os.close(gate)
