"""Locust users that stream from an LLM server and time every token.

`LLMUser` is a FastHttpUser: Locust's host, connection pool and settings apply. Each request
goes through runtime/send.py `SendPath.send` to the user's `Client` (transport/client.py: a
`StreamClient`, or the gRPC client for --api vllm-grpc; `make_client`), becomes one RequestRecord, folds into the
process's MetricsHub, and fires Locust's own request event with E2E as response_time and
output tokens as response_length, so Locust's table means something.
"""

from __future__ import annotations

import itertools
import logging
import os
import random

import gevent
import gevent.lock
from locust import FastHttpUser, constant, task
from locust.env import Environment

from llm_locust.loop.session_runner import SessionRequest, load_workload, pick_start_turn, set_up_load
from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols import GRPC_APIS, OPENAI_APIS, get_adapter
from llm_locust.protocols.base import RequestSpec, request_headers
from llm_locust.runtime.context import run_context
from llm_locust.runtime.hub import hub
from llm_locust.runtime.send import SendPath
from llm_locust.safe.masking import protect
from llm_locust.transport.client import Client
from llm_locust.transport.clients import main_client
from llm_locust.transport.grpc_h2 import H2GrpcClient
from llm_locust.transport.http import JSONClient, StreamClient
from llm_locust.transport.served import fetch_models
from llm_locust.transport.turns import take_turn
from llm_locust.workload.graded import maybe_graded
from llm_locust.workload.scenario import LLMClient
from llm_locust.workload.sessions import SessionTrace
from llm_locust.workload.specs import SpecBuilder

log = logging.getLogger(__name__)


class Workload:
    """The records this process sends, in order, looping; shared by the process's users."""

    def __init__(self, trace, builder: SpecBuilder, offset: int = 0, trace_models: bool = False) -> None:
        self.trace = trace
        self.builder = builder
        self._next = itertools.count(offset)
        self.trace_models = trace_models

    def next_spec(self, model: str | None) -> tuple[RequestSpec, str]:
        entry = self.trace[next(self._next) % len(self.trace)]
        return self.builder.spec(entry, entry.model if self.trace_models and entry.model else model), entry.source


class UsersState:
    """The closed-loop users' shared state in one process, set up when the first one starts:
    settings, workload, model name, router, draws (RunContext.users)."""

    def __init__(self, env: Environment) -> None:
        s = self.settings = run_context(env).settings
        protect(s.api_key)
        work = load_workload(s.trace_path, s.trace_format or None)
        index = getattr(env.runner, "worker_index", 0) or 0
        setup = set_up_load(s, work, index, s.endpoint_list, model_for=self._session_model)  # as the dispatcher's
        builder, self.model_split, self.router = setup.builder, setup.model_split, setup.router
        self.runner = setup.runner  # a session workload's (None: single records)
        self.cancel = setup.cancel  # --cancel: one seeded plan per process
        split = s.model_split
        self.sessions: SessionTrace | None = work if isinstance(work, SessionTrace) else None
        self.workload = None
        if self.sessions is not None:
            self._next_session = itertools.count((index * 7919) % len(self.sessions))
            self._start_rng = random.Random(s.seed * 1_000_033 + index)
        else:
            # spread workers over the trace so they do not all send the same records first
            self.workload = Workload(work, builder, offset=(index * 7919) % len(work), trace_models=s.trace_models)
        self.model: str | None = split[0][0] if len(split) == 1 else None
        self.model_checked = bool(split) or self.settings.api not in OPENAI_APIS
        self.session_headers = s.session_header_names
        self.endpoint_models: dict[str, list[str]] | None = None  # /v1/models per endpoint, read once
        hub(env).status_sources.update(setup.status_sources())
        self.lock = gevent.lock.Semaphore()
        self._mix_rng = random.Random(s.seed * 1_000_003 + index)  # per process, seeded
        self._mix = list(s.mix.items())
        self.ids = itertools.count()
        self.id_prefix = f"{os.getpid():x}-{index}"

    def _session_model(self, session) -> str | None:
        return self.model_split.pick(session.id) if self.model_split is not None else self.model

    def request_model(self) -> str | None:
        """The model of the next request outside a session: the split's draw, or the one model."""
        return self.model_split.pick(None) if self.model_split is not None else self.model

    def next_session(self, first: bool):
        """(session, start turn): the process's sessions in turn, looping; a user's first one
        starts mid-trajectory under --mid-start."""
        assert self.sessions is not None, "a session workload's"
        sess = self.sessions.roots[next(self._next_session) % len(self.sessions.roots)]
        start = pick_start_turn(sess, self._start_rng) if first and self.settings.mid_start else 0
        return sess, start

    def pick_kind(self) -> str | None:
        """The kind of the next request under --mix (None: the --api's own)."""
        if not self._mix:
            return None
        r = self._mix_rng.random()
        for kind, share in self._mix:
            if r < share:
                return kind
            r -= share
        return None


