"""Smoke tests against a real llama.cpp llama-server (built by scripts/real-servers.sh)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
from realservers import LlamaServer, http_get

pytestmark = pytest.mark.real_server

MAX_TOKENS = 16


def stream_completion(url: str, model: str, prompt: str, max_tokens: int = MAX_TOKENS) -> tuple[int, bytes]:
    """One streaming POST /v1/completions over http.client; returns (status, raw SSE body)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        body = json.dumps(
            {
                "model": model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
                "temperature": 0.0,
            }
        )
        conn.request(
            "POST",
            "/v1/completions",
            body=body,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def parse_sse(raw: bytes) -> tuple[list[dict], bool]:
    """JSON payloads of the ``data:`` events, and whether a ``data: [DONE]`` terminator came."""
    events, done = [], False
    for line in raw.decode("utf-8").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            done = True
            continue
        events.append(json.loads(data))
    return events, done


def check_stream(srv: LlamaServer) -> dict:
    status, raw = stream_completion(srv.url, srv.alias, "The quick brown fox jumps over the lazy dog. Then")
    assert status == 200, raw[:500]
    events, done = parse_sse(raw)
    assert events, f"no SSE data events in body: {raw[:500]!r}"
    final = events[-1]
    assert final.get("usage"), f"final chunk has no usage: {final}"
    assert final["usage"]["completion_tokens"] == MAX_TOKENS, final["usage"]
    timings = final.get("timings")
    assert timings, f"final chunk has no timings: {final}"
    assert timings["predicted_n"] == MAX_TOKENS, timings
    assert timings["predicted_per_second"] > 0, timings
    assert all(e.get("model") == srv.alias for e in events if "model" in e)
    text = "".join(c.get("text", "") for e in events for c in e.get("choices", []))
    assert text, "streamed no text"
    print(
        f"{srv.alias}: {timings['predicted_n']} tokens at {timings['predicted_per_second']:.1f} tok/s "
        f"(prompt {timings['prompt_n']} tokens in {timings['prompt_ms']:.1f} ms), [DONE]={done}"
    )
    return final


def check_metrics(srv: LlamaServer) -> None:
    status, body = http_get(srv.url + "/metrics")
    assert status == 200, body[:500]
    text = body.decode()
    assert "llamacpp:" in text, text[:500]
    # the request above went through, so the token counter is non-zero
    for line in text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total"):
            assert float(line.split()[-1]) >= MAX_TOKENS, line
            break
    else:
        pytest.fail(f"llamacpp:tokens_predicted_total missing from /metrics:\n{text[:1000]}")


def test_tiny_model_streams_exact_token_count(llama_server_bin, tiny_model):
    with LlamaServer(tiny_model, binary=llama_server_bin, alias="tiny", slots=2, ctx=2048) as srv:
        assert http_get(srv.url + "/health")[0] == 200
        check_stream(srv)
        check_metrics(srv)


def test_smollm2_streams_exact_token_count(llama_server_bin, smollm2_model):
    with LlamaServer(smollm2_model, binary=llama_server_bin, alias="smollm2", slots=2, ctx=2048) as srv:
        check_stream(srv)
        check_metrics(srv)
