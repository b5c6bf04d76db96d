"""The one Locust-aware part of metrics: records -> worker deltas -> master aggregate.

On a worker, finished requests fold into a delta `Aggregate` per load step; every report
interval the deltas ride on Locust's own `report_to_master` message (key "llm_locust") and are
reset. The master merges them exactly (histogram buckets add). In a LocalRunner there is no
report: records fold straight into the totals.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from llm_locust.metrics.records import RequestRecord
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.recordlog import RecordLog

log = logging.getLogger(__name__)

REPORT_KEY = "llm_locust"
WORKER_REPORT_INTERVAL_GRACE = 8.0  # master waits this long at shutdown for workers' last deltas
LOOP_LAG_PERIOD = 0.1  # seconds between event-loop lag probes
CPU_PERIOD = 1.0


class WorkerState:
    """What the master knows of one worker."""

    __slots__ = ("client_id", "index", "reports", "last_report", "in_flight", "idle", "sent", "finished", "lost_at", "rejoined_at")

    def __init__(self, client_id: str, index: int | None) -> None:
        self.client_id = client_id
        self.index = index
        self.reports = 0
        self.last_report = 0.0
        self.in_flight = 0
        self.idle = True
        self.sent = 0
        self.finished = 0
        self.lost_at: float | None = None
        self.rejoined_at: float | None = None


class MetricsHub:
    """Per process: records requests (worker/local) and holds the merged totals (master/local)."""

    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self.slos: dict[str, float] = {}
        self.step = 0
        self.in_flight = 0
        # worker/local side: what has not been reported yet, per step
        self._delta: dict[int, Aggregate] = {}
        # master/local side: merged totals, per step and overall
        self.steps: dict[int, Aggregate] = {}
        self.total = Aggregate()
        self.workers: dict[str, WorkerState] = {}
        self._monitors: list[gevent.Greenlet] = []
        self.started_at: float | None = None
        self.info: dict[str, Any] = {}  # facts learned while running (e.g. the model name)
        self.record_log: RecordLog | None = None
        self.id_prefix = f"{os.getpid():x}"
        self.run_number = 1  # a new test started from the web UI after one ended: see new_run

    def new_run(self) -> None:
        """Master / local, as a test starts after an earlier one in this process (started again
        from the web UI): forget the earlier test's figures, where Locust clears its stats.
        Requests of the old test still in flight on a worker arrive in the new one's figures as
        cancelled. The step is the ladder's to set (shapes.renew gives it a fresh controller)."""
        self.steps = {}
        self.total = Aggregate()
        self.started_at = None
        for w in self.workers.values():
            w.sent = w.finished = 0
        self.run_number += 1

    # ---- recording, on the process that sends requests ----

    @property
    def _is_worker(self) -> bool:
        return isinstance(self.env.runner, WorkerRunner)

    def _sink(self, step: int) -> list[Aggregate]:
        if self._is_worker:
            agg = self._delta.get(step)
            if agg is None:
                agg = self._delta[step] = Aggregate()
            return [agg]
        agg = self.steps.get(step)
        if agg is None:
            agg = self.steps[step] = Aggregate()
        return [agg, self.total]

    def on_sent(self) -> int:
        """Call once per request just before sending it; returns the step it belongs to."""
        self.in_flight += 1
        for agg in self._sink(self.step):
            agg.sent += 1
        return self.step

    def on_done(self, rec: RequestRecord) -> None:
        self.in_flight -= 1
        if self.record_log is not None:
            self.record_log.write(rec)
        for agg in self._sink(rec.step):
            agg.add(rec, self.slos)

    # ---- worker -> master ----

    def report(self, data: dict[str, Any]) -> None:
        """Worker: put the deltas since the last report into Locust's report message."""
        runner = self.env.runner
        deltas, self._delta = self._delta, {}
        data[REPORT_KEY] = {
            "steps": {str(step): agg.to_wire() for step, agg in deltas.items()},
            "in_flight": self.in_flight,
            "idle": self.in_flight == 0 and (runner is None or runner.user_count == 0),
            "index": getattr(runner, "worker_index", None),
            "info": self.info,
        }

    def merge_report(self, client_id: str, data: dict[str, Any]) -> None:
        """Master: merge one worker's deltas."""
        payload = data.get(REPORT_KEY)
        if payload is None:
            return
        w = self.workers.get(client_id)
        if w is None:
            w = self.workers[client_id] = WorkerState(client_id, payload.get("index"))
        w.reports += 1
        w.last_report = time.time()
        w.in_flight = payload["in_flight"]
        w.idle = payload["idle"]
        self.info.update(payload.get("info") or {})
        for step_key, wire in payload["steps"].items():
            step = int(step_key)
            agg = self.steps.get(step)
            if agg is None:
                agg = self.steps[step] = Aggregate()
            agg.merge_wire(wire)
            self.total.merge_wire(wire)
            w.sent += wire["counters"][0]
            w.finished += sum(wire["outcomes"].values())

    def wait_for_idle_workers(self, timeout: float) -> bool:
        """Master at shutdown: wait (bounded) until every live worker reported with nothing in flight."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(w.idle or w.lost_at is not None for w in self.workers.values()):
                return True
            gevent.sleep(0.05)
        return False

    # ---- client validity monitors (worker/local) ----

    def start_monitors(self) -> None:
        if self._monitors:
            return
        self._monitors = [gevent.spawn(self._loop_lag_probe), gevent.spawn(self._cpu_probe)]

    def stop_monitors(self) -> None:
        gevent.killall(self._monitors, block=False)
        self._monitors = []

    def _loop_lag_probe(self) -> None:
        perf = time.perf_counter
        loop = gevent.get_hub().loop
        while True:
            loop.update_now()  # timers count from the loop's cached clock: refresh it first
            t0 = perf()
            gevent.sleep(LOOP_LAG_PERIOD)
            lag = perf() - t0 - LOOP_LAG_PERIOD
            for agg in self._sink(self.step):
                agg.hist["loop_lag"].record(lag if lag > 0 else 0.0)

    def _cpu_probe(self) -> None:
        last_cpu, last_wall = time.process_time(), time.perf_counter()
        while True:
            gevent.sleep(CPU_PERIOD)
            cpu, wall = time.process_time(), time.perf_counter()
            percent = 100.0 * (cpu - last_cpu) / (wall - last_wall)
            last_cpu, last_wall = cpu, wall
            if self.in_flight or (self.env.runner is not None and self.env.runner.user_count):
                for agg in self._sink(self.step):
                    agg.add_cpu_sample(percent)


def _watch_workers(h: MetricsHub, runner: MasterRunner) -> None:
    """Master: note when a worker goes missing or leaves mid-run (and if it comes back).
    Its figures reported so far stay in the totals; the results list it with the time."""
    while True:
        gevent.sleep(1.0)
        for cid, w in h.workers.items():
            client = runner.clients.get(cid)
            gone = client is None or client.state == "missing"
            if gone and w.lost_at is None and runner.state in ("running", "spawning"):
                w.lost_at = time.time()
                log.warning("worker %s (index %s) lost at %.0f: its %d reported requests are kept", cid, w.index, w.lost_at, w.finished)
            elif not gone and w.lost_at is not None:
                w.rejoined_at = time.time()
                log.info("worker %s is back", cid)


def hub(environment: Environment) -> MetricsHub:
    """The environment's MetricsHub, created on first use."""
    h = getattr(environment, "llm_metrics", None)
    if h is None:
        h = MetricsHub(environment)
        environment.llm_metrics = h  # type: ignore[attr-defined]
    return h


