"""The LLM view on Locust's web UI: the data builder (plain inputs) and, in a real headless
Chromium, a real Locust with its web UI driving a ladder against the simulator."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import pytest
import support
from support import free_port

from llm_locust.analysis.server_metrics import Sample, ServerSeries
from llm_locust.analysis.steps import step_result
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.histogram import Histogram
from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.report import live as D
from llm_locust.report.live import Inputs, LadderInputs, LiveView, server_columns, summary_rows
from llm_locust.runtime.webui import guard  # imports Locust, which patches ssl: before any test runs

T0 = 1_700_000_000.0


def rec(t, *, ttft=0.05, n=8, gap=0.01, outcome=Outcome.OK, requested=None, error=None) -> RequestRecord:
    """A request sent at wall time t (perf clock = wall clock here)."""
    ok = outcome is Outcome.OK
    times = [t + ttft + i * gap for i in range(n)] if ok else []
    return RequestRecord(
        request_id="r",
        api="openai-chat",
        t_sched=t,
        t_sent=t,
        wall_sent=t,
        t_first=times[0] if times else None,
        t_first_content=times[0] if times else None,
        t_end=(times[-1] + 0.001) if times else t + 0.01,
        chunk_times=times,
        chunk_tokens=[1] * len(times),
        n_out=len(times),
        n_in=10,
        n_in_source="usage",
        requested_out=requested,
        outcome=outcome,
        error=None if ok else (error or "boom"),
    )


def fold(aggs, r, slos=None):
    for a in aggs:
        a.add_sent()
        a.add(r, slos)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def inputs(total, now, **kw) -> Inputs:
    kw.setdefault("state", "running")
    kw.setdefault("users", 4)
    kw.setdefault("in_flight", 2)
    kw.setdefault("steps", {0: total})
    return Inputs(now=now, total=total, **kw)


def test_recent_percentiles_see_only_the_last_window():
    h = {"ttft": Histogram()}
    ring = D.CountsRing(("ttft",), window=10.0)
    for _ in range(1000):
        h["ttft"].record(1.0)  # slow, long ago
    ring.add(T0, h)
    start, first = ring.recent(T0, h)
    assert start is None and first["ttft"]["p50"] == pytest.approx(1.0, rel=1e-3)  # nothing older: all so far
    for i in range(1, 12):
        ring.add(T0 + i, h)
    for _ in range(100):
        h["ttft"].record(0.010)  # fast, just now
    start, recent = ring.recent(T0 + 12, h)
    assert start == pytest.approx(T0 + 2)  # the newest snapshot at least 10 s old
    assert recent["ttft"]["p99"] == pytest.approx(0.010, rel=1e-3)  # the slow ones are out of the window
    assert h["ttft"].percentile(50) == pytest.approx(1.0, rel=1e-3)  # while the run's median is still slow
    assert len(ring.snaps) <= 12


# ---- the payload ----


def populated(n_per_s=20, seconds=30, start=T0):
    total = Aggregate()
    for s in range(seconds):
        for k in range(n_per_s):
            t = start + s + k / n_per_s
            fold([total], rec(t, ttft=0.05 + 0.001 * k, requested=8))
    return total


def test_payload_figures_series_and_incremental_polls():
    total = populated()
    fold([total], rec(T0 + 5, outcome=Outcome.HTTP_ERROR, error="HTTP 500: overloaded"))
    fold([total], rec(T0 + 6, outcome=Outcome.HTTP_ERROR, error="HTTP 500: overloaded"))
    fold([total], rec(T0 + 7, outcome=Outcome.TIMEOUT, error="no progress for 30 s"))
    now = T0 + 31.5
    clock = Clock()
    view = LiveView(clock=clock)
    p = view.payload(lambda: inputs(total, now), since=0)
    orjson.dumps(p)  # plain JSON types only
    t = p["totals"]
    assert t["ok"] == 600 and t["failed"] == 3 and t["sent"] == 603
    assert t["tokens_out"] == 600 * 8 and t["length_checked"] == 600 and t["length_mismatch"] == 0
    assert p["failures"]["http_error"] == {"n": 2, "texts": [["HTTP 500: overloaded", 2]]}
    assert p["failures"]["timeout"]["n"] == 1
    # last 10 complete seconds (lag 1 s): 20 req/s, 160 tok/s
    assert p["recent"]["requests_per_s"] == pytest.approx(20, rel=0.1)
    assert p["recent"]["output_tokens_per_s"] == pytest.approx(160, rel=0.1)
    lat = p["latency"]["ttft"]
    assert lat["count"] == 600 and 0.05 <= lat["p50"] <= 0.07 and lat["p99"] <= 0.0701
    assert p["latency"]["itl"]["p50"] == pytest.approx(0.010, rel=2e-3)
    # the per-second series, whole run on the first poll, up to the last complete second
    sec = p["series"]["sec"]
    assert sec[0] == int(T0) and sec[-1] == int(now - 1) - 1
    assert (
        sum(p["series"]["ok"]) == sum(b[1] for s, b in total.series.items() if s <= sec[-1]) == 598
    )  # 2 end in second 30
    assert sum(p["series"]["tokens"]) == sum(b[0] for s, b in total.series.items() if s <= sec[-1])
    assert p["samples"]["t"] == [round(now, 2)] and p["samples"]["ttft_p50"][0] is not None
    assert p["step"] is None and p["ladder"] is None and p["workers"] is None
    assert p["client"]["valid"] is True

    # a poll within the same second gets the cached snapshot, and nothing older than `since`
    before = view.computations
    clock.t += 0.4
    q = view.payload(lambda: pytest.fail("inputs read again within a second"), since=p["now"])
    assert view.computations == before and q["samples"]["t"] == []
    assert q["series"]["sec"][0] == int(p["now"]) - p["series_tail"]  # the re-sent tail only
    assert len(q["series"]["sec"]) < len(sec)
    # a second later it is recomputed, and the new sample comes alone
    clock.t += 1.0
    r = view.payload(lambda: inputs(total, now + 1), since=p["now"])
    assert view.computations == before + 1 and r["samples"]["t"] == [round(now + 1, 2)]
    assert len(orjson.dumps(r)) < 4000  # compact: a poll carries only what is new


def test_recent_rates_count_no_second_from_before_the_start():
    """ "Output tokens/s (last 10 s)" 3 s into a test: the rate of those 3 s, not their tokens over
    10 s (old code: the seconds before Start, which sent nothing, were in the window: 6 req/s
    shown for 20)."""
    total = populated(n_per_s=20, seconds=4, start=T0)  # 20 req/s from T0, 8 tokens each
    p = LiveView().payload(lambda: inputs(total, T0 + 4.5, started_at=T0), 0)
    r = p["recent"]
    assert r["window_s"] == 3  # the complete seconds T0 .. T0+2 (lag 1 s)
    assert r["requests_per_s"] == pytest.approx(20, rel=0.1)
    assert r["output_tokens_per_s"] == pytest.approx(160, rel=0.1)
    rows = {x["metric"]: x["value"] for x in summary_rows(p)}
    assert float(rows["Output tokens/s (last 3 s)"].replace(",", "")) == pytest.approx(160, rel=0.1)
    # a start inside a second counts that second from the start on: 3.5 s of 20 req/s
    series = {int(T0) + k: [8 * (10 if k == 0 else 20), 10 if k == 0 else 20, 0] for k in range(6)}
    end, w, (tok, ok, failed) = D.recent_counts(series, T0 + 5.5, 1.0, 10.0, T0 + 0.5)
    assert (end, w, ok / w, tok / w, failed) == (int(T0) + 4, 3.5, 20, 160, 0)
    # later, the last 10 complete seconds as before; before the first complete second, no rate
    assert D.recent_counts(series, T0 + 30, 1.0, 10.0, T0 + 0.5)[:2] == (int(T0) + 29, 10.0)
    early = LiveView().payload(lambda: inputs(total, T0 + 1.2, started_at=T0 + 0.5), 0)["recent"]
    assert early["window_s"] == 0 and early["output_tokens_per_s"] is None
    assert {
        x["metric"]: x["value"]
        for x in summary_rows(LiveView().payload(lambda: inputs(total, T0 + 1.2, started_at=T0 + 0.5), 0))
    }["Output tokens/s (last 0 s)"] == "-"


@pytest.mark.parametrize(
    ("ok", "failed", "cancelled", "by_client", "want"),
    [(3, 4, 1, 2, 4 / 7), (0, 0, 2, 3, 0.0), (0, 2, 0, 0, 1.0)],
    ids=["mixed", "none_answered", "all_failed"],
)
def test_the_error_rate_is_one_formula_in_the_summary_the_groups_and_the_live_view(
    ok, failed, cancelled, by_client, want
):
    """The summary's figures, each endpoint's row and the live view's totals read the error rate
    of the same counts from one function: failed over answered, cancellations in neither part, 0.0
    when nothing was answered (a copy that counted cancellations, or divided by zero, would differ)."""
    from llm_locust.metrics.aggregate import error_rate, figures

    total = Aggregate()
    outcomes = [Outcome.OK] * ok + [Outcome.HTTP_ERROR] * failed
    outcomes += [Outcome.CANCELLED] * cancelled + [Outcome.CLIENT_CANCELLED] * by_client
    for i, o in enumerate(outcomes):
        r = rec(T0 + i, outcome=o)
        r.endpoint = "http://127.0.0.1:1" if i % 2 else "http://127.0.0.1:2"
        fold([total], r)
    n = len(outcomes)
    assert error_rate(failed, n, cancelled, by_client) == want
    assert figures(total)["error_rate"] == want
    # the groups' own counts, each through the same formula
    for g in total.groups["endpoint"].values():
        f = g.figures(10.0)
        assert f["error_rate"] == error_rate(f["failed"], f["finished"], f["cancelled"], f["client_cancelled"])
    whole = Aggregate()
    for o in outcomes:
        r = rec(T0, outcome=o)
        r.endpoint = "http://127.0.0.1:1"
        fold([whole], r)
    (one,) = whole.groups["endpoint"].values()
    assert one.figures(10.0)["error_rate"] == want
    live = LiveView().payload(lambda: inputs(total, T0 + n + 1), 0)["totals"]["error_rate"]
    assert live == round(want, 5)


def mixed_run() -> Aggregate:
    """30 s of ok requests, then failures, cancellations, two endpoints, a prompt cache, loop lag
    and CPU samples: every part of the live view has figures."""
    total = populated(seconds=30)
    kinds = [Outcome.OK, Outcome.HTTP_ERROR, Outcome.CANCELLED, Outcome.CLIENT_CANCELLED, Outcome.OK, Outcome.TIMEOUT]
    for i, o in enumerate(kinds * 3):
        r = rec(T0 + 0.7 * i, ttft=0.02 if i % 3 else 0.4, outcome=o)
        r.n_cached, r.ideal_cached = (8 if i % 3 else 1), 9
        r.endpoint, r.model = f"http://127.0.0.1:{i % 2 + 1}", "m"
        fold([total], r, {"ttft": 0.1})
    for k in range(40):
        total.hist["loop_lag"].record(0.001 * k)
    total.add_cpu_sample(95.0, 90.0)
    total.add_cpu_sample(20.0, 90.0)
    return total


def test_the_live_view_shows_the_results_figures_of_the_same_records(monkeypatch):
    """The live view's totals, latencies, client verdict, prompt cache and per-endpoint rows are
    the results' figures (`metrics.aggregate.figures`) of the same records, rounded for the page:
    a copy of a formula in report/live.py that drifted (requests/s over finished rather than ok, a
    span from the first end, TPOT of another histogram) would differ here. Only the "recent"
    figures, over the last 10 s, are the view's own."""
    from llm_locust.metrics.aggregate import client_line, figures

    total = mixed_run()
    fig = figures(total)
    p = LiveView().payload(lambda: inputs(total, T0 + 31.5, started_at=T0, slos={"ttft": 0.1}), 0)
    t = p["totals"]
    counts = ("sent", "finished", "ok", "failed", "cancelled", "client_cancelled", "tokens_in", "tokens_out")
    for k in (*counts, "length_checked", "length_mismatch"):
        assert t[k] == fig[k], k
    assert fig["failed"] and fig["cancelled"] and fig["client_cancelled"]  # each count is exercised
    rounded = {"error_rate": 5, "duration_s": 2, "output_tokens_per_s": 2, "requests_per_s": 3}
    for k, nd in rounded.items():
        assert t[k] == round(fig[k], nd), k
    for m in D.LATENCY_VIEW:
        want = fig["latency"][m]
        assert p["latency"][m] == {
            "count": want["count"],
            **{k: round(want[k], 6) for k in ("mean", "max", "p50", "p90", "p99")},
        }, m
    c = p["client"]
    assert c["line"] == client_line(fig["client"]) and c["valid"] == fig["client"]["valid"]
    assert c["loop_lag_p99"] == round(fig["client"]["loop_lag"]["p99"], 6)
    assert c["cpu_max"] == fig["client"]["cpu_max_percent"]
    assert c["cpu_high_share"] == fig["client"]["cpu_high_samples"] / fig["client"]["cpu_samples"] == 0.5
    for k in ("hit_ratio", "ideal_hit_ratio", "achieved_vs_ideal"):
        assert p["cache"][k] == round(fig["cache"][k], 4), k
    assert p["cache"]["ttft_hit_p50"] == round(fig["cache"]["ttft_hit"]["p50"], 6)
    assert p["cache"]["ttft_miss_p50"] == round(fig["cache"]["ttft_miss"]["p50"], 6)
    rows = p["groups"]["endpoint"]
    assert [r["key"] for r in rows] == list(fig["by_endpoint"])
    for r in rows:
        g = fig["by_endpoint"][r["key"]]
        assert (r["ok"], r["failed"]) == (g["ok"], g["failed"])
        assert r["output_tokens_per_s"] == round(g["output_tokens_per_s"], 2)
        assert r["tpot_p50"] == D._r(g["latency"]["tpot"].get("p50"), 6)

    # and the view reads them from that one function: what it returns is what the page shows
    real = D.totals

    def other(agg):
        return {**real(agg), "output_tokens_per_s": 12345.0, "error_rate": 0.25}

    monkeypatch.setattr(D, "totals", other)
    q = LiveView().payload(lambda: inputs(total, T0 + 31.5, started_at=T0), 0)["totals"]
    assert (q["output_tokens_per_s"], q["error_rate"]) == (12345.0, 0.25)


