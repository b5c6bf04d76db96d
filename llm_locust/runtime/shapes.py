"""Stepped load: a ladder of concurrency, request rate or trace speed, driven from the master.

`LadderShape` is a Locust LoadTestShape; its tick (about once a second, on the master or the
local runner) runs the `LadderController`, which walks the ladder:

  step k: warm-up (requests tagged -k, left out of the step's figures), then the measurement
  window (requests tagged k), ended on time, or on a request count, or extended by the
  stability rule; then the early-stop check, then step k+1.

Every process learns the current step from a "llm_locust_step" message (the master's own hub is
set directly); for rate and speed ladders the open-loop dispatcher of each worker (llm_locust.
replay) changes its rate (the cluster's rate split evenly across workers) or restarts its trace
pass at the new speed. Concurrency ladders are closed loop: the shape sets the user count.

An SLA search (`--ladder sla:rate`, `sla:concurrency`; settings.ladder.Search) walks the same
steps, but each level is chosen after the last step's result (analysis.sla.next_level). Every
probe is judged on all the requests its window sent: after the window the rate search sends
nothing (the concurrency search holds its users, their new requests in no step) until they have
finished, bounded by --request-timeout; so an overloaded probe's backlog neither hides its
slowest requests nor spills into the next probe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gevent
from locust import LoadTestShape
from locust.env import Environment

from llm_locust.analysis import agents as agent_tier
from llm_locust.analysis import refine
from llm_locust.analysis import sla as sla_search
from llm_locust.analysis.saturation import analyse, format_steps
from llm_locust.analysis.stability import burst_recovery, format_stability
from llm_locust.analysis.steps import StepResult, broken_slos, step_result
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.runtime import cache_reset
from llm_locust.runtime.cache_reset import summary as reset_summary
from llm_locust.runtime.closed_loop import StreamingUser
from llm_locust.runtime.context import Role, run_context
from llm_locust.runtime.hub import hub
from llm_locust.runtime.precision_stop import Pace, merged_until, met_text
from llm_locust.runtime.replay_shares import ReplayUser, dispatchers_ready, steer, stop_passes
from llm_locust.schema import BurstRecovery, Precision, PrecisionCheck
from llm_locust.settings.ladder_spec import EarlyStop, Ladder, Stable, parse_ladder
from llm_locust.settings.units import PlanError, run_time_seconds

log = logging.getLogger(__name__)

STEP = "llm_locust_step"
REPORT_LAG = 3.5  # distributed: the master's figures trail the workers' by up to one report interval
DRAIN_STEP = 0  # requests sent after the last step's window (while it drains) belong to no step


@dataclass
class StepWindow:
    index: int  # 1-based; requests of the warm-up carry -index, of the measurement +index
    level: float
    started: float  # wall clock
    measured_from: float | None = None
    ended: float | None = None
    extended: float = 0.0
    judged: float | None = None  # an SLA probe: when its requests had finished and it was judged
    cache_reset: dict[str, Any] | None = None  # --reset-cache: the reset before this step (runtime/cache_reset.py)
    precision: PrecisionCheck | None = None  # --precision: the check that ended it, or the one at its end

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"judged": self.judged} if self.judged is not None else {}),
            **({"cache_reset": self.cache_reset} if self.cache_reset is not None else {}),
            "step": self.index,
            "level": self.level,
            "started": self.started,
            "measured_from": self.measured_from,
            "ended": self.ended,
            "extended": self.extended,
        }


def ladder_from_settings(s) -> Ladder | None:
    if not s.ladder:
        return None
    stable = None
    if s.stable_window:
        stable = Stable(
            window=s.stable_window,
            tolerance=s.stable_tolerance,
            max_extend=s.stable_max_extend,
            windows=s.stable_windows,
        )
    return parse_ladder(
        s.ladder,
        warmup=s.warmup,
        duration=s.step_duration,
        requests=s.step_requests,
        stable=stable,
        arrivals=s.arrivals,
        burstiness=s.arrivals_burstiness,
    )


class LadderController:
    """Walks the ladder on the master (or local runner) and keeps each step's window."""

    def __init__(
        self,
        env: Environment,
        ladder: Ladder,
        slos: dict[str, float],
        early: EarlyStop,
        request_timeout: float = 600.0,
        refine: int = 0,
        run_time: float | None = None,
    ) -> None:
        self.env = env
        self.ladder = ladder
        self.slos = slos
        self.early = early
        self.request_timeout = request_timeout
        self.windows: list[StepWindow] = []
        self.stop_reason: str | None = None
        self.done = False
        self.drain_until: float | None = None  # the last step's window ended: its requests finish first
        self.search = ladder.search  # an SLA search: levels chosen one at a time
        self.judge_until: float | None = None  # an SLA probe's window ended: its requests finish, then it is judged
        self.probes: list[dict[str, Any]] = []  # the search's probes: step, level, met, broken
        self.sla: dict[str, Any] | None = None  # the search's conclusion
        self.burst_limit = 0.0  # a burst: --burst-recovery (0: recovering within the run passes)
        self.refine = refine  # --refine: at most this many steps after the ladder's, around its knee
        self.run_time = run_time  # -t: a refine step starts only if it ends by then (from the first step)
        self.refining = False  # the ladder's own steps ran: the refine steps run, judged one by one
        self.refine_end: str | None = None  # why the refinement ended
        self.precision_targets: dict[str, float] = {}  # --precision: a step ends once its figures are this precise
        self.precision_pace: Any = None  # its checks' pace (runtime/precision_stop.py Pace)
        self.tier: agent_tier.Tier | None = None  # --agent-tier: a probe is judged per session too
        self.gpus: int | None = None  # --gpus, --gpu-power-w: agents per GPU and per megawatt
        self.gpu_power_w: float | None = None

    # ---- the walk ----

    def tick(self) -> tuple[int, float] | None:
        if self.done:
            return None
        now = time.time()
        if not self.windows:
            if not self._dispatchers_ready():
                return self._users(None)
            self._start_step(0, now, self._first_level())
            return self._users(self.windows[-1].level)
        resets = cache_reset.resets(self.env)
        if resets is not None and resets.pending is not None:  # between two steps: the cache emptied first
            return resets.tick(self, now)
        cur = self.windows[-1]
        if self.drain_until is not None:
            return self._drain(cur, now)
        if self.judge_until is not None:
            return self._judge(cur, now)
        if cur.measured_from is None:
            if now >= cur.started + self.ladder.step_timing(cur.index)[1]:
                cur.measured_from = now
                self._broadcast(cur.index, cur.level)
            return self._users(cur.level)
        if not self._step_over(cur, now):
            return self._users(cur.level)
        cur.ended = now
        if self.precision_targets and cur.precision is None and not self.ladder.profile:
            cur.precision = self._check(cur, now)  # judged at its end: not precise by then
        i = len(self.windows)
        if self.search is not None or self.refining:
            return self._end_probe(cur, now)
        reason = self.early.check(self.results(), self.slos) if not self.ladder.profile else None
        if reason or i >= len(self.ladder.levels):
            self.stop_reason = reason or "ladder complete"
            if self._refine_level(now) is not None:  # around the knee: each step drained and judged first
                self.refining = True
                return self._end_probe(cur, now)
            return self._finish(cur, now)
        return self._next_step(i, now)

    def _next_step(self, i: int, now: float, level: float | None = None) -> tuple | None:
        resets = cache_reset.resets(self.env)
        if resets is not None and resets.between_steps:  # --reset-cache step (runtime/cache_reset.py)
            lag = self._report_lag(0.0)
            return resets.begin(self, i, level, now, now + self.request_timeout + lag, DRAIN_STEP)
        self._start_step(i, now, level)
        return self._users(self.windows[-1].level)

    def _finish(self, cur: StepWindow, now: float) -> tuple | None:
        # The last step is judged on the requests its window sent: stopping now would cancel
        # the ones in flight (a healthy step read as no_data, or as broken). The load goes on
        # at the same level, new requests belong to no step, until they have all finished
        # (bounded by --request-timeout, plus the workers' report interval).
        lag = self._report_lag(0.0)
        self.drain_until = now + self.request_timeout + lag
        self._broadcast(DRAIN_STEP, cur.level, drain=True)
        log.info("ladder stops after step %d: %s; waiting for its requests in flight", cur.index, self.stop_reason)
        return self._drain(cur, now)

    # ---- the SLA search ----

    def _first_level(self) -> float:
        if self.search is None:
            return self.ladder.levels[0]
        s = self.search
        level = sla_search.next_level([], s.kind, s.lo, s.hi, s.precision)
        assert level is not None, "a search's first probe is at its lowest load"
        return level

    def _end_probe(self, cur: StepWindow, now: float) -> tuple | None:
        """A probe's window ended: stop sending (rate) or hold the users, its requests untagged
        (concurrency), until its requests have finished; then judge it (_judge)."""
        lag = self._report_lag(0.0)
        self.judge_until = now + self.request_timeout + lag
        if self.ladder.kind == "rate":
            self._broadcast(DRAIN_STEP, 0.0)  # share_rate 0: the open-loop pass stops, no new arrivals
        else:
            self._broadcast(DRAIN_STEP, cur.level, drain=True)
        return self._judge(cur, now)

    def _judge(self, cur: StepWindow, now: float) -> tuple | None:
        drained = hub(self.env).step_drained(cur.index)
        if not drained and now < (self.judge_until or now):
            return self._users(cur.level)
        if not drained:
            log.warning(
                "%s %d: requests still in flight %.0f s after its window: judged without them",
                "SLA probe" if self.search is not None else "step",
                cur.index,
                now - (cur.ended or now),
            )
        self.judge_until = None
        cur.judged = now
        if self.search is None:  # --refine: the next point inside the knee's bracket, or the end
            return self._refine_next(cur, now)
        step = self.results()[-1]
        broken = self._broken(step)
        probe: dict[str, Any] = {"step": cur.index, "level": cur.level, "met": not broken, "broken": broken}
        if self.tier is not None:
            agg = hub(self.env).steps.get(cur.index) or Aggregate()
            att = agent_tier.attainment(agg.sessions, self.tier)
            probe["agents"] = att
            if not att["ok"]:
                broken.append(agent_tier.broken_line(att))
                probe["met"] = False
        self.probes.append(probe)
        s = self.search
        assert s is not None
        history = [(p["level"], p["met"]) for p in self.probes]
        log.info(
            "SLA probe %d: %s %g %s",
            cur.index,
            s.kind,
            cur.level,
            "met every SLO" if not broken else "broke: " + ", ".join(broken),
        )
        nxt = sla_search.next_level(history, s.kind, s.lo, s.hi, s.precision)
        if nxt is None or len(self.windows) >= s.max_probes() + 2:
            self.sla = sla_search.conclude(history, s.kind, s.lo, s.hi, s.precision)
            self.sla["probes_detail"] = self.probes
            self.sla["seconds"] = round(now - self.windows[0].started, 1)
            if self.tier is not None:
                self.sla["agents"] = self._agents_verdict(self.sla)
            self.stop_reason = "SLA search: " + self.sla["reason"]
            if self.sla["reached"] == "lowest_breaks":  # a failed gate of the run (report/outcome.py)
                first: list[str] = next((p["broken"] for p in self.probes), [])
                self.stop_reason += f" ({', '.join(first)})"
            # its requests have finished already: the drain ends at once
            lag = self._report_lag(0.0)
            self.drain_until = now + self.request_timeout + lag
            log.info("SLA search over after %d probes: %s", len(self.probes), self.sla["reason"])
            return self._drain(cur, now)
        return self._next_step(len(self.windows), now, nxt)

    # ---- --refine: points between the two loads around the knee (analysis.refine) ----

    def _split(self, steps: list[StepResult]) -> tuple[list[StepResult], list[StepResult]]:
        """(the ladder's own steps sorted by load, the refine steps in the order they ran)."""
        n = len(self.ladder.levels)
        own = sorted((s for s in steps if s.step <= n), key=lambda s: s.offered)
        return own, [s for s in steps if s.step > n]

    def _refine_level(self, now: float) -> float | None:
        """The next refine point, or None (with the reason in refine_end): --refine spent, the
        knee known, no knee to refine, or no time left under -t for a whole step."""
        if self.refine <= 0 or self.ladder.profile or self.search is not None:
            return None
        steps = self.results()
        own, refined = self._split(steps)
        if not own or not steps[-1].ok:  # the server stopped answering: nothing to refine against
            self.refine_end = "the last step had no successful request"
            return None
        kr = refine.knee_range(own, analyse(own, self.slos), refined)
        level = refine.next_level(kr)
        if level is None:
            self.refine_end = "no knee to refine" if kr is None or not kr["refinable"] else "knee known"
            return None
        if len(refined) >= self.refine:
            self.refine_end = f"--refine {self.refine} spent"
            return None
        st = self.ladder.stable
        longest = self.ladder.duration + (st.max_extend if st else 0.0) + REPORT_LAG
        if self.run_time is not None and now + longest > self.windows[0].started + self.run_time:
            self.refine_end = f"no time left under -t {self.run_time:g}s for a {longest:g} s step"
            return None
        return level

    def _refine_next(self, cur: StepWindow, now: float) -> tuple | None:
        """A refine step (or the ladder's last) was judged: the next point, or the end of the run."""
        nxt = self._refine_level(now)
        if nxt is None:
            log.info(
                "knee refinement over after %d step(s): %s",
                len(self.windows) - len(self.ladder.levels),
                self.refine_end,
            )
            lag = self._report_lag(0.0)
            self.drain_until = now + self.request_timeout + lag  # its requests have finished: ends at once
            return self._drain(cur, now)
        return self._next_step(len(self.windows), now, nxt)

    def _agents_verdict(self, sla: Mapping[str, Any]) -> dict[str, Any]:
        """The agents-under-a-tier verdict of a concluded search: the answer in agents, per GPU
        and per megawatt (--gpu-power-w x --gpus here; report/outcome.py puts the GPU sidecar's
        power over the answer's probe in its place when the run has one)."""
        assert self.tier is not None
        power = self.gpu_power_w * (self.gpus or 1) if self.gpu_power_w else None
        out = agent_tier.capacity(sla.get("answer"), self.gpus, power, "--gpu-power-w" if power else None)
        out["tier"] = self.tier.to_dict()
        out["rule"] = agent_tier.TIER_RULE
        good = next((p for p in self.probes if p["met"] and p["level"] == sla.get("answer")), None)
        if good is not None:
            out["step"] = good["step"]
            out["attainment"] = good.get("agents")
        return out

    def _broken(self, step: StepResult) -> list[str]:
        """Why a probe fails: the SLOs it broke, and the run's error-rate limit (with early stop on)."""
        broken = broken_slos(step, self.slos)
        mer = self.early.max_error_rate if self.early.enabled else None
        if step.ok and mer is not None and step.error_rate > mer:
            broken.append(f"error rate {step.error_rate:.1%} above {mer:.1%}")
        return broken

    def _drain(self, cur: StepWindow, now: float) -> tuple | None:
        drained = hub(self.env).step_drained(cur.index)
        if not drained and now < (self.drain_until or now):
            return self._users(cur.level)
        if not drained:
            log.warning(
                "step %d: requests still in flight %.0f s after its window: they end as cancelled",
                cur.index,
                now - (cur.ended or now),
            )
        self.done = True
        return None

    def _step_over(self, cur: StepWindow, now: float) -> bool:
        ld = self.ladder
        planned_end = cur.started + ld.step_timing(cur.index)[0] + cur.extended
        if ld.requests and not ld.profile and self._finished(cur.index) >= ld.requests:
            return True
        if self.precision_targets and not ld.profile and self._precise(cur, now):
            return True
        if now < planned_end:
            return False
        st = ld.stable if not ld.profile else None  # a burst's or a series' steps last exactly as planned
        if st and cur.extended + st.window <= st.max_extend and not st.settled(self._window_rates(cur, now, st)):
            cur.extended += st.window
            log.info("step %d extended by %gs: throughput not yet stable", cur.index, st.window)
            return False
        return True

    def _check(self, cur: StepWindow, now: float) -> PrecisionCheck:
        """The step's figures so far judged against --precision (runtime/precision_stop.py)."""
        if self.precision_pace is None:
            self.precision_pace = Pace()
        agg = hub(self.env).steps.get(cur.index) or Aggregate()
        seconds = now - (cur.measured_from or now)
        return self.precision_pace.check(agg, self.precision_targets, seconds, cur.index, merged_until(self.env))

    def _precise(self, cur: StepWindow, now: float) -> bool:
        """--precision: the step ends (before its duration) once every target is met, judged at
        most once a second (or less often: Pace)."""
        if self.precision_pace is not None and not self.precision_pace.due():
            return False
        c = self._check(cur, now)
        if not c["met"]:
            return False
        c["stopped"] = True
        cur.precision = c
        log.info("step %d precise after %.1f s: %s", cur.index, c["seconds"], met_text(c))
        return True

    def precision_report(self) -> Precision | None:
        """The results' `precision`: each step's check (one not judged yet, cut by an interruption,
        judged on its figures so far). None without --precision, or for a burst or a rate series."""
        if not self.precision_targets or self.ladder.profile:
            return None
        now = time.time()
        checks = [w.precision or self._check(w, w.ended or now) for w in self.windows if w.measured_from is not None]
        met = bool(checks) and all(c["met"] for c in checks)
        return {"targets": dict(self.precision_targets), "met": met, "checks": checks}

    def _start_step(self, i: int, now: float, level: float | None = None) -> None:
        level = self.ladder.levels[i] if level is None else level
        w = StepWindow(index=i + 1, level=level, started=now)
        resets = cache_reset.resets(self.env)
        w.cache_reset = resets.take() if resets is not None else None
        self.windows.append(w)
        if self.search is not None:
            log.info("SLA probe %d: %s %g", w.index, self.ladder.kind, level)
        elif w.index > len(self.ladder.levels):
            log.info(
                "ladder refine step %d/%d: %s %g",
                w.index - len(self.ladder.levels),
                self.refine,
                self.ladder.kind,
                level,
            )
        else:
            log.info("ladder step %d/%d: %s %g", w.index, len(self.ladder.levels), self.ladder.kind, level)
        if self.ladder.step_timing(w.index)[1] <= 0:
            w.measured_from = now
            self._broadcast(w.index, level)
        else:
            self._broadcast(-w.index, level)

    # ---- what the processes do ----

    def _users(self, level: float | None) -> tuple:
        if self.ladder.kind == "concurrency":
            users = int(level or 0)
            return users, max(users, 1), [StreamingUser]
        n = _worker_count(self.env)
        return n, n, [_replay_user_class()]

    def _report_lag(self, local: float) -> float:
        """How far the figures trail the clock: the workers' report interval on the master, `local`
        in one process."""
        return REPORT_LAG if run_context(self.env).role is Role.MASTER else local

    def _broadcast(self, step: int, level: float, drain: bool = False) -> None:
        run = run_context(self.env)
        payload = {
            "step": step,
            "kind": self.ladder.kind,
            "level": level,
            "arrivals": self.ladder.arrivals,
            "burstiness": self.ladder.burstiness,
            "drain": drain,
        }
        if run.role is Role.MASTER:
            runner = run.master_runner()
            n = max(_worker_count(self.env), 1)
            payload["share_rate"] = level / n
            for client in list(runner.clients.values()):
                runner.send_message(STEP, payload, client.id)
            hub(self.env).step = step
        else:
            payload["share_rate"] = level
            apply_step(self.env, payload)

    def _dispatchers_ready(self) -> bool:
        if self.ladder.kind == "concurrency":
            return True
        return dispatchers_ready(self.env)

    # ---- figures ----

    def _finished(self, step: int) -> int:
        agg = hub(self.env).steps.get(step)
        return agg.finished if agg is not None else 0

    def _window_rates(self, cur: StepWindow, now: float, st: Stable) -> list[float]:
        """Output tokens/s in consecutive windows of the measurement so far (whole seconds)."""
        series = hub(self.env).total.series
        lag = self._report_lag(1.0)
        end = int(now - lag)
        start = int(cur.measured_from or cur.started) + 1
        width = max(1, int(st.window))
        rates = []
        for a in range(start, end - width + 1, width):
            rates.append(sum(series.get(sec, (0,))[0] for sec in range(a, a + width)) / width)
        return rates

    def results(self) -> list[StepResult]:
        h = hub(self.env)
        out = []
        for w in self.windows:
            if w.measured_from is None:
                continue
            end = w.ended if w.ended is not None else time.time()
            agg = h.steps.get(w.index) or Aggregate()
            out.append(
                step_result(
                    agg,
                    step=w.index,
                    offered=w.level,
                    offered_kind=self.ladder.kind,
                    window=(w.measured_from, end),
                    warmup=self.ladder.step_timing(w.index)[1],
                    slos=self.slos,
                    series=h.total.series,
                    max_error_rate=self.early.max_error_rate,  # the run's limit, as its summary uses
                )
            )
        return out

    def report(self, server: Sequence[Mapping[str, Any]] | None = None, cut: bool = False) -> dict[str, Any]:
        """What the results JSON keeps: the ladder, each step's window and figures, the verdict.
        `server`: the server's /metrics per window ({"step": index, ...}), for the table's
        prefix-cache and speculative-decoding columns. `cut`: the run was interrupted: a step whose
        window had not ended is kept and marked cut, and left out of the verdict."""
        steps = self.results()
        cut_step = self._cut_step() if cut else None
        judged = [s for s in steps if s.step != cut_step]
        # a search's probes go up and down: the knee analysis reads them in load order
        # (a burst and a rate series go up and down by design: no knee)
        own, refined = self._split(judged)
        verdict = analyse(own, self.slos) if own and not self.ladder.profile else None
        if verdict is not None:
            refine.apply(verdict, own, refined)
        out: dict[str, Any] = {
            "ladder": self.ladder.to_dict(),
            "windows": [w.to_dict() for w in self.windows],
            "steps": [{**s.to_dict(), **(self._cut_facts() if s.step == cut_step else {})} for s in steps],
            "saturation": verdict.to_dict() if verdict else None,
            "stop_reason": (f"interrupted ({self.stop_reason})" if self.stop_reason else "interrupted")
            if cut
            else self.stop_reason,
            **({"refine": self._refine_report()} if self.refine else {}),
            "cut_step": cut_step,
            "table": format_steps(judged, verdict, _by_step(server, judged), knee=not self.ladder.profile)
            if judged
            else "",
        }
        if cut_step is not None:
            w = self.windows[-1]
            planned = self.ladder.step_timing(w.index)[0]
            out["table"] += (
                f"\nstep {w.index} ({self.ladder.kind} {w.level:g}) was cut by the interruption after "
                f"{time.time() - w.started:.1f} s of its {planned:g} s: kept in the results, left out of this "
                "table and of the verdict"
            )
        if reset_summary(self.windows):
            out["table"] = (out["table"] + "\n" if out["table"] else "") + reset_summary(self.windows)
        if self.ladder.burst is not None:
            out["burst"] = self._burst_report()
            if out["burst"] is not None:
                out["table"] = (out["table"] + "\n\n" if out["table"] else "") + format_stability(
                    {"burst": out["burst"]}
                )
        if self.search is not None:
            out["sla"] = self._sla_report()
            out["table"] = (out["table"] + "\n" if out["table"] else "") + format_sla(out["sla"])
        return out

    def _refine_report(self) -> dict[str, Any]:
        """`ladder.refine`: the steps --refine allowed, those it ran, and why it ended."""
        return {
            "most": self.refine,
            "steps": max(0, len(self.windows) - len(self.ladder.levels)),
            "ended": self.refine_end,
            "run_time": self.run_time,
        }

    def _cut_facts(self) -> dict[str, Any]:
        """What the results say of the step an interruption cut: that it was cut, the seconds it
        was planned for and the seconds it ran (warm-up included), so a report can mark it."""
        w = self.windows[-1]
        return {
            "cut": True,
            "planned_seconds": float(self.ladder.step_timing(w.index)[0]),
            "ran_seconds": round(max(0.0, time.time() - w.started), 3),
        }

    def _cut_step(self) -> int | None:
        """The step an interruption cut: the last one, when its window had not ended."""
        if not self.windows or self.windows[-1].ended is not None:
            return None
        return self.windows[-1].index

    def _burst_report(self) -> BurstRecovery | None:
        """The burst's recovery (analysis.stability.burst_recovery), once its three steps ran."""
        w = self.windows
        if len(w) < 3 or w[0].measured_from is None or w[2].ended is None:
            return None
        return burst_recovery(
            hub(self.env).total.by_sent,
            (w[0].measured_from, w[0].ended or w[1].started),
            (w[1].started, w[1].ended or w[2].started),
            w[2].ended,
            limit=getattr(self, "burst_limit", 0.0) or 0.0,
        )

    def _sla_report(self) -> dict[str, Any]:
        s = self.search
        assert s is not None
        if self.sla is not None:
            return self.sla
        history = [(p["level"], p["met"]) for p in self.probes]  # stopped before the search ended
        d = sla_search.conclude(history, s.kind, s.lo, s.hi, s.precision)
        d["probes_detail"] = self.probes
        d["seconds"] = round(time.time() - self.windows[0].started, 1) if self.windows else 0.0
        return d


