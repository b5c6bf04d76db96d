"""An open-loop replay's coordination, by role: the cluster replays the trace exactly once.

  1. master -> each worker: "llm_locust_plan" {share: [i, K], options, host}
  2. each worker loads its share (runtime/dispatcher.py `Dispatcher.load`, in a native thread, so
     heartbeats go on), then answers "llm_locust_ready";
  3. master, once all are ready: "llm_locust_go" {t0: wall-clock start}, the same for everyone;
  4. each worker dispatches its share from t0 on the master's clock (its measured offset to it,
     loop/clock.py, applied; measured afresh before it says ready) and answers "llm_locust_done".
In a LocalRunner the same happens in-process with the share (0, 1). A rate or speed ladder steers
each process's pass step by step instead (`steer`), from runtime/shapes.py. The test stops when
every share is done.

`ReplayUser` is the placeholder Locust spawns: the process's dispatcher does the sending.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import gevent
from locust import User, task
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from llm_locust.runtime.context import ReplayState, Role, run_context
from llm_locust.runtime.dispatcher import Dispatcher
from llm_locust.runtime.hub import hub
from llm_locust.safe.masking import protect
from llm_locust.settings.derive import from_options
from llm_locust.settings.model import Settings
from llm_locust.workload.schedule import ReplayWindow

log = logging.getLogger(__name__)

PLAN, READY, GO, DONE = "llm_locust_plan", "llm_locust_ready", "llm_locust_go", "llm_locust_done"
START_LEAD = 0.5  # seconds between "go" and t0, so every worker has the message before t0


def _state(env: Environment) -> ReplayState:
    return run_context(env).replay_state()


def _dispatcher(env: Environment) -> Dispatcher | None:
    """This process's dispatcher (None: not planned yet), made here only (_start_local, on_plan)."""
    d = _state(env).dispatcher
    assert d is None or isinstance(d, Dispatcher), "replay.dispatcher is made here only"
    return d


def _ladder_driven(settings: Settings) -> bool:
    """Rate and speed ladders drive the dispatchers step by step instead of one replay."""
    return bool(settings.ladder) and settings.ladder.split(":", 1)[0] in ("rate", "speed")


def dispatchers_ready(env: Environment) -> bool:
    """Every process that sends has loaded its share (master: all planned workers answered)."""
    st = _state(env)
    if run_context(env).role is Role.MASTER:
        return (
            bool(st.planned) and set(st.ready) >= set(st.planned) and not any(d.get("error") for d in st.ready.values())
        )
    d = _dispatcher(env)
    return d is not None and d.ready.is_set() and not d.error


def steer(env: Environment, payload: dict[str, Any]) -> None:
    """A new ladder step: replace this process's open-loop pass with one at the new rate / speed.
    A rate step at the rate the pass already runs (a step's warm-up ending, a series' next step
    at the same rate) keeps it: the arrivals go on as drawn (a restarted gamma sequence would
    drop the interval under way); only the step the requests are tagged with changes (hub)."""
    d = _dispatcher(env)
    if d is None or d.trace is None:
        log.error("ladder step %s: no loaded dispatcher in this process", payload.get("step"))
        return
    shape = (
        (payload["share_rate"], payload.get("arrivals"), payload.get("burstiness"))
        if payload["kind"] == "rate"
        else None
    )
    g = d.pass_greenlet
    if shape is not None and shape == d.pass_shape and g is not None and not g.dead:
        return
    d.pass_shape = shape
    if g is not None:
        g.kill(block=False)

    def start() -> None:
        d._prepare()
        if payload["kind"] == "rate":
            if payload["share_rate"] > 0:
                d.rate_pass(payload["share_rate"], payload.get("arrivals", "poisson"), payload.get("burstiness", 1.0))
        else:
            s = d.settings
            window = ReplayWindow(payload["level"], s.start_offset, s.duration or None, s.loops)
            d.replay_pass(time.perf_counter(), window)

    d.pass_greenlet = gevent.spawn(start)


def stop_passes(env: Environment) -> None:
    """Test stopped: no new sends; requests in flight end as cancelled (and are counted)."""
    d = _dispatcher(env)
    if d is None:
        return
    if d.pass_greenlet is not None:
        d.pass_greenlet.kill(block=True, timeout=5)
    group = getattr(d, "greenlets", None)
    if group is not None:
        group.kill(block=True, timeout=5)


def _options_dict(env: Environment) -> dict[str, Any]:
    return {k: v for k, v in vars(env.parsed_options).items() if isinstance(v, (str, int, float, bool, type(None)))}


def _stop_test(env: Environment) -> None:
    runner = env.runner
    assert runner is not None, "a running test's"
    headless = getattr(env.parsed_options, "headless", False)
    gevent.spawn(runner.quit if headless else runner.stop)


