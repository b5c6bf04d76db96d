"""The one Locust-aware part of metrics: records -> worker deltas -> master aggregate.

One hub per process, one class per role, as Locust has one runner class per role:
- `MetricsHub` (a LocalRunner's process, and what every role shares): records fold straight into
  the totals per load step; the client monitors, the warm-up, the measurement window;
- `WorkerHub`: finished requests fold into a delta `Aggregate` per step; every report interval the
  deltas ride on Locust's own `report_to_master` message (key "llm_locust") and are reset; a final
  report when the master asks or as the worker quits; its offset to the master's clock;
- `MasterHub`: merges the workers' deltas exactly (histogram buckets add), knows each worker
  (`WorkerState`), collects their final reports at stop and counts what lost workers had in
  flight as lost.
`hub(environment)` gives the process's hub, of its runner's role.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

import gevent
import locust.runners
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from llm_locust.loop import clock
from llm_locust.metrics import recordlog
from llm_locust.metrics.aggregate import CPU_LIMIT, Aggregate, client_valid, wire_problem, wire_sent
from llm_locust.metrics.ceiling import CeilingWatch, live_reason
from llm_locust.metrics.recordlog import RecordLog
from llm_locust.metrics.records import WARMUP_STEP, RequestRecord
from llm_locust.runtime.context import Role, run_context
from llm_locust.settings.workers import ceiling

log = logging.getLogger(__name__)

REPORT_KEY = "llm_locust"
FINAL = "llm_locust_final"  # master -> workers at test stop: stop, then send a final report
FINAL_REPORT_GRACE = 10.0  # s the master waits for final reports at stop (plus Locust's --stop-timeout)
DRAIN_GRACE = 5.0  # s a worker waits, once stopped, for its cancelled requests to be counted
QUIT_TOKEN = -1  # the "final" of a report a worker sends as it quits on its own (SIGTERM, Ctrl-C)
LOOP_LAG_PERIOD = 0.1  # seconds between event-loop lag probes
CPU_PERIOD = 1.0
# Heartbeats a worker may miss (one a second) before the master marks it missing. Locust's 3 let a
# worker starved of CPU for 3 s beside a CPU-bound server (a 2-core CI machine running vLLM) go
# missing: its users were handed to the others, and with every worker missing the test stopped.
# 10 s still finds a dead worker well within a step; its figures are kept and what it had in
# flight is counted lost either way.
WORKER_LIVENESS = 10


class WorkerState:
    """What the master knows of one worker."""

    __slots__ = (
        "client_id",
        "index",
        "reports",
        "last_report",
        "in_flight",
        "idle",
        "sent",
        "finished",
        "lost_at",
        "rejoined_at",
        "joined_at",
        "open",
        "step",
        "final",
        "left_at",
        "lost",
        "status",
        "record_log",
        "refused",
        "refused_reports",
        "clock",
        "ceiling",
    )

    def __init__(self, client_id: str, index: int | None) -> None:
        self.client_id = client_id
        self.index = index
        self.reports = 0
        self.status: dict[str, Any] = {}  # its senders' live state at its last report (status_sources)
        self.last_report = 0.0
        self.in_flight = 0
        self.idle = True
        self.sent = 0
        self.finished = 0
        self.lost_at: float | None = None
        self.rejoined_at: float | None = None
        self.joined_at = time.time()  # its first report reached the master
        self.open: dict[int, int] = {}  # step -> requests sent, not yet finished, as reported
        self.step: int | None = None  # the step the worker was in when it made its last report
        self.final = 0  # token of the last final report received (QUIT_TOKEN: it quit on its own)
        self.left_at: float | None = None  # quit on its own, after its final report
        self.lost = 0  # requests it had in flight that never got an outcome (set at the end)
        self.record_log: list[str] = []  # its record log's lost records, as its last report said
        self.refused = ""  # why its figures could not be read (another llm-locust), "" while they can
        self.refused_reports = 0
        self.clock: dict[str, Any] | None = None  # its offset to the master's clock (loop/clock.py)
        self.ceiling: dict[str, Any] | None = None  # its token rate against its ceiling (CeilingWatch.to_wire)

    @property
    def in_flight_reported(self) -> int:
        return sum(n for n in self.open.values() if n > 0)


class MetricsHub:
    """A process's figures: a LocalRunner's hub (records fold into the totals), and what the
    worker's and the master's share (WorkerHub, MasterHub)."""

    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self.slos: dict[str, float] = {}
        self.step = 0
        self.in_flight = 0
        # the totals, per step and overall (a worker's stay empty: it reports deltas, WorkerHub)
        self.steps: dict[int, Aggregate] = {}
        self.total = Aggregate()
        self.workers: dict[str, WorkerState] = {}  # what the master knows of its workers (MasterHub)
        self._monitors: list[gevent.Greenlet] = []
        self.started_at: float | None = None
        self.info: dict[str, Any] = {}  # facts learned while running (e.g. the model name)
        # live state of this process's senders, read at each report: "endpoints" (the router's
        # status per URL), "sessions" (started / done / broken); see `status`
        self.status_sources: dict[str, Any] = {}
        self.record_log: RecordLog | None = None
        self.id_prefix = f"{os.getpid():x}"
        self.run_number = 1  # a new test started from the web UI after one ended: see new_run
        self.final_token = 0  # master: the last final-report request; worker: the last one answered
        self.finals_collected = False  # master: this test's final reports are in (or timed out)
        self.lost_accounted = False
        # when the client monitors sample (the measurement only: not spawn, not shutdown)
        self.spawned = False
        self.stopping = False
        self.ladder = False  # a ladder sets steps: sample inside measurement windows (step > 0) only
        # a closed loop's or a replay's warm-up (--run-warmup): wall seconds from the test's start
        # in which what is sent is warm-up (WARMUP_STEP), and when they end (perf_counter)
        self.warmup_s = 0.0
        self.warmup_until: float | None = None
        # a worker's offset to the master's clock (loop/clock.py): its replay starts and its
        # requests are placed (wall_sent, the per-second series) on the master's clock
        self.clock = clock.ClockSync(clock.align_enabled())
        # this process's token rate against what one process holds (metrics/ceiling.py)
        self.ceiling = CeilingWatch(*ceiling())
        self.ceiling_said: set[str] = set()  # master: the workers whose live warning was given

    def new_run(self) -> None:
        """Master / local, as a test starts after an earlier one in this process (started again
        from the web UI): forget the earlier test's figures, where Locust clears its stats.
        Requests of the old test still in flight on a worker arrive in the new one's figures as
        cancelled. The step is the ladder's to set (shapes.renew gives it a fresh controller)."""
        self.steps = {}
        self.total = Aggregate()
        self.started_at = None
        for w in self.workers.values():
            w.sent = w.finished = w.lost = 0
            w.open = {}
        self.finals_collected = self.lost_accounted = False
        self.run_number += 1
        self.ceiling = CeilingWatch(self.ceiling.ceiling, self.ceiling.source)
        self.ceiling_said = set()

    @property
    def measuring(self) -> bool:
        """Whether the client monitors count now: between spawn complete and stop, and in a ladder
        only inside a step's measurement window (warm-up, the ramp to the level and the drain after
        the last step are left out). The client is judged where the figures are measured."""
        if self.stopping:
            return False
        if self.ladder:
            return self.step > 0
        return self.spawned and not self.in_warmup()

    def start_warmup(self, t0: float) -> None:
        """The warm-up counted from `t0` (perf_counter) rather than the test's start: a replay's
        agreed start time, so that its warm-up is the trace time --run-warmup says."""
        self.warmup_until = t0 + self.warmup_s if self.warmup_s > 0 else None

    def in_warmup(self) -> bool:
        """Whether a request sent now is part of the run's warm-up (--run-warmup): its first
        seconds from the test's start (a replay: of trace time)."""
        return self.warmup_until is not None and time.perf_counter() < self.warmup_until

    # ---- recording, on the process that sends requests ----

    def _sink(self, step: int) -> list[Aggregate]:
        """Where a record folds: here the step's totals and the run's (a warm-up is not the run's),
        once when they are one object (_step_totals)."""
        agg = self.steps.get(step)
        if agg is None:
            agg = self.steps[step] = self._step_totals(step)
        return [agg] if step == WARMUP_STEP or agg is self.total else [agg, self.total]

    def _step_totals(self, step: int) -> Aggregate:
        """A new step's totals. The run's first step (the only one of a run without a ladder) is
        the run's totals themselves while no other step has come: each record then folds once,
        not twice (the second fold was ~5% of a burst's client CPU, benchmarks/README.md). The
        next step gives it figures of its own: a copy of those so far (an exact merge)."""
        if step == WARMUP_STEP:
            return Aggregate()
        for other, agg in self.steps.items():
            if agg is self.total:
                own = self.steps[other] = Aggregate()
                own.merge(agg)
                return Aggregate()
        if any(other != WARMUP_STEP for other in self.steps):
            return Aggregate()
        return self.total

    def on_sent(self, warmup: bool = False) -> int:
        """Call once per request just before sending it; returns the step it belongs to:
        WARMUP_STEP when the sender says so (a user's first requests) or the run is warming up."""
        self.in_flight += 1
        step = WARMUP_STEP if (warmup or self.in_warmup()) and not self.ladder else self.step
        for agg in self._sink(step):
            agg.sent += 1
        return step

    def on_done(self, rec: RequestRecord) -> None:
        self.in_flight -= 1
        rec.wall_sent += self.clock.offset  # a worker's record on the master's clock (0 elsewhere)
        self.ceiling.add_tokens(sum(rec.chunk_tokens))
        if self.record_log is not None:
            self.record_log.write(rec)
        gaps = None  # the request's gap samples, folded by the first Aggregate, reused by the next
        for agg in self._sink(rec.step):
            gaps = agg.add(rec, self.slos, gaps)

    def own_status(self) -> dict[str, Any]:
        out = {}
        for key, read in list(self.status_sources.items()):
            try:
                out[key] = read()
            except Exception:  # noqa: BLE001 - a status is informative; a report must still go
                log.exception("status %s", key)
        return out

    def status(self) -> dict[str, Any]:
        """The senders' state (endpoints, sessions: see MasterHub.status): this process's own."""
        return _status_over([self.own_status()])

    def record_log_failures(self) -> list[str]:
        """A line per record log that lost records (this process's), for the run's end and exit."""
        return recordlog.failures()

    def step_drained(self, step: int) -> bool:
        """Whether every request tagged `step` has finished, as far as this process knows."""
        agg = self.steps.get(step)
        return agg is None or agg.finished >= agg.sent

    def collect_final_reports(self, timeout: float | None = None) -> bool:
        """The master's (MasterHub): a process without workers has nothing to collect."""
        self.finals_collected = True
        return True

    def account_lost(self) -> int:
        """The master's (MasterHub): a process without workers loses nothing in flight."""
        self.lost_accounted = True
        return self.total.lost

    def sync_clock(self, n: int = clock.BURST) -> None:
        """A worker's (WorkerHub): elsewhere there is no master's clock to measure."""

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
            measuring = self.measuring
            gevent.sleep(LOOP_LAG_PERIOD)
            lag = perf() - t0 - LOOP_LAG_PERIOD
            if measuring and self.measuring:  # the whole sample inside the measurement
                for agg in self._sink(self.step):
                    agg.hist["loop_lag"].record(lag if lag > 0 else 0.0)

    def _cpu_probe(self) -> None:
        last_cpu, last_wall = time.process_time(), time.perf_counter()
        while True:
            gevent.sleep(CPU_PERIOD)
            cpu, wall = time.process_time(), time.perf_counter()
            percent = 100.0 * (cpu - last_cpu) / (wall - last_wall)
            last_cpu, last_wall = cpu, wall
            busy = self.in_flight or (self.env.runner is not None and self.env.runner.user_count)
            measuring = bool(busy and self.measuring)
            if measuring:
                for agg in self._sink(self.step):
                    agg.add_cpu_sample(percent)
            self.ceiling.sample(wall, percent, measuring)
            self._ceiling_live()

    def _ceiling_live(self) -> None:
        """A local process over its ceiling says so once, as it happens (a worker's report carries
        its rate to the master, which says it: MasterHub.merge_report)."""
        w = self.ceiling
        if w.said or type(self) is not MetricsHub:
            return
        said = live_reason("this process", w.to_wire(), CPU_LIMIT, lambda: not client_valid(self.total))
        if said:
            w.said = True
            log.warning(said)


