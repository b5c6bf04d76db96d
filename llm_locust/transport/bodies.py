"""Body readers: how a reply's body is read once its head is in (StreamClient._exchange).

The connection's exchange (transport/http.py) writes the request, reads the head and classifies
what goes wrong on the connection; the body is read by one of these, chosen when the client is
made (StreamClient's `body`, `token_reads` and `pump` options), all with one interface:

  - `SSEReader`: the general way. Every read goes through llhttp (HTTP/1.1 chunked framing), the
    stream's decoder (SSE or NDJSON) and the adapter's `feed`, and each event decoded from a
    read gets that read's arrival time. It is the reference the others are checked against.
  - `TokenReader`: the same, and token events told without parsing once the stream's shape is
    known (protocols/token_reads.py): an event made of the same bytes as the last token event
    around another plain text is counted without the adapter (a burst's many events a read, in
    runs at once);
    a read that is exactly whole chunks of such events is counted without llhttp or the decoder,
    and such reads are taken by the process's pump (transport/pump.py), many streams a wake-up.
    Anything else goes the general way, in order, with the same result.
  - `JSONReader`: a reply that is one JSON document (embeddings, rerank, score), read whole up to
    a limit and parsed by the adapter.

Every reader bounds what it holds (an event's bytes, framing without body bytes, a JSON body),
lets the read function's yields and the watchdog end it on time, and turns anything the server
sends into a classified outcome (`Ended`), never another exception.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from geventhttpclient.response import HTTPParseError, HTTPSocketResponse

from llm_locust.metrics.records import SOURCE_USAGE, Outcome, RequestRecord
from llm_locust.protocols import make_decoder, printable
from llm_locust.protocols.base import (
    CONTENT,
    REASONING,
    TOOL_CALL,
    Adapter,
    Limits,
    ProtocolError,
    RequestSpec,
    StreamState,
    resolve_tokens,
)
from llm_locust.protocols.embeddings import Reply
from llm_locust.protocols.sse import SSEDecoder
from llm_locust.protocols.token_reads import event_matcher, events_matcher, token_read_matcher, whole_chunks
from llm_locust.transport.reads import Read

log = logging.getLogger(__name__)

# Templates a stream may take for its token events without one of them matching an event.
TEMPLATE_TRIES = 3
# A read of at least this many events (a burst's) is told by its template at once, all but its
# last BULK_TAIL events (_Stream.told_at_once).
BULK_EVENTS = 16
BULK_TAIL = 4


class Ended(Exception):
    """The request ended abnormally with this outcome and text."""

    def __init__(self, outcome: Outcome, text: str) -> None:
        super().__init__(text)
        self.outcome = outcome
        self.text = text


class BodyReader(Protocol):
    """Reads a reply's body (the head is in: rec.t_headers is set) into the record and state;
    raises Ended for an abnormal end; the connection's exchange classifies socket errors."""

    def read(self, resp: Any, read: Read, rec: RequestRecord, state: StreamState, spec: RequestSpec) -> None: ...

    def finish(self, rec: RequestRecord, state: StreamState) -> None: ...


def finish_record(rec: RequestRecord, state: StreamState) -> None:
    """A stream's record completed from what the stream said: its counts (resolve_tokens), finish
    reason, server facts, and the text when it was kept. Every stream client ends a request here
    (the HTTP one, both gRPC ones)."""
    rec.n_out, rec.n_out_source, rec.chunk_tokens = resolve_tokens(state, len(rec.chunk_times), rec.requested_out)
    rec.finish_reason = state.finish_reason
    if state.usage_in is not None:
        rec.n_in, rec.n_in_source = state.usage_in, SOURCE_USAGE
    if state.usage_cached is not None:
        rec.n_cached = state.usage_cached
    if state.extra:
        rec.extra = state.extra
    if state.keep_text:
        rec.text = "".join(state.text)


# ---- the general way ----


