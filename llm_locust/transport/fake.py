"""A socket-free `Client` (transport/client.py): a server played from a script, in process.

`FakeClient.send` makes its RequestRecord as a real client does (the send's times, a 200 head,
one time per token, the count from the chunks, the finish reason, the text when kept) and ends it
through the same `finish_record`, but no byte leaves the process: the tokens come from a `Script`,
at times the script fixes from the send (t_sent + first_token_s + k * token_gap_s), and the send
sleeps (gevent) until each, so that a run on it takes the time it says and a stop cancels what is
in flight, as on a real server. TTFT is then first_token_s and every ITL token_gap_s, whatever the
machine's load: what a test of the loops, the send path and the figures can compare exactly.

It counts what it was asked (`sends`) and keeps every record it made (`records`), so a test can
tell a request that reached the client from one that a loop dropped or a send path went around.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent import GreenletExit

from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.protocols.base import RequestSpec, StreamState
from llm_locust.transport.bodies import finish_record


@dataclass(frozen=True)
class Script:
    """What the fake server does with every request: when its first token comes after the send,
    the gap between the next ones, and how many (the spec's max_tokens when it names one)."""

    first_token_s: float = 0.02
    token_gap_s: float = 0.002
    tokens: int = 8  # a spec without max_tokens gets these many

    def count(self, spec: RequestSpec) -> int:
        return spec.max_tokens if spec.max_tokens else self.tokens

    def times(self, t_sent: float, n: int) -> list[float]:
        """The tokens' arrival times for a send at t_sent: fixed by the script, not measured."""
        return [t_sent + self.first_token_s + k * self.token_gap_s for k in range(n)]


class FakeClient:
    """A `Client` answering from a `Script`, with no socket (see the module's docstring)."""

    def __init__(self, script: Script | None = None, api: str = "openai-chat", keep_text: bool = False) -> None:
        self.script = script or Script()
        self.api = api
        self.keep_text = keep_text
        self.sends = 0  # send() calls
        self.records: list[RequestRecord] = []  # every record made, in the order of the sends

    def send(
        self,
        spec: RequestSpec,
        request_id: str,
        *,
        t_sched: float | None = None,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        step: int = 0,
        keep_text: bool | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Client.send's contract: the scripted reply, timed from the send; a kill ends it as
        CANCELLED, handed to `on_cancel`, and GreenletExit propagates."""
        self.sends += 1
        now = time.perf_counter()
        rec = RequestRecord(
            request_id=request_id,
            api=self.api,
            t_sched=now if t_sched is None else t_sched,
            t_sent=now,
            wall_sent=time.time(),
            requested_out=spec.max_tokens if spec.force_length else None,
            step=step,
        )
        self.records.append(rec)
        if on_record is not None:
            on_record(rec)
        state = StreamState(self.keep_text if keep_text is None else keep_text)
        rec.t_written = rec.t_headers = now
        rec.connect, rec.new_connection, rec.status = 0.0, False, 200
        n = self.script.count(spec)
        try:
            for t in self.script.times(now, n):
                _sleep_until(t)
                rec.chunk_times.append(t)
                if rec.t_first is None:
                    rec.t_first = rec.t_first_content = t
                if state.keep_text:
                    state.text.append(f"t{len(rec.chunk_times)} ")
        except GreenletExit:
            rec.outcome, rec.error = Outcome.CANCELLED, "test stopped while in flight"
            rec.t_end = time.perf_counter()
            finish_record(rec, state)
            if on_cancel is not None:
                on_cancel(rec)
            raise
        state.finish_reason = "length" if n == spec.max_tokens else "stop"
        rec.t_end = rec.chunk_times[-1] if rec.chunk_times else now
        finish_record(rec, state)
        return rec


def _sleep_until(deadline: float) -> None:
    """gevent's timers may fire a little early: sleep again until the clock has passed `deadline`,
    so that a token's scripted time is never in the future when it is stamped."""
    while (dt := deadline - time.perf_counter()) > 0:
        gevent.sleep(dt)