def format_sla(d: dict[str, Any]) -> str:
    """The search's lines under the step table."""
    unit = "users" if d["kind"] == "concurrency" else "requests/s"
    head = (
        f"SLA search ({d['kind']}, precision {d['precision']:.1%}): "
        + (f"{d['answer']:g} {unit}" if d["answer"] is not None else "no load meets every SLO")
        + f" after {d['probes']} probes, {d.get('seconds', 0):g} s"
    )
    lines = [head, f"  - {d['reason']}"]
    order = ", ".join(f"{p['level']:g}{'' if p['met'] else ' (broke)'}" for p in d.get("probes_detail", []))
    if order:
        lines.append(f"  probes: {order}")
    if d.get("agents"):
        lines.append(agent_tier.format_agents(d["agents"]))
    return "\n".join(lines)


def apply_step(env: Environment, payload: dict[str, Any]) -> None:
    """On every sending process: tag new requests with the step; steer the open-loop dispatcher
    (not for the drain after the last step: the load goes on as it was)."""
    h = hub(env)
    h.ladder = True  # the client monitors sample inside measurement windows only
    h.step = payload["step"]
    if payload["kind"] in ("rate", "speed") and not payload.get("drain"):
        steer(env, payload)


def _worker_count(env: Environment) -> int:
    run = run_context(env)
    if run.role is Role.MASTER:
        return len([c for c in run.master_runner().clients.values() if c.state != "missing"])
    return 1


