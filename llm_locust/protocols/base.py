"""What every protocol adapter provides. Adapters know nothing of Locust or of sockets.

The per-chunk hot path is: decoder.feed(bytes) -> payloads; adapter.feed(payload, state) -> kind.
No per-token objects: an adapter updates one mutable `StreamState` per request and returns
an int saying whether the event carried output tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from llm_locust.metrics.records import SOURCE_CHUNKS, SOURCE_CONTINUOUS, SOURCE_REJECTED, SOURCE_USAGE

# Return values of Adapter.feed
NO_TOKEN = 0  # role-only, empty text, usage-only, keep-alive, end marker, error
CONTENT = 1  # carries visible output text
REASONING = 2  # carries reasoning text only
TOOL_CALL = 3  # carries generated tool-call tokens (function name, argument JSON): output, no visible text


class ProtocolError(ValueError):
    """A payload that is not what the protocol allows (e.g. invalid JSON, a field of the wrong
    JSON type, a negative token count, an event over the size limit)."""


class UnknownAPI(ValueError):
    pass


@dataclass(slots=True)
class Timeouts:
    """A request's time limits in seconds (the client enforces them)."""

    connect: float = 10.0  # TCP (and TLS) connect
    no_progress: float = 60.0  # no byte received for this long
    total: float = 600.0  # whole request: from its send (as E2E) to the end of the body


# The header the preflight's requests carry (transport/preflight.py): they ask an endpoint whether it
# exists with a request no server generates from; `trace record` forwards them and records no line.
PROBE_HEADER = "X-LLM-Locust-Probe"

# What the client accepts from a server before it calls the reply broken (memory stays bounded
# whatever a server sends). Module constants so the settings layer can offer them as options.
MAX_HEAD_BYTES = 64 * 1024  # the response's status line and headers (interim 1xx ones included)
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one SSE event or one NDJSON line
MAX_BODY_BYTES = 8 * 1024 * 1024  # a whole non-streaming reply (e.g. /v1/models)
# A token count a server reports (usage) above this is not believed: a protocol error.
MAX_TOKEN_COUNT = 1_000_000_000
# A server's output token count (usage, continuous usage) is believed only near the count read
# from the stream (the token-bearing chunks; the token ids of a gRPC reply): at most USAGE_FACTOR
# times it (or the length the request asked for, when it forced one) plus USAGE_SLACK, and at least
# it less USAGE_SLACK, divided by USAGE_FACTOR. Honest
# servers put several tokens in a chunk (speculative decoding: up to k + 1 a step; vLLM merges the
# deltas a late reader has not taken), hence a factor and not equality; a count past it is a
# broken or lying server (999999999 tokens on 2-token replies), and is not used (docs/metrics.md).
USAGE_FACTOR = 8
USAGE_SLACK = 16


@dataclass(slots=True)
class Limits:
    """Sizes in bytes the client accepts from a server; past them a reply is a classified failure."""

    head_bytes: int = MAX_HEAD_BYTES
    event_bytes: int = MAX_EVENT_BYTES
    body_bytes: int = MAX_BODY_BYTES


@dataclass(slots=True)
class RequestSpec:
    """What to ask for, independent of the wire format."""

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    force_length: bool = False  # ask the server to emit exactly max_tokens (ignore_eos/min_tokens)
    continuous_usage: bool = False  # vLLM stream_options.continuous_usage_stats
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged last into the request body
    headers: dict[str, str] | None = None  # extra request headers (a router's session key)
    # the prompt tokens an unbounded prefix cache would have served, from the record's prefix
    # blocks (workload.sessions.IdealCache): carried to the request's record, never sent
    ideal_cached: int | None = None
    # what the request carries that its record counts (workload.specs builds them, runtime/send.py
    # puts them on the record), never sent: the overlong mix's mark, and (images, image bytes,
    # audio clips, audio bytes) when it carries media
    overlong: bool = False
    media: tuple[int, int, int, int] | None = None