def test_client_validity_and_length_mismatch_are_reported():
    total = populated(seconds=5)
    fold([total], rec(T0 + 1, requested=16))  # 8 tokens arrived, 16 asked for
    for _ in range(50):
        total.hist["loop_lag"].record(0.020)  # the client's event loop was 20 ms late
    p = LiveView().payload(lambda: inputs(total, T0 + 6), 0)
    assert p["totals"]["length_mismatch"] == 1 and p["totals"]["length_checked"] == 101
    c = p["client"]
    assert c["valid"] is False and c["valid_now"] is False
    assert any("event-loop lag" in r for r in c["reasons"])
    rows = {r["metric"]: r["value"] for r in summary_rows(p)}
    assert rows["Client"].startswith("SUSPECT: ") and rows["Output length mismatches"] == "1 of 101"
    # the web view says what the summary says, and quotes the rule of docs/metrics.md
    from llm_locust.metrics.aggregate import client_figures, client_line, validity_rule

    assert c["line"] == client_line(client_figures(total)) and c["line"].startswith("client: SUSPECT")
    assert c["rule"] == validity_rule()


def test_cache_and_per_endpoint_rows_in_the_payload():
    total = Aggregate()
    plain = LiveView().payload(lambda: inputs(total, T0 + 2), 0)
    assert plain["cache"] is None and plain["groups"] is None  # nothing reported: no panel
    for i in range(4):
        r = rec(T0 + i * 0.1, ttft=0.02 if i < 3 else 0.4)
        r.n_cached, r.ideal_cached = (8 if i < 3 else 1), 9
        r.endpoint, r.model = f"http://e{i % 2}", "m"
        fold([total], r)
    p = LiveView().payload(lambda: inputs(total, T0 + 6), 0)
    c = p["cache"]
    assert (c["reported"], c["cached_tokens"], c["prompt_tokens"], c["hits"], c["misses"]) == (4, 25, 40, 3, 1)
    assert c["hit_ratio"] == pytest.approx(25 / 40) and c["achieved_vs_ideal"] == pytest.approx(25 / 36, abs=1e-4)
    assert c["ttft_hit_p50"] == pytest.approx(0.02, rel=1e-3) and c["ttft_miss_p50"] == pytest.approx(0.4, rel=1e-3)
    rows = p["groups"]["endpoint"]
    assert [(r_["key"], r_["ok"]) for r_ in rows] == [("http://e0", 2), ("http://e1", 2)]
    assert "model" not in p["groups"]  # one model: no per-model rows
    json.dumps(p)  # JSON-ready


