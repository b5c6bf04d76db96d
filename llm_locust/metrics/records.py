"""The plain data types every stage speaks in.

A request is described by one `RequestRecord`: the moments of the metrics spec (all
`time.perf_counter()` seconds on the worker that sent it), the arrival times of its
token-bearing chunks, its token counts with their sources, and exactly one outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

# The step of a closed loop's or a replay's warm-up requests (--run-warmup, --warmup-requests): sent,
# counted in their own figures (results `warmup`), left out of the run's. A ladder's warm-ups are
# -k, step k's; a run without steps measures in step 0.
WARMUP_STEP = -1_000_000


class Outcome(StrEnum):
    OK = "ok"
    HTTP_ERROR = "http_error"
    STREAM_ERROR = "stream_error"
    TRUNCATED = "truncated"
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    CANCELLED = "cancelled"  # in flight when the test (or its step) stopped
    # aborted by the client on purpose (--cancel, workload.cancel): not a failure, not in latencies
    CLIENT_CANCELLED = "client_cancelled"


OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)
# What the server may be blamed for: every outcome but ok and the client's own cancellation (a
# stop's `cancelled` stays here for the places that list it apart by name).
FAILURE_KINDS: tuple[str, ...] = tuple(o.value for o in Outcome if o not in (Outcome.OK, Outcome.CLIENT_CANCELLED))

# Where a token count came from, most trusted first (metrics spec, "Output tokens").
SOURCE_USAGE = "usage"
SOURCE_CONTINUOUS = "continuous_usage"
SOURCE_CHUNKS = "chunks"  # estimate: one token per token-bearing chunk
SOURCE_PROMPT = "prompt"  # input count the prompt was built with
# the server's output count was far from the count read from the stream (protocols.base
# count_believed) and was not used: N_out is the count read (the chunks, a gRPC reply's token ids)
SOURCE_REJECTED = "usage_rejected"


@dataclass(slots=True)
class WorkFacts:
    """What the workload made of one request and what the client checked of its answer, kept apart
    from what the server said about it (RequestRecord.extra, whose keys vary by server): the
    aggregate counts these by name, and the record log writes them as ``work``."""

    overlong: bool = False  # sent over the model's context on purpose (--overlong-share)
    images: int = 0  # images it carried (--images, a trace's image counts) and their bytes
    image_bytes: int = 0
    audio: int = 0  # audio clips it carried and their bytes
    audio_bytes: int = 0
    json_parsed: bool | None = None  # --response-format: the answer parsed as JSON (None: not checked)
    json_valid: bool | None = None  # ... and met the schema
    graded: bool | None = None  # a graded prompt answered right (None: not graded; --graded)
    # the client drew a cancellation for it (--cancel); it ended client_cancelled unless it ended first
    cancel_drawn: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The facts that were set (those not at their default), for the record log."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) != f.default}


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. Times are perf_counter seconds; None = never happened."""

    request_id: str
    api: str
    t_sched: float
    t_sent: float
    wall_sent: float  # time.time() at t_sent: places the request on the run's timeline
    t_headers: float | None = None
    # when the sender's cap (--max-in-flight, --max-prefill) let a request it held back go (None:
    # not held): the client's own lateness is counted from here (the send_delay validity check)
    t_released: float | None = None
    # request phases (docs/metrics.md, "Request phases"): when the request's bytes were all
    # written (None: not timed apart from t_sent, e.g. gRPC, whose t_sent is after its write);
    # the seconds spent opening its connection before t_sent (DNS, TCP, TLS; 0.0 on a kept-alive
    # one; None: not measured) and whether it was opened for this request (None: not said)
    t_written: float | None = None
    connect: float | None = None
    new_connection: bool | None = None
    t_first: float | None = None
    t_first_content: float | None = None
    t_first_tool: float | None = None  # first generated tool-call token (function name or arguments)
    t_end: float | None = None
    # Arrival time of each token-bearing chunk, and its token count n_k (resolved per spec).
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    n_out: int = 0
    n_out_source: str = SOURCE_CHUNKS
    n_in: int | None = None
    n_in_source: str | None = None
    requested_out: int | None = None
    outcome: Outcome = Outcome.OK
    status: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    step: int = 0
    extra: dict | None = None  # what the server said about the request (llama.cpp timings, TGI details)
    work: WorkFacts | None = None  # what the workload made of it (images, overlong, graded ...)
    text: str | None = None  # the output text, only when asked for (conversations, tests)
    source: str | None = None  # the trace record it replays ("file:line")
    # why it failed, from the server's own words (protocols.causes: overlong, overloaded, oom);
    # None when ok or unsaid. `error` keeps the server's exact text.
    cause: str | None = None
    # prompt-cache reuse: the prompt tokens the server says it served from its cache (usage's
    # cached_tokens, Anthropic's cache_read_input_tokens, llama.cpp's timings.cache_n; None: unsaid),
    # and what an unbounded cache could have served, from the session history and the trace's
    # hash ids (set by the sender; None: not known)
    n_cached: int | None = None
    ideal_cached: int | None = None
    endpoint: str | None = None  # the base URL it went to, when the run has several
    model: str | None = None  # the model it asked for, when the run splits traffic over several
    session: str | None = None  # the session (conversation) it belongs to
    # whose clock timed its reads: "kernel" (every read stamped with the kernel's receive time,
    # SO_TIMESTAMPNS: plain TCP on Linux), "user" (some read timed as it returned: TLS, other
    # systems), None (not said). The client-validity rule judges the loop lag only where reads
    # were not all kernel-stamped (metrics/aggregate.py client_checks)
    clock: str | None = None
    # how long (s) the newest data of the read that brought its first token had waited in the
    # socket when the read returned, by its kernel receive time (transport/reads.py WAIT_READS;
    # None: not measured). Over WAITED_LONG, the client was not reading: a first token read with
    # the second is then its lateness, not the server's writing them together
    first_wait: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def t_last(self) -> float | None:
        return self.chunk_times[-1] if self.chunk_times else None

    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_sent

    @property
    def e2e(self) -> float | None:
        return None if self.t_end is None else self.t_end - self.t_sent

    @property
    def schedule_lag(self) -> float:
        return self.t_sent - self.t_sched

    @property
    def tpot(self) -> float | None:
        if self.n_out < 2 or self.t_first is None or not self.chunk_times:
            return None
        return (self.chunk_times[-1] - self.t_first) / (self.n_out - 1)

    def phases(self) -> tuple[float | None, float | None, float, float, float] | None:
        """(connect, send, wait, first_token, receive) in seconds; None before a first token or
        without a head. connect = `connect` (before t_sent; None: not measured), send = t_written
        - t_sent (None: not timed apart), wait = t_headers - t_written (or - t_sent), first_token
        = t_first - t_headers, receive = t_end - t_first. The stamps are clamped into order (a
        kernel receive stamp may fall before the write returned), so send + wait + first_token
        is TTFT exactly, and with receive, E2E."""
        t_first, t_head = self.t_first, self.t_headers
        if t_first is None or t_head is None:
            return None
        t_head = min(t_head, t_first)
        t_written = self.t_written
        send: float | None = None
        if t_written is None:
            t_written = self.t_sent
        else:
            t_written = min(max(t_written, self.t_sent), t_head)
            send = t_written - self.t_sent
        t_end = t_first if self.t_end is None else max(self.t_end, t_first)
        return self.connect, send, t_head - t_written, t_first - t_head, t_end - t_first

    @property
    def length_mismatch(self) -> bool:
        return self.requested_out is not None and self.ok and self.n_out != self.requested_out


def work_of(rec: RequestRecord) -> WorkFacts:
    """The record's workload facts, made when the first is set."""
    if rec.work is None:
        rec.work = WorkFacts()
    return rec.work