class StreamState:
    """Everything an adapter learned from one response stream."""

    __slots__ = (
        "keep_text",
        "text",
        "reasoning",
        "usage_in",
        "usage_out",
        "usage_cached",
        "cont_out",
        "cont_tokens",
        "cont_broken",
        "read_out",
        "finish_reason",
        "error",
        "done",
        "extra",
        "aux",
    )

    def __init__(self, keep_text: bool = False) -> None:
        self.keep_text = keep_text
        self.text: list[str] = []  # visible output pieces (only when keep_text)
        self.reasoning: list[str] = []  # reasoning pieces (only when keep_text)
        self.usage_in: int | None = None  # server's prompt token count
        self.usage_out: int | None = None  # server's final completion token count
        # prompt tokens the server says it served from its prefix cache (usage's cached_tokens,
        # Anthropic's cache_read_input_tokens, llama.cpp's timings.cache_n); None: unsaid
        self.usage_cached: int | None = None
        self.cont_out: int | None = None  # last running completion count (continuous usage)
        # n_k per token-bearing chunk, from continuous usage deltas; only filled when every
        # token-bearing chunk so far carried a running count.
        self.cont_tokens: list[int] = []
        # set (by the adapter) once a token-bearing chunk came without a usable running count
        self.cont_broken = False
        # output tokens the client counted itself (a gRPC reply's token ids); None: only chunks
        self.read_out: int | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None  # error text from inside a 200 stream
        self.done = False  # the protocol's end marker (or final event) was seen
        self.extra: dict[str, Any] = {}  # e.g. llama.cpp "timings", TGI "details"
        # the adapter's own per-stream working value (e.g. SGLang's cumulative text so far);
        # nothing outside the adapter reads it
        self.aux: Any = None


class Adapter(Protocol):
    name: str  # e.g. "openai-chat"
    framing: str  # "sse" or "ndjson"
    # True when the protocol has an explicit end ([DONE], a final event): a body that ends
    # before it is a truncated stream. False: a cleanly ended body is a complete stream.
    end_marker: bool

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        """The path (with leading '/') and the JSON body for a streaming request."""
        ...

    def feed(self, payload: bytes, state: StreamState) -> int:
        """Read one event payload; return NO_TOKEN, CONTENT or REASONING.

        Raises ProtocolError, and nothing else, for any payload a server may send: invalid
        JSON or UTF-8, a field of the wrong JSON type, a token count that is not a plausible
        non-negative integer."""
        ...

    # Optional (not part of the structural type, so existing adapters need nothing):
    #   def headers(self, api_key: str | None) -> dict[str, str]
    # the authentication and protocol headers of every request to this API (e.g. Anthropic's
    # x-api-key and anthropic-version). Callers use request_headers(adapter, api_key), which
    # falls back to a Bearer token.


def request_headers(adapter: Any, api_key: str | None) -> dict[str, str]:
    """The headers an API's requests carry, for an API key (or None): the adapter's own
    `headers(api_key)` when it has one, else `Authorization: Bearer KEY` (none without a key).
    For streaming requests, model listing and probes alike; called once per client, not per
    request."""
    hook = getattr(adapter, "headers", None)
    if hook is not None:
        return dict(hook(api_key))
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def count_believed(server: int, read: int, asked: int | None = None) -> bool:
    """Whether a server's output token count is near enough the count read from the stream to be
    used (USAGE_FACTOR, USAGE_SLACK): read / F - S <= server <= max(F * read, asked) + S, `asked`
    the length the request asked the server for (None: not forced). A server may send many tokens
    in one delta (vLLM sends a required tool call whole, once parsed), but never more than asked."""
    upper = max(USAGE_FACTOR * read, asked or 0) + USAGE_SLACK
    return server <= upper and read <= USAGE_FACTOR * server + USAGE_SLACK


def resolve_tokens(state: StreamState, n_chunks: int, asked: int | None = None) -> tuple[int, str, list[int]]:
    """Output token count, its source, and n_k for each of the n_chunks token-bearing chunks.

    Metrics spec order of trust: server usage, then continuous usage, then one per chunk; a
    server count far from what was read (count_believed) is not used: the count read is, with
    the source SOURCE_REJECTED (the run is flagged and its gates fail).
    """
    read = n_chunks if state.read_out is None else state.read_out
    own = state.read_out is not None and len(state.cont_tokens) == n_chunks  # n_k the client counted
    cont = len(state.cont_tokens) == n_chunks and n_chunks > 0
    if (state.usage_out is not None and not count_believed(state.usage_out, read, asked)) or (
        cont and not own and not count_believed(sum(state.cont_tokens), read, asked)
    ):
        return read, SOURCE_REJECTED, list(state.cont_tokens) if own else [1] * n_chunks
    if cont:
        per_chunk = list(state.cont_tokens)
        total = state.usage_out if state.usage_out is not None else sum(per_chunk)
        return total, (SOURCE_USAGE if state.usage_out is not None else SOURCE_CONTINUOUS), per_chunk
    if state.usage_out is not None:
        total = state.usage_out
        if n_chunks == 0:
            return total, SOURCE_USAGE, []
        surplus = total - n_chunks
        if surplus <= 0:
            return total, SOURCE_USAGE, [1] * n_chunks
        base, rem = divmod(surplus, n_chunks)
        # spread the surplus evenly; the remainder goes to the first chunks
        return total, SOURCE_USAGE, [1 + base + (1 if i < rem else 0) for i in range(n_chunks)]
    return n_chunks, SOURCE_CHUNKS, [1] * n_chunks
