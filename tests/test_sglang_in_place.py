"""SGLang's /generate events read in place (protocols.sglang.read_events through
SSEDecoder.read_events): with the text not kept, the mid-stream events' counts are read where they
lie in the read's buffer instead of each event being cut out and parsed. Whatever the bytes and
however they are split, every read must give the same token events (so the same chunk times), the
same counts, finish, usage and errors as reading each event whole; anything unexpected must fall
back to that whole read. And the client must time such a stream exactly as before."""

from __future__ import annotations

import random

import orjson
import pytest
from geventhttpclient import HTTPClient
from support import canned_server, sse_reply

from llm_locust.metrics.records import Outcome
from llm_locust.protocols import ProtocolError, get_adapter, make_decoder
from llm_locust.protocols.base import RequestSpec, StreamState
from llm_locust.transport.http import StreamClient, Timeouts

# Words whose JSON form holds the very patterns the reader looks for, inside a string, where a
# quote is always escaped: they must never be taken for keys.
WORDS = [" Paris", ' "completion_tokens":99,', ' {"finish_reason":null}', " \u00e9t\u00e9", ' "error":', " \\", " x"]


def real_event(text: str, ids: list[int], count: int, finish=None, **extra) -> dict:
    """An event as SGLang's /generate sends it: text, output_ids, then meta_info, last."""
    meta = {
        "id": "4f9c1e0b6a5d4c3e8f7a2b1c0d9e8f7a",
        "finish_reason": finish,
        "prompt_tokens": 7,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": count,
        "cached_tokens": 3,
        "e2e_latency": 0.0123 * count,
    }
    return {"text": text, "output_ids": ids, "meta_info": meta, **extra}


def frame(events: list) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n" for e in events)


def long_stream(n: int, step: int = 1, **last_extra) -> bytes:
    """n events of cumulative text and ids; counts grow by `step` (several tokens an event when
    step > 1, and a repeated count every 7th event: an event with no new token)."""
    events, text, ids, count = [], "", [], 0
    for k in range(1, n + 1):
        text += WORDS[k % len(WORDS)]
        ids.append(1000 + k)
        count += 0 if k % 7 == 0 else step
        finish = {"type": "length", "length": count} if k == n else None
        events.append(real_event(text, list(ids), count, finish, **(last_extra if k == n else {})))
    return frame(events + [b"[DONE]"])


def read(pieces: list[bytes], in_place: bool):
    """Token events per piece fed (then at the close) and the state, reading in place or not."""
    adapter = get_adapter("sglang-generate")
    state = StreamState(False)
    decoder = make_decoder(adapter, state=state if in_place else None)
    per_piece = []
    try:
        for piece in pieces:
            out = decoder.feed(piece)
            n = 0
            if out and type(out[0]) is int:
                n, out = out[0], out[1:]
            per_piece.append(n + sum(1 for p in out if adapter.feed(p, state)))
        per_piece.append(sum(1 for p in decoder.close() if adapter.feed(p, state)))
    except ProtocolError as e:
        return "error", str(e)
    return per_piece, (
        list(state.cont_tokens),
        state.cont_out,
        state.usage_in,
        state.usage_out,
        state.usage_cached,
        state.finish_reason,
        state.error,
        state.done,
    )