class _Stream:
    """One reply's body read the general way: the per-request state of SSEReader.read."""

    __slots__ = (
        "resp",
        "read",
        "rec",
        "state",
        "feed",
        "decoder",
        "payloads",
        "head",
        "kind",
        "framing",
        "limit",
        "now",
        "stop_at",
        "match",
        "match_all",
        "tries",
        "hits",
    )

    def __init__(self, reader: SSEReader, resp: Any, read: Read, rec: RequestRecord, state: StreamState) -> None:
        self.resp = resp
        self.read = read
        self.rec = rec
        self.state = state
        self.feed = reader.adapter.feed
        self.decoder = make_decoder(reader.adapter, reader.limits.event_bytes, state)
        self.payloads = 0  # events seen (for "no stream events" when the body held none)
        self.head = b""  # the body's first bytes, for that error's text
        self.kind = 0  # the last event's kind
        self.framing = 0  # bytes read since the last body byte (chunk sizes, trailers): bounded
        self.limit = reader.limits.head_bytes
        assert rec.t_headers is not None, "the head is read first (StreamClient._exchange)"
        self.now: float = rec.t_headers  # when the last read arrived
        self.stop_at = getattr(state, "stop_at", 0)  # --cancel after N tokens
        self.match: Callable[[bytes], bool] | None = None  # a token event told by its template
        self.match_all: Callable[[list[bytes]], bool] | None = None  # a run of them, told at once
        self.tries = 0  # templates the stream may still learn (the general way: none)
        self.hits = 0  # events the template told since it was learnt

    def run(self) -> None:
        """Read to the body's end: each read's body bytes decoded and applied with its time."""
        resp, rec = self.resp, self.rec
        # body bytes as llhttp hands them over (one fresh bytearray per piece), not appended to
        # the response's bytearray: each byte is copied once on its way to the decoder, not twice
        pieces = resp.pieces = []
        if resp._body_buffer:  # what came in the same read as the headers
            pieces.append(bytes(resp._body_buffer))
            del resp._body_buffer[:]
        now = self.now
        closed = False  # a close-delimited body ended with the connection
        while True:
            if pieces:
                data = bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
                pieces.clear()
                if not self.head:
                    self.head = data[:300]
                self.apply(self.decoder.feed(data), now)
                if self.stop_at:
                    self.after(now)
            elif resp.broken is not None:
                rec.t_end = now
                raise Ended(Outcome.STREAM_ERROR, resp.broken)
            elif closed or resp.message_complete:
                self.apply(self.decoder.close(), now)  # an event the body's end completed
                rec.t_end = now
                return
            else:
                now, closed = self.take(now)
                self.now = now

    def take(self, now: float) -> tuple[float, bool]:
        """One read fed to llhttp: (its time, whether the body ended with the connection)."""
        chunk, now = self.read()
        return now, self.parse(chunk, now)

    def parse(self, chunk: bytes, now: float) -> bool:
        """llhttp fed one read; True when it was a close-delimited body's end."""
        resp = self.resp
        if not chunk:
            if close_delimited(resp):
                return True
            self.rec.t_end = now
            raise Ended(Outcome.TRUNCATED, "connection closed before the end of the body")
        try:
            resp.feed(chunk)
        except HTTPParseError as e:  # decode the body bytes before the fault first
            resp.broken = f"invalid HTTP body framing: {parse_error_text(e)}"
            return False
        if resp.pieces:
            self.framing = 0
        else:
            self.framing += len(chunk)
            if self.framing > self.limit:
                self.rec.t_end = now
                raise Ended(
                    Outcome.STREAM_ERROR, f"invalid HTTP body framing: over {self.limit} bytes without body data"
                )
        return False

    def apply(self, events: list, now: float) -> None:
        """The events one read completed, applied to the record and state with its time: each
        told by the template (`match`, a TokenReader's; a run of them at once, `match_all`) or
        fed to the adapter."""
        rec = self.rec
        if events and type(events[0]) is int:  # text events the adapter read in place
            n = events[0]
            self.payloads += 1
            if n:
                rec.chunk_times += [now] * n
                if rec.t_first is None:
                    rec.t_first = now
                if rec.t_first_content is None:
                    rec.t_first_content = now
            events = events[1:]
        self.payloads += len(events)
        start = 0
        while start < len(events):
            start = self.apply_from(events, start, now)

    def apply_from(self, events: list, start: int, now: float) -> int:  # noqa: C901 (per-event hot path: one loop, locals)
        """events[start:] applied; where to go on: the end, or the event after one that gave a
        new template when a run follows that it may tell at once (a burst's first read)."""
        rec = self.rec
        n = len(events)
        told = 0  # events the template told: it came from a token event, so t_first is set
        if n - start >= BULK_EVENTS and self.match_all is not None:
            told = self.told_at_once(events, start, now)
            start += told
        feed, state, append, match = self.feed, self.state, rec.chunk_times.append, self.match
        kind = self.kind
        for i in range(start, n):
            payload = events[i]
            if match is not None and match(payload):
                append(now)
                told += 1
                continue
            kind = feed(payload, state)
            if kind:
                append(now)
                if rec.t_first is None:
                    rec.t_first = now
                if kind != REASONING and rec.t_first_content is None:
                    rec.t_first_content = now  # text or a tool call: what the user waits for
                if kind == TOOL_CALL and rec.t_first_tool is None:
                    rec.t_first_tool = now
                if kind == CONTENT and self.tries:
                    self.hits += told
                    told = 0
                    match = self.learn(payload)
                    if n - i > BULK_EVENTS and self.match_all is not None:
                        self.kind = kind
                        return i + 1
        self.hits += told
        self.kind = kind
        return n

    def told_at_once(self, events: list, start: int, now: float) -> int:
        """A burst's read: events from `start` but the last few (a stream's finish, usage and
        [DONE] come last) told by the template at once when every one is a token event; else
        0, and no more such tries until a new template (a stream whose texts it refuses)."""
        stop = len(events) - BULK_TAIL
        if self.match_all is not None and self.match_all(events[start:stop]):
            self.rec.chunk_times += [now] * (stop - start)
            return stop - start
        self.match_all = None
        return 0

    def learn(self, payload: bytes) -> Callable[[bytes], bool] | None:
        """The template the stream reads later token events with: none, read the general way."""
        return None

    def after(self, now: float) -> None:
        """After a read's events: --cancel after N tokens ends the request here."""
        stop_at = self.stop_at
        if stop_at and len(self.rec.chunk_times) >= stop_at and not self.state.done:
            self.rec.t_end = now
            raise Ended(Outcome.CLIENT_CANCELLED, f"cancelled by the client after {len(self.rec.chunk_times)} tokens")