def test_workers_at_full_cpu_make_the_client_suspect():
    total = populated(seconds=3)
    workers = [
        {"id": "a", "index": 0, "state": "running", "cpu": 97.0, "report_age": 1.0, "in_flight": 3, "finished": 10}
    ]
    p = LiveView().payload(lambda: inputs(total, T0 + 4, workers=workers, lag=3.5), 0)
    assert p["workers"] == workers and any("worker(s) at >= 90% CPU" in r for r in p["client"]["reasons"])
    assert p["series_end"] == int(T0 + 4 - 3.5)  # the master waits one report interval for a second to be complete


# ---- the ladder: the same figures and flags as the final report ----


def ladder_case():
    """Steps of 10 s (warm-up 1 s) at 1, 2, 4 users; step 2 has errors, step 3 a length mismatch
    and a lagging client; step 4 is in its warm-up."""
    total, steps = Aggregate(), {}
    windows = []
    for i, rate in enumerate((5, 10, 10), start=1):
        start = T0 + 10 * (i - 1)
        steps[i] = Aggregate()
        windows.append(
            {
                "step": i,
                "level": 2.0 ** (i - 1),
                "started": start,
                "measured_from": start + 1,
                "ended": start + 10,
                "extended": 0.0,
            }
        )
        for s in range(1, 10):
            for k in range(rate):
                fold([steps[i], total], rec(start + s + k / rate, ttft=0.02 * i, requested=8))
        if i == 2:
            for k in range(5):
                fold([steps[i], total], rec(start + 2 + k, outcome=Outcome.HTTP_ERROR, error="HTTP 503"))
        if i == 3:
            fold([steps[i], total], rec(start + 3, requested=9))
            for _ in range(20):
                steps[i].hist["loop_lag"].record(0.05)
                total.hist["loop_lag"].record(0.05)
    windows.append({"step": 4, "level": 8.0, "started": T0 + 30, "measured_from": None, "ended": None, "extended": 0.0})
    ld = LadderInputs(
        kind="concurrency",
        levels=[1.0, 2.0, 4.0, 8.0],
        warmup=1.0,
        duration=10.0,
        requests=0,
        windows=windows,
        done=False,
        stop_reason=None,
        slos={},
    )
    return total, steps, ld