def splits(body: bytes, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    out, i = [], 0
    while i < len(body):
        k = rnd.choice([1, 2, 3, 50, 700, 4096, 65536, 262144])
        out.append(body[i : i + k])
        i += k
    return out


BODIES = {
    "long": long_stream(120),
    "multi-token events": long_stream(60, step=3),
    "crlf": long_stream(40).replace(b"\n", b"\r\n"),
    "no space after data:": long_stream(30).replace(b"data: ", b"data:"),
    "comment between events": long_stream(30).replace(b"}}\n\ndata: ", b"}}\n\n: keep-alive\n\ndata: ", 5),
    "index after meta_info": frame(
        [
            {**real_event("A", [1], 1), "index": 0},
            {**real_event("A b", [1, 2], 2), "index": 0},
            {**real_event("A b c", [1, 2, 3], 3, {"type": "stop"}), "index": 0},
            b"[DONE]",
        ]
    ),
    "error after meta_info": frame(
        [
            real_event("A", [1], 1),
            {**real_event("A b", [1, 2], 2), "error": {"message": "boom"}},
            real_event("A b c", [1, 2, 3], 3, {"type": "length", "length": 3}),
            b"[DONE]",
        ]
    ),
    "error event": frame([real_event("A", [1], 1), {"error": {"message": "out of memory"}}, b"[DONE]"]),
    "abort": frame(
        [real_event("A", [1], 1), real_event("A", [1], 1, {"type": "abort", "message": "client gone"}), b"[DONE]"]
    ),
    "count past the bound": frame(
        [
            real_event("A", [1], 1),
            real_event("A b", [1, 2], 1_000_000_001),
            real_event("A b c", [1, 2, 3], 1_000_000_002, {"type": "length"}),
            b"[DONE]",
        ]
    ),
    "count not a number": long_stream(5).replace(b'"completion_tokens":2,', b'"completion_tokens":"2",'),
    "count falls": frame(
        [
            real_event("A", [1], 5),
            real_event("A b", [1, 2], 3),
            real_event("A b c", [1, 2, 3], 6, {"type": "length", "length": 6}),
            b"[DONE]",
        ]
    ),
    "no counts": frame(
        [
            {"text": "A", "meta_info": {"finish_reason": None}},
            real_event("A b", [1, 2], 2),
            real_event("A b c", [1, 2, 3], 3, {"type": "length"}),
            b"[DONE]",
        ]
    ),
    "broken last event": long_stream(20).replace(b'"length":20}', b'"length":20'),
    "two data lines": long_stream(10).replace(b',"output_ids"', b'\ndata: ,"output_ids"', 1),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_in_place_reading_agrees_with_reading_each_event_in_any_split(name):
    body = BODIES[name]
    ways = [[body], [body[i : i + 65536] for i in range(0, len(body), 65536)], *(splits(body, s) for s in range(12))]
    if len(body) < 20_000:
        ways.append([body[i : i + 1] for i in range(len(body))])
    for pieces in ways:
        assert read(pieces, in_place=True) == read(pieces, in_place=False), (name, [len(p) for p in pieces][:20])


def test_in_place_reading_matches_reading_with_the_text_kept():
    """The per-event path is itself checked against reading everything (text kept)."""
    body = BODIES["multi-token events"]
    adapter = get_adapter("sglang-generate")
    whole = StreamState(True)
    decoder = make_decoder(adapter, state=whole)  # text kept: no in-place reading
    assert decoder.read_events is None
    kinds = [adapter.feed(p, whole) for p in decoder.feed(body) + decoder.close()]
    per_piece, (tokens, cont_out, usage_in, usage_out, cached, finish, error, done) = read([body], in_place=True)
    assert per_piece[0] == sum(1 for k in kinds if k) == 52  # 60 events, 8 of them without a new token
    assert (tokens, cont_out, usage_out, usage_in, cached, finish, error, done) == (
        list(whole.cont_tokens),
        whole.cont_out,
        whole.usage_out,
        7,
        3,
        "length",
        None,
        True,
    )
    assert sum(tokens) == usage_out == 3 * 52


def test_in_place_reading_is_taken_and_the_last_event_is_still_read_whole(monkeypatch):
    import llm_locust.protocols.sglang as sglang

    whole_reads = []
    real = sglang.event_object
    monkeypatch.setattr(sglang, "event_object", lambda p, s: whole_reads.append(p) or real(p, s))
    monkeypatch.setattr(sglang, "_counts_only", lambda p, s: whole_reads.append(p))
    body = long_stream(200)
    per_piece, state = read([body[i : i + 65536] for i in range(0, len(body), 65536)], in_place=True)
    assert sum(per_piece) == 200 - 200 // 7
    # only the last event (its finish reason and usage: tried for its counts, then read whole)
    # and [DONE] went through the adapter
    assert (
        len(whole_reads) == 3
        and whole_reads[0] == whole_reads[1]
        and whole_reads[-1] == b"[DONE]"
        and b'"length"' in whole_reads[-2]
    )
    assert state[3] == 200 - 200 // 7 and state[5] == "length"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_client_times_an_in_place_read_stream_as_before(chunked):
    """Over real HTTP, in the client's own reads: without the text kept (in place) the record has
    the same tokens, chunk counts, per-chunk tokens, usage and finish as with it kept."""
    body = long_stream(300, step=2)
    if chunked:
        pieces = [body[i : i + 5000] for i in range(0, len(body), 5000)]
        reply = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
            + b"0\r\n\r\n"
        )
    else:
        reply = sse_reply(body)
    records = {}
    for keep in (False, True):
        server = canned_server(reply)
        try:
            url = f"http://127.0.0.1:{server.server_port}"
            http = HTTPClient.from_url(url, concurrency=2, connection_timeout=2.0, network_timeout=5.0)
            client = StreamClient(http, url, get_adapter("sglang-generate"), Timeouts(2.0, 5.0, 10.0), None, keep)
            records[keep] = client.send(
                RequestSpec(model="m", prompt="p", max_tokens=600, force_length=True), f"r{keep}"
            )
        finally:
            server.stop()
    fast, whole = records[False], records[True]
    assert fast.outcome is Outcome.OK and whole.outcome is Outcome.OK, (fast.error, whole.error)
    assert fast.n_out == whole.n_out == 2 * (300 - 300 // 7)
    assert fast.chunk_tokens == whole.chunk_tokens and len(fast.chunk_times) == len(whole.chunk_times) == 300 - 300 // 7
    assert (
        (fast.n_in, fast.n_cached, fast.finish_reason)
        == (whole.n_in, whole.n_cached, whole.finish_reason)
        == (7, 3, "length")
    )
    assert fast.t_first == fast.chunk_times[0] and fast.t_first_content == fast.t_first
    assert all(b >= a for a, b in zip(fast.chunk_times, fast.chunk_times[1:], strict=False))
    assert fast.text is None and whole.text