def _replay_user_class():
    for u in ReplayUser.__subclasses__():
        return u
    raise RuntimeError("no ReplayUser subclass is loaded: use locustfiles/ladder.py")


def controller(env: Environment) -> LadderController | None:
    """The ladder's controller (None: no ladder), made by install and renew only."""
    ctl = run_context(env).ladder
    assert ctl is None or isinstance(ctl, LadderController), "run.ladder is made here only"
    return ctl


def install(env: Environment, settings) -> None:
    """Set up the controller on the master / local runner, the step handler on workers."""
    run = run_context(env)
    if run.role is Role.WORKER:
        run.worker_runner().register_message(STEP, lambda environment, msg, **_kw: apply_step(env, msg.data))
        return
    cache_reset.install(env, settings)  # --reset-cache: before the run, and between steps
    ladder = ladder_from_settings(settings)
    if ladder is None:
        return
    tier = agent_tier.parse_tier(settings.agent_tier) if settings.agent_tier else None
    if tier is not None and (ladder.search is None or ladder.search.kind != "concurrency"):
        raise PlanError(
            ["--agent-tier counts agents, the probes of a concurrency search: give --ladder sla:concurrency:LO..HI:P%"]
        )
    if ladder.search is not None:
        if not settings.slos and tier is None:
            raise PlanError(
                [
                    f"--ladder {ladder.search.spec()} searches for the highest load meeting every SLO: "
                    "give at least one --slo, e.g. --slo ttft=500ms or --slo e2e_p99=2s"
                ]
            )
    ctl = run_context(env).ladder = LadderController(
        env,
        ladder,
        settings.slos,
        settings.early_stop_rule(),
        request_timeout=settings.request_timeout,
        refine=settings.refine,
        run_time=run_time_seconds(settings.run_time) if settings.run_time else None,
    )
    ctl.burst_limit = settings.burst_recovery
    ctl.tier, ctl.gpus, ctl.gpu_power_w = tier, settings.gpus, settings.gpu_power_w
    ctl.precision_targets = dict(settings.precision)


