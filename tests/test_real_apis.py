"""The OpenAI Responses and Anthropic Messages adapters end to end against real servers: llama.cpp's
llama-server (SmolLM2) here, vLLM's CPU build in test_real_vllm.py (on that module's server).
Through StreamClient, as a run sends them: every request ok, our output token count
equal to the server's own (its usage, its timings, and its Prometheus token counter over the whole
test), TTFT no less than the server's
own prompt time where it reports one."""

from __future__ import annotations

import functools
import itertools

import pytest
from realservers import LlamaServer, http_get
from support import stream_client

from llm_locust.metrics.records import Outcome
from llm_locust.protocols import RequestSpec, get_adapter, request_headers
from llm_locust.protocols.base import Timeouts

pytestmark = pytest.mark.real_server

MAX_TOKENS = 16
PER_API = 3
ids = itertools.count()

# llama-server closes a kept-alive connection after a streamed reply, at times only after the client has
# reused it (then a connect_error, on every API, openai-chat included): one connection per request keeps
# this test about the APIs
client_for = functools.partial(
    stream_client,
    api_key="sk-unused",
    headers={"Connection": "close"},
    timeouts=Timeouts(5.0, 120.0, 300.0),
    concurrency=4,
    network_timeout=120.0,
)


def spec(model, i, force=True):
    messages = [
        {"role": "system", "content": "You are brief."},
        {"role": "user", "content": f"Tell me fact number {i} about the sea."},
    ]
    return RequestSpec(
        model=model, messages=messages, max_tokens=MAX_TOKENS, force_length=force, extra_body={"temperature": 0}
    )


def counter(url, name) -> float:
    status, body = http_get(url + "/metrics")
    assert status == 200, body[:300]
    for line in body.decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            return float(line.split()[-1])
    raise AssertionError(f"{name} missing from {url}/metrics")


def run_api(url, model, api, force=True):
    client = client_for(url, api)
    recs = [client.send(spec(model, i, force), f"real-{api}-{next(ids)}") for i in range(PER_API)]
    for rec in recs:
        assert rec.outcome is Outcome.OK, rec.error
        assert rec.n_out_source == "usage" and rec.n_in_source == "usage"
        assert rec.t_sent < rec.t_headers <= rec.t_first <= rec.t_end
        assert rec.text and rec.finish_reason
    return recs


@pytest.fixture(scope="module")
def llama(llama_server_bin, smollm2_model):
    with LlamaServer(smollm2_model, binary=llama_server_bin, alias="smollm2", slots=2, ctx=2048) as srv:
        yield srv


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages"])
def test_llama_server(llama, api):
    before = counter(llama.url, "llamacpp:tokens_predicted_total")
    recs = run_api(llama.url, llama.alias, api)
    after = counter(llama.url, "llamacpp:tokens_predicted_total")
    # ignore_eos is honoured on both routes: exactly max_tokens, as usage says and as the
    # server's own token counter says
    assert [r.n_out for r in recs] == [MAX_TOKENS] * PER_API
    assert after - before == sum(r.n_out for r in recs)
    for r in recs:
        assert not r.length_mismatch
        assert sum(r.chunk_tokens) == r.n_out and len(r.chunk_times) <= r.n_out  # merged UTF-8 pieces only
        if api == "openai-responses":
            timings = r.extra["timings"]
            assert timings["predicted_n"] == r.n_out
            assert r.n_in == timings["prompt_n"] + timings["cache_n"]
            assert r.t_first - r.t_sent >= timings["prompt_ms"] / 1000  # our TTFT includes its prefill
            assert r.finish_reason == "completed"
        else:
            assert r.finish_reason == "max_tokens"
            assert r.n_in >= 10
    print(
        f"llama-server {api}: n_out {[r.n_out for r in recs]} == usage, server counter +{after - before:g}; "
        f"TTFT ms {[round((r.t_first - r.t_sent) * 1000, 1) for r in recs]}"
    )


def test_model_listing_works_for_both(llama):
    """Both APIs are in OPENAI_APIS: the run lists the model at /v1/models with their headers."""
    from llm_locust.transport.http import Timeouts
    from llm_locust.transport.served import fetch_models

    for api in ("openai-responses", "anthropic-messages"):
        assert fetch_models(llama.url, request_headers(get_adapter(api), None), Timeouts()) == ["smollm2"]
