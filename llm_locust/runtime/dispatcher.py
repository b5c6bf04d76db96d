"""One process's open-loop sender: its share of the trace, each request at its time.

Each request goes out at t0 + (trace time - offset) / speed, whatever the responses do; its
latency is kept both from the scheduled time (t_sched) and from the actual send (t_sent).
Records of one conversation go out in turn order, each only after the previous reply (and at
its own trace time, if later), carrying the conversation's history when the trace has text.

`Dispatcher` loads its share (records whose key % K == i; a conversation stays whole on one
worker) in a native thread, so heartbeats go on, and sends it from a t0 on the master's clock
(`run`), or at a rate (`rate_pass`) or speed (`replay_pass`) a ladder step sets. Who plans the
shares, says go and ends the test is the replay's coordination: runtime/replay_shares.py, by role.
The dispatcher is one greenlet per process, whatever the number of ReplayUsers there.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
import gevent.pool
from gevent.event import Event
from geventhttpclient import HTTPClient
from locust.env import Environment

from llm_locust.loop.session_runner import SessionRequest, load_workload, set_up_load, sleep_until
from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols import GRPC_APIS, OPENAI_APIS, get_adapter
from llm_locust.protocols.base import request_headers
from llm_locust.runtime.hub import hub
from llm_locust.runtime.send import SendPath
from llm_locust.settings.model import Settings
from llm_locust.transport.client import Client
from llm_locust.transport.clients import main_client
from llm_locust.transport.served import fetch_models
from llm_locust.workload.arrivals import share_offsets
from llm_locust.workload.graded import maybe_graded
from llm_locust.workload.schedule import ReplayWindow, due_times
from llm_locust.workload.sessions import SessionTrace
from llm_locust.workload.trace import Trace

log = logging.getLogger(__name__)

PREFILL_POLL = 0.001  # s: how often a send held at --max-prefill looks for a first token


class PrefillGate:
    """--max-prefill N: at most N of this process's requests without their first token.

    A send takes a place before its request exists (`acquire`, counted as pending), the client
    hands over the record as soon as it makes it (`started`, Client.send's on_record), and
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

    def _client(self, url: str | None = None) -> Client:
        """The sender for `url` (default: the host): main_client's, on a pool sized for the replay.
        The one place the open loop makes its clients: a test's replay returns a FakeClient here."""
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
        self.client: Client = self._client()
        self.model = self._model()
        urls = s.endpoint_list or [self.host]
        setup = set_up_load(  # as the closed loop's users' (runtime/closed_loop.py UsersState)
            s, self.trace, self.share[0], urls, model_for=lambda sess: self._request_model(sess.id), speed=s.speed
        )
        self.builder, self.model_split, self.router = setup.builder, setup.model_split, setup.router
        self.runner = setup.runner  # a session trace's (None: single records)
        self.metrics = hub(self.env)
        self.greenlets = gevent.pool.Group()
        if self.router is not None:
            self.clients: dict[str, Client] = {u: self._client(u) for u in urls}
            if self.model_split is not None:  # which endpoint serves which model
                self.router.serve({u: fetch_models(u, self._headers(), s.timeouts, s.limits) for u in urls})
        self.send_path = SendPath(
            self.env,
            new_id=lambda: f"{self.metrics.id_prefix}-{self.sent}",
            client_for=lambda url: self.clients[url],
            router=self.router,
            session_header_names=tuple(s.session_header_names),
        )
        for client in (self.client, *getattr(self, "clients", {}).values()):
            if hasattr(client, "cancel"):  # an HTTP client (--cancel is refused with gRPC)
                client.cancel = setup.cancel  # --cancel: one seeded plan per process
            warm_up = getattr(client, "warm_up", None)
            if warm_up is not None:
                warm_up(self.model)
        if self.prefill is not None:
            self.metrics.info[self._prefill_key()] = self.prefill.figures()
        self.metrics.status_sources.update(setup.status_sources())

    def _record_model(self, entry) -> str | None:
        if self.settings.trace_models and entry.model:
            return entry.model
        return self._request_model()

    def _request_model(self, session: str | None = None) -> str | None:
        return self.model_split.pick(session) if self.model_split is not None else self.model

    def run(self, t0_wall: float) -> None:
        """The whole replay (trace window and loops of the settings), then wait for the replies."""
        try:
            self._prepare()
            s = self.settings
            window = ReplayWindow(s.speed, s.start_offset, s.duration or None, s.loops)
            # t0_wall is on the master's clock: this worker's offset to it (loop/clock.py) applied
            t0 = time.perf_counter() + (t0_wall - self.metrics.clock.master_time())
            self.metrics.start_warmup(t0)  # --run-warmup: trace time from the replay's first record
            g = self.pass_greenlet = gevent.spawn(self.replay_pass, t0, window)
            g.join()
            self.greenlets.join()
        finally:
            self.finished.set()

    def replay_pass(self, t0: float, window: ReplayWindow) -> None:
        """Send the records of one window on schedule from perf_counter time t0; a session trace's
        sessions start at their times, their later turns follow their replies (loop.session_runner)."""
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
            entry = trace[i]
            spec, source, graded = maybe_graded(
                self, self.settings, self.builder.spec(entry, self._record_model(entry)), entry.source, self.share[0]
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
            entry = trace[k % len(trace)]
            k += 1
            released = self._acquire_slot(t)
            spec, source, graded = maybe_graded(
                self, self.settings, self.builder.spec(entry, self._record_model(entry)), entry.source, self.share[0]
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

    def _session_send(self, req: SessionRequest) -> RequestRecord:
        released = self._acquire_slot(req.t_sched)
        return self._send(req.spec, req.t_sched, req.source, req.keep_text, req.session, req.ideal, released)