def test_ladder_rows_carry_the_reports_flags_and_a_provisional_verdict():
    total, steps, ld = ladder_case()
    p = LiveView().payload(lambda: inputs(total, T0 + 30.5, steps=steps, ladder=ld, current_step=-4), 0)
    rows = p["ladder"]["steps"]
    assert [r["phase"] for r in rows] == ["done", "done", "done", "warmup"]
    for r, w in zip(rows[:3], ld.windows, strict=False):
        expected = step_result(
            steps[w["step"]],
            step=w["step"],
            offered=w["level"],
            offered_kind="concurrency",
            window=(w["measured_from"], w["ended"]),
            warmup=1.0,
            slos={},
            series=total.series,
        )
        assert r["flags"] == expected.flags
        assert r["output_tokens_per_s"] == pytest.approx(expected.output_tokens_per_s, abs=0.1)
    assert rows[0]["flags"] == []
    assert "errors" in rows[1]["flags"]
    assert "length_mismatch" in rows[2]["flags"] and "client_saturated" in rows[2]["flags"]
    st = p["step"]
    assert st["index"] == 4 and st["of"] == 4 and st["phase"] == "warmup" and st["unit"] == "users"
    v = p["ladder"]["verdict"]
    assert v is not None and v["final"] is False and v["steps_used"] == 3 and "saturation" in v["text"]
    rows_tab = {r["metric"]: r["value"] for r in summary_rows(p)}
    assert rows_tab["Load step"] == "4/4: 8 users (warmup)" and "Saturation (so far)" in rows_tab


def test_polls_carry_only_the_step_rows_and_verdict_that_changed():
    total, steps, ld = ladder_case()
    ld.windows[-1].update(measured_from=T0 + 31)  # step 4 measuring
    clock = Clock()
    view = LiveView(clock=clock)
    get = lambda: inputs(total, T0 + 33 + clock.t, steps=steps, ladder=ld)  # noqa: E731
    first = view.payload(get, 0)
    assert [r["step"] for r in first["ladder"]["steps"]] == [1, 2, 3, 4] and first["ladder"]["verdict"][
        "steps_used"
    ] == 3
    clock.t += 1.0
    second = view.payload(get, first["now"])
    assert [r["step"] for r in second["ladder"]["steps"]] == [4] and "verdict" not in second["ladder"]
    clock.t += 1.0
    fold([steps[2], total], rec(T0 + 19.5, requested=8))  # a late report changes step 2: its row comes again
    third = view.payload(get, second["now"])
    assert [r["step"] for r in third["ladder"]["steps"]] == [2, 4] and third["ladder"]["verdict"]["steps_used"] == 3
    assert len(orjson.dumps(second)) < len(orjson.dumps(first)) / 2
    assert view.payload(get, 0)["ladder"]["steps"][0]["step"] == 1  # a new page still gets every row


def test_step_figures_are_cached(monkeypatch):
    total, steps, ld = ladder_case()
    ld.windows[-1].update(measured_from=T0 + 31)  # step 4 measuring
    calls = []
    real = D.step_result
    monkeypatch.setattr(D, "step_result", lambda agg, **kw: calls.append(kw["step"]) or real(agg, **kw))
    clock = Clock()
    view = LiveView(clock=clock)
    get = lambda: inputs(total, T0 + 33 + clock.t, steps=steps, ladder=ld)  # noqa: E731
    view.payload(get, 0)
    assert sorted(calls) == [1, 2, 3, 4]
    calls.clear()
    clock.t += 1.5  # next snapshot: finished steps unchanged, only the running one is read again
    view.payload(get, 0)
    assert calls == [4]
    calls.clear()
    clock.t += 1.5
    fold([steps[2], total], rec(T0 + 19.5, requested=8))  # a late worker report for step 2
    view.payload(get, 0)
    assert sorted(calls) == [2, 4]


# ---- server and GPU series ----


