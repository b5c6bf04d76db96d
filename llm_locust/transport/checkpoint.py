"""The results written while a run goes on (--checkpoint-every), so that a run killed at any time
leaves what it had counted.

On the master (or the one local process) a greenlet builds the results document as the test
starts and every `every` seconds after, as the end of the run would from what it holds now
(report.outcome, marked partial: `partial`, `checkpoint`, each section's `in_flight`), and writes
it over --results atomically (report.files.write_atomic: a kill mid-write leaves the previous checkpoint whole). It
stops as the test stops; the end's write then replaces the last checkpoint with the whole run's
file (`partial: false`). A SIGKILL of the master between two checkpoints loses at most `every`
seconds of figures, and the file says up to when it counts (`checkpoint.counted_until`).

The build runs on the master's event loop, between two of its greenlets' turns: its cost per
write is measured in benchmarks/README.md ("Checkpoints").
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import gevent

from llm_locust.report import outcome
from llm_locust.report.results import write_results

log = logging.getLogger(__name__)


class Checkpoints:
    """Writes `gather(checkpoint facts)`'s outcome to `path` every `every` seconds between
    `start` and `stop`. `secrets`: what to mask in the file (the end's write masks the same)."""

    def __init__(
        self,
        path: str,
        every: float,
        gather: Callable[[dict[str, Any]], outcome.Ended],
        secrets: Callable[[], tuple[str, ...]] = tuple,
        facts: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self.path, self.every, self.gather, self.secrets, self.facts = path, every, gather, secrets, facts
        self.greenlet: gevent.Greenlet | None = None
        self.stopped = True
        self.written = 0
        self.seconds: list[float] = []  # the build-and-write time of each checkpoint (the loop's cost)
        self.failed = ""  # the last write's error, said once

    @property
    def enabled(self) -> bool:
        return bool(self.path) and self.every > 0

    def start(self, **_kw: Any) -> None:
        if not self.enabled:
            return
        self.stop()
        self.stopped = False
        self.greenlet = gevent.spawn(self._loop)

    def stop(self, **_kw: Any) -> None:
        """No checkpoint after this (the test stops; the end's write is next)."""
        self.stopped = True
        if self.greenlet is not None:
            self.greenlet.kill(block=False)
            self.greenlet = None

    def discard(self) -> None:
        """The run measured nothing (no worker joined, nothing sent): its checkpoints' file goes,
        as no results file is written for such a run."""
        self.stop()
        if self.written:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def _loop(self) -> None:
        """The first at once (nothing counted yet: a kill before the next leaves this run's file,
        not an earlier run's at the path), then one every `every` seconds."""
        while not self.stopped:
            self.write()
            gevent.sleep(self.every)

    def write(self) -> bool:
        """One checkpoint now: False when it could not be written (said once in a line; the run
        goes on), or the test stopped while it was built."""
        t0 = time.perf_counter()
        try:
            out = outcome.build(self.gather({"every_s": self.every, **self.facts()}))
        except Exception:  # noqa: BLE001 - a checkpoint never stops the run; the end builds its own
            if not self.failed:
                log.exception("could not build the checkpoint of the results (the run goes on)")
            self.failed = "build"
            return False
        if self.stopped or not out.measured:  # stopped while it was built: the end writes now
            return False
        try:
            write_results(self.path, out.results, secrets=self.secrets())
        except OSError as e:
            if str(e) != self.failed:
                log.error("could not write the checkpoint of the results to %s: %s", self.path, e)
            self.failed = str(e)
            return False
        self.failed = ""
        self.written += 1
        self.seconds.append(time.perf_counter() - t0)
        return True


def coverage(workers: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint covers, from the master's workers (runtime.hub WorkerState): every request
    finished before `counted_until` is counted, the oldest last report of the workers still there
    (each report carries everything its worker finished before it sent it); `workers_missing`:
    those lost (no heartbeat, not back), whose requests after their last report are not known. A
    process without workers counts as it goes: None, the checkpoint's own time."""
    live = [w for w in workers.values() if not _missing(w) and w.left_at is None and w.reports]
    return {
        "counted_until": min((w.last_report for w in live), default=None),
        "workers_missing": sum(1 for w in workers.values() if _missing(w)),
    }


def _missing(w: Any) -> bool:
    return w.lost_at is not None and (w.rejoined_at is None or w.rejoined_at < w.lost_at)
