"""The one send path: what every request goes through, whoever decided when to send it.

The closed loop (runtime/closed_loop.py `LLMUser.send`), the open loop (runtime/dispatcher.py
`Dispatcher._send`) and sessions (loop/session_runner.py, through either) differ only in
*when* they send and on which connections. What a request is and how it is recorded is decided
here, once: its id, its endpoint (the router's pick, counted started and finished), the session
headers, whether its reply's text is kept, the facts copied into its record (source, session,
ideal cached tokens, model, endpoint, when a held send was released) and its accounting
(`account`: the hub's figures and Locust's table). A per-request feature added here is one
that a ladder and a replay both have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from locust.env import Environment

from llm_locust.metrics.records import Outcome, RequestRecord, work_of
from llm_locust.protocols import CHAT_APIS
from llm_locust.protocols.base import RequestSpec
from llm_locust.protocols.causes import cause_of, normalise
from llm_locust.runtime.context import UNSET, run_context
from llm_locust.runtime.hub import hub
from llm_locust.safe.masking import mask
from llm_locust.safe.terminal import terminal_safe
from llm_locust.transport.client import Client
from llm_locust.transport.turns import take_turn
from llm_locust.workload.graded import grade_record
from llm_locust.workload.routing import Router, session_headers
from llm_locust.workload.specs import StructuredCheck, wants_text


@dataclass
class SendPath:
    """One process's sender (or one closed-loop user's): its environment, router and ids."""

    env: Any  # Locust's Environment: where `account` folds the record
    new_id: Callable[[], str]  # the next request id of this sender
    client_for: Callable[[str], Client]  # the sender's client for one endpoint the router picked
    router: Router | None = None  # several endpoints: which one each request goes to
    session_header_names: tuple[str, ...] = ()  # headers that carry the session id (router affinity)

    def send(
        self,
        client: Client,
        spec: RequestSpec,
        t_sched: float | None,
        source: str | None,
        step: int,
        *,
        name: str | None = None,
        session: str | None = None,
        ideal: int | None = None,
        keep_text: bool | None = None,
        released: float | None = None,
        routed: bool = True,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Send `spec` on `client` (or, with a router and `routed`, on the client of the endpoint
        it picks), due at `t_sched`, in ladder step `step`; account for it under `name` (Locust's
        table; default the API's name) when it ends, cancelled or not. The client is any
        `Client` (transport/client.py: its send's arguments and promises). `keep_text`: keep the
        reply's text (None: the client's own default); a structured-output request always keeps
        it, for its check. `on_record`: handed the record as soon as the client makes it."""
        url = None
        router = self.router
        if router is not None and routed:
            url = router.pick(session, spec.model)
            client = self.client_for(url)
            router.started(url)
        if session is not None and self.session_header_names:
            spec.headers = {**(spec.headers or {}), **session_headers(self.session_header_names, session)}

        def done(rec: RequestRecord) -> None:
            carry(spec, rec)
            rec.source, rec.session, rec.model = source, session, spec.model
            rec.ideal_cached = ideal if ideal is not None else spec.ideal_cached
            rec.t_released = released
            if url is not None and router is not None:  # a URL is picked by the router only
                rec.endpoint = url
                router.finished(url, rec.ok, rec.outcome is Outcome.CONNECT_ERROR)
            account(self.env, rec, name)

        if wants_text(spec):
            keep_text = True  # a structured-output reply is checked against its schema
        rec = client.send(  # the Client protocol (transport/client.py): http, grpc_h2, grpc_io or the fake
            spec, self.new_id(), t_sched=t_sched, on_cancel=done, step=step, keep_text=keep_text, on_record=on_record
        )
        try:
            take_turn()  # its accounting after the streams' reads when the loop has been busy (transport/turns.py)
        finally:
            done(rec)  # killed while it waited (a stop): counted all the same
        return rec


class LLMFailure(Exception):
    """Shown in Locust's failure table: '<outcome>: <first error text>'."""


# Ended by us, not by the server: cancelled at a stop, or by the client on purpose (--cancel)
_NOT_FAILED = (Outcome.CANCELLED, Outcome.CLIENT_CANCELLED)


def account(env: Environment, rec: RequestRecord, name: str | None = None) -> None:
    """Fold a finished request into the process's metrics and into Locust's own table.

    A failure gets its cause from the server's own words (protocols.causes; the record's error keeps
    them exactly); Locust's failure row reads '<outcome>: <cause>: <error, numbers as N>', so errors
    that differ only in numbers (token counts, sizes) share one row."""
    if rec.error:  # a server may echo the key, or send escapes: masked and made printable before any output
        rec.error = terminal_safe(mask(rec.error))
    if not rec.ok and rec.cause is None and rec.outcome not in _NOT_FAILED:
        rec.cause = cause_of(rec.status, rec.error)  # from the server's own words, which rec.error keeps
    grade_record(rec)  # --graded: a graded item's reply, graded (workload.graded)
    _note_workload(env, rec)
    hub(env).on_done(rec)
    if rec.outcome in _NOT_FAILED:
        return  # not a failure of the server: counted in our figures, kept out of Locust's table
    failure = None
    if not rec.ok:
        text = normalise(rec.error)
        failure = LLMFailure(
            f"{rec.outcome.value}: {rec.cause}: {text}" if rec.cause else f"{rec.outcome.value}: {text}"
        )
    env.events.request.fire(
        request_type="POST",
        name=name or rec.api,
        response_time=(rec.e2e or 0.0) * 1000.0,
        response_length=rec.n_out,
        response=None,
        context={},
        exception=failure,
        start_time=rec.wall_sent,
        url=None,
    )


def _structured_check(env: Environment) -> StructuredCheck | None:
    """The run's structured-output check (--response-format), made once per process; None without one."""
    run = run_context(env)
    if run.structured is UNSET:
        check = None
        try:
            path = run.settings.response_format
        except Exception:  # noqa: BLE001 - no settings (a bare Environment in tests): no check
            path = ""
        if path:
            check = StructuredCheck.from_file(path)
        run.structured = check
    return run.structured


def carry(spec: RequestSpec, rec: RequestRecord) -> None:
    """What the request carried, from its spec onto its record's workload facts (rec.work): the
    overlong mix's mark (counted apart: metrics/aggregate.py overlong) and the images and audio it
    sent (--images, --audio, a trace's media counts)."""
    if spec.overlong:
        work_of(rec).overlong = True
    if spec.media is not None:
        w = work_of(rec)
        w.images, w.image_bytes, w.audio, w.audio_bytes = spec.media


def _note_workload(env: Environment, rec: RequestRecord) -> None:
    """What --response-format adds to a record's workload facts (rec.work): for a reply kept for
    it, whether its structured output parsed as JSON and met the schema."""
    if rec.text is not None and rec.ok and rec.api in CHAT_APIS:
        check = _structured_check(env)
        if check is not None:
            w = work_of(rec)
            w.json_parsed, w.json_valid = check(rec.text)
