"""Child processes that belong to their parent: `--repeat`'s repetitions, `--grid`'s cells and the
reset hook run before each repetition.

Why: a series that runs `subprocess.run` per child dies at once on SIGTERM (nothing combined is
written) while its child keeps sending load, and a Ctrl-C stops one child only, then the next one
starts. Here:

- each child runs in a process group of its own, its stdin /dev/null: a terminal's Ctrl-C (SIGINT to
  the foreground group) reaches the parent alone, and a child never touches the terminal's mode (a
  background group that did would be stopped by SIGTTOU);
- the parent forwards every SIGINT and SIGTERM to the child's group (the child's own handling then
  applies: it stops, writes its results marked interrupted; a third signal ends it at once; a child
  still starting, with no SIGTERM handler yet, gets SIGTERM, which ends it quietly) and waits for it
  at most GRACE_S after the first signal, then kills the group;
- the first signal stops the series: no further child starts (`Children.run` returns None), and the
  parent writes what finished, marked with `interruption`;
- a child whose parent dies, SIGKILL included, gets SIGTERM (Linux PR_SET_PDEATHSIG) and stops as
  on any SIGTERM.

Plain `signal` and `subprocess`, no event loop: the parent of a series runs no load itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llm_locust.report.outcome import Interruption

GRACE_S = 60.0  # a child stopped by a signal writes its results and report within this, or is killed
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a series' child (a repetition, a grid's cell): this very package first on
    its path (not another one the child's path might find first), and `extra`."""
    pkg_root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [pkg_root, os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux's PR_SET_PDEATHSIG), and exit
    now if it died already (between the fork and here). Elsewhere the prctl is absent: nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def ended(code: int) -> str:
    """How a child ended, for a line: "exited 2", or "was killed by SIGKILL" (a negative status)."""
    if code >= 0:
        return f"exited {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def stop_status(code: int) -> int:
    """The series' exit status when a child that wrote no results stops it: the child's own, 1 when
    it had none (0) or was killed by a signal (a negative status is no exit status)."""
    return code if code > 0 else 1


def _catches(pid: int, sig: int) -> bool | None:
    """Whether process `pid` has a handler for `sig` (Linux: /proc/PID/status SigCgt), None unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next((line.split()[1] for line in f if line.startswith("SigCgt:")), None)
    except OSError:
        return None
    return None if caught is None else bool(int(caught, 16) >> (sig - 1) & 1)


def _forwarded(pid: int, sig: int) -> int:
    """The signal to pass on: `sig` once the child handles SIGTERM (llm-locust's run does from its
    start: it then stops either way, marked with the signal); SIGTERM to a child that does not yet
    (a Python still starting would print a KeyboardInterrupt traceback on SIGINT; SIGTERM ends it
    quietly, before it sent anything)."""
    return sig if _catches(pid, signal.SIGTERM) is not False else signal.SIGTERM


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


class Children:
    """One child at a time under the parent's SIGINT / SIGTERM handling (a context manager: the
    handlers are the series' while it is entered, the previous ones restored after).

    `interruption`: the first signal (which, when, and `phase`, what ran then); None while none came.
    """

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self.interruption: Interruption | None = None
        self.phase = "between children"
        self._child: subprocess.Popen[bytes] | None = None
        self._pending: int | None = None  # a signal that came while no child was there to take it
        self._deadline = 0.0
        self._previous: dict[int, Any] = {}
        self.over_limit = False  # the last child ran past its limit_s (run)

    def __enter__(self) -> Children:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        child = self._child
        if child is not None and child.poll() is None:  # left by an exception: the child goes too
            _signal_group(child.pid, signal.SIGKILL)
            child.wait()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, sig: int, _frame: object) -> None:
        name = signal.Signals(sig).name
        child = self._child
        if self.interruption is None:
            self.interruption = Interruption(name, time.time(), self.phase)
            self._deadline = time.monotonic() + self.grace_s
            what = f"stopping {self.phase}" if child is not None else "no further run starts"
            _say(f"{name}: {what}; the series stops, what finished is written (marked interrupted)")
        if child is None:
            self._pending = sig  # a child being started gets it as soon as it is there (run)
        elif child.poll() is None:
            _signal_group(child.pid, _forwarded(child.pid, sig))

    def run(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        phase: str = "",
        limit_s: float = 0.0,
        output: Any = None,
    ) -> int | None:
        """`argv` as a child of the series, to its end: its exit status, or None when a signal came
        before it could start (the series is stopping). `limit_s` > 0: a child still running that
        many seconds after its start gets SIGTERM (it stops as on any SIGTERM, marked interrupted),
        and is killed grace_s later; `over_limit` then says so (the series goes on). `output`: a
        file the child's stdout and stderr go to (None: the parent's)."""
        self.over_limit = False
        if self.interruption is not None:
            return None
        self.phase = phase or " ".join(argv[:3])
        parent = os.getpid()
        self._child = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            process_group=0,
            preexec_fn=lambda: _die_with_parent(parent),
        )
        if self._pending is not None:  # the signal came while the child was being started
            _signal_group(self._child.pid, _forwarded(self._child.pid, self._pending))
        try:
            return self._wait(self._child, time.monotonic() + limit_s if limit_s > 0 else None)
        finally:
            self._child = None
            self.phase = "between children"

    def _wait(self, child: subprocess.Popen[bytes], limit: float | None = None) -> int:
        """The child's exit status; once a signal came, at most grace_s more, then its group is
        killed; past `limit` (monotonic), SIGTERM, then grace_s more, then killed."""
        while True:
            timeout = 1.0 if self.interruption is None else max(0.0, self._deadline - time.monotonic())
            try:
                return child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                if self.interruption is not None and time.monotonic() >= self._deadline:
                    _say(f"{self.phase} did not stop within {self.grace_s:g} s of {self.interruption.signal}: killed")
                    _signal_group(child.pid, signal.SIGKILL)
                    return child.wait()
                if limit is not None and time.monotonic() >= limit:
                    limit = self._past_limit(child)

    def _past_limit(self, child: subprocess.Popen[bytes]) -> float | None:
        """A child past its time limit: SIGTERM the first time (the next limit: grace_s on),
        SIGKILL the second (no limit left: it ends now)."""
        if not self.over_limit:
            self.over_limit = True
            _say(f"{self.phase} ran past its time limit: stopping it (SIGTERM)")
            _signal_group(child.pid, signal.SIGTERM)
            return time.monotonic() + self.grace_s
        _say(f"{self.phase} did not stop within {self.grace_s:g} s of its time limit: killed")
        _signal_group(child.pid, signal.SIGKILL)
        return None


def _say(line: str) -> None:
    print(f"llm-locust: {line}", file=sys.stderr, flush=True)