def _users_state(env: Environment) -> UsersState:
    run = run_context(env)
    if run.users is None:
        run.users = UsersState(env)
    users = run.users
    assert isinstance(users, UsersState), "run.users is made here only"
    return users


class LLMUser(FastHttpUser):
    """The base of every llm-locust user: the run's settings, host, key and metrics, and `self.llm`
    (workload.scenario.LLMClient) for scenarios written in Python. It has no task of its own:
    StreamingUser replays the workload; a scenario defines its own @task methods."""

    abstract = True
    wait_time = constant(0)
    concurrency = 256  # one-greenlet-per-request replay shares this pool

    @property
    def _host_url(self) -> str:
        """The host: FastHttpUser refuses to make a user without one."""
        assert self.host is not None, "FastHttpUser requires a host"
        return self.host

    def on_start(self) -> None:
        env = self.environment
        self.ctx = _users_state(env)
        s = self.ctx.settings
        self.metrics = hub(env)
        self.metrics.slos = s.request_slos
        self.warmup_left = s.warmup_requests  # this user's first requests: warm-up (--warmup-requests)
        self.adapter = get_adapter(s.api) if s.api not in GRPC_APIS else None
        http_client = self.client.client.clientpool.get_client(self._host_url)
        http_client._connection_pool.connection_timeout = s.timeouts.connect
        self._http = http_client
        self.stream: Client = self.make_client(self._host_url)
        ctx = self.ctx
        self.send_path = SendPath(
            env,
            new_id=lambda: f"{ctx.id_prefix}-{next(ctx.ids)}",
            client_for=self._stream_for,
            router=ctx.router,
            session_header_names=tuple(ctx.session_headers),
        )
        self.llm = LLMClient(self)
        self._discover_model()
        self._discover_endpoint_models()

    def make_client(self, url: str) -> Client:
        """This user's client for the run's API at `url` (the host, or one of --endpoints): a
        StreamClient on its own connections, or a gRPC API's own channel (main_client). The one
        place the closed loop makes its main clients: a test's user returns a FakeClient here."""
        s = self.ctx.settings
        if self.adapter is None:  # a gRPC API: its own channel to the endpoint (as the dispatcher's)
            return main_client(s, url)
        http = self.client.client.clientpool.get_client(url)
        http._connection_pool.connection_timeout = s.timeouts.connect
        c = StreamClient(http, url, self.adapter, s.timeouts, headers=self.stream_headers(), limits=s.limits)
        c.cancel = self.ctx.cancel
        return c

    def stream_client(self, adapter) -> StreamClient:
        """A client for one API on this user's connections to the host."""
        s = self.ctx.settings
        c = StreamClient(
            self._http, self._host_url, adapter, s.timeouts, headers=self.stream_headers(adapter), limits=s.limits
        )
        c.cancel = self.ctx.cancel
        return c

    def json_client(self, adapter) -> StreamClient:
        """A client for one non-streaming kind (embeddings, rerank, score) on this user's connections."""
        s = self.ctx.settings
        return JSONClient(
            self._http, self._host_url, adapter, s.timeouts, headers=self.stream_headers(adapter), limits=s.limits
        )

    def _discover_model(self) -> None:
        ctx = self.ctx
        if ctx.model_checked:
            return
        with ctx.lock:
            if ctx.model_checked:
                return
            if self.adapter is None:  # a gRPC server: its GetModelInfo names what it serves
                grpc = self.stream
                assert isinstance(grpc, H2GrpcClient), "main_client's for a gRPC API"
                served = grpc.model_info().get("served_model_name") or ""
                models = [n.strip() for n in served.split(",") if n.strip()]
            else:
                models = fetch_models(self._host_url, self.stream_headers(), ctx.settings.timeouts, ctx.settings.limits)
            if models:
                ctx.model = models[0]
                self.metrics.info["model"] = ctx.model
                log.info("model from /v1/models: %s", ctx.model)
            ctx.model_checked = True

    def _discover_endpoint_models(self) -> None:
        """Several endpoints and several models: which endpoint serves which model (/v1/models),
        once per process, so a model's requests go only where it is served."""
        ctx = self.ctx
        if ctx.router is None or ctx.model_split is None or ctx.endpoint_models is not None:
            return
        with ctx.lock:
            if ctx.endpoint_models is None:
                s = ctx.settings
                ctx.endpoint_models = {
                    u: fetch_models(u, self.stream_headers(), s.timeouts, s.limits) for u in ctx.router.urls
                }
                ctx.router.serve(ctx.endpoint_models)

    def stream_headers(self, adapter=None) -> dict[str, str]:
        """The key as the API takes it (a Bearer token; Anthropic: x-api-key and its version)."""
        return request_headers(adapter or self.adapter, self.ctx.settings.api_key)

    def send(
        self,
        spec: RequestSpec,
        t_sched: float | None = None,
        source: str | None = None,
        *,
        name: str | None = None,
        keep_text: bool | None = None,
        stream: Client | None = None,
        session: str | None = None,
        ideal: int | None = None,
    ) -> RequestRecord:
        """Send one request and account for it (under `name` in Locust's table); returns its record.
        `session`: the session it belongs to (routing affinity, session headers); `ideal`: the prompt
        tokens an unbounded prefix cache could serve (loop.session_runner)."""
        take_turn()  # the streams' reads (and their work) first: a closed loop's send is due when this ends
        warmup = self.warmup_left > 0
        self.warmup_left -= warmup
        step = self.metrics.on_sent(warmup)
        return self.send_path.send(
            stream or self.stream,
            spec,
            t_sched,
            source,
            step,
            name=name,
            session=session,
            ideal=ideal,
            keep_text=keep_text,
            routed=stream is None,
        )

    def _stream_for(self, url: str) -> Client:
        """This user's client for one endpoint of a run with several (its own connections)."""
        streams: dict[str, Client] = self.__dict__.setdefault("_streams", {})
        c = streams.get(url)
        if c is None:
            c = streams[url] = self.make_client(url)
        return c

    def run_session(self, session, start_turn: int = 0) -> bool:
        """One whole session (its turns in order, its subagents in parallel), from this user."""
        runner = self.ctx.runner
        assert runner is not None, "a session workload's"
        return runner.run(session, self._session_send, start_turn=start_turn, timed=False)

    def _session_send(self, req: SessionRequest) -> RequestRecord:
        return self.send(
            req.spec,
            req.t_sched,
            req.source,
            session=req.session,
            ideal=req.ideal,
            keep_text=True if req.keep_text else None,
        )


