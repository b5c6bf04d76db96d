"""The merged figures as Prometheus metric families: what a scrape of the run shows, built from an
Aggregate alone (the histograms with their buckets, the counters, the prompt cache, the request
phases, the graded items, the 95% intervals, the per-endpoint and per-model series).

The collection, in prometheus_client's terms; the exposition (the collector over the hub and
Locust's runner, /metrics on the web UI and on --prometheus-port) is runtime/exporter.py, whose
docstring names every series.

Histogram buckets are counted from the HDR histogram: a sample within 0.1% of a bucket bound
may fall on either side of it (the HDR precision), which no dashboard can see.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from llm_locust.metrics.aggregate import PHASE_LATENCIES, Aggregate, SparseHistogram
from llm_locust.metrics.histogram import Histogram

_SLOW = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120)
_FAST = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1)
_LAG = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
HISTOGRAMS = {  # exported name -> (aggregate histogram, bucket bounds in seconds, help)
    "llm_locust_ttft_seconds": ("ttft", _SLOW, "Time to first token: first token-bearing chunk - request sent."),
    "llm_locust_ttft_queue_seconds": ("ttft_queue", _SLOW, "Time to first token from the scheduled send time."),
    "llm_locust_ttft_tool_seconds": (
        "ttft_tool",
        _SLOW,
        "Time to the first generated tool-call token (requests that called a tool).",
    ),
    "llm_locust_itl_seconds": ("itl", _FAST, "Inter-token latency, one sample per token (gap / tokens in the chunk)."),
    "llm_locust_tpot_seconds": ("tpot", _FAST, "Time per output token per request, first token excluded."),
    "llm_locust_e2e_seconds": ("e2e", _SLOW, "End-to-end request latency."),
    "llm_locust_schedule_lag_seconds": ("schedule_lag", _LAG, "Send time - scheduled time (client-side delay)."),
    "llm_locust_ttft_cache_hit_seconds": (
        "ttft_cache_hit",
        _SLOW,
        "TTFT of ok requests the server said had at least half their prompt cached.",
    ),
    "llm_locust_ttft_cache_miss_seconds": (
        "ttft_cache_miss",
        _SLOW,
        "TTFT of ok requests the server said had less than half their prompt cached.",
    ),
}
# request phases run from microseconds (send) to minutes (a queue's wait): buckets over that range
_PHASE = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
GROUP_HISTOGRAMS = {  # per endpoint / per model: name suffix -> (group histogram, bounds, help)
    "ttft_seconds": ("ttft", _SLOW, "Time to first token"),
    "tpot_seconds": ("tpot", _FAST, "Time per output token"),
    "e2e_seconds": ("e2e", _SLOW, "End-to-end request latency"),
}


def cumulative_buckets(h: Histogram, bounds: tuple[float, ...]) -> list[tuple[str, int]]:
    """Prometheus `le` buckets from an HDR histogram (values recorded in microseconds)."""
    return _le_buckets(h.buckets_us(), bounds, h.count)


def sparse_buckets(h: SparseHistogram, bounds: tuple[float, ...]) -> list[tuple[str, int]]:
    """Prometheus `le` buckets from a per-group histogram (same bucketing as the HDR one)."""
    return _le_buckets(h.buckets.items(), bounds, sum(h.buckets.values()))


def _le_buckets(values_us, bounds: tuple[float, ...], total: int) -> list[tuple[str, int]]:
    """(value in us, count) pairs -> cumulative `le` buckets, then +Inf with `total`."""
    limits = [round(b * 1e6) for b in bounds]
    counts = [0] * len(bounds)
    for value, n in values_us:
        for i, limit in enumerate(limits):
            if value <= limit:
                counts[i] += n
                break
    out, acc = [], 0
    for bound, c in zip(bounds, counts, strict=True):
        acc += c
        out.append((f"{bound:g}", acc))
    out.append(("+Inf", total))
    return out


def cache_families(total: Aggregate) -> Any:
    """The prompt-cache counters and ratio gauges (docs/metrics.md, "Prompt cache")."""
    c = total.cache
    for name, value, doc in (
        (
            "llm_locust_cache_reported_requests",
            c.reported,
            "Ok requests whose server reported its cached prompt tokens.",
        ),
        ("llm_locust_cached_prompt_tokens", c.cached, "Prompt tokens the server said it served from its prefix cache."),
        ("llm_locust_cache_prompt_tokens", c.prompt, "Prompt tokens of the requests with a cached count reported."),
        (
            "llm_locust_ideal_cached_prompt_tokens",
            c.ideal,
            "Prompt tokens an unbounded prefix cache could have served.",
        ),
        ("llm_locust_ideal_prompt_tokens", c.ideal_prompt, "Prompt tokens of the requests whose ideal is known."),
    ):
        yield CounterMetricFamily(name, doc, value=value)
    for name, num, den, doc in (
        (
            "llm_locust_cache_hit_ratio",
            c.cached,
            c.prompt,
            "Cached / prompt tokens, over requests with a cached count.",
        ),
        (
            "llm_locust_cache_ideal_hit_ratio",
            c.ideal,
            c.ideal_prompt,
            "Ideal cached / prompt tokens (unbounded prefix cache).",
        ),
        (
            "llm_locust_cache_achieved_vs_ideal_ratio",
            c.both_cached,
            c.both_ideal,
            "Cached / ideal cached tokens, over requests with both known.",
        ),
    ):
        if den:
            yield GaugeMetricFamily(name, doc, value=num / den)


def phase_families(total: Aggregate) -> Any:
    """The request phases (docs/metrics.md, "Request phases"): one histogram family labelled by
    phase, and the connections those requests opened or found kept alive."""
    fam = HistogramMetricFamily(
        "llm_locust_request_phase",
        "Request phases of ok requests: connect (0 when kept alive; connect_new: opened ones only), "
        "send, wait (to the headers), first_token (headers to first token), receive.",
        labels=["phase"],
        unit="seconds",
    )
    for key in PHASE_LATENCIES:
        h = total.hist[key]
        fam.add_metric(
            [key.removeprefix("phase_")], buckets=cumulative_buckets(h, _PHASE), sum_value=(h.sum_us or 0) / 1e6
        )
    yield fam
    conn = CounterMetricFamily(
        "llm_locust_connections", "Ok requests timed in phases, by their connection.", labels=["connection"]
    )
    conn.add_metric(["new"], total.connections.new)
    conn.add_metric(["kept_alive"], total.connections.kept)
    yield conn


def graded_families(total: Aggregate) -> Any:
    """Accuracy under load (--graded; docs/verdicts.md): graded items that ended ok, and those
    answered right. Accuracy is their ratio (rate() of the two over a window)."""
    yield CounterMetricFamily(
        "llm_locust_graded_requests", "Graded items whose request ended ok (--graded).", value=total.work.graded
    )
    yield CounterMetricFamily("llm_locust_graded_correct", "Graded items answered right.", value=total.work.correct)


def interval_families(agg: Aggregate, window: str) -> Any:
    """The 95% intervals of the window's headline figures (docs/metrics.md "Confidence
    intervals"), computed at the scrape from the window's time blocks: half the interval's width
    over the figure (0.031: "± 3.1%"), and for a figure with too few samples, the samples it needs.
    A ladder's window is its current step (a whole ladder mixes loads: no interval)."""
    intervals = agg.blocks.intervals(agg.first_sent, agg.last_end)
    if intervals is None:
        return
    rel = GaugeMetricFamily(
        "llm_locust_ci95_relative_half_width",
        "Half the 95% confidence interval's width over the figure (0.031: +-3.1%), by time-block batch means.",
        labels=["window", "figure", "statistic"],
    )
    needs = GaugeMetricFamily(
        "llm_locust_ci95_samples_needed",
        "Samples a figure needs before it has a 95% interval (it is shown as insufficient until then).",
        labels=["window", "figure", "statistic"],
    )
    rows = [(m, stat, doc) for m, figs in intervals["latency"].items() for stat, doc in figs.items()]
    rows += [(name, "rate", doc) for name, doc in intervals["rates"].items()]
    for figure, stat, doc in rows:
        if (half := doc.get("rel")) is not None:
            rel.add_metric([window, figure, stat], half)
        elif (n := doc.get("needs")) is not None:
            needs.add_metric([window, figure, stat], n)
    yield rel
    yield needs


