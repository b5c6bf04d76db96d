"""The streaming APIs' SSE decoder + adapter cost beside openai-completions, in-process.

What: million tokens per second through `SSEDecoder.feed` and the API's adapter `feed`, and
through the decoder alone, for openai-completions, openai-responses and anthropic-messages.
How: each stream is STREAM_TOKENS minimal one-token events (as servers flush them: one event a
piece, each fed to the decoder on its own), STREAMS_PER_REPEAT streams a repeat, best of
REPEATS; each ratio is to openai-completions run in the same process (these machines are noisy).
For whole, server-shaped 256-token streams of all five APIs fed the same way, see
`bench_api_ingest.py --in-process`. Numbers only, no assertions on timing.

    python benchmarks/bench_api_adapters.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llm_locust.protocols import get_adapter  # noqa: E402
from llm_locust.protocols.base import StreamState  # noqa: E402
from llm_locust.protocols.sse import SSEDecoder  # noqa: E402

STREAM_TOKENS = 256  # one-token events per stream
STREAMS_PER_REPEAT = 20
REPEATS = 7  # the best (shortest) repeat is kept
TOKEN_TEXT = "tok"
BASELINE = "openai-completions"


def completions_events(n: int = STREAM_TOKENS) -> list[bytes]:
    """n minimal /v1/completions token chunks."""
    data = orjson.dumps({"choices": [{"index": 0, "text": TOKEN_TEXT}]})
    return [b"data: " + data + b"\n\n"] * n


def responses_events(n: int = STREAM_TOKENS) -> list[bytes]:
    """n minimal Responses `response.output_text.delta` events."""
    data = orjson.dumps(
        {"type": "response.output_text.delta", "delta": TOKEN_TEXT, "output_index": 0, "content_index": 0}
    )
    return [b"event: response.output_text.delta\ndata: " + data + b"\n\n"] * n


def anthropic_events(n: int = STREAM_TOKENS) -> list[bytes]:
    """n minimal Anthropic `content_block_delta` text_delta events."""
    data = orjson.dumps(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TOKEN_TEXT}}
    )
    return [b"event: content_block_delta\ndata: " + data + b"\n\n"] * n


EVENTS = {
    "openai-completions": completions_events,
    "openai-responses": responses_events,
    "anthropic-messages": anthropic_events,
}


def feed_streams(api: str, events: list[bytes], with_adapter: bool, streams: int) -> None:
    """Decode `streams` streams of `events` (one feed call per event), each with a fresh
    decoder and state, passing every payload to the adapter when with_adapter."""
    adapter = get_adapter(api)
    for _ in range(streams):
        decoder = SSEDecoder()
        state = StreamState()
        for event in events:
            for payload in decoder.feed(event):
                if with_adapter:
                    adapter.feed(payload, state)


def tokens_per_second(
    api: str,
    events: list[bytes],
    n_tokens: int,
    with_adapter: bool = True,
    streams: int = STREAMS_PER_REPEAT,
    repeats: int = REPEATS,
) -> float:
    """Million tokens per second (n_tokens per stream), from the best of `repeats` timings."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        feed_streams(api, events, with_adapter, streams)
        best = min(best, time.perf_counter() - t0)
    return streams * n_tokens / best / 1e6


def main() -> int:
    for label, with_adapter in (("decoder+adapter", True), ("decoder only", False)):
        rates = {api: tokens_per_second(api, build(), STREAM_TOKENS, with_adapter) for api, build in EVENTS.items()}
        base = rates[BASELINE]
        parts = [f"{BASELINE} {base:.2f} M tok/s"]
        parts += [f"{api} {rate:.2f} ({rate / base:.0%})" for api, rate in rates.items() if api != BASELINE]
        print(f"{label}: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
