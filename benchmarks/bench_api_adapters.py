"""The new streaming APIs' decoder + adapter cost beside openai-completions, in-process.

    python benchmarks/bench_api_adapters.py

256 one-token events per stream (as servers flush them: one event a piece), 20 streams a
repeat, best of 7: million tokens per second for openai-completions, openai-responses and
anthropic-messages, with the SSE decoder and adapter together and the decoder alone; each ratio
is to openai-completions run in the same process (these machines are noisy). Numbers only.
"""

import time
from llm_locust.protocols.sse import SSEDecoder
from llm_locust.protocols import get_adapter
from llm_locust.protocols.base import StreamState
import orjson
def bench(api, events, adapter=True):
    ad = get_adapter(api); best = 1e9
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(20):
            d = SSEDecoder(); st = StreamState()
            for e in events:
                for p in d.feed(e):
                    if adapter: ad.feed(p, st)
        best = min(best, time.perf_counter() - t)
    return 20 * 256 / best / 1e6
comp = [b"data: " + orjson.dumps({"choices": [{"index": 0, "text": "tok"}]}) + b"\n\n" for _ in range(256)]
resp = [b"event: response.output_text.delta\ndata: " + orjson.dumps({"type": "response.output_text.delta", "delta": "tok", "output_index": 0, "content_index": 0}) + b"\n\n" for _ in range(256)]
anth = [b"event: content_block_delta\ndata: " + orjson.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "tok"}}) + b"\n\n" for _ in range(256)]
for label, adp in (("decoder+adapter", True), ("decoder only", False)):
    c = bench("openai-completions", comp, adp); r = bench("openai-responses", resp, adp); a = bench("anthropic-messages", anth, adp)
    print(f"{label}: openai-completions {c:.2f} M tok/s; openai-responses {r:.2f} ({r/c:.0%}); anthropic-messages {a:.2f} ({a/c:.0%})")