class SSEReader:
    """A streamed reply (SSE or NDJSON), every byte read the general way."""

    def __init__(self, adapter: Adapter, limits: Limits) -> None:
        self.adapter = adapter
        self.limits = limits

    def read(self, resp: Any, read: Read, rec: RequestRecord, state: StreamState, spec: RequestSpec) -> None:
        self._run(_Stream(self, resp, read, rec, state))

    def _run(self, stream: _Stream) -> None:
        rec, state = stream.rec, stream.state
        try:
            stream.run()
        except ProtocolError as e:
            rec.t_end = stream.now
            raise Ended(Outcome.STREAM_ERROR, str(e)) from None
        except (Ended, OSError, HTTPParseError):
            raise  # classified by the caller (timeouts, resets, HTTP framing)
        except Exception as e:  # noqa: BLE001 - a reply the adapter could not read is a stream error
            log_unexpected(e)
            rec.t_end = stream.now
            raise Ended(Outcome.STREAM_ERROR, f"unreadable stream event: {exception_text(e)}") from None
        if state.error is not None:
            raise Ended(Outcome.STREAM_ERROR, state.error)
        if self.adapter.end_marker and not state.done:
            if not stream.payloads:
                ctype = stream.resp.get("content-type") or "none"
                text = printable(stream.head)
                raise Ended(Outcome.STREAM_ERROR, f"no stream events in reply (content-type {ctype}): {text[:200]}")
            raise Ended(Outcome.TRUNCATED, "stream ended without its end marker")

    def finish(self, rec: RequestRecord, state: StreamState) -> None:
        finish_record(rec, state)


# ---- token events told without parsing ----


