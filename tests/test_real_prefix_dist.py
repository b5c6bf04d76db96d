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

VLLM_SERVER_KWARGS = {  # a server of its own: prefix caching, and the cached count in usage
    "max_num_seqs": 8,
    "extra_args": ["--enable-prefix-caching", "--enable-prompt-tokens-details"],
}


def test_a_zipf_workloads_ideal_hit_ratio_is_what_vllm_serves(vllm_server, smollm2_tokenizer, tmp_path):
    results = tmp_path / "r.json"
    run_ok(
        "--host", vllm_server.url, "--api", "openai-completions", "--model", "smollm2",
        "--tokenizer", str(smollm2_tokenizer), "--replay", "-t", "60s",
        "--synthetic", "requests=120,input=300,output=2,prefix_tokens=256,seed=3,rate=6",
        "--prefix-dist", "zipf:1.1:20", "--results", str(results), timeout=400,
    )  # fmt: skip
    doc = json.loads(results.read_text())
    summary = doc["summary"]
    assert summary["ok"] == 120, summary["outcomes"]
    cache = summary["cache"]
    assert cache["requests_reported"] == 120 and cache["ideal_requests"] == 120
    assert 0.5 < cache["ideal_hit_ratio"] < 0.85  # the law's: most prompts find their prefix
    assert abs(cache["hit_ratio"] - cache["ideal_hit_ratio"]) < 0.05, cache