def renew(env: Environment) -> None:
    """A new test on a runner whose ladder already ran (started again from the web UI): a fresh
    controller from the first step (the hub clears the last test's figures at test_start)."""
    ctl = controller(env)
    if ctl is None or not ctl.windows:
        return
    fresh = run_context(env).ladder = LadderController(
        env, ctl.ladder, ctl.slos, ctl.early, ctl.request_timeout, refine=ctl.refine, run_time=ctl.run_time
    )
    fresh.burst_limit = getattr(ctl, "burst_limit", 0.0)
    fresh.precision_targets = ctl.precision_targets
    fresh.tier, fresh.gpus, fresh.gpu_power_w = ctl.tier, ctl.gpus, ctl.gpu_power_w
    log.info("new ladder run from step 1")


class LadderShape(LoadTestShape):
    """Runs the --ladder (see llm_locust.settings.ladder_spec.parse_ladder for its syntax)."""

    def reset_time(self) -> None:
        # Locust calls this as a shape test starts, before the first tick
        super().reset_time()
        if self.runner is not None:
            renew(self.runner.environment)

    def tick(self):
        assert self.runner is not None, "Locust ticks a shape of a runner"
        ctl = controller(self.runner.environment)
        if ctl is None:
            log.error("LadderShape needs --ladder (e.g. --ladder concurrency:1..32)")
            return None
        return ctl.tick()


def stop_dispatchers_on(env: Environment) -> None:
    """Kill open-loop passes when the test stops (in-flight requests end as cancelled)."""
    env.events.test_stop.add_listener(lambda **_kw: gevent.spawn(stop_passes, env))


def _by_step(server: Sequence[Mapping[str, Any]] | None, steps) -> list[Mapping[str, Any]] | None:
    """The server windows in the order of the step results (matched by step index)."""
    if not server:
        return None
    by = {w.get("step"): w for w in server}
    return [by.get(s.step, {}) for s in steps]