def install(environment: Environment) -> MetricsHub:
    """Wire the hub into Locust's events. Call from an `init` listener (every process)."""
    h = hub(environment)
    events = environment.events
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        events.report_to_master.add_listener(lambda client_id, data: h.report(data))
    if isinstance(runner, MasterRunner):
        events.worker_report.add_listener(lambda client_id, data: h.merge_report(client_id, data))

        gevent.spawn(_watch_workers, h, runner)
    if not isinstance(runner, MasterRunner):

        def on_start(**_kw: Any) -> None:
            if h.started_at is not None and not isinstance(runner, WorkerRunner):
                h.new_run()
            h.started_at = time.time()
            h.start_monitors()
            path = getattr(environment.parsed_options, "record_log", "")
            if path and h.record_log is None:
                if isinstance(runner, WorkerRunner):
                    path = f"{path}.worker{runner.worker_index}"
                h.record_log = RecordLog(path)

        def on_stop(**_kw: Any) -> None:
            h.stop_monitors()
            if h.record_log is not None:
                h.record_log.close()
                h.record_log = None

        events.test_start.add_listener(on_start)
        events.test_stop.add_listener(on_stop)
    else:
        def on_master_start(**_kw: Any) -> None:
            if h.started_at is not None:
                h.new_run()
            h.started_at = time.time()

        events.test_start.add_listener(on_master_start)
    return h