def test_server_and_gpu_columns():
    srv = ServerSeries("http://x/metrics", server="vllm")
    for i in range(4):
        srv.samples.append(
            Sample(
                T0 + 2 * i,
                {"kv_cache_usage": 0.1 * i, "running": i, "waiting": 0, "generation_tokens_total": 1000.0 * i},
            )
        )
    cols = server_columns(srv, 0, "server")
    assert cols["kind"] == "vllm" and cols["kv"] == [0.0, 10.0, 20.0, 30.0]
    assert cols["gen_tps"] == [None, 500.0, 500.0, 500.0] and cols["running"] == [0, 1, 2, 3]
    later = server_columns(srv, T0 + 2, "server")
    assert later["t"] == [T0 + 4, T0 + 6] and later["gen_tps"] == [
        500.0,
        500.0,
    ]  # the rate still uses the sample before
    gpu = ServerSeries("http://g/metrics", server="llm-locust-gpu-sidecar")
    gpu.samples.append(
        Sample(T0, {"gpu_memory_used_bytes": 3 * 2**30, "gpu_memory_total_bytes": 141 * 2**30, "gpu_utilization": 0.42})
    )
    g = server_columns(gpu, 0, "gpu")
    assert g["mem_gib"] == [3.0] and g["mem_total_gib"] == [141.0] and g["util"] == [42.0]
    total = populated(seconds=2)
    p = LiveView().payload(lambda: inputs(total, T0 + 3, server=srv, gpu=gpu), 0)
    assert p["server"]["kv"][-1] == 30.0 and p["gpu"]["util"] == [42.0]


