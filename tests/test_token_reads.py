"""Token events and one-token reads taken without parsing them (protocols/token_reads.py, the
TokenReader of transport/bodies.py).

A read taken that way must give exactly what reading it the general way (llhttp, the SSE decoder,
the adapter) gives: the same token events at the same times, the same counts, finish, usage,
errors and outcome, whatever the server sends and however its bytes are cut into reads. Each
stream below is read twice, by a TokenReader and by the general SSEReader, and the two records compared; the
reads are handed to the client's own loop exactly as given, so the cuts are the test's."""

from __future__ import annotations

import itertools
import socket

import orjson
import pytest
from geventhttpclient import HTTPClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llm_locust.transport.bodies as client_mod
from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols import get_adapter
from llm_locust.protocols.base import Limits, RequestSpec, StreamState
from llm_locust.protocols.token_reads import (
    event_matcher,
    events_matcher,
    text_template,
    token_read_matcher,
    whole_chunks,
)
from llm_locust.transport.bodies import Ended, finish_record
from llm_locust.transport.http import StreamClient, Timeouts, _read_head, _Response

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def completion_event(text, finish=None, **extra) -> dict:
    return {
        "id": "cmpl-7",
        "object": "text_completion",
        "created": 1796209400,
        "model": "m",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}],
        **extra,
    }


def chat_event(text, finish=None, **extra) -> dict:
    return {
        "id": "chatcmpl-7",
        "object": "chat.completion.chunk",
        "created": 1796209400,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


def usage_event(n: int) -> dict:
    return {
        "id": "cmpl-7",
        "object": "text_completion",
        "created": 1796209400,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 5, "total_tokens": 5 + n, "completion_tokens": n},
    }