class WorkerHub(MetricsHub):
    """A worker's hub: its records fold into deltas that ride on Locust's reports to the master."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self._delta: dict[int, Aggregate] = {}  # per step: what has not been reported yet

    def _sink(self, step: int) -> list[Aggregate]:
        agg = self._delta.get(step)
        if agg is None:
            agg = self._delta[step] = Aggregate()
        return [agg]

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
            "status": self.own_status(),
            "step": self.step,
            "final": self.final_token,
            "record_log": recordlog.failures(),  # empty unless this worker's log lost records
            "clock": self.clock.figures(),
            "ceiling": self.ceiling.to_wire(),
        }

    def send_final_report(self, token: int) -> None:
        """Worker: stop sending, let the requests in flight end as cancelled (counted), then report
        everything not yet reported, marked with the master's token (QUIT_TOKEN: quitting)."""
        runner = run_context(self.env).worker_runner()
        runner.stop()  # users killed: their requests end as cancelled; open-loop passes stop on test_stop
        deadline = time.monotonic() + DRAIN_GRACE
        while self.in_flight > 0 and time.monotonic() < deadline:
            gevent.sleep(0.02)  # bounded: cancelled requests are counted as their greenlets unwind
        if self.in_flight > 0:
            log.warning(
                "%d request(s) still in flight at the final report: the master counts them lost, unless their "
                "outcome reaches it in a later report before it ends the run",
                self.in_flight,
            )
        _close_record_log(self, wait=0.0)  # its last writes' failures go with the final report
        self.final_token = token
        runner._send_stats()  # noqa: SLF001 - Locust's own report message, with our deltas in it

    def sync_clock(self, n: int = clock.BURST) -> None:
        """Worker: measure the offset to the master's clock now (`n` round trips, bounded)."""
        runner = run_context(self.env).worker_runner()
        self.clock.burst(lambda data: runner.send_message(clock.PING, data), n)