class _TokenStream(_Stream):
    """One reply read by TokenReader: the general way, plus its token templates.

    The template (the bytes around the text of the stream's last token event read the general
    way, protocols/token_reads.py) counts later events of that shape without the adapter
    (`match`), and, while llhttp is known to wait at a chunk's start (`synced`: a read taken
    past it must leave it there) and the SSE decoder holds nothing, whole reads of such events
    without llhttp or the decoder (`raw`): by the pump when the socket has one. A template that
    fails on a token event is replaced by that event's (a server's `created` changes every
    second): `tries` templates are left, and one that matched (`hits`) earns its successor, so
    that a stream whose events never repeat stops trying after TEMPLATE_TRIES."""

    __slots__ = ("template", "event_head", "raw", "sse", "synced", "via_pump")

    def __init__(self, reader: TokenReader, resp: Any, read: Read, rec: RequestRecord, state: StreamState) -> None:
        super().__init__(reader, resp, read, rec, state)
        self.template: Callable[[bytes, StreamState], tuple[bytes, bytes] | None] = reader.adapter.token_template  # type: ignore[attr-defined]
        # the lines before a token event's data on the wire: `data: `, or a named event's
        self.event_head: bytes = getattr(reader.adapter, "token_event_head", b"data: ")
        self.raw: Callable[[bytes], int] | None = None
        self.sse: SSEDecoder = self.decoder  # type: ignore[assignment]  # TokenReader takes SSE streams only
        self.synced = bool(resp.at_chunk_start)
        self.tries = TEMPLATE_TRIES
        self.via_pump = getattr(read, "via_pump", None) if reader.pump else None

    def take(self, now: float) -> tuple[float, bool]:
        raw = self.raw
        if raw is None or not self.sse.idle():  # token reads only from an event's start
            chunk, now = self.read()
        elif self.via_pump is not None:  # token reads taken by the pump; this one is not
            chunk, now, n = self.via_pump(raw, self.rec.chunk_times)
            if n:
                self.hits += n
                self.payloads += n
                self.framing = 0
        else:
            chunk, now = self.read()
            n = raw(chunk)
            if n:  # token events, as the general path would have read them
                self.hits += n
                self.payloads += n
                self.rec.chunk_times += [now] * n
                self.framing = 0
                return now, False
        closed = self.parse(chunk, now)
        if self.synced and chunk and not whole_chunks(chunk):
            self.synced = False
            self.raw = None
        return now, closed

    def learn(self, payload: bytes) -> Callable[[bytes], bool] | None:
        """A new template from the token event just fed the general way (one of `tries`)."""
        if self.hits:  # the last template matched: its successor may be tried
            self.tries, self.hits = min(self.tries + 1, TEMPLATE_TRIES), 0
        self.tries -= 1
        cut = self.template(payload, self.state)
        if cut is None:  # an event with an escape, a finish, a count: the template stays
            return self.match
        self.match = event_matcher(*cut)
        self.match_all = events_matcher(*cut)
        self.raw = token_read_matcher(*cut, self.sse.max_event, self.event_head) if self.synced else None
        return self.match


class TokenReader(SSEReader):
    """A streamed reply whose token events are told without parsing once its shape is known (see
    _TokenStream); `pump`: such whole reads are taken by the process's pump. A stream it cannot
    read so (the text kept, --cancel after N tokens, an adapter without a template, another
    framing) is read the general way."""

    def __init__(self, adapter: Adapter, limits: Limits, pump: bool = True) -> None:
        super().__init__(adapter, limits)
        self.pump = pump
        # an SSE stream whose adapter cuts token templates and reads no events in place
        # (make_decoder gives SGLang's, which reads its own, a decoder with read_events)
        self._templates = (
            adapter.framing == "sse"
            and getattr(adapter, "token_template", None) is not None
            and getattr(adapter, "read_events", None) is None
        )

    def read(self, resp: Any, read: Read, rec: RequestRecord, state: StreamState, spec: RequestSpec) -> None:
        stop_at: int = getattr(state, "stop_at", 0)  # --cancel after N tokens: counted the general way
        if not self._templates or state.keep_text or stop_at:
            return super().read(resp, read, rec, state, spec)
        self._run(_TokenStream(self, resp, read, rec, state))


# ---- one JSON document ----


class JSONAdapter(Protocol):
    """What JSONReader needs of a non-streaming request kind's adapter (protocols.embeddings)."""

    name: str
    framing: str
    end_marker: bool

    def request(self, spec: RequestSpec) -> tuple[str, bytes]: ...

    def parse(self, body: bytes, spec: RequestSpec, keep_text: bool = False) -> Reply: ...