class StreamingUser(LLMUser):
    """Closed loop over the workload: each user sends the next record as soon as its last request
    ended (the bundled locustfiles' user, and concurrency ladders')."""

    @task
    def next_request(self) -> None:
        ctx = self.ctx
        if ctx.sessions is not None:  # a user runs whole sessions, turn after turn
            first = not self.__dict__.get("_had_session")
            self._had_session = True
            session, start = ctx.next_session(first)
            self.run_session(session, start)
            return
        assert ctx.workload is not None, "a workload of records when it has no sessions"
        spec, source = ctx.workload.next_spec(ctx.request_model())
        spec, source, graded = maybe_graded(
            ctx, ctx.settings, spec, source, getattr(self.environment.runner, "worker_index", 0) or 0
        )
        kind = None if graded else self.ctx.pick_kind()
        if kind is None:
            self.send(spec, source=source, keep_text=True if graded else None)
        else:
            self._send_kind(kind, spec)
        if self.ctx.settings.think_time:
            gevent.sleep(self.ctx.settings.think_time)

    def _send_kind(self, kind: str, spec: RequestSpec) -> None:
        """A request of another kind (--mix) made from the record's text: its prompt embedded,
        its first sentence as a rerank query over the rest cut in four, or scored against it."""
        text = (
            spec.prompt
            if spec.prompt is not None
            else " ".join(m.get("content", "") for m in spec.messages or [] if isinstance(m.get("content"), str))
        )
        text = text or "empty"
        if kind == "embeddings":
            self.llm.embed([text], model=spec.model, name="embeddings")
            return
        cut = max(len(text) // 4, 1)
        docs = [text[i : i + cut] for i in range(0, len(text), cut)][:4] or [text]
        if kind == "rerank":
            self.llm.rerank(text[:200], docs, model=spec.model, name="rerank")
        else:
            self.llm.score(text[:200], docs[0], model=spec.model, name="score")


def scenario_failed(user_instance, exception, tb=None, **_kw) -> None:
    """A scenario's task raised: a counted failure row in Locust's table (the traceback is in
    Locust's exceptions already), and the user goes on with its next task. Locust names the
    task set as `user_instance`; its `user` is the user."""
    user = getattr(user_instance, "user", user_instance)
    if not isinstance(user, LLMUser):
        return
    user.environment.events.request.fire(
        request_type="SCENARIO",
        name=f"scenario error: {type(user).__name__}",
        response_time=0.0,
        response_length=0,
        response=None,
        context={},
        exception=exception,
        url=None,
    )