def sse(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def chunk(data: bytes, size_line: bytes | None = None) -> bytes:
    return (size_line if size_line is not None else b"%x" % len(data)) + b"\r\n" + data + b"\r\n"


def delta_event(text, finish=None) -> dict:
    """Anthropic's text delta (vLLM's key order); with `finish`, the message_delta that ends it."""
    if finish is not None:
        return {"type": "message_delta", "delta": {"stop_reason": finish, "stop_sequence": None}}
    return {"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}, "index": 0}


def named(payload: bytes) -> bytes:
    """An Anthropic event on the wire: `event: <its type>` then its data."""
    typ = orjson.loads(payload).get("type", "error") if payload.startswith(b"{") else "x"
    return b"event: " + typ.encode() + b"\n" + sse(payload)


def anthropic_reads(texts: list[str]) -> list[bytes]:
    """A well-formed paced Messages stream: the head, message and block start, one text delta a
    read, then the block's stop, the stop reason with usage and message_stop."""
    start = {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 5, "output_tokens": 0}}}
    block = {"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0}
    reads = [HEAD, chunk(named(orjson.dumps(start))) + chunk(named(orjson.dumps(block)))]
    reads += [chunk(named(orjson.dumps(delta_event(text)))) for text in texts]
    end = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": len(texts)}}
    tail = [{"type": "content_block_stop", "index": 0}, end, {"type": "message_stop"}]
    reads.append(b"".join(chunk(named(orjson.dumps(e))) for e in tail) + b"0\r\n\r\n")
    return reads


def paced_reads(api: str, texts: list[str]) -> list[bytes]:
    """A well-formed paced stream: the head, one chunk per read per token, the finish, usage, end."""
    if api == "anthropic-messages":
        return anthropic_reads(texts)
    make = chat_event if api == "openai-chat" else completion_event
    reads = [HEAD]
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        reads.append(chunk(sse(orjson.dumps(make(text, "length" if last else None)))))
    reads.append(chunk(sse(orjson.dumps(usage_event(len(texts))))) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return reads


def read_through(api: str, reads: list[bytes], token_reads: bool, monkeypatch, limits: Limits | None = None):
    """The client's record of a reply arriving as exactly these reads (each at its own time)."""
    http = HTTPClient.from_url("http://127.0.0.1:9")  # never connects: the reads are handed in
    client = StreamClient(
        http, "http://127.0.0.1:9", get_adapter(api), Timeouts(1.0, 1.0, 1.0), limits=limits, token_reads=token_reads
    )
    rec = RequestRecord(request_id="r", api=api, t_sched=0.0, t_sent=0.0, wall_sent=0.0)
    state = StreamState(False)
    it = iter(enumerate(reads))

    def read():
        i, data = next(it, (len(reads), b""))
        return data, 1.0 + i

    resp = _Response(None, block_size=65536, method="POST")
    try:
        rec.t_headers = _read_head(resp, read, rec, 65536)
        client.body.read(resp, read, rec, state, RequestSpec(model="m"))
    except Ended as e:
        rec.outcome, rec.error = e.outcome, e.text
    except Exception as e:  # noqa: BLE001 - compared like any other outcome
        rec.outcome, rec.error = type(e).__name__, str(e)
    finish_record(rec, state)
    return (
        rec.outcome,
        rec.error,
        rec.n_out,
        rec.n_out_source,
        rec.chunk_times,
        rec.chunk_tokens,
        rec.finish_reason,
        rec.n_in,
        rec.t_first,
        rec.t_first_content,
        rec.t_end,
        state.done,
        state.error,
        state.cont_broken,
    )


def count_token_reads(monkeypatch) -> list[int]:
    """How many reads the token-read test took, counted through the matcher the client makes."""
    hits = [0]
    real = client_mod.token_read_matcher

    def counting(*args):
        match = real(*args)

        def counted(read):
            ok = match(read)
            hits[0] += ok
            return ok

        return counted

    monkeypatch.setattr(client_mod, "token_read_matcher", counting)
    return hits


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat", "anthropic-messages"])
def test_a_paced_stream_is_read_without_parsing_and_agrees(api, monkeypatch):
    texts = [" to", " and", ' "quoted"', " caf\u00e9", " \\n", " \u4e2d\u6587", " x"] * 15
    reads = paced_reads(api, texts)
    hits = count_token_reads(monkeypatch)
    fast = read_through(api, reads, True, monkeypatch)
    assert hits[0] > 0
    general = read_through(api, reads, False, monkeypatch)
    assert fast == general
    assert fast[0].value == "ok" and fast[2] == len(texts) and len(fast[4]) == len(texts)
    # every token read but the first (read the general way, it gives the template), those with
    # an escape in their JSON (a quote, a backslash) and OpenAI's last (its finish reason differs)
    last = 0 if api == "anthropic-messages" else 1
    escaped = sum(1 for t in texts[1 : len(texts) - last] if '"' in t or "\\" in t)
    assert hits[0] == len(texts) - 1 - last - escaped


def test_reads_that_are_not_one_whole_token_chunk_go_the_general_way(monkeypatch):
    """Two chunks in one read, a chunk cut in two, an extension, uppercase and zero-padded size
    lines: none is taken as a token read unless it is exactly one chunk; the counts agree."""
    ev = [chunk(sse(orjson.dumps(completion_event(f" w{i}")))) for i in range(12)]
    cut = len(ev[3]) // 2
    reads = [
        HEAD,
        ev[0],
        ev[1],
        ev[2] + ev[3][:cut],
        ev[3][cut:],
        ev[4] + ev[5],
        ev[6].replace(b"\r\n", b";x=1\r\n", 1),
        ev[7].upper()[:2] + ev[7][2:],
        b"00" + ev[8],
        ev[9],
        ev[10],
        ev[11],
        chunk(sse(orjson.dumps(completion_event(" end", "stop")))) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n",
    ]
    hits = count_token_reads(monkeypatch)
    fast = read_through("openai-completions", reads, True, monkeypatch)
    assert fast == read_through("openai-completions", reads, False, monkeypatch)
    assert fast[2] == 13 and fast[0].value == "ok"
    # after the cut chunk llhttp's place is unknown: no token read from there on; before it,
    # ev[1] and ev[2]+.. : only ev[1] (ev[0] gave the template)
    assert hits[0] == 1


def test_a_token_chunk_after_a_chunk_that_ends_inside_an_event_goes_the_general_way(monkeypatch):
    """A chunk may end inside an SSE event (a line without its end, an event without its blank
    line): the general path joins the next chunk's bytes to it, so a token chunk read then is not
    one token event. Issue 24 item 26: a comment line left open (`: c`) swallowed the next token
    chunk's line on the general path, while the fast path counted the token and the comment then
    swallowed the server's error event instead: "ok" for a stream that said `error`."""
    ev = [chunk(sse(orjson.dumps(completion_event(f" w{i}")))) for i in range(8)]
    error = chunk(sse(orjson.dumps({"error": {"message": "boom", "type": "server_error"}})))
    end = chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    held = sse(orjson.dumps(completion_event(" held")))
    cases = {
        "a comment left open, then the error event": ([HEAD, *ev[:3], chunk(b": c"), ev[3], error, end], "boom"),
        "an event without its blank line": ([HEAD, *ev[:3], chunk(held[:-1]), *ev[3:], end], "invalid JSON"),
        "an event cut inside its line": ([HEAD, *ev[:3], chunk(held[:20]), *ev[3:], end], "invalid JSON"),
        "an event line for the next event": ([HEAD, *ev[:3], chunk(b"id: 7\n"), *ev[3:], end], None),
        "a CR whose LF may follow": ([HEAD, *ev[:3], chunk(b"data: \r"), *ev[3:], end], None),
    }
    for name, (reads, error_text) in cases.items():
        fast = read_through("openai-completions", reads, True, monkeypatch)
        general = read_through("openai-completions", reads, False, monkeypatch)
        assert fast == general, name
        if error_text is None:
            assert fast[0].value == "ok", (name, fast[:2])
        else:
            assert fast[0].value == "stream_error" and error_text in fast[1], (name, fast[:2])


def test_a_body_that_came_with_the_head(monkeypatch):
    """A busy client reads the head and the first token(s) together: token reads start after
    them when that read held the whole head and whole chunks; not when the head came in parts
    (where the body starts is then not known)."""
    ev = [chunk(sse(orjson.dumps(completion_event(f" w{i}")))) for i in range(6)]
    end = chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    cases = {
        "whole head and a chunk": ([HEAD + ev[0], *ev[1:], end], 5),
        "whole head and two chunks": ([HEAD + ev[0] + ev[1], *ev[2:], end], 4),
        "head in parts": ([HEAD[:20], HEAD[20:] + ev[0], *ev[1:], end], 0),
        "head and part of a chunk": ([HEAD + ev[0][:5], ev[0][5:], *ev[1:], end], 0),
    }
    for name, (reads, taken) in cases.items():
        hits = count_token_reads(monkeypatch)
        fast = read_through("openai-completions", reads, True, monkeypatch)
        assert fast == read_through("openai-completions", reads, False, monkeypatch), name
        assert fast[0].value == "ok" and fast[2] == 6, name
        assert hits[0] == taken, name


def test_a_body_with_a_length_or_a_head_with_bare_line_feeds_is_read_the_general_way(monkeypatch):
    body = b"".join(sse(orjson.dumps(completion_event(f" w{i}"))) for i in range(6)) + b"data: [DONE]\n\n"
    sized = [
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body),
        *[body[i : i + 100] for i in range(0, len(body), 100)],
    ]
    ev = [chunk(sse(orjson.dumps(completion_event(f" w{i}")))) for i in range(6)]
    bare = [HEAD.replace(b"\r\n", b"\n")[:-1] + b"\r\n" + ev[0], *ev[1:], chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]
    hits = count_token_reads(monkeypatch)
    for reads in (sized, bare):
        fast = read_through("openai-completions", reads, True, monkeypatch)
        assert fast == read_through("openai-completions", reads, False, monkeypatch)
        assert fast[2] == 6 if reads is sized else fast[0] == "HTTPParseError"  # llhttp wants CRLF
    assert hits[0] == 0


def test_a_shape_that_changes_now_and_then_is_taken_anew_and_one_that_never_repeats_is_given_up(monkeypatch):
    """A server whose `created` changes every second (llama.cpp writes it per chunk): each new
    shape is learnt from the first event read the general way. A stream whose every event differs
    elsewhere than its text stops trying after TEMPLATE_TRIES shapes."""

    def stream(created_of):
        return (
            [HEAD]
            + [chunk(sse(orjson.dumps(completion_event(f" w{i}", created=created_of(i))))) for i in range(60)]
            + [chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]
        )

    cases = [
        (stream(lambda i: 1796209400 + i // 10), 6, 54),  # 6 shapes, each read once the general way
        (stream(lambda i: 1796209400 + i), client_mod.TEMPLATE_TRIES, 0),
    ]
    for reads, templates, taken in cases:
        hits = count_token_reads(monkeypatch)
        made = [0]
        counting = client_mod.token_read_matcher

        def made_and_counting(*args, counting=counting, made=made):
            made[0] += 1
            return counting(*args)

        monkeypatch.setattr(client_mod, "token_read_matcher", made_and_counting)
        fast = read_through("openai-completions", reads, True, monkeypatch)
        assert fast == read_through("openai-completions", reads, False, monkeypatch)
        assert fast[0].value == "ok" and fast[2] == 60
        assert (made[0], hits[0]) == (templates, taken)


def test_an_event_past_the_event_limit_is_refused_either_way(monkeypatch):
    big = " " + "y" * 300
    reads = paced_reads("openai-completions", [" a", " b", big, " c"])
    limits = Limits(event_bytes=300)
    fast = read_through("openai-completions", reads, True, monkeypatch, limits)
    assert fast == read_through("openai-completions", reads, False, monkeypatch, limits)
    assert fast[0].value == "stream_error" and "longer than 300 bytes" in fast[1]


# Texts a server might put where the token goes, as raw bytes inside the JSON string: valid
# content, escapes, and bytes no JSON string may hold (each must fail the same way both ways).
RAW_TEXTS = st.one_of(
    st.text(max_size=6).map(lambda t: orjson.dumps(t)[1:-1]),
    st.sampled_from(
        [
            b"",
            b'"',
            b"\\",
            b"\\u00e9",
            b"\x01",
            b"\x1f",
            b"\x7f",
            b"\xff",
            b"\xc3",
            b"\xe4\xb8",
            b"\xed\xa0\x80",
            b"a\nb",
            b"a\rb",
            b"\r\n",
            b'x"y',
            b"]}",
            b"\xf0\x9f\x98\x80",
        ]
    ),
    st.binary(max_size=4),
)


def unfinished(draw, make) -> bytes:
    """A chunk's data that leaves the SSE decoder holding something: a line without its end, an
    event without its blank line, a field that belongs to the next event, a CR whose LF may
    follow. The general path joins what comes next to it; a token read must not be taken past it."""
    error = orjson.dumps({"error": {"message": "boom", "type": "server_error"}})
    whole = draw(st.sampled_from([sse(orjson.dumps(make(" held"))), sse(error), b"data: [DONE]\n\n"]))
    return draw(
        st.sampled_from(
            [
                whole[:-1],  # the event's last line, its blank line still to come
                whole[: draw(st.integers(1, len(whole) - 2))],  # cut inside a line
                b": keep-alive",
                b"event: error\n",
                b"id: 7\n",
                b"\r",
                b"data: \r",
            ]
        )
    )


# What a token's text usually is: a plain word, read as a token read once the stream's shape is known.
PLAIN_TEXTS = st.from_regex(rb"\A[ a-z]{1,6}\Z")


@st.composite
def streams(draw):
    """A chunked event stream as reads: token events with raw texts, now and then a change of
    shape (a finish reason, usage, an error object, a comment, an end marker, a chunk that ends
    inside an event), cut into reads in any way."""
    api = draw(st.sampled_from(["openai-completions", "openai-chat", "anthropic-messages"]))
    make = {"openai-chat": chat_event, "anthropic-messages": delta_event}.get(api, completion_event)
    template = orjson.dumps(make("\x00"))  # the text's place: orjson writes \u0000
    before, after = template.split(b"\\u0000")
    # an event's lines before its data: Anthropic's name them (mostly; a server may not)
    named_ = api == "anthropic-messages" and draw(st.integers(0, 5)) > 0
    event = (lambda p: b"event: content_block_delta\n" + sse(p)) if named_ else sse
    chunks = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(
            st.sampled_from(
                ["token"] * 8 + ["finish", "usage", "error", "comment", "two", "role", "unfinished", "done"]
            )
        )
        if kind == "unfinished":
            chunks.append(chunk(unfinished(draw, make)))
            continue
        if kind == "token":  # mostly the usual (a plain word: a token read), else any raw text
            payload = before + draw(PLAIN_TEXTS if draw(st.integers(0, 3)) else RAW_TEXTS) + after
        elif kind == "finish":
            payload = orjson.dumps(make(" end", draw(st.sampled_from(["stop", "length"]))))
        elif kind == "usage" and api == "anthropic-messages":
            payload = orjson.dumps({"type": "message_delta", "usage": {"output_tokens": draw(st.integers(0, 40))}})
        elif kind == "usage":
            payload = orjson.dumps(usage_event(draw(st.integers(0, 40))))
        elif kind == "error":
            payload = orjson.dumps({"error": {"message": "boom", "type": "server_error"}})
        elif kind == "role":
            payload = orjson.dumps(make(""))
        elif kind == "done":  # an end marker, and (when more is drawn) events after it
            payload = b'{"type":"message_stop"}' if api == "anthropic-messages" and draw(st.booleans()) else b"[DONE]"
        else:
            payload = None
        data = (
            b": keep-alive\n\n"
            if kind == "comment"
            else event(payload)
            if kind != "two"
            else (event(before + b" a" + after) + event(before + b" b" + after))
        )
        size_line = draw(st.sampled_from([None] * 24 + [b"0%x" % len(data), b"%X" % len(data), b"%x;e=1" % len(data)]))
        chunks.append(chunk(data, size_line))
    ending = draw(st.sampled_from(["done", "done", "eof", "zero"]))
    if ending == "done":
        chunks.append(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    elif ending == "zero":
        chunks.append(b"0\r\n\r\n")
    body = b"".join(chunks)
    reads = [HEAD]
    pos = 0
    n_cuts = draw(st.sampled_from([0, 0, 2, 6]))  # a read cut inside a chunk ends token reads: often none
    bounds = sorted(draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=n_cuts)))
    for c in chunks:  # mostly a chunk a read, as a paced server's arrive; some cut elsewhere
        end = pos + len(c)
        cuts = [b for b in bounds if pos < b < end]
        for b in cuts:
            reads.append(body[pos:b])
            pos = b
        reads.append(body[pos:end])
        pos = end
    if draw(st.booleans()):  # some reads joined
        i = draw(st.integers(1, len(reads) - 1))
        reads[i : i + 2] = [b"".join(reads[i : i + 2])]
    return api, bursts(draw, reads)


def bursts(draw, reads: list[bytes]) -> list[bytes]:
    """Now and then the body's reads joined in groups: a burst, many events a read (event
    templates), and the head with the body's first bytes, as a burst's first read holds them."""
    group = draw(st.sampled_from([1, 1, 1, 3, 50]))
    if group == 1:
        return reads
    body_reads = reads[1:]
    reads = [HEAD] + [b"".join(body_reads[i : i + group]) for i in range(0, len(body_reads), group)]
    if draw(st.booleans()):
        reads[:2] = [b"".join(reads[:2])]
    return reads


@pytest.mark.slow  # 400 streams read twice: seconds
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams())
def test_any_stream_cut_any_way_reads_the_same_with_and_without_token_reads(monkeypatch, stream):
    api, reads = stream
    assert read_through(api, reads, True, monkeypatch) == read_through(api, reads, False, monkeypatch)


@pytest.mark.slow  # 300 streams read twice: seconds
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams(), st.integers(2, 4), st.integers(0, 2))
def test_any_stream_reads_the_same_when_short_runs_are_told_at_once(monkeypatch, stream, from_events, tail):
    """The same with runs told at once (_Stream.told_at_once) from 2-4 events a read, leaving
    0-2 at the end: the drawn streams' reads are short, and their every mix of shapes then meets
    a run."""
    monkeypatch.setattr(client_mod, "BULK_EVENTS", from_events)
    monkeypatch.setattr(client_mod, "BULK_TAIL", tail)
    api, reads = stream
    assert read_through(api, reads, True, monkeypatch) == read_through(api, reads, False, monkeypatch)