class MasterHub(MetricsHub):
    """The master's hub: merges its workers' reports into the totals and knows each worker."""

    def status(self) -> dict[str, Any]:
        """The senders' state over the cluster, from each worker's last report (see _status_over)."""
        return _status_over([w.status for w in self.workers.values() if w.status] or [self.own_status()])

    def record_log_failures(self) -> list[str]:
        """A line per record log that lost records, this process's and each
        worker's (its own file, RECORD_LOG.workerN, on its machine), and a line per worker whose
        figures this master could not read (a worker of another llm-locust), for the run's end
        and exit."""
        lines = recordlog.failures()
        for w in sorted(self.workers.values(), key=lambda w: (w.index is None, w.index or 0)):
            name = f"worker {w.index if w.index is not None else w.client_id}"
            lines += [f"{name}: {line}" for line in w.record_log]
            if w.refused:
                lines.append(f"{name}: its figures were not counted ({w.refused}): {w.refused_reports} reports")
        return lines

    def _readable(self, w: WorkerState, wire: dict[str, Any]) -> bool:
        """Whether a worker's step figures can be merged (Aggregate.merge_wire refuses another wire
        version whole); said once a worker, counted, and kept for the run's end (exit 1)."""
        problem = wire_problem(wire)
        if problem is None:
            return True
        if not w.refused:
            w.refused = problem
            log.error("worker %s: its figures cannot be read (%s): not counted", w.client_id, problem)
        w.refused_reports += 1
        return False

    def _note_clock(self, w: WorkerState, figures: dict[str, Any] | None) -> None:
        """Master: a worker's clock as its report says, kept for the results (workers[i].clock);
        said once when its uncertainty passes the bound."""
        if not figures:
            return
        if figures.get("flagged") and not (w.clock or {}).get("flagged"):
            log.warning(
                "worker %s (index %s): its clock is known to the master's within %.1f ms only (bound %.1f ms): "
                "its share of a replay may be sent off schedule by as much",
                w.client_id,
                w.index,
                figures["uncertainty_s"] * 1000,
                figures["bound_s"] * 1000,
            )
        w.clock = figures

    def _note_ceiling(self, w: WorkerState, wire: dict[str, Any] | None) -> None:
        """A worker's token rate against its ceiling, kept; said once when its peak is over."""
        if not wire:
            return
        w.ceiling = wire
        if w.client_id in self.ceiling_said:
            return
        name = f"worker {w.index if w.index is not None else w.client_id}"
        said = live_reason(name, wire, CPU_LIMIT, lambda: not client_valid(self.total))
        if said:
            self.ceiling_said.add(w.client_id)
            log.warning(said)

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
        w.step = payload.get("step")
        self.info.update(payload.get("info") or {})
        w.status = payload.get("status") or w.status
        w.record_log = payload.get("record_log") or w.record_log
        self._note_clock(w, payload.get("clock"))
        self._note_ceiling(w, payload.get("ceiling"))
        if self.lost_accounted and payload["steps"]:
            # after the end's accounting: what it had in flight is counted lost (account_lost), as
            # the worker said; merged now, it would be counted twice
            log.debug("worker %s (index %s): a report after the run's end is not merged", w.client_id, w.index)
            return
        for step_key, wire in payload["steps"].items():
            if not self._readable(w, wire):
                continue
            step = int(step_key)
            agg = self.steps.get(step)
            if agg is None:
                agg = self.steps[step] = self._step_totals(step)
            agg.merge_wire(wire)
            # a warm-up's figures are its own, not the run's; a run's only step is the run's
            # totals themselves (_step_totals): merged once, not twice (half the master's cost
            # of a report, benchmarks/bench_master.py)
            if step != WARMUP_STEP and agg is not self.total:
                self.total.merge_wire(wire)
            sent, done = wire_sent(wire), sum(wire["outcomes"].values())
            w.sent += sent
            w.finished += done
            w.open[step] = w.open.get(step, 0) + sent - done
        final = payload.get("final") or 0
        if final == QUIT_TOKEN or w.final == QUIT_TOKEN:
            w.final = QUIT_TOKEN  # it is quitting on its own, everything reported: it leaves, it is not lost
        elif final > w.final:
            w.final = final

    # ---- the master at stop: every live worker's final report, before Locust's quit ----

    def _master(self) -> MasterRunner:
        """The runner, on the master (where the workers' reports and final reports are kept)."""
        return run_context(self.env).master_runner()

    def _live_clients(self) -> list[str]:
        runner = self._master()
        return [c.id for c in list(runner.clients.values()) if c.state != "missing"]

    def _final_askees(self) -> list[str]:
        """Every worker that may still answer a final report: the connected ones, missing ones
        included (a worker starved of CPU misses its heartbeats for a few seconds and comes back),
        and the ones that reported but are not connected right now (between Locust's
        client_stopped and client_ready); not the ones that quit after their own final report."""
        runner = self._master()
        ids = [c.id for c in list(runner.clients.values())]
        ids += [cid for cid, w in self.workers.items() if cid not in ids]
        return [cid for cid in ids if cid not in self.workers or self.workers[cid].final != QUIT_TOKEN]

    def collect_final_reports(self, timeout: float | None = None) -> bool:
        """Master: ask every worker to stop and send a final report, and wait (bounded) until each
        has, or has quit. Locust's own quit gives workers 0.5 s and then stops receiving, which
        lost a busy worker's last report: this runs first (test_stop, quitting). A worker Locust
        marks missing is asked and waited for too: one whose loop stalled past its heartbeats at
        the end of a run (a CI machine's CPU taken by the server) lost its last requests when only
        the live ones were; a dead one costs the wait (the grace), nothing else."""
        runner = self._master()
        if timeout is None:
            timeout = FINAL_REPORT_GRACE + float(getattr(self.env, "stop_timeout", 0) or 0)
        self.final_token += 1
        token = self.final_token
        asked = self._final_askees()
        for cid in asked:
            try:
                runner.send_message(FINAL, {"token": token}, cid)
            except Exception as e:  # noqa: BLE001 - a broken connection: that worker is waited for in vain
                log.warning("could not ask worker %s for its final report: %s", cid, e)
        deadline = time.monotonic() + timeout
        while True:
            waiting = [cid for cid in asked if not self._answered(cid, token)]
            if not waiting:
                break
            if time.monotonic() >= deadline:
                log.warning(
                    "no final report within %.0f s from worker(s) %s: what they had in flight at their last "
                    "report is counted lost",
                    timeout,
                    ", ".join(waiting),
                )
                break
            gevent.sleep(0.05)  # bounded by the deadline: reports arrive on Locust's listener greenlet
        self.finals_collected = True
        return not waiting

    def _answered(self, cid: str, token: int) -> bool:
        w = self.workers.get(cid)
        return w is not None and (w.final == QUIT_TOKEN or w.final >= token)

    def account_lost(self) -> int:
        """Master, once at the end: the requests each worker had in flight at its last report that
        never got an outcome (the worker was lost, or sent no final report) become `lost`, per step
        and in the total, so that sent == ok + failed + cancelled + lost across the cluster."""
        if self.lost_accounted:
            return self.total.lost
        self.lost_accounted = True
        for w in self.workers.values():
            # a worker that answered the final report (or quit after its own) has everything it
            # sent counted, even one Locust marked missing for a while (a stalled loop); but for
            # requests still in flight past its drain (it says so) whose outcome no later report
            # brought: those are lost, as the worker says (and reports after this are not merged)
            answered = w.final == QUIT_TOKEN or bool(self.final_token and w.final >= self.final_token)
            gone = w.lost_at is not None and (w.rejoined_at is None or w.rejoined_at < w.lost_at)
            if answered and not w.in_flight_reported:
                w.lost = 0
                continue
            if not (answered or gone or self.final_token):
                continue  # no final report was asked for and it is connected: nothing to judge
            w.lost = w.in_flight_reported
            if not answered:
                self.total.workers_lost += 1
            for step, n in w.open.items():
                if n > 0:
                    agg = self.steps.get(step)
                    if agg is None:
                        agg = self.steps[step] = Aggregate()
                    agg.lost += n
                    agg.workers_lost = agg.workers_lost or int(not answered)
                    if step != WARMUP_STEP and agg is not self.total:  # a run's only step is its totals
                        self.total.lost += n
            if w.lost:
                log.warning(
                    "worker %s (index %s): %d request(s) in flight at its last report have no outcome: counted lost",
                    w.client_id,
                    w.index,
                    w.lost,
                )
        return self.total.lost

    def step_drained(self, step: int) -> bool:
        """Whether every request tagged `step` has finished, as far as this process knows: on the
        master, every live worker's last report was made after it left the step, with none of the
        step's requests open."""
        for cid in self._live_clients():
            w = self.workers.get(cid)
            if w is None or w.open.get(step, 0) > 0:
                return False
            # its last report must come from after it left the step: in no step (0, the drain
            # after a step) or a later one. A report made before it entered the step says
            # nothing of the step's requests (a 1.5 s step can pass between two reports).
            if w.step is None or not (w.step == 0 or w.step > step):
                return False  # None: a report that did not say its step says nothing of it either
        return True