def _start_local(env: Environment) -> None:
    """LocalRunner: plan, load and go in-process."""
    st = _state(env)
    if st.dispatcher is not None:
        return
    settings = run_context(env).settings
    protect(settings.api_key)
    d = st.dispatcher = Dispatcher(env, settings, env.host or "", (0, 1))  # none: load() says so

    def go() -> None:
        d.load()
        if d.error:
            log.error("replay cannot start: %s", d.error)
            _stop_test(env)
            return
        if _ladder_driven(settings):
            return  # the ladder's steps start and steer the passes (steer)
        d.run(time.time() + START_LEAD)
        info = hub(env).info
        info["replay_sent"], info["replay_held_back"] = d.sent, d.held_back
        log.info("replay finished: %d requests sent, %d held back by the in-flight caps", d.sent, d.held_back)
        if d.prefill is not None:
            info[d._prefill_key()] = f = d.prefill.figures()
            log.info("--max-prefill %d: %d sends waited, %.3f s in all", f["cap"], f["waited"], f["wait_s"])
        _stop_test(env)

    gevent.spawn(go)


def install(env: Environment) -> None:
    """Register the replay messages. Called at init on every process."""
    run = run_context(env)
    if run.role is Role.MASTER:
        _install_master(env, run.master_runner())
    elif run.role is Role.WORKER:
        _install_worker(env, run.worker_runner())
    if run.role is not Role.MASTER:
        env.events.test_stop.add_listener(lambda **_kw: stop_passes(env))


def _install_master(env: Environment, runner: MasterRunner) -> None:
    """The master's side: plan the shares at test start, say go once every worker is ready, stop when all are done."""

    def on_start(**_kw: Any) -> None:
        if not any(issubclass(u, ReplayUser) for u in env.user_classes):
            return
        settings = run_context(env).settings
        if settings.ladder and not _ladder_driven(settings):
            return  # a concurrency ladder's locustfile has the open-loop class too, never spawned
        st = _state(env)
        workers = sorted(
            (c for c in runner.clients.values() if c.state != "missing"),
            key=lambda c: runner.get_worker_index(c.id),
        )
        st.planned = [c.id for c in workers]
        st.ready, st.done, st.go_sent = {}, {}, False
        options = _options_dict(env)
        for i, c in enumerate(workers):
            runner.send_message(PLAN, {"share": [i, len(workers)], "options": options, "host": env.host}, c.id)
        log.info("replay planned over %d workers", len(workers))

    def on_ready(environment, msg, **_kw) -> None:
        st = _state(env)
        st.ready[msg.node_id] = msg.data
        if msg.data.get("error"):
            log.error("worker %s cannot replay: %s", msg.node_id, msg.data["error"])
        if set(st.ready) >= set(st.planned) and not st.go_sent and not _ladder_driven(run_context(env).settings):
            st.go_sent = True
            if any(d.get("error") for d in st.ready.values()):
                _stop_test(env)
                return
            t0 = time.time() + START_LEAD
            for cid in st.planned:
                runner.send_message(GO, {"t0": t0}, cid)
            hub(env).info["replay_t0"] = t0

    def on_done(environment, msg, **_kw) -> None:
        st = _state(env)
        st.done[msg.node_id] = msg.data
        if set(st.done) >= set(st.planned):
            info = hub(env).info
            info["replay_sent"] = sum(d["sent"] for d in st.done.values())
            info["replay_held_back"] = sum(d["held_back"] for d in st.done.values())
            _stop_test(env)

    env.events.test_start.add_listener(on_start)
    runner.register_message(READY, on_ready)
    runner.register_message(DONE, on_done)


def _install_worker(env: Environment, runner: WorkerRunner) -> None:
    """A worker's side: load its share when planned (answering ready), dispatch it on go (answering done)."""

    def on_plan(environment, msg, **_kw) -> None:
        st = _state(env)
        settings = from_options(SimpleNamespace(**msg.data["options"]))
        protect(settings.api_key)
        d = st.dispatcher = Dispatcher(env, settings, msg.data["host"], tuple(msg.data["share"]))
        d.load()
        hub(env).sync_clock()  # the offset to the master's clock, fresh for t0 (loop/clock.py)
        runner.send_message(READY, {"error": d.error, "records": len(d.trace) if d.trace is not None else 0})

    def on_go(environment, msg, **_kw) -> None:
        d = _dispatcher(env)
        if d is None or d.error:
            return
        d.run(msg.data["t0"])
        runner.send_message(DONE, {"sent": d.sent, "held_back": d.held_back})

    runner.register_message(PLAN, on_plan, concurrent=True)
    runner.register_message(GO, on_go, concurrent=True)


class ReplayUser(User):
    """Placeholder user for open-loop replay: the process's dispatcher does the sending.

    Run with one user per worker (more are harmless: they idle). The test ends by itself when
    the whole trace window has been replayed.
    """

    abstract = True

    def on_start(self) -> None:
        if run_context(self.environment).role is not Role.WORKER:
            _start_local(self.environment)

    @task
    def wait(self) -> None:
        gevent.sleep(1.0)