def _count_told(monkeypatch) -> dict[str, int]:
    """Events told by the template, one at a time ("one") and in runs at once ("run")."""
    told = {"one": 0, "run": 0}
    real, real_all = client_mod.event_matcher, client_mod.events_matcher

    def counting(*args):
        match = real(*args)

        def counted_match(payload):
            ok = match(payload)
            told["one"] += ok
            return ok

        return counted_match

    def counting_all(*args):
        match_all = real_all(*args)

        def counted_match_all(payloads):
            ok = match_all(payloads)
            told["run"] += len(payloads) if ok else 0
            return ok

        return counted_match_all

    monkeypatch.setattr(client_mod, "event_matcher", counting)
    monkeypatch.setattr(client_mod, "events_matcher", counting_all)
    return told


@pytest.mark.parametrize("api", ["openai-completions", "anthropic-messages"])
@pytest.mark.parametrize("plain", [False, True])
def test_a_burst_is_counted_by_template_and_agrees(monkeypatch, plain, api):
    """A server faster than the client: the whole reply in one read with the head (nginx), or cut
    into two anywhere. The first event gives the template, and the read's later token events are
    told by it without the adapter, but for those it cannot tell (an escape, the finish, usage,
    [DONE]); the record is the general path's. Plain texts are told in runs at once
    (events_matcher), from the read that gave the template on; a run holding an escape is told
    one by one (event_matcher)."""
    texts = ([] if plain else [" to", " and", " caf\u00e9", ' "q"']) + [f" w{i}" for i in range(200)]
    body = b"".join(paced_reads(api, texts)[1:])
    told = _count_told(monkeypatch)
    for cut in (0, 1, 300, len(body) // 2, len(body) - 7):
        reads = [HEAD + body] if cut == 0 else [HEAD + body[:cut], body[cut:]]
        told.update(one=0, run=0)
        fast = read_through(api, reads, True, monkeypatch)
        assert fast == read_through(api, reads, False, monkeypatch)
        assert fast[0].value == "ok" and fast[2] == len(texts)
        assert told["one"] + told["run"] >= len(texts) - 5, (cut, told)  # not the first, the escaped one, the last
        if plain:  # all but the first and the last few of each read, at once
            assert told["run"] >= len(texts) - 2 * (client_mod.BULK_TAIL + 2), (cut, told)


def test_the_matcher_counts_whole_chunks_of_one_token_event_each():
    payload = orjson.dumps(completion_event(" to"))
    prefix, suffix = text_template(payload, b'"text":"')
    match = token_read_matcher(prefix, suffix, 1 << 20)
    ok = chunk(sse(payload.replace(b" to", b" and")))
    assert match(ok)
    assert not match(ok[:-1]) and not match(ok + b"0\r\n\r\n") and not match(b"x" + ok) and not match(b" " + ok)
    assert match(b"00" + ok)  # a zero-padded size line is one too
    assert not match(ok.replace(b" and", b""))  # an empty text: not a token
    assert not match(chunk(sse(payload.replace(b" to", b" a\\nd"))))  # escapes: the general way
    bad_size = b"%x" % (int(ok.split(b"\r\n")[0], 16) + 1) + ok[ok.index(b"\r\n") :]
    assert not match(bad_size)
    assert match(ok.replace(ok[:2], ok[:2].upper(), 1)) == (ok[:2].upper() != ok[:2])  # uppercase: a valid size line
    assert not token_read_matcher(prefix, suffix, 100)(ok)  # over the event limit
    # a reader that fell behind: several whole token chunks in one read, each counted
    other = chunk(sse(payload.replace(b" to", b" caf\xc3\xa9")))
    assert match(ok + other) == 2 and match(ok + other + ok) == 3 and match(ok + ok.upper()[:2] + ok[2:]) == 2
    assert not match(ok + other[:-1]) and not match(ok + chunk(sse(payload.replace(b" to", b"\\n"))))
    assert not match(ok + b"0\r\n\r\n") and not match(ok + chunk(b"data: [DONE]\n\n"))
    assert not match(ok + chunk(sse(payload.replace(b" to", b"\xff"))))
    assert text_template(orjson.dumps({"a": {"text": "x"}, "text": "y"}), b'"text":"') is None
    assert text_template(orjson.dumps(completion_event('say "hi"')), b'"text":"') is None


def test_a_run_of_events_is_told_at_once_exactly_when_each_would_be_alone():
    """events_matcher (a burst's run, at once) says yes exactly when event_matcher says yes for
    every one of them: texts of every kind of byte, alone and next to each other (a newline
    joins them, a UTF-8 sequence cut between two texts is not one)."""
    payload = orjson.dumps(completion_event(" to"))
    prefix, suffix = text_template(payload, b'"text":"')
    one, run = event_matcher(prefix, suffix), events_matcher(prefix, suffix)
    texts = [
        b" to",
        b"caf\xc3\xa9",
        b"\xc3",
        b"\xa9",
        b"a\nb",
        b"",
        b'q"',
        b"\\n",
        b"\x01",
        b"\x7f",
        b"\xff",
        b"\xe4\xb8\xad",
    ]
    for a, b, c in itertools.product(texts, repeat=3):
        events = [prefix + t + suffix for t in (a, b, c)]
        assert run(events) == all(map(one, events)), (a, b, c)
    good = [prefix + b" w%d" % i + suffix for i in range(50)]
    assert run(good)
    assert not run([*good, payload.replace(b'"finish_reason":null', b'"finish_reason":"stop"')])
    assert not run([*good, prefix + suffix[:-1]]) and not run([*good, prefix[1:] + b"x" + suffix])
    assert not run([prefix + suffix[:1]]) and not run([prefix[:-1] + suffix])  # prefix and suffix overlap


def test_whole_chunks_knows_where_a_parser_stops():
    one = chunk(b"data: x\n\n")
    assert whole_chunks(one) and whole_chunks(one * 3)
    assert not whole_chunks(one[:-1]) and not whole_chunks(one + one[:4]) and not whole_chunks(b"")
    assert not whole_chunks(one + b"0\r\n\r\n") and not whole_chunks(b"5;a=b\r\nhello\r\n")
    assert not whole_chunks(b"5\r\nhelloXY") and not whole_chunks(b"g\r\n")


def test_the_simulator_paced_stream_is_timed_the_same(monkeypatch):
    """Over real HTTP against the paced simulator: most token reads are taken without parsing,
    and the record is the general path's (same counts, finish, one time per token, in order)."""
    from llm_locust.sim.process import SimProcess

    hits = count_token_reads(monkeypatch)
    with SimProcess(slots=8, iter_base=0.005, iter_per_seq=0.0, iter_per_prefill_token=0.0) as sim:
        out = {}
        for on in (True, False):
            http = HTTPClient.from_url(sim.url, concurrency=2)
            c = StreamClient(http, sim.url, get_adapter("openai-chat"), Timeouts(2.0, 5.0, 30.0), token_reads=on)
            out[on] = c.send(RequestSpec(model="m", prompt="hello", max_tokens=60, force_length=True), f"r{on}")
            http.close()
    for rec in out.values():
        assert rec.outcome.value == "ok" and rec.n_out == 60 and len(rec.chunk_times) == 60
        assert rec.finish_reason == "length" and rec.n_out_source == "usage"
        assert all(b >= a for a, b in zip(rec.chunk_times, rec.chunk_times[1:], strict=False))
        assert rec.t_first == rec.chunk_times[0] and rec.t_sent <= rec.t_first <= rec.t_end
    assert hits[0] >= 30  # paced at 5 ms a token: most arrive one a read


class _PreemptedClock:
    """A monotonic clock that advances 200 ns a read and once waits `pause_ns` before its `at`-th
    read (the process preempted), and a wall clock `offset_ns` ahead of it: what
    stamps.clock_offset_ns reads on a loaded machine."""

    def __init__(self, offset_ns: int, pause_ns: int, at: int) -> None:
        self.mono, self.reads, self.offset_ns, self.pause_ns, self.at = 0, 0, offset_ns, pause_ns, at

    def _tick(self) -> int:
        self.reads += 1
        self.mono += 200 + (self.pause_ns if self.reads == self.at else 0)
        return self.mono

    def perf_counter_ns(self) -> int:
        return self._tick()

    def time_ns(self) -> int:
        return self._tick() + self.offset_ns


@pytest.mark.parametrize("at", [1, 2, 3, 4])
def test_the_kernel_stamps_offset_is_right_when_its_clock_reads_were_interrupted(monkeypatch, at):
    """A kernel receive stamp becomes perf_counter time through CLOCK_REALTIME - CLOCK_MONOTONIC,
    read once a stream. The old code read the two clocks one after the other: preempted 5 ms
    between them, its offset was 5 ms off, and so was every stamp of the stream (its chunk times
    went backwards where a stamp past its read's return was replaced by the return's time: a CI
    run's test_sglang_in_place). Read between two monotonic reads, and again when those were far
    apart, it is right to a read's 200 ns."""
    from llm_locust.transport import stamps

    offset = 1_800_000_000_000_000_000
    clock = _PreemptedClock(offset, pause_ns=5_000_000, at=at)
    monkeypatch.setattr(stamps.time, "perf_counter_ns", clock.perf_counter_ns)
    monkeypatch.setattr(stamps.time, "time_ns", clock.time_ns)
    assert abs(stamps.clock_offset_ns() - offset) <= 200


def test_a_stream_s_arrivals_never_go_back_after_a_stamp_past_its_read():
    """A stamp past its read's return (an offset a preempted clock read left off) is replaced by
    the return's time; the next read's true stamp, earlier than that, is then the stream's last
    arrival, not a time before it (chunk times went backwards in a CI run's fast tier)."""
    import struct

    from llm_locust.transport.stamps import SO_TIMESTAMPNS, arrival

    def anc(t: float) -> list:
        ns = round(t * 1e9)
        return [(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("qq", ns // 1_000_000_000, ns % 1_000_000_000))]

    last, got = 0.0, []
    # (stamp, the read's return): the first read's stamp is past its return, the second's is not
    for stamp, now in ((1.0105, 1.0100), (1.0099, 1.0200), (1.0300, 1.0400)):
        last = arrival(anc(stamp), now, 1.0, 0, last)
        got.append(last)
    assert got == [1.0100, 1.0100, 1.0300]
    assert arrival(anc(1.0099), 1.0200, 1.0, 0) == 1.0099  # alone, the true stamp is taken