def group_families(total: Aggregate) -> Any:
    """Per-endpoint and per-model series, labelled by the endpoint (base URL) or model."""
    for dim, groups in total.groups.items():
        if not groups:
            continue
        prefix = f"llm_locust_{dim}"
        req = CounterMetricFamily(
            f"{prefix}_requests", f"Finished requests by {dim} and outcome.", labels=[dim, "outcome"]
        )
        counters = {
            key: CounterMetricFamily(f"{prefix}_{key}_tokens", f"{doc} by {dim}.", labels=[dim])
            for key, doc in (
                ("input", "Input tokens of ok requests"),
                ("output", "Output tokens of ok requests"),
                ("cached_prompt", "Prompt tokens the server served from its cache"),
                ("ideal_cached_prompt", "Prompt tokens an unbounded prefix cache could have served"),
            )
        }
        hists = {
            suffix: HistogramMetricFamily(f"{prefix}_{suffix}", f"{doc} by {dim}.", labels=[dim])
            for suffix, (_k, _b, doc) in GROUP_HISTOGRAMS.items()
        }
        for value, g in sorted(groups.items()):
            for outcome, n in sorted(g.outcomes.items()):
                req.add_metric([value, outcome], n)
            counters["input"].add_metric([value], g.tokens_in)
            counters["output"].add_metric([value], g.tokens_out)
            counters["cached_prompt"].add_metric([value], g.cache.cached)
            counters["ideal_cached_prompt"].add_metric([value], g.cache.ideal)
            for suffix, (key, bounds, _doc) in GROUP_HISTOGRAMS.items():
                h = g.hist[key]
                hists[suffix].add_metric([value], buckets=sparse_buckets(h, bounds), sum_value=h.sum_us / 1e6)
        yield req
        yield from counters.values()
        yield from hists.values()


def aggregate_families(total: Aggregate) -> Any:
    """The run's (or a window's) families from its aggregate, in the order a scrape shows them."""
    for name, (key, bounds, doc) in HISTOGRAMS.items():
        hist = total.hist[key]
        fam = HistogramMetricFamily(name, doc)
        sum_us = hist.sum_us
        fam.add_metric([], buckets=cumulative_buckets(hist, bounds), sum_value=(sum_us or 0) / 1e6)
        yield fam
    c = CounterMetricFamily("llm_locust_requests", "Finished requests by outcome.", labels=["outcome"])
    for outcome, n in total.outcomes.items():
        c.add_metric([outcome], n)
    yield c
    yield CounterMetricFamily("llm_locust_sent_requests", "Requests sent.", value=total.sent)
    yield CounterMetricFamily("llm_locust_input_tokens", "Input tokens of ok requests.", value=total.tokens_in)
    yield CounterMetricFamily("llm_locust_output_tokens", "Output tokens of ok requests.", value=total.tokens_out)
    yield from cache_families(total)
    yield from graded_families(total)
    yield from phase_families(total)
    yield from group_families(total)
