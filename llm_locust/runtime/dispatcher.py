"""Open-loop, timestamp-faithful trace replay across a Locust cluster.

Each request goes out at t0 + (trace time - offset) / speed, whatever the responses do; its
latency is kept both from the scheduled time (t_sched) and from the actual send (t_sent).
Records of one conversation go out in turn order, each only after the previous reply (and at
its own trace time, if later), carrying the conversation's history when the trace has text.

Across workers the cluster replays the trace exactly once:
  1. master -> each worker: "llm_locust_plan" {share: [i, K], options, host}
  2. each worker loads its share (records whose key % K == i; a conversation stays whole on one
     worker) in a native thread, so heartbeats go on, then answers "llm_locust_ready";
  3. master, once all are ready: "llm_locust_go" {t0: wall-clock start}, the same for everyone;
  4. each worker dispatches its share from t0 on the master's clock (its measured offset to it,
     transport/clock.py, applied; measured afresh before it says ready) and answers "llm_locust_done".
In a LocalRunner the same happens in-process with the share (0, 1).

The dispatcher is one greenlet per process, whatever the number of ReplayUsers there: Locust's
users only keep the runner alive while it works. It stops the test when every share is done.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import gevent
import gevent.pool
from gevent.event import Event
from geventhttpclient import HTTPClient
from locust import User, task
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols import CHAT_APIS, GRPC_APIS, OPENAI_APIS, get_adapter
from llm_locust.protocols.base import request_headers
from llm_locust.report.masking import protect
from llm_locust.runtime.context import ReplayState, run_context
from llm_locust.runtime.hub import hub
from llm_locust.runtime.send import SendPath
from llm_locust.settings.derive import from_options
from llm_locust.settings.model import Settings
from llm_locust.transport.clients import main_client
from llm_locust.transport.served import fetch_models
from llm_locust.transport.session_runner import SessionRunner, load_workload, run_nonce, sleep_until
from llm_locust.workload.arrivals import share_offsets
from llm_locust.workload.cancel import process_plan
from llm_locust.workload.graded import maybe_graded
from llm_locust.workload.prompts import PromptBuilder
from llm_locust.workload.schedule import ReplayWindow, due_times
from llm_locust.workload.sessions import SessionTrace
from llm_locust.workload.specs import SpecBuilder
from llm_locust.workload.trace import Trace

log = logging.getLogger(__name__)

PLAN, READY, GO, DONE = "llm_locust_plan", "llm_locust_ready", "llm_locust_go", "llm_locust_done"
START_LEAD = 0.5  # seconds between "go" and t0, so every worker has the message before t0
READY_TIMEOUT = 600.0
PREFILL_POLL = 0.001  # s: how often a send held at --max-prefill looks for a first token


class PrefillGate:
    """--max-prefill N: at most N of this process's requests without their first token.

    A send takes a place before its request exists (`acquire`, counted as pending), the client
    hands over the record as soon as it makes it (`started`, StreamClient.send's on_record), and
    the place is free once the record has a first token or has ended. The client's read path is
    untouched: a send held at the cap looks at the open records' t_first every PREFILL_POLL
    seconds (only while it is held), so it goes out at most ~1 ms after the token that freed a
    place. Counts the sends that waited and how long (`figures`, kept in the results)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.pending = 0  # places taken whose record the client has not made yet
        self.open: dict[int, RequestRecord] = {}  # by id(): records without a first token so far
        self.waited = 0  # sends held at the cap
        self.wait_s = 0.0
        self.longest_s = 0.0

    def busy(self) -> int:
        """Places taken now: pending sends and open records still before their first token."""
        done = [k for k, r in self.open.items() if r.t_first is not None or r.t_end is not None]
        for k in done:
            del self.open[k]
        return self.pending + len(self.open)

    def acquire(self) -> None:
        if self.busy() >= self.cap:
            t = time.perf_counter()
            while self.busy() >= self.cap:
                gevent.sleep(PREFILL_POLL)
            waited = time.perf_counter() - t
            self.waited += 1
            self.wait_s += waited
            self.longest_s = max(self.longest_s, waited)
        self.pending += 1

    def started(self, rec: RequestRecord) -> None:
        self.pending -= 1
        self.open[id(rec)] = rec

    def ended(self, rec: RequestRecord | None) -> None:
        """The send is over (whatever happened): its place is free."""
        if rec is None:
            self.pending -= 1  # the client never made the record (it raised before)
        else:
            self.open.pop(id(rec), None)

    def figures(self) -> dict[str, Any]:
        return {
            "cap": self.cap,
            "waited": self.waited,
            "wait_s": round(self.wait_s, 6),
            "longest_wait_s": round(self.longest_s, 6),
        }


class Dispatcher:
    """Sends one process's share of the trace on schedule."""

    def __init__(self, env: Environment, settings: Settings, host: str, share: tuple[int, int]) -> None:
        self.env = env
        self.settings = settings
        self.host = host
        self.share = share
        self.trace: Trace | SessionTrace | None = None  # this process's share (load_workload)
        self.ready = Event()
        self.finished = Event()
        self.error: str | None = None
        self.sent = 0
        self.held_back = 0
        self._in_flight = 0
        self._unblocked_at = float("-inf")
        self.pass_greenlet: gevent.Greenlet | None = None  # the schedule being walked (replaced at each ladder step)
        self._slot_free = Event()
        self.prefill = PrefillGate(settings.max_prefill) if settings.max_prefill else None
        self.pass_shape: tuple | None = None  # a rate pass's (rate, arrivals, burstiness): steer keeps an equal one

    # ---- set-up ----

    def load(self) -> None:
        """Load this process's share in a native thread (parsing must not stall heartbeats),
        then make the client, model and spec builder (_prepare): all before this process says
        it is ready, so that none of it (a tokenizer's load, the model list, a gRPC channel's
        connection) eats into the lead before t0 and makes the first sends late."""
        s = self.settings
        try:
            self.trace = gevent.get_hub().threadpool.apply(
                load_workload, (s.trace_path,), {"fmt": s.trace_format or None, "share": self.share}
            )
            self._prepare()
        except Exception as e:  # noqa: BLE001 - reported to the master, the test stops
            self.error = f"{type(e).__name__}: {e}"
        self.ready.set()

    def _client(self, url: str | None = None):
        """The sender for `url` (default: the host): main_client's, on a pool sized for the replay."""
        s = self.settings
        url = url or self.host
        if not url:  # Locust run directly without --host (llm-locust run always gives one)
            raise ValueError("no server to send to: give --host")
        if s.api in GRPC_APIS:
            return main_client(s, url)  # its own HTTP/2 channel
        cap = s.max_in_flight or 10_000
        http = HTTPClient.from_url(
            url,
            concurrency=cap,
            connection_timeout=s.timeouts.connect,
            network_timeout=s.timeouts.no_progress,
            insecure=True,
        )
        return main_client(s, url, http)

    def _model(self) -> str | None:
        s = self.settings
        split = s.model_split
        if split or s.api not in OPENAI_APIS:
            return split[0][0] if len(split) == 1 else None
        models = fetch_models(self.host, self._headers(), s.timeouts, s.limits)
        if models:
            hub(self.env).info["model"] = models[0]
        return models[0] if models else None

    def _headers(self) -> dict[str, str]:
        return request_headers(get_adapter(self.settings.api), self.settings.api_key)  # OpenAI APIs only (models)

    # ---- the replay ----

    def _prepare(self) -> None:
        """Client, model and spec builder: once per process, before the first send."""
        if getattr(self, "client", None) is not None:
            return
        s = self.settings
        self.client = self._client()
        self.model = self._model()
        chat = s.api in CHAT_APIS
        self.builder = SpecBuilder(s, PromptBuilder(seed=s.seed, chat=chat, tokenizer=s.tokenizer_obj()), chat)
        self.metrics = hub(self.env)
        self.greenlets = gevent.pool.Group()
        seed = s.seed * 1_000_003 + self.share[0]
        split = s.model_split
        self.model_split = None
        if len(split) > 1:
            from llm_locust.workload.routing import ModelSplit

            self.model_split = ModelSplit(split, seed=seed)
        urls = s.endpoint_list or [self.host]
        self.router = None
        if len(urls) > 1:
            from llm_locust.workload.routing import Router

            self.router = Router(urls, s.route, seed=seed)
            self.clients = {u: self._client(u) for u in urls}
            if self.model_split is not None:  # which endpoint serves which model
                self.router.serve({u: fetch_models(u, self._headers(), s.timeouts, s.limits) for u in urls})
        self.send_path = SendPath(
            self.env,
            new_id=lambda: f"{self.metrics.id_prefix}-{self.sent}",
            client_for=lambda url: self.clients[url],
            router=self.router,
            session_header_names=tuple(s.session_header_names),
        )
        self.runner = None
        if isinstance(self.trace, SessionTrace):
            self.runner = SessionRunner(
                self.trace,
                self.builder,
                s,
                nonce=run_nonce(s.seed),
                speed=s.speed,
                model_for=lambda sess: self._request_model(sess.id),
            )
        plan = process_plan(s.cancel, s.seed, self.share[0])  # --cancel: one seeded plan per process
        for client in (self.client, *getattr(self, "clients", {}).values()):
            if hasattr(client, "cancel"):  # an HTTP client (--cancel is refused with gRPC)
                client.cancel = plan
            warm_up = getattr(client, "warm_up", None)
            if warm_up is not None:
                warm_up(self.model)
        if self.prefill is not None:
            self.metrics.info[self._prefill_key()] = self.prefill.figures()
        status = self.metrics.status_sources
        if self.router is not None:
            status["endpoints"] = self.router.status
        if self.runner is not None:
            status["sessions"] = self.runner.counts

    def _record_model(self, rec) -> str | None:
        if self.settings.trace_models and rec.model:
            return rec.model
        return self._request_model()

    def _request_model(self, session: str | None = None) -> str | None:
        return self.model_split.pick(session) if self.model_split is not None else self.model

    def run(self, t0_wall: float) -> None:
        """The whole replay (trace window and loops of the settings), then wait for the replies."""
        try:
            self._prepare()
            s = self.settings
            window = ReplayWindow(s.speed, s.start_offset, s.duration or None, s.loops)
            # t0_wall is on the master's clock: this worker's offset to it (transport/clock.py) applied
            t0 = time.perf_counter() + (t0_wall - self.metrics.clock.master_time())
            self.metrics.start_warmup(t0)  # --run-warmup: trace time from the replay's first record
            g = self.pass_greenlet = gevent.spawn(self.replay_pass, t0, window)
            g.join()
            self.greenlets.join()
        finally:
            self.finished.set()

    def replay_pass(self, t0: float, window: ReplayWindow) -> None:
        """Send the records of one window on schedule from perf_counter time t0; a session trace's
        sessions start at their times, their later turns follow their replies (transport.session_runner)."""
        trace, runner = self.trace, self.runner
        assert trace is not None, "a pass after load()"
        due = due_times(trace.arrivals, window)
        if runner is not None:  # made for a session trace (_prepare): its sessions are runner.trace's
            roots = runner.trace.roots
            for offset, i in due:
                t_due = t0 + offset
                sleep_until(t_due)
                self.greenlets.spawn(runner.run, roots[i], self._session_send, t_due)
            return
        assert isinstance(trace, Trace), "records, when not sessions"
        for offset, i in due:
            t_due = t0 + offset
            sleep_until(t_due)
            released = self._acquire_slot(t_due)
            rec = trace[i]
            spec, source, graded = maybe_graded(
                self, self.settings, self.builder.spec(rec, self._record_model(rec)), rec.source, self.share[0]
            )  # --graded: maybe an item instead
            self.greenlets.spawn(self._send, spec, t_due, source, graded, released=released)

    def rate_pass(self, rate: float, arrivals: str = "poisson", burstiness: float = 1.0) -> None:
        """Open loop at `rate` requests/s from this process (poisson, constant or gamma intervals:
        workload.arrivals), records of the share in turn, until killed (the next load step
        replaces it). The cluster's arrivals are one seeded sequence at rate x workers, of which
        this process sends every K-th (share_offsets). A session trace starts sessions at `rate`
        per second instead, each running its turns after its replies."""
        trace, runner = self.trace, self.runner
        assert trace is not None, "a pass after load()"
        roots = runner.trace.roots if runner is not None else []  # a session trace's (_prepare)
        i, workers = self.share
        offsets = share_offsets(
            arrivals, rate * workers, burstiness=burstiness, seed=self.settings.seed * 1_000_003, share=(i, workers)
        )
        t0 = time.perf_counter()
        k = 0
        for offset in offsets:
            t = t0 + offset
            sleep_until(t)
            if runner is not None:
                self.greenlets.spawn(runner.run, roots[k % len(roots)], self._session_send, t)
                k += 1
                continue
            assert isinstance(trace, Trace), "records, when not sessions"
            rec = trace[k % len(trace)]
            k += 1
            released = self._acquire_slot(t)
            spec, source, graded = maybe_graded(
                self, self.settings, self.builder.spec(rec, self._record_model(rec)), rec.source, self.share[0]
            )  # --graded: maybe an item instead
            self.greenlets.spawn(self._send, spec, t, source, graded, released=released)

    def _acquire_slot(self, t_due: float) -> float | None:
        """Take an in-flight slot, waiting at the cap, then a place before the first token
        (--max-prefill). A request is held back when it waited itself (at either cap), or fell
        due while the dispatcher was waiting for an earlier one."""
        cap = self.settings.max_in_flight
        held = t_due < self._unblocked_at
        if cap and self._in_flight >= cap:
            held = True
            while self._in_flight >= cap:
                self._slot_free.clear()
                self._slot_free.wait()
            self._unblocked_at = time.perf_counter()
        self._in_flight += 1
        if self.prefill is not None and self._prefill_wait():
            held = True
        self.held_back += held
        return time.perf_counter() if held else None  # when it was let go: t_released

    def _prefill_wait(self) -> bool:
        """A place before the first token (PrefillGate); True when this send had to wait for it."""
        gate = self.prefill
        assert gate is not None, "with --max-prefill"
        waited = gate.waited
        try:
            gate.acquire()
        except BaseException:  # killed while held (the next ladder step, the test's stop): no send
            self._in_flight -= 1
            self._slot_free.set()
            raise
        if gate.waited == waited:
            return False
        self._unblocked_at = time.perf_counter()
        hub(self.env).info[self._prefill_key()] = gate.figures()
        return True

    def _prefill_key(self) -> str:
        """Where hub.info (the results' run.server) keeps this process's --max-prefill figures: one
        key per worker, as the master keeps the last info each worker reported."""
        i, workers = self.share
        return "prefill_cap" if workers == 1 else f"prefill_cap_worker{i}"

    def _send(
        self,
        spec,
        t_sched: float,
        source: str,
        keep_text: bool = False,
        session: str | None = None,
        ideal: int | None = None,
        released: float | None = None,
    ) -> RequestRecord:
        """Send with a slot already taken (`_acquire_slot`, which says when it `released` a held
        one); gives it back at the end."""
        self.sent += 1
        step = self.metrics.on_sent()
        gate = self.prefill
        made: list[RequestRecord] = []  # the record, once the client made it (--max-prefill)

        def on_record(rec: RequestRecord) -> None:
            made.append(rec)
            assert gate is not None, "handed over only with --max-prefill"
            gate.started(rec)

        try:
            return self.send_path.send(
                self.client,
                spec,
                t_sched,
                source,
                step,
                session=session,
                ideal=ideal,
                keep_text=keep_text,
                released=released,
                on_record=on_record if gate is not None else None,
            )
        finally:
            self._in_flight -= 1
            self._slot_free.set()
            if gate is not None:
                gate.ended(made[0] if made else None)

    def _session_send(self, spec, t_sched: float, source: str, session: str, ideal, keep_text: bool) -> RequestRecord:
        released = self._acquire_slot(t_sched)
        return self._send(spec, t_sched, source, keep_text, session, ideal, released)


# ---- process wiring -------------------------------------------------------------------


def _state(env: Environment) -> ReplayState:
    return run_context(env).replay_state()


def _ladder_driven(settings: Settings) -> bool:
    """Rate and speed ladders drive the dispatchers step by step instead of one replay."""
    return bool(settings.ladder) and settings.ladder.split(":", 1)[0] in ("rate", "speed")


def dispatchers_ready(env: Environment) -> bool:
    """Every process that sends has loaded its share (master: all planned workers answered)."""
    st = _state(env)
    if isinstance(env.runner, MasterRunner):
        return (
            bool(st.planned) and set(st.ready) >= set(st.planned) and not any(d.get("error") for d in st.ready.values())
        )
    d = st.dispatcher
    return d is not None and d.ready.is_set() and not d.error


def steer(env: Environment, payload: dict[str, Any]) -> None:
    """A new ladder step: replace this process's open-loop pass with one at the new rate / speed.
    A rate step at the rate the pass already runs (a step's warm-up ending, a series' next step
    at the same rate) keeps it: the arrivals go on as drawn (a restarted gamma sequence would
    drop the interval under way); only the step the requests are tagged with changes (hub)."""
    d = _state(env).dispatcher
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
    d = _state(env).dispatcher
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
    runner = env.runner
    if isinstance(runner, MasterRunner):
        _install_master(env, runner)
    elif isinstance(runner, WorkerRunner):
        _install_worker(env, runner)
    if not isinstance(runner, MasterRunner):
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
        hub(env).sync_clock()  # the offset to the master's clock, fresh for t0 (transport/clock.py)
        runner.send_message(READY, {"error": d.error, "records": len(d.trace) if d.trace is not None else 0})

    def on_go(environment, msg, **_kw) -> None:
        d = _state(env).dispatcher
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
        if not isinstance(self.environment.runner, WorkerRunner):
            _start_local(self.environment)

    @task
    def wait(self) -> None:
        gevent.sleep(1.0)
