"""Throughput of the per-chunk hot path: SSEDecoder + openai-completions adapter.

A realistic 256-event vLLM-style /v1/completions stream (~200-byte events, a usage chunk and
[DONE]) is decoded and interpreted (a) fed whole, (b) 4 events per feed, (c) one event per
feed, and compared with bare `orjson.loads` of the same payloads in this process.
Run: python benchmarks/bench_protocols.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from llm_locust.protocols import StreamState, get_adapter, make_decoder

N_EVENTS = 256


def make_stream() -> tuple[list[bytes], list[bytes]]:
    """The events (raw bytes, one per SSE event) and their data payloads."""
    payloads = []
    words = [" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", ","]
    for i in range(N_EVENTS - 2):
        last = i == N_EVENTS - 3
        obj = {
            "id": "cmpl-b9f6f85687d8d885",
            "object": "text_completion",
            "created": 1795943888,
            "model": "smollm2-135m",
            "choices": [
                {
                    "index": 0,
                    "text": words[i % len(words)],
                    "logprobs": None,
                    "finish_reason": "length" if last else None,
                    "stop_reason": None,
                }
            ],
        }
        payloads.append(orjson.dumps(obj))
    usage = {
        "id": "cmpl-b9f6f85687d8d885",
        "object": "text_completion",
        "created": 1795943888,
        "model": "smollm2-135m",
        "choices": [],
        "usage": {"prompt_tokens": 4, "total_tokens": 258, "completion_tokens": N_EVENTS - 2},
    }
    payloads.append(orjson.dumps(usage))
    payloads.append(b"[DONE]")
    events = [b"data: " + p + b"\n\n" for p in payloads]
    return events, payloads


def run_stream(adapter, pieces: list[bytes]) -> int:
    decoder = make_decoder(adapter)
    state = StreamState()
    feed = adapter.feed
    n = 0
    for piece in pieces:
        for payload in decoder.feed(piece):
            if feed(payload, state):
                n += 1
    for payload in decoder.close():
        feed(payload, state)
    return n


def bench(fn, n_events: int, min_time: float = 0.5) -> float:
    """Best-of-5 seconds per event."""
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        if time.perf_counter() - t0 > min_time / 5:
            break
        reps *= 2
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best / n_events


def main() -> None:
    adapter = get_adapter("openai-completions")
    events, payloads = make_stream()
    body = b"".join(events)
    cases = {
        "whole body, 1 feed": [body],
        "4 events per feed": [b"".join(events[i : i + 4]) for i in range(0, len(events), 4)],
        "1 event per feed": events,
    }
    assert run_stream(adapter, [body]) == N_EVENTS - 2
    loads = orjson.loads

    def baseline() -> None:
        for p in payloads:
            if p != b"[DONE]":
                loads(p)

    base = bench(baseline, N_EVENTS)
    print(f"{N_EVENTS} events, mean {len(body) / N_EVENTS:.0f} bytes/event")
    print(f"{'case':<24}{'events/s':>12}{'ns/event':>10}{'x orjson.loads':>16}")
    print(f"{'orjson.loads baseline':<24}{1 / base:>12,.0f}{base * 1e9:>10.0f}{1.0:>16.2f}")
    for label, pieces in cases.items():
        t = bench(lambda pieces=pieces: run_stream(adapter, pieces), N_EVENTS)
        print(f"{label:<24}{1 / t:>12,.0f}{t * 1e9:>10.0f}{t / base:>16.2f}")
    for label, pieces in cases.items():

        def decode_only(pieces=pieces) -> None:
            d = make_decoder(adapter)
            for piece in pieces:
                d.feed(piece)

        t = bench(decode_only, N_EVENTS)
        print(f"{'decoder only, ' + label:<40}{1 / t:>12,.0f} events/s {t * 1e9:>6.0f} ns/event")


if __name__ == "__main__":
    main()
