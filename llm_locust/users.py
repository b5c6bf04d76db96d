"""Locust users that stream from an LLM server and time every token.

`LLMUser` is a FastHttpUser: Locust's host, connection pool and settings apply. Each request
goes through `StreamClient` (llm_locust.client), becomes one RequestRecord, folds into the
process's MetricsHub, and fires Locust's own request event with E2E as response_time and
output tokens as response_length, so Locust's table means something.
"""

from __future__ import annotations

import itertools
import logging
import os

import gevent.lock
from locust import FastHttpUser, constant, task
from locust.env import Environment

from . import plugin  # noqa: F401  (registers options and listeners)
from .client import StreamClient
from .metrics.cluster import hub
from .options import Settings
from .protocols import get_adapter
from .protocols.base import RequestSpec
from .protocols.openai import parse_models
from .records import Outcome, RequestRecord
from .workload import PromptSynth, TraceRecord, load_trace

log = logging.getLogger(__name__)

OPENAI_APIS = ("openai-chat", "openai-completions")
DEFAULT_MAX_TOKENS = 128


class LLMFailure(Exception):
    """Shown in Locust's failure table: '<outcome>: <first error text>'."""


class Workload:
    """The records this process sends, in order, looping; shared by the process's users."""

    def __init__(self, records: list[TraceRecord], settings: Settings, offset: int = 0) -> None:
        self.records = records
        self.settings = settings
        self.synth = PromptSynth(settings.seed)
        self._next = itertools.count(offset)

    def next_spec(self, model: str | None) -> RequestSpec:
        rec = self.records[next(self._next) % len(self.records)]
        s = self.settings
        max_tokens = s.max_tokens or rec.output_tokens or DEFAULT_MAX_TOKENS
        if s.max_tokens_cap:
            max_tokens = min(max_tokens, s.max_tokens_cap)
        prompt = rec.prompt
        if prompt is None and rec.messages is None:
            prompt = self.synth.prompt(rec.input_tokens or 1)
        return RequestSpec(
            model=model or None,
            prompt=prompt,
            messages=rec.messages,
            max_tokens=max_tokens,
            force_length=s.force_length,
            continuous_usage=s.continuous_usage,
        )


class _ProcessContext:
    """Per-process state set up once at test start: settings, workload, model name."""

    def __init__(self, env: Environment) -> None:
        self.settings = Settings.from_options(env.parsed_options)
        records = load_trace(self.settings.trace)
        index = getattr(env.runner, "worker_index", 0) or 0
        # spread workers over the trace so they do not all send the same records first
        self.workload = Workload(records, self.settings, offset=(index * 7919) % len(records))
        self.model: str | None = self.settings.model or None
        self.model_checked = bool(self.model) or self.settings.api not in OPENAI_APIS
        self.lock = gevent.lock.Semaphore()
        self.ids = itertools.count()
        self.id_prefix = f"{os.getpid():x}-{index}"


def _context(env: Environment) -> _ProcessContext:
    ctx = getattr(env, "llm_context", None)
    if ctx is None:
        ctx = env.llm_context = _ProcessContext(env)  # type: ignore[attr-defined]
    return ctx


class LLMUser(FastHttpUser):
    """Closed loop: each user sends the workload's next request as soon as its last one ended."""

    abstract = True
    wait_time = constant(0)
    concurrency = 256  # one-greenlet-per-request replay shares this pool

    def on_start(self) -> None:
        env = self.environment
        self.ctx = _context(env)
        s = self.ctx.settings
        self.metrics = hub(env)
        self.metrics.slos = s.slos
        self.adapter = get_adapter(s.api)
        http_client = self.client.client.clientpool.get_client(self.host)
        http_client._connection_pool.connection_timeout = s.timeouts.connect
        headers = {"Authorization": f"Bearer {s.api_key}"} if s.api_key else {}
        self.stream = StreamClient(http_client, self.host, self.adapter, s.timeouts, headers=headers)
        self._discover_model()

    def _discover_model(self) -> None:
        ctx = self.ctx
        if ctx.model_checked:
            return
        with ctx.lock:
            if ctx.model_checked:
                return
            try:
                r = self.client.get("/v1/models", name="/v1/models", headers=self.stream_headers())
                models = parse_models(r.content or b"") if r.status_code == 200 else []
            except Exception as e:  # noqa: BLE001 - any failure here only costs the model name
                log.warning("could not list models at %s/v1/models: %s", self.host, e)
                models = []
            if models:
                ctx.model = models[0]
                self.metrics.info["model"] = ctx.model
                log.info("model from /v1/models: %s", ctx.model)
            else:
                log.warning("no model name given and none listed by the server; sending requests without one")
            ctx.model_checked = True

    def stream_headers(self) -> dict[str, str]:
        key = self.ctx.settings.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    @task
    def next_request(self) -> None:
        self.send(self.ctx.workload.next_spec(self.ctx.model))

    def send(self, spec: RequestSpec, t_sched: float | None = None) -> RequestRecord:
        """Send one request and account for it; returns its record."""
        ctx = self.ctx
        step = self.metrics.on_sent()
        rid = f"{ctx.id_prefix}-{next(ctx.ids)}"
        rec = self.stream.send(spec, rid, t_sched, on_cancel=self._done, step=step)
        self._done(rec)
        return rec

    def _done(self, rec: RequestRecord) -> None:
        self.metrics.on_done(rec)
        if rec.outcome is Outcome.CANCELLED:
            return  # not a failure of the server: counted in our figures, kept out of Locust's table
        e2e = rec.e2e or 0.0
        self.environment.events.request.fire(
            request_type="POST",
            name=rec.api,
            response_time=e2e * 1000.0,
            response_length=rec.n_out,
            response=None,
            context={},
            exception=None if rec.ok else LLMFailure(f"{rec.outcome.value}: {rec.error}"),
            start_time=rec.wall_sent,
            url=self.host,
        )