# ---- end to end in a real headless Chromium ----

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT_COPY = Path("/tmp/llm-locust-webui.png")


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through the playwright package (skip locally / fail in CI when missing)."""
    missing = []
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        missing.append("chromium (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("playwright (pip install playwright; no `playwright install` needed)")
    if missing:
        support.missing("browser test needs " + " and ".join(missing))
    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"), args=CHROMIUM_ARGS
        )
        yield b
        b.close()


def wait_for(what, fn, timeout=30.0, every=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


@contextlib.contextmanager
def locust_web_ui(tmp_path, host: str, *options: str, locustfile: str = "ladder.py"):
    """A real Locust (one of llm_locust's locustfiles) with its web UI on a free 127.0.0.1 port:
    yields its base URL; terminated (killed after 20 s) on exit. Output: tmp_path/locust.log."""
    web = free_port()
    locustfile = Path(__file__).resolve().parents[1] / "llm_locust" / "locustfiles" / locustfile
    with open(tmp_path / "locust.log", "a") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(locustfile),
                "--host",
                host,
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(web),
                *options,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://127.0.0.1:{web}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_live_view_in_chromium_start_steps_and_stop_from_the_ui(browser, tmp_path):
    from llm_locust.sim.process import SimProcess

    gpu_port = free_port()
    log = open(tmp_path / "sidecar.log", "w")
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.cli", "gpu-sidecar", "--fake", "1", "--port", str(gpu_port)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    sim = SimProcess(slots=4, fault={"http500": 0.15}).start()
    # 5 s steps: the checks below, done before the test stops the run, fit in the 40 s ladder
    options = (
        "--ladder",
        "concurrency:1,2,4,6,8,12,16,24",
        "--warmup",
        "1",
        "--step-duration",
        "5",
        "--no-early-stop",
        "--max-tokens",
        "24",
        "--gpu-metrics",
        f"http://127.0.0.1:{gpu_port}/metrics",
        "-t",
        "300",  # each start stops 300 s after it: the page says when
    )
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        with locust_web_ui(tmp_path, sim.url, *options) as base:
            wait_for("the web UI", lambda: get_json(f"{base}/llm/data")["state"] == "ready")

            # Locust's own page: its Start button runs the ladder shape
            page.goto(base + "/")
            page.get_by_role("button", name="Start").click()
            wait_for("the test to run", lambda: get_json(f"{base}/llm/data")["state"] in ("running", "spawning"))
            # its "LLM" tab shows our rows, the load step among them
            page.get_by_role("tab", name="LLM").click()
            page.get_by_text(re.compile(r"^\d+/8: \d+ users")).wait_for(timeout=15_000)
            # and the link under Reports ("Download data") opens the LLM view
            page.get_by_role("tab", name="Download Data").click()
            page.get_by_role("link", name=re.compile("LLM live view")).click()
            page.wait_for_url(base + "/llm")

            page.wait_for_function(
                "window.llmView && window.llmView.polls >= 1 && window.llmView.last.state === 'running'"
            )
            assert page.locator("#llm-runtime").inner_text().startswith("stops at ")

            def figures():
                return page.evaluate("""() => ({
                    finished: Number(document.getElementById('llm-finished').textContent.replace(/,/g, '')),
                    tps: Number(document.getElementById('llm-tps').textContent.replace(/,/g, '')),
                    step: document.getElementById('llm-step').textContent,
                    points: window.llmView.charts['chart-throughput'].data[0].length,
                    samples: window.llmView.charts['chart-ttft'].data[0].length,
                    polls: window.llmView.polls,
                })""")

            first = wait_for("requests shown", lambda: (f := figures())["finished"] > 0 and f)
            second = wait_for(
                "the figures to move",
                lambda: (
                    (f := figures())["finished"] > first["finished"]
                    and f["polls"] > first["polls"]
                    and f["tps"] > 0
                    and f["points"] > 0
                    and f["samples"] >= 2
                    and f
                ),
            )
            assert re.fullmatch(r"\d/8: \d+ users", second["step"]), second["step"]
            assert page.locator("#llm-steps tbody tr").count() >= 1

            # a provisional verdict once three steps are done; every flagged step is marked in the table
            page.wait_for_function("window.llmView.verdict && window.llmView.verdict.steps_used >= 3", timeout=30_000)
            page.wait_for_function(
                "window.llmView.charts['chart-server'] && window.llmView.charts['chart-server'].data[0].length > 0"
            )
            page.wait_for_function(
                "window.llmView.charts['chart-gpu'] && window.llmView.charts['chart-gpu'].data[0].length > 0"
            )
            # the view's figures and its table read in one go (the page re-renders every 1.5 s)
            snap = page.evaluate(
                "() => ({last: window.llmView.last, steps: window.llmView.steps, rows:"
                " [...document.querySelectorAll('#llm-steps tbody tr')].map(tr => [tr.className, tr.innerText])})"
            )
            p, step_rows = snap["last"], snap["steps"]
            assert p["state"] == "running" and p["failures"]["http_error"]["n"] > 0
            assert page.locator("#llm-failures").inner_text().count("http_error") == 1
            # the request phases under the latencies, as the run's figures have them
            lat = page.locator("#llm-latency tbody").inner_text()
            assert "phase: first token" in lat and p["latency"]["phase_first_token"]["count"] > 0, lat
            flagged = 0
            assert [r["step"] for r in step_rows] == list(range(1, len(step_rows) + 1))
            assert len(snap["rows"]) == len(step_rows)
            for r, (cls, cells) in zip(step_rows, snap["rows"], strict=True):
                if r.get("flags"):  # marked: final on a finished step, "so far" on the running one
                    flagged += r["phase"] == "done"
                    assert ("flagged" if r["phase"] == "done" else "flagged-so-far") in cls.split(), (r, cls)
                    for f in r["flags"]:
                        assert f in cells
                else:
                    assert not {"flagged", "flagged-so-far"} & set(cls.split()), (r, cls)
            assert flagged >= 1  # 15% HTTP 500s: a finished step with an error rate over 1%
            assert page.locator("#tile-verdict .big").inner_text() not in ("-", "pending")
            assert page.locator("#chart-throughput canvas").count() >= 1

            shot = tmp_path / "llm-webui.png"
            page.screenshot(path=str(shot), full_page=True)
            shutil.copyfile(shot, SCREENSHOT_COPY)

            # Stop from the view's own button: the runner stops
            page.locator("#llm-stop").click()
            page.wait_for_function("document.getElementById('llm-state').textContent === 'stopped'", timeout=20_000)
            assert get_json(f"{base}/llm/data")["state"] == "stopped"
            assert get_json(f"{base}/stats/requests")["state"] == "stopped"
            assert page.locator("#llm-start").is_enabled() and not page.locator("#llm-stop").is_enabled()
            page.screenshot(path=str(tmp_path / "llm-webui-stopped.png"), full_page=True)
            before = get_json(f"{base}/llm/data")

            # Start again from the view: a new test, the ladder from its first step, figures afresh
            page.locator("#llm-start").click()
            again = wait_for(
                "a new run at step 1",
                lambda: (
                    (d := get_json(f"{base}/llm/data"))["state"] == "running"
                    and (d.get("step") or {}).get("index") == 1
                    and d
                ),
            )
            assert again["totals"]["finished"] < before["totals"]["finished"], (again["totals"], before["totals"])
            assert [r["step"] for r in again["ladder"]["steps"]] == [1]
            page.wait_for_function(
                "window.llmView.last && window.llmView.last.state === 'running'"
                " && /^1\\/8: /.test(document.getElementById('llm-step').textContent)",
                timeout=20_000,
            )
            page.locator("#llm-stop").click()
            wait_for("the second stop", lambda: get_json(f"{base}/llm/data")["state"] == "stopped")
            assert errors == []
    finally:
        page.close()
        sim.stop()
        sidecar.terminate()
        sidecar.wait(timeout=10)
        log.close()


def test_latency_history_starts_with_the_test_not_with_the_page(tmp_path):
    """Nobody watches for the first steps; the page opened later still has a sample a second from
    the test's start (the view samples while a test runs)."""
    from llm_locust.sim.process import SimProcess

    with (
        SimProcess(slots=4) as sim,
        locust_web_ui(
            tmp_path,
            sim.url,
            "--autostart",
            "--ladder",
            "concurrency:1,2,4",
            "--warmup",
            "1",
            "--step-duration",
            "3",
            "--no-early-stop",
            "--max-tokens",
            "16",
        ) as base,
    ):
        # /metrics (the exporter) does not touch the view: wait there for step 3 (6 s in)
        def step() -> int:
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
                text = r.read().decode()
            line = next((x for x in text.splitlines() if x.startswith("llm_locust_step ")), "llm_locust_step 0")
            return int(float(line.split()[1]))

        wait_for("step 3", lambda: abs(step()) == 3)
        d = get_json(f"{base}/llm/data?since=0")
        t = d["samples"]["t"]
        assert d["started_at"] is not None and len(t) >= 5, t
        assert t[0] - d["started_at"] < 2.5, (t[0], d["started_at"])
        assert all(b > a for a, b in zip(t, t[1:], strict=False))
        assert max(b - a for a, b in zip(t, t[1:], strict=False)) < 2.5  # about one a second, no gap


def test_a_closed_loop_test_started_again_from_the_ui_starts_its_figures_afresh(tmp_path):
    """As Locust clears its stats when a test is started again, the hub forgets the last test."""
    from llm_locust.sim.process import SimProcess

    def swarm(base: str) -> None:  # what Locust's Start form posts
        body = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2, "host": sim.url}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{base}/swarm", data=body), timeout=5) as r:
            assert r.status == 200

    with (
        SimProcess(slots=4) as sim,
        locust_web_ui(tmp_path, sim.url, "--max-tokens", "16", locustfile="closed.py") as base,
    ):
        wait_for("the web UI", lambda: get_json(f"{base}/llm/data")["state"] == "ready")
        swarm(base)
        first = wait_for("30 requests", lambda: (d := get_json(f"{base}/llm/data"))["totals"]["finished"] >= 30 and d)
        urllib.request.urlopen(urllib.request.Request(f"{base}/stop", data=b""), timeout=5).read()  # POST, as the UI
        wait_for("the stop", lambda: get_json(f"{base}/llm/data")["state"] == "stopped")
        swarm(base)
        again = wait_for(
            "a new test",
            lambda: (
                (d := get_json(f"{base}/llm/data"))["state"] == "running"
                and d["started_at"] > first["started_at"]
                and d
            ),
        )
        assert again["totals"]["sent"] < first["totals"]["sent"], (again["totals"], first["totals"])
        assert again["totals"]["finished"] < first["totals"]["finished"]


