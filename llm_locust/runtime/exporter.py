"""Prometheus exposition of the master's (or local runner's) figures.

A prometheus_client Collector reads the merged aggregates at scrape time: nothing is copied per
request. Served on the web UI's Flask app at /metrics, and on its own port with
`--prometheus-port` (headless runs). Names:

  llm_locust_<latency>_seconds        histograms (documented buckets below), exact _sum
  llm_locust_requests_total{outcome}  counter; llm_locust_{input,output}_tokens_total
  llm_locust_users, _in_flight, _step, _offered_load, _test_running, _workers{state},
  llm_locust_worker_cpu_percent{worker}, llm_locust_worker_report_age_seconds{worker}
  llm_locust_ttft_cache_{hit,miss}_seconds  TTFT of cache hits / misses (docs/metrics.md, "Prompt cache")
  llm_locust_cache_reported_requests_total, llm_locust_cached_prompt_tokens_total,
  llm_locust_cache_prompt_tokens_total, llm_locust_ideal_cached_prompt_tokens_total,
  llm_locust_ideal_prompt_tokens_total           prompt-cache counters (ok requests)
  llm_locust_cache_hit_ratio, llm_locust_cache_ideal_hit_ratio,
  llm_locust_cache_achieved_vs_ideal_ratio       gauges, present once defined
  llm_locust_graded_requests_total, llm_locust_graded_correct_total   accuracy under load (--graded)
  llm_locust_request_phase_seconds{phase}   request phases: connect, send, wait, first_token,
                                      receive, connect_new (docs/metrics.md, "Request phases")
  llm_locust_connections_total{connection}  ok requests timed in phases, by new / kept_alive
  llm_locust_{endpoint,model}_requests_total{endpoint|model, outcome},
  llm_locust_{endpoint,model}_{input,output,cached_prompt,ideal_cached_prompt}_tokens_total{...},
  llm_locust_{endpoint,model}_{ttft,tpot,e2e}_seconds{...}   per endpoint / per model, when the
                                      requests carry one (at most MAX_GROUPS values, then "other")
  locust_*                            the familiar locust_exporter names, for existing dashboards

Histogram buckets are counted from the HDR histogram: a sample within 0.1% of a bucket bound
may fall on either side of it (the HDR precision), which no dashboard can see.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from llm_locust.metrics.aggregate import PHASE_LATENCIES, Aggregate, SparseHistogram
from llm_locust.metrics.histogram import Histogram
from llm_locust.runtime.context import run_context
from llm_locust.runtime.hub import hub
from llm_locust.runtime.shapes import controller

log = logging.getLogger(__name__)

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


class LLMCollector:
    def __init__(self, environment) -> None:
        self.env = environment

    def describe(self):
        return []  # collected on demand only: no registration-time scrape

    def collect(self):
        h = hub(self.env)
        total = h.total
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
        if h.ladder:
            step = h.steps.get(h.step)
            if step is not None and h.step > 0:
                yield from interval_families(step, f"step {h.step}")
        else:
            yield from interval_families(total, "run")
        yield from self._gauges(h)
        yield from self._locust_compatible()

    def _gauges(self, h) -> Any:
        runner = self.env.runner
        state = getattr(runner, "state", "")
        yield GaugeMetricFamily(
            "llm_locust_test_running",
            "1 while a test runs; figures of a stopped test are not current.",
            value=1 if state in ("running", "spawning") else 0,
        )
        yield GaugeMetricFamily(
            "llm_locust_users",
            "Users (closed loop) or dispatchers (open loop).",
            value=getattr(runner, "user_count", 0),
        )
        workers = list(getattr(runner, "clients", {}).values()) if hasattr(runner, "clients") else []
        in_flight = sum(w.in_flight for w in h.workers.values()) if workers else h.in_flight
        yield GaugeMetricFamily(
            "llm_locust_in_flight", "Requests in flight (workers: as of their last report).", value=in_flight
        )
        yield GaugeMetricFamily(
            "llm_locust_step", "Current ladder step (negative: its warm-up; 0: no ladder).", value=h.step
        )
        ctl = controller(self.env)
        if ctl is not None and ctl.windows:
            yield GaugeMetricFamily(
                "llm_locust_offered_load",
                f"Offered load of the current step ({ctl.ladder.kind}).",
                value=ctl.windows[-1].level,
            )
        yield from _ceiling_families(h, bool(workers))
        if workers:
            by_state = GaugeMetricFamily("llm_locust_workers", "Workers by state.", labels=["state"])
            states: dict[str, int] = {}
            for w in workers:
                states[w.state] = states.get(w.state, 0) + 1
            for s, n in states.items():
                by_state.add_metric([s], n)
            yield by_state
            cpu = GaugeMetricFamily(
                "llm_locust_worker_cpu_percent", "Worker CPU use (Locust heartbeat).", labels=["worker"]
            )
            age = GaugeMetricFamily(
                "llm_locust_worker_report_age_seconds",
                "Seconds since the worker's last metrics report.",
                labels=["worker"],
            )
            done = GaugeMetricFamily(
                "llm_locust_worker_finished_requests", "Requests the worker reported finished.", labels=["worker"]
            )
            now = time.time()
            for w in workers:
                cpu.add_metric([w.id], w.cpu_usage)
                ws = h.workers.get(w.id)
                if ws is not None and ws.last_report:
                    age.add_metric([w.id], now - ws.last_report)
                    done.add_metric([w.id], ws.finished)
            yield cpu
            yield age
            yield done

    def _locust_compatible(self) -> Any:
        """The names ContainerSolutions/locust_exporter served, so existing Locust dashboards work."""
        runner = self.env.runner
        stats = self.env.stats
        yield GaugeMetricFamily("locust_users", "Users.", value=getattr(runner, "user_count", 0))
        running = GaugeMetricFamily("locust_running", "Runner state: 0 stopped, 1 spawning/hatching, 2 running.")
        state = getattr(runner, "state", "")
        running.add_metric([], 2 if state == "running" else 1 if state == "spawning" else 0)
        yield running
        if hasattr(runner, "clients"):
            yield GaugeMetricFamily("locust_workers_count", "Workers connected.", value=len(runner.clients))
            yield GaugeMetricFamily(
                "locust_workers_running_count", "Workers running.", value=len(runner.clients.running)
            )
            yield GaugeMetricFamily(
                "locust_workers_missing_count", "Workers missing.", value=len(runner.clients.missing)
            )
        if stats is None:
            return
        yield GaugeMetricFamily("locust_fail_ratio", "Failed / all requests.", value=stats.total.fail_ratio)
        per = {
            "locust_requests_num_requests": ("Requests.", lambda e: e.num_requests),
            "locust_requests_num_failures": ("Failures.", lambda e: e.num_failures),
            "locust_requests_current_rps": ("Requests per second, recent.", lambda e: e.current_rps or 0.0),
            "locust_requests_current_fail_per_sec": (
                "Failures per second, recent.",
                lambda e: e.current_fail_per_sec or 0.0,
            ),
            "locust_requests_avg_response_time": ("Mean response time (ms).", lambda e: e.avg_response_time),
            "locust_requests_median_response_time": ("Median response time (ms).", lambda e: e.median_response_time),
            "locust_requests_max_response_time": ("Max response time (ms).", lambda e: e.max_response_time),
            "locust_requests_min_response_time": ("Min response time (ms).", lambda e: e.min_response_time or 0),
            "locust_requests_current_response_time_percentile_50": (
                "Recent p50 (ms).",
                lambda e: e.get_current_response_time_percentile(0.5) or 0,
            ),
            "locust_requests_current_response_time_percentile_95": (
                "Recent p95 (ms).",
                lambda e: e.get_current_response_time_percentile(0.95) or 0,
            ),
        }
        entries = list(stats.entries.values()) + [stats.total]
        for name, (doc, get) in per.items():
            g = GaugeMetricFamily(name, doc, labels=["method", "name"])
            for e in entries:
                g.add_metric([e.method or "", e.name], float(get(e)))
            yield g


def _ceiling_families(h, master: bool) -> Any:
    """Each sending process's token rate (last 5 s) against its ceiling, and 1 once its peak went
    over it (metrics/ceiling.py): a master's workers as last reported, else this process."""
    if master:
        parts = [(str(w.index if w.index is not None else w.client_id), w.ceiling) for w in h.workers.values()]
    else:
        parts = [("local", h.ceiling.to_wire())]
    rate = GaugeMetricFamily(
        "llm_locust_process_tokens_per_second", "Tokens/s a sending process reads (last 5 s).", labels=["process"]
    )
    limit = GaugeMetricFamily(
        "llm_locust_process_ceiling_tokens_per_second", "Tokens/s one process holds (its ceiling).", labels=["process"]
    )
    over = GaugeMetricFamily(
        "llm_locust_process_over_ceiling",
        "1 once the process's peak token rate went over its ceiling.",
        labels=["process"],
    )
    for name, wire in parts:
        if not wire:
            continue
        rate.add_metric([name], wire["rate"])
        limit.add_metric([name], wire["ceiling"])
        over.add_metric([name], 1 if wire["peak"] > wire["ceiling"] else 0)
    yield rate
    yield limit
    yield over


def registry_for(environment) -> CollectorRegistry:
    run = run_context(environment)
    if run.prometheus is None:
        reg = CollectorRegistry(auto_describe=False)
        reg.register(LLMCollector(environment))
        ProcessCollector(registry=reg)  # process_resident_memory_bytes etc.: the soak dashboard
        run.prometheus = reg
    return run.prometheus


def install(environment, port: int, host: str = "127.0.0.1") -> None:
    """Serve /metrics on the web UI (when there is one) and on `port` (when given)."""
    reg = registry_for(environment)
    web_ui = environment.web_ui  # created before Locust's init event, where this is called
    if web_ui is not None:

        @web_ui.app.route("/metrics")
        @web_ui.auth_required_if_enabled
        def metrics():  # noqa: ANN202 - Flask view
            return generate_latest(reg), 200, {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}

    if port:
        try:
            start_http_server(port, addr=host, registry=reg)
        except OSError as e:
            raise OSError(f"cannot serve Prometheus metrics on {host}:{port}: {e.strerror or e}") from None
        log.info("Prometheus metrics at http://%s:%d/metrics", host, port)
