"""Prefix popularity laws against a real server's prefix cache (issue 39 item 3; docs/prompts.md
"Prefix popularity"): real vLLM (CPU build, SmolLM2, automatic prefix caching, the prompt tokens'
cached count in usage) sent each prompt of a Zipf-drawn workload once, in an open loop. The
server's own hit ratio (its `cached_tokens` over the prompt tokens) must agree with the ideal of
an unbounded cache (`ideal_hit_ratio`, from the prompts' prefix blocks in the order they were
sent) within 5 points. A broken law (the prefixes not shared as drawn), a broken ideal (counted
in the wrong order, or from the wrong blocks), or prompts whose shared text is not a shared token
prefix (completions, exact lengths by vLLM's own tokenizer) would all miss it.
"""

from __future__ import annotations

import json

import pytest
from support import run_ok

pytestmark = pytest.mark.real_server

VLLM_SERVER_KWARGS = {  # a server of its own: prefix caching, the cached count in usage, and
    # 32-token KV blocks (the CPU build's default is 128, its least 32): vLLM caches whole blocks
    # only, so a 64-token prefix is two of them. The CPU build prefills about 45 tokens/s here, so
    # the prompts are short and the open loop slow enough that a repeated prefix mostly finds its
    # first prompt done (measured: 30 of 30 ok in 58 s, the server's hit ratio the ideal's, 48.0%).
    "max_num_seqs": 8,
    "extra_args": ["--enable-prefix-caching", "--enable-prompt-tokens-details", "--block-size", "32"],
}


def test_a_zipf_workloads_ideal_hit_ratio_is_what_vllm_serves(vllm_server, smollm2_tokenizer, tmp_path):
    results = tmp_path / "r.json"
    run_ok(
        "--host", vllm_server.url, "--api", "openai-completions", "--model", "smollm2",
        "--tokenizer", str(smollm2_tokenizer), "--replay", "-t", "180s",
        "--synthetic", "requests=30,input=80,output=2,prefix_tokens=64,seed=3,rate=0.4",
        "--prefix-dist", "zipf:1.1:20", "--results", str(results), timeout=400,
    )  # fmt: skip
    doc = json.loads(results.read_text())
    summary = doc["summary"]
    assert summary["ok"] == 30, summary["outcomes"]
    cache = summary["cache"]
    assert cache["requests_reported"] == 30 and cache["ideal_requests"] == 30
    assert cache["hit_requests"] > 12  # the law's: most prompts find their prefix (64 of 80 tokens)
    assert 0.35 < cache["ideal_hit_ratio"] < 0.8
    assert abs(cache["hit_ratio"] - cache["ideal_hit_ratio"]) < 0.05, cache