def test_run_time_stops_each_run_started_from_the_web_ui(tmp_path, sims):
    """`llm-locust run --web -t 3s`: Locust applies -t only headless (or to --autostart's first
    start); each start from the UI now stops 3 s after it, and both pages say when (old code: the
    run went on until stopped)."""
    sim = sims(slots=4)
    web = free_port()
    base = f"http://127.0.0.1:{web}"
    args = ["run", "--web", "--web-keep-open", "--web-port", str(web), "--host", sim.url, "-u", "2", "-t", "3s"]
    args += ["--max-tokens", "16"]
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "llm_locust.cli", *args], stdout=log, stderr=subprocess.STDOUT)
    try:
        ready = wait_for("the web UI", lambda: (d := get_json(f"{base}/llm/data"))["state"] == "ready" and d)
        assert ready["control"]["run_time"] == 3 and ready["control"]["stops_at"] is None
        for _ in range(2):  # each start, not only the first
            body = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2}).encode()  # the LLM view's Start
            req = urllib.request.Request(f"{base}/swarm", data=body, headers={"Origin": base})
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.status == 200
            running = wait_for("the run", lambda: (d := get_json(f"{base}/llm/data"))["state"] == "running" and d)
            assert abs(running["control"]["stops_at"] - running["started_at"] - 3) < 0.5, running["control"]
            rows = {x["metric"]: x["value"] for x in get_json(f"{base}/stats/requests")["extended_stats"][0]["data"]}
            assert rows["Run time (-t)"].startswith("this test stops at "), rows
            stopped = wait_for(
                "the stop at -t", lambda: (d := get_json(f"{base}/llm/data"))["state"] == "stopped" and d
            )
            assert 2.5 < stopped["totals"]["duration_s"] < 5.0, stopped["totals"]
            assert stopped["control"]["stops_at"] is None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert (tmp_path / "run.log").read_text().count("--run-time 3s reached: stopping the test") == 2


def test_a_web_run_ends_by_itself_when_its_test_ends(tmp_path, sims):
    """`llm-locust run --web -t 5s`: the test started from the UI stops at -t, and the run ends
    there as a headless one would: its results unmarked, judged by its gates, exit by them (here
    1: an SLO no server meets). Old code: only Ctrl-C ended it, marked interrupted, exit 130, no
    gates."""
    sim = sims(slots=4)
    web = free_port()
    base = f"http://127.0.0.1:{web}"
    results = tmp_path / "r.json"
    args = ["run", "--web", "--web-port", str(web), "--host", sim.url, "-u", "2", "-t", "5s", "--max-tokens", "16"]
    args += ["--slo", "ttft=0.01ms", "--results", str(results)]
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "llm_locust.cli", *args], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for("the web UI", lambda: get_json(f"{base}/llm/data")["state"] == "ready")
        started = time.monotonic()
        body = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2}).encode()
        req = urllib.request.Request(f"{base}/swarm", data=body, headers={"Origin": base})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200
        # live: the recent rates' window holds no second from before the start (old code: 10 s from the first)
        d = wait_for(
            "a recent rate",
            lambda: (d := get_json(f"{base}/llm/data"))["state"] == "running" and d["recent"]["window_s"] > 0 and d,
        )
        assert d["recent"]["window_s"] <= d["now"] - d["started_at"], (d["recent"], d["now"], d["started_at"])
        rc = proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = (tmp_path / "run.log").read_text()
    assert rc == 1, out[-3000:]
    assert 4.5 < took < 35, took  # -t 5s, then the summary and the files
    assert "the test ended: ending the run" in out and "interrupted" not in out, out[-3000:]
    doc = json.loads(results.read_text())
    assert doc["run"]["interrupted"] is None and doc["summary"]["ok"] > 0
    gates = {g["name"]: g["passed"] for g in doc["gates"]}
    assert gates["answered"] is True and False in gates.values(), doc["gates"]


def test_a_web_run_with_workers_leaves_no_process_behind(tmp_path):
    """`llm-locust run --web --workers 2` (its own simulator) ends with its test, and its worker
    processes with it. Old code: Locust forks the workers from the process that started the
    simulator; each returned into `llm-locust run` and stopped the parent's simulator, waiting 10 s
    for a process not its own: the workers outlived the run by 9 s (after a Ctrl-C, by a minute)."""
    import psutil

    web = free_port()
    base = f"http://127.0.0.1:{web}"
    args = ["run", "--web", "--workers", "2", "--web-port", str(web), "-u", "2", "-t", "4s", "--max-tokens", "16"]
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "llm_locust.cli", *args], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for("the web UI", lambda: get_json(f"{base}/llm/data")["state"] == "ready")
        children = wait_for(
            "the workers and the simulator", lambda: (c := psutil.Process(proc.pid).children()) and len(c) >= 3 and c
        )
        body = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2}).encode()
        with urllib.request.urlopen(
            urllib.request.Request(f"{base}/swarm", data=body, headers={"Origin": base}), timeout=5
        ):
            pass
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = (tmp_path / "run.log").read_text()
    assert rc in (0, 1) and "the test ended: ending the run" in out, out[-3000:]  # 1: a machine too slow for -t

    def alive() -> list[int]:
        live = []
        for c in children:
            try:
                if c.status() != psutil.STATUS_ZOMBIE:
                    live.append(c.pid)
            except psutil.NoSuchProcess:
                pass
        return live

    deadline = time.monotonic() + 3
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the process table, bounded by the deadline
    assert alive() == [], (alive(), out[-2000:])
    assert "Traceback" not in out


def test_web_keep_open_without_the_web_ui_is_refused():
    from support import run_cli

    p = run_cli("--web-keep-open", "-t", "2s", timeout=60)
    assert p.returncode == 2 and "--web-keep-open: keeps the web UI open: give --web too" in p.stderr, p.stderr
    assert "Starting Locust" not in p.stdout + p.stderr and "Traceback" not in p.stderr