def _status_over(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """endpoints: per URL, requests sent and in flight summed, and on how many processes it is
    down (`down` when on every process that sent to it); sessions: started, done (every turn
    answered), broken (a turn failed)."""
    endpoints: dict[str, dict[str, Any]] = {}
    sessions = {"started": 0, "done": 0, "broken": 0}
    for st in parts:
        for url, e in (st.get("endpoints") or {}).items():
            c = endpoints.setdefault(url, {"sent": 0, "in_flight": 0, "down_on": 0, "processes": 0})
            c["sent"] += e.get("sent", 0)
            c["in_flight"] += e.get("in_flight", 0)
            c["processes"] += 1
            c["down_on"] += bool(e.get("down"))
        for k in sessions:
            sessions[k] += (st.get("sessions") or {}).get(k, 0)
    for c in endpoints.values():
        c["down"] = c["down_on"] > 0 and c["down_on"] == c["processes"]
    out: dict[str, Any] = {}
    if endpoints:
        out["endpoints"] = endpoints
    if sessions["started"]:
        out["sessions"] = sessions
    return out


def _watch_workers(h: MasterHub, runner: MasterRunner) -> None:
    """Master: note when a worker goes missing or leaves mid-run (and if it comes back).
    Its figures reported so far stay in the totals; the results list it with the time."""
    while True:
        gevent.sleep(1.0)
        for cid, w in list(h.workers.items()):
            client = runner.clients.get(cid)
            gone = client is None or client.state == "missing"
            if gone and w.final == QUIT_TOKEN:  # quit on its own after a final report: it left, nothing lost
                if w.left_at is None:
                    w.left_at = time.time()
                    log.info(
                        "worker %s (index %s) quit; its final report is in (%d requests)", cid, w.index, w.finished
                    )
            elif gone and w.lost_at is None and runner.state in ("running", "spawning"):
                w.lost_at = time.time()
                log.warning(
                    "worker %s (index %s) lost at %.0f: its %d reported requests are kept, the %d it had in "
                    "flight at its last report will count as lost",
                    cid,
                    w.index,
                    w.lost_at,
                    w.finished,
                    w.in_flight_reported,
                )
            elif not gone and w.lost_at is not None and (w.rejoined_at is None or w.rejoined_at < w.lost_at):
                w.rejoined_at = time.time()
                log.info("worker %s is back", cid)


def _close_record_log(h: MetricsHub, wait: float = DRAIN_GRACE) -> None:
    deadline = time.monotonic() + wait
    while h.in_flight > 0 and time.monotonic() < deadline:
        gevent.sleep(0.02)
    if h.record_log is not None:
        h.record_log.close()
        h.record_log = None


def _role(environment: Environment) -> type[MetricsHub]:
    """The hub's class for this process's role."""
    return {Role.WORKER: WorkerHub, Role.MASTER: MasterHub, Role.LOCAL: MetricsHub}[run_context(environment).role]


def hub(environment: Environment) -> MetricsHub:
    """The environment's hub, of its runner's role, created on first use."""
    run = run_context(environment)
    if run.hub is None:
        run.hub = _role(environment)(environment)
    h = run.hub
    assert isinstance(h, MetricsHub), "run.hub is made here only"  # the context types it by what it uses
    return h


def _freeze_startup_objects() -> None:
    """Take what exists at a test's start (modules, Locust, the workload) out of the cyclic
    collector's passes.

    Those objects live for the whole run, yet each older-generation pass walked all of them
    again: a `perf` profile of a burst run had the collector at 4.6% of the client's CPU, 3.2%
    once they are frozen. Objects made later are collected as before."""
    gc.collect()
    gc.freeze()


def install(environment: Environment) -> MetricsHub:
    """Wire the hub into Locust's events. Call from an `init` listener (every process)."""
    clock.apply_test_shift()  # test-only (LLM_LOCUST_TEST_CLOCK_SHIFT): a host whose clock is off
    h = hub(environment)
    assert type(h) is _role(environment), f"{type(h).__name__} made before the runner: {environment.runner}"
    run = run_context(environment)
    if not isinstance(h, MasterHub):
        # quitting listeners run in reverse: registered first, this closes the record log last
        environment.events.quitting.add_listener(lambda **_kw: _close_record_log(h, wait=0.0))
    if isinstance(h, WorkerHub):
        _install_worker(h, environment, run.worker_runner())
    if isinstance(h, MasterHub):
        _install_master(h, environment, run.master_runner())
    else:
        _install_sender(h, environment)
    return h


def _install_worker(h: WorkerHub, environment: Environment, runner: WorkerRunner) -> None:
    """A worker's deltas ride on Locust's reports; its final report goes when asked, or as it quits."""
    events = environment.events
    events.report_to_master.add_listener(lambda client_id, data: h.report(data))
    runner.register_message(
        FINAL, lambda environment, msg, **_kw: h.send_final_report(msg.data["token"]), concurrent=True
    )

    def on_worker_quitting(**_kw: Any) -> None:
        # Quitting on its own (SIGTERM, Ctrl-C): Locust's worker tells the master it quits and
        # then stops its users without reporting again. Listeners run in reverse here, so this
        # comes first: stop, report everything (marked as quitting), then Locust says quit.
        if runner.state not in ("stopped",) or h._delta or h.in_flight:
            try:
                h.send_final_report(QUIT_TOKEN)
            except Exception as e:  # noqa: BLE001 - no master to send to: nothing more to do
                log.warning("could not send the final report while quitting: %s", e)

    events.quitting.add_listener(on_worker_quitting)
    runner.register_message(clock.PONG, lambda environment, msg, **_kw: h.clock.pong(msg.data))  # inline: t4
    gevent.spawn(_clock_loop, h)


def _clock_loop(h: WorkerHub) -> None:
    """Worker: measure the offset to the master's clock at once, then every SYNC_PERIOD s."""
    h.sync_clock(clock.BURST)
    while True:
        gevent.sleep(clock.SYNC_PERIOD)
        h.sync_clock(clock.REPEAT_BURST)


def _install_master(h: MasterHub, environment: Environment, runner: MasterRunner) -> None:
    """The master merges the workers' reports, collects their final reports at stop, and watches them."""
    events = environment.events
    # read by Locust each time a worker connects or sends a heartbeat
    locust.runners.HEARTBEAT_LIVENESS = max(locust.runners.HEARTBEAT_LIVENESS, WORKER_LIVENESS)
    events.worker_report.add_listener(lambda client_id, data: h.merge_report(client_id, data))
    runner.register_message(  # a worker's clock round trip, answered at once (loop/clock.py)
        clock.PING, lambda environment, msg, **_kw: runner.send_message(clock.PONG, clock.answer(msg.data), msg.node_id)
    )

    def on_master_stop(**_kw: Any) -> None:
        if not h.finals_collected:
            h.collect_final_reports()

    events.test_stop.add_listener(on_master_stop)
    gevent.spawn(_watch_workers, h, runner)

    def on_master_start(**_kw: Any) -> None:
        if h.started_at is not None:
            h.new_run()
        h.started_at = time.time()
        h.finals_collected = False

    events.test_start.add_listener(on_master_start)


def _warmup_seconds(environment: Environment) -> float:
    """--run-warmup in wall seconds from the test's start (a replay's is trace time: over --speed);
    0 in a ladder (each step warms up: --warmup) or without the run's options."""
    try:
        s = run_context(environment).settings
    except Exception:  # noqa: BLE001 - an environment without llm-locust's options (a test's, a bare Locust)
        return 0.0
    if not s.run_warmup or s.ladder:
        return 0.0
    return s.run_warmup / (s.speed if s.replay else 1.0)


def _install_sender(h: MetricsHub, environment: Environment) -> None:
    """A process that sends (worker, local): client monitors and the record log follow the test."""
    worker = run_context(environment).role is Role.WORKER

    def on_start(**_kw: Any) -> None:
        if h.started_at is not None and not worker:
            h.new_run()
        _freeze_startup_objects()
        h.started_at = time.time()
        h.spawned = h.stopping = False
        h.warmup_s = _warmup_seconds(environment)
        h.start_warmup(time.perf_counter())  # a replay counts it again from its agreed start
        h.start_monitors()
        path = getattr(environment.parsed_options, "record_log", "")
        if path and h.record_log is None:
            if worker:
                path = f"{path}.worker{run_context(environment).worker_runner().worker_index}"
            h.record_log = RecordLog(path)

    def on_stop(**_kw: Any) -> None:
        h.stop_monitors()
        if h.record_log is not None:
            # closed once the requests still in flight (open-loop passes stop after this
            # listener) have ended as cancelled and been written: bounded
            gevent.spawn(_close_record_log, h)

    def on_spawned(**_kw: Any) -> None:
        h.spawned = True

    def on_stopping(**_kw: Any) -> None:
        h.stopping = True

    events = environment.events
    events.test_start.add_listener(on_start)
    events.test_stop.add_listener(on_stop)
    events.spawning_complete.add_listener(on_spawned)
    events.test_stopping.add_listener(on_stopping)
