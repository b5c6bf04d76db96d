"""Issue 26 item 5 on real servers: --reset-cache's reset (runtime/cache_reset.py) empties a real
llama-server's and a real vLLM's prefix cache, and a server that cannot or will not is reported.

What a broken implementation would fail here:
- llama-server started with --slot-save-path (and --cache-ram 0: its host-memory prompt cache has
  no endpoint): after the reset a prompt it had cached is prefilled again: its usage says 0 cached
  tokens and llamacpp:prompt_tokens_cached_total does not rise; without --slot-save-path the slot
  action answers 501 and the reset says "not supported" with the option that turns it on;
- vLLM with VLLM_SERVER_DEV_MODE=1 and prefix caching: after the reset the prompt's second
  sending finds nothing (usage cached_tokens 0, vllm:prefix_cache_hits_total does not rise); with
  a request running vLLM answers {"success": false} and the reset says "refused", busy.
"""

from __future__ import annotations

import http.client
import json
import uuid
from urllib.parse import urlsplit

import pytest
from realservers import LlamaServer, http_get, smollm2_tokenizer_dir
from support import run_cli

from llm_locust.analysis import server_metrics
from llm_locust.transport import server_cache

pytestmark = pytest.mark.real_server

TEXT = (
    "The river that runs past the old mill carries leaves, small stones and the songs of the "
    "village children down to the sea, where fishermen mend their nets at dawn. "
)


def _open(
    url: str, model: str, prompt: str, max_tokens: int
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
    conn.request("POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"})
    return conn, conn.getresponse()


def _cached(url: str, model: str, prompt: str) -> int:
    """The prompt's cached tokens as the server's usage says (prompt_tokens_details.cached_tokens)."""
    conn, resp = _open(url, model, prompt, 4)
    try:
        raw = resp.read().decode()
    finally:
        conn.close()
    assert resp.status == 200, raw[:300]
    events = [json.loads(ln[6:]) for ln in raw.splitlines() if ln.startswith("data: {")]
    usage = [e["usage"] for e in events if e.get("usage")][-1]
    return usage["prompt_tokens_details"]["cached_tokens"]


def _hits(url: str) -> float:
    status, body = http_get(url + "/metrics", timeout=10.0)
    assert status == 200
    return server_metrics.read(body.decode())[1]["prefix_cache_hits_total"]


def test_llama_server_slots_erased_and_a_server_without_the_action_reported(smollm2_model, tmp_path):
    prompt = f"{uuid.uuid4().hex} " + TEXT * 3
    extra = ["--slot-save-path", str(tmp_path), "--cache-ram", "0"]
    with LlamaServer(smollm2_model, slots=2, extra_args=extra) as srv:
        _cached(srv.url, "smollm2", prompt)
        assert _cached(srv.url, "smollm2", prompt) > 0  # cached before the reset
        r = server_cache.reset(srv.url, {}, None, "before step 2")
        assert (r.outcome, r.engine, r.status) == ("ok", "llama.cpp", 200), r
        assert "2 slots" in r.detail
        before = _hits(srv.url)
        assert _cached(srv.url, "smollm2", prompt) == 0
        assert _hits(srv.url) == before
    with LlamaServer(smollm2_model, slots=2) as plain:
        r = server_cache.reset(plain.url, {}, None)
        assert (r.outcome, r.engine, r.status) == ("not_supported", "llama.cpp", 501), r
        assert "--slot-save-path" in r.line()


def test_vllm_reset_empties_the_prefix_cache_and_a_busy_one_refuses(vllm_server, tmp_path):
    srv = vllm_server  # realservers.VLLM_SHARED: the prefix cache, its per-request counts, the dev routes
    prompt = f"{uuid.uuid4().hex} " + TEXT * 4
    _cached(srv.url, "smollm2", prompt)
    assert _cached(srv.url, "smollm2", prompt) > 0
    r = server_cache.reset(srv.url, {}, None, "before the run")
    assert (r.outcome, r.engine, r.status) == ("ok", "vllm", 200), r
    before = _hits(srv.url)
    assert _cached(srv.url, "smollm2", prompt) == 0
    assert _hits(srv.url) <= before
    conn, resp = _open(srv.url, "smollm2", prompt + " and then", 1500)  # runs for many seconds
    try:
        resp.readline()  # its first bytes: the request is in the engine
        busy = server_cache.reset(srv.url, {}, "vllm")
    finally:
        conn.close()
    assert (busy.outcome, busy.busy, busy.status) == ("refused", True, 200), busy
    # --prefix-hit on the same server (issue 26 item 5's plan): flushed, primed, measured,
    # checked against vLLM's own prefix_cache_hits / queries (its CPU build's 128-token blocks: 128 of 256)
    # (vLLM's CPU build prefills about 45 tokens/s on 2 cores: a 256-token prompt takes 6-8 s, so
    # 20 s left the measured requests unfinished at the stop when the CPU was shared; 60 s)
    hit = _prefix_hit_run(srv.url, str(smollm2_tokenizer_dir()), tmp_path, 0.5, duration="60s")["prefix_hit"]
    assert hit["source"] == "counters" and abs(hit["achieved"] - 0.5) < 0.05, hit


def _prefix_hit_run(
    url: str, tokenizer, tmp_path, ratio: float, users: int = 2, input_tokens: int = 256, duration: str = "20s"
) -> dict:
    """`llm-locust run --prefix-hit RATIO` against a real server: its results."""
    results = tmp_path / f"hit-{ratio}.json"
    p = run_cli(
        "--host", url, "--api", "openai-completions", "--model", "smollm2", "--tokenizer", tokenizer,
        "--synthetic", f"requests=100,input={input_tokens},output=2", "-u", str(users), "-t", duration,
        "--prefix-hit", str(ratio), "--results", results, timeout=180,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert f"prefix hit: target {ratio:.0%}, the server's counters" in " ".join(p.stdout.split())
    return json.loads(results.read_text())


@pytest.mark.timing  # its figures move with the CPU it gets: it runs alone (tests/alone.py)
def test_a_prefix_hit_run_gets_the_ratio_it_asks_for_on_llama_server(smollm2_model, smollm2_tokenizer, tmp_path):
    """Issue 26 item 5's controlled prefix-hit plan on llama-server: flushed (slot erase), primed,
    measured: the server's own counters (prompt_tokens_cached against prompt_tokens) give the
    ratio asked for."""
    extra = ["--slot-save-path", str(tmp_path), "--cache-ram", "0"]
    # one user, 128-token prompts, one thread: a CPU shared with vLLM's shard still answers in time
    # (with 2 users of 256 tokens under that load the measured requests never ended within -t)
    with LlamaServer(smollm2_model, slots=2, threads=1, extra_args=extra) as srv:
        for ratio in (0.5, 0.25):
            r = _prefix_hit_run(srv.url, smollm2_tokenizer, tmp_path, ratio, users=1, input_tokens=128)
            hit = r["prefix_hit"]
            assert r["summary"]["ok"] >= 5, r["summary"]
            assert hit["source"] == "counters" and abs(hit["achieved"] - ratio) < 0.05, hit
            assert r["run"]["cache_reset"]["outcome"] == "ok", r["run"]["cache_reset"]
            assert {g["name"]: g["passed"] for g in r["gates"]}["prefix_hit"] is True