def test_run_time_in_words():
    assert D.run_time_text({"run_time": None}) == ""
    assert D.run_time_text({"run_time": 30.0, "stops_at": None}) == "each test started here stops 30 s after its start"
    at = time.strftime("%H:%M:%S", time.localtime(T0))
    assert D.run_time_text({"run_time": 30.0, "stops_at": T0}) == f"this test stops at {at} (30 s after its start)"


def test_a_long_runs_folded_seconds_are_spread_over_their_bucket():
    """Past the seconds kept one by one, the series holds [tokens, ok, failed, width] buckets: the
    page's first poll spreads each over its seconds (before: a one-second spike of 60 s of tokens)."""
    first = 1_000_000
    series = {first: [600, 60, 6, 60]}  # a minute folded into one bucket
    series.update({first + 60 + k: [10, 1, 0] for k in range(4000)})  # then second by second
    snap = {"_series_first": first, "series_end": first + 4060, "series_tail": 10}
    cols = LiveView.series(series, 0.0, snap)
    assert cols["sec"][:60] == list(range(first, first + 60))
    assert cols["tokens"][:60] == [10.0] * 60 and cols["ok"][:60] == [1.0] * 60 and cols["failed"][0] == 0.1
    assert cols["tokens"][60:63] == [10, 10, 10] and sum(cols["tokens"]) == 600 + 10 * 4000


# ---- who may read: every route answers only requests sent to this machine's names ----


def raw_get(port: int, path: str, host: str) -> tuple[int, bytes]:
    """GET `path` from 127.0.0.1:`port` with this exact Host header, as a browser sends it to a
    page's own name (DNS rebinding: the name resolves to 127.0.0.1): (status, raw body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_no_route_answers_a_host_that_is_not_this_machine(tmp_path, sims):
    """Without --web-login, a page whose own name resolves to 127.0.0.1 is the web UI's origin for
    the browser: its GETs read the target's URL, the logs and the figures (old code: 200 on every
    route). Now 403 for any Host that does not name this machine; its own names still pass."""
    sim = sims(slots=4)
    with locust_web_ui(
        tmp_path, sim.url, "--web-origins", "https://locust.example.com", locustfile="closed.py"
    ) as base:
        port = int(base.rsplit(":", 1)[1])
        wait_for("the web UI", lambda: get_json(f"{base}/llm/data")["state"] == "ready")
        routes = ("/llm/data", "/logs", "/stats/requests", "/metrics", "/", "/llm", "/llm/static/llm.js", "/tasks")
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}", f"localhost.evil:{port}"):
            for route in routes:
                status, body = raw_get(port, route, host)
                assert status == 403, (host, route, status, body[:200])
                assert sim.url.encode() not in body and b"refused: sent to Host" in body, (host, route)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "locust.example.com"):
            status, body = raw_get(port, "/llm/data", host)
            assert status == 200 and sim.url.encode() in body, (host, status)
        assert raw_get(port, "/metrics", f"127.0.0.1:{port}")[0] == 200
    log = (tmp_path / "locust.log").read_text()
    assert f"refused GET /llm/data: sent to Host evil.example:{port}" in log


def test_the_session_cookie_stays_on_this_site(tmp_path, sims, monkeypatch):
    """The login's cookie: SameSite=Strict (a cross-site request carries no login), HttpOnly, and
    not Secure over plain HTTP (old code: no SameSite attribute)."""
    monkeypatch.setenv("LLM_LOCUST_WEB_PASSWORD", "pw-123")
    monkeypatch.setenv("LLM_LOCUST_WEB_USER", "ops")
    sim = sims(slots=4)
    with locust_web_ui(tmp_path, sim.url, "--web-login", locustfile="closed.py") as base:
        import requests

        wait_for("the login page", lambda: requests.get(base + "/login", timeout=5).status_code == 200)
        r = requests.post(
            base + "/llm/login",
            data={"username": "ops", "password": "pw-123"},
            headers={"Origin": base},
            timeout=5,
            allow_redirects=False,
        )
        assert r.status_code == 302, r.text
        cookie = r.headers["Set-Cookie"]
        attributes = {a.strip().split("=")[0].lower(): a.strip() for a in cookie.split(";")[1:]}
        assert attributes.get("samesite") == "SameSite=Strict" and "httponly" in attributes, cookie
        assert "secure" not in attributes, cookie  # plain HTTP: a Secure cookie would never come back
        s = requests.Session()
        s.cookies.update(r.cookies)
        assert s.get(base + "/llm/data", timeout=5, allow_redirects=False).status_code == 200  # and it logs in


def test_the_session_cookie_is_secure_when_the_web_ui_serves_tls():
    from flask import Flask, session

    for tls, secure in ((("cert.pem", "key.pem"), True), ((None, None), False)):
        app = Flask(__name__)
        app.config["SECRET_KEY"] = "k"

        @app.route("/set")
        def set_it():  # noqa: ANN202
            session["x"] = 1
            return "ok"

        ui = type("UI", (), {"app": app, "tls_cert": tls[0], "tls_key": tls[1]})()
        guard._cookie_rules(ui)
        cookie = app.test_client().get("/set").headers["Set-Cookie"]
        assert "SameSite=Strict" in cookie and "HttpOnly" in cookie
        assert ("; Secure" in cookie) is secure, cookie


def test_a_process_over_its_ceiling_is_in_the_client_view():
    total = populated(seconds=3)
    assert LiveView().payload(lambda: inputs(total, T0 + 4), 0)["client"]["over_ceiling"] == []
    over = ["worker 1: 18,700 tokens/s over 14,000"]
    p = LiveView().payload(lambda: inputs(total, T0 + 4, over_ceiling=over), 0)
    assert p["client"]["over_ceiling"] == over