class JSONReader:
    """A reply that is one JSON document (embeddings, rerank, score: the adapters of
    protocols.embeddings), timed: t_headers, then t_end when the whole body is in (E2E is the
    latency; no chunks, no TTFT). Read whole, up to limits.body_bytes, then parsed by the adapter.
    A reply the adapter cannot read (not JSON, the wrong shape, a wrong number of items, a wrong
    type) is a stream_error with its words.

    The record: n_in = the server's usage when it gives one, n_out = 0, extra["items"] = the
    embeddings returned or documents scored. What the reply held (scores; embeddings when asked
    with keep_text) waits in `replies[request_id]` for the caller (workload.scenario) to take."""

    MAX_KEPT = 64  # replies nobody took: the oldest are dropped past this many

    def __init__(self, adapter: JSONAdapter, limits: Limits) -> None:
        self.adapter = adapter
        self.limits = limits
        self.replies: dict[str, object] = {}

    def read(self, resp: Any, read: Read, rec: RequestRecord, state: StreamState, spec: RequestSpec) -> None:
        body = self._body(resp, read, rec)
        try:
            reply = self.adapter.parse(body, spec, keep_text=state.keep_text)
        except ProtocolError as e:
            ctype = header_text(resp, "content-type") or "none"
            text = str(e) if "json" in ctype.lower() else f"{e} (content-type {ctype})"
            raise Ended(Outcome.STREAM_ERROR, text) from None
        except Exception as e:  # noqa: BLE001 - a reply the adapter could not read is a stream error
            log_unexpected(e)
            raise Ended(Outcome.STREAM_ERROR, f"unreadable reply: {exception_text(e)}") from None
        state.aux = reply
        state.usage_in = reply.usage_in
        state.done = True

    def _body(self, resp: Any, read: Read, rec: RequestRecord) -> bytes:
        """The whole body, within the limits on its size and on framing without body bytes."""
        buf = resp._body_buffer
        limit, framing_limit = self.limits.body_bytes, self.limits.head_bytes
        framing = 0
        now = rec.t_headers
        while not resp.message_complete:
            if resp.broken is not None:
                rec.t_end = now
                raise Ended(Outcome.STREAM_ERROR, resp.broken)
            if len(buf) > limit:
                rec.t_end = now
                raise Ended(Outcome.STREAM_ERROR, f"reply over {limit} bytes (the body limit)")
            chunk, now = read()
            if not chunk:
                if close_delimited(resp):
                    break
                rec.t_end = now
                raise Ended(Outcome.TRUNCATED, "connection closed before the end of the body")
            framing = feed_counting(resp, chunk, framing)
            if framing > framing_limit:
                rec.t_end = now
                raise Ended(
                    Outcome.STREAM_ERROR, f"invalid HTTP body framing: over {framing_limit} bytes without body data"
                )
        rec.t_end = now
        if resp.broken is not None:
            raise Ended(Outcome.STREAM_ERROR, resp.broken)
        if len(buf) > limit:
            raise Ended(Outcome.STREAM_ERROR, f"reply over {limit} bytes (the body limit)")
        body = bytes(buf)
        del buf[:]
        return body

    def finish(self, rec: RequestRecord, state: StreamState) -> None:
        rec.n_out, rec.n_out_source = 0, SOURCE_USAGE  # no output tokens: exact, not an estimate
        reply = state.aux
        if reply is None:
            return
        rec.extra = {"items": reply.items}
        if state.usage_in is not None:
            rec.n_in, rec.n_in_source = state.usage_in, SOURCE_USAGE
        if rec.ok:
            replies = self.replies
            replies[rec.request_id] = reply
            while len(replies) > self.MAX_KEPT:
                del replies[next(iter(replies))]


def feed_counting(resp: Any, chunk: bytes, framing: int) -> int:
    """llhttp fed one read of a body kept in the response's buffer (a JSON reply's, an error
    reply's): the framing bytes since the last body byte (0 when the read brought body bytes,
    or broke the framing: resp.broken says so)."""
    before = len(resp._body_buffer)
    try:
        resp.feed(chunk)
    except HTTPParseError as e:
        resp.broken = f"invalid HTTP body framing: {parse_error_text(e)}"
        return 0
    return 0 if len(resp._body_buffer) > before else framing + len(chunk)


# ---- shared by the readers and the exchange ----


def close_delimited(resp: HTTPSocketResponse) -> bool:
    """A body with neither Content-Length nor chunked encoding ends when the server closes."""
    te = header_text(resp, "transfer-encoding").lower()
    return resp.content_length is None and "chunked" not in te


def header_text(resp: HTTPSocketResponse, name: str) -> str:
    """A header's value ("" when absent): a header sent more than once comes as a list, its values
    joined as one (RFC 9110 5.3), so that it reads like a string."""
    value = resp.get(name)
    if isinstance(value, list):
        return ", ".join(value)
    return value or ""


def parse_error_text(e: HTTPParseError) -> str:
    """llhttp's message without its error code: HTTPParseError('Invalid character in chunk size', 12)."""
    return str(e.args[0]) if e.args and isinstance(e.args[0], str) else str(e) or type(e).__name__


def exception_text(e: BaseException) -> str:
    text = str(e)
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


_logged_unexpected: set[type] = set()


def log_unexpected(e: BaseException) -> None:
    """A reply that raised something other than a classified error: log its traceback once per
    exception type (it is a gap in an adapter's checks), then only at debug level."""
    if type(e) not in _logged_unexpected:
        _logged_unexpected.add(type(e))
        log.warning("unexpected %s while reading a reply (counted as stream_error)", type(e).__name__, exc_info=e)
    else:
        log.debug("unexpected %s while reading a reply", type(e).__name__, exc_info=e)
