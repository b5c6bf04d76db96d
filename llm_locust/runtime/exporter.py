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

The families built from an aggregate alone, with the histograms' buckets, are
metrics/prometheus.py; this module adds what the hub and Locust's runner know (users, in flight,
the step, workers, each process's ceiling, the locust_* names) and serves them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from locust.env import Environment
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily

from llm_locust.metrics.prometheus import aggregate_families, interval_families
from llm_locust.runtime.context import run_context
from llm_locust.runtime.hub import hub
from llm_locust.runtime.shapes import controller

log = logging.getLogger(__name__)


class LLMCollector:
    """Read at each scrape: the hub's merged figures, and Locust's runner and stats."""

    def __init__(self, environment: Environment) -> None:
        self.env = environment

    def describe(self):
        return []  # collected on demand only: no registration-time scrape

    def collect(self):
        h = hub(self.env)
        total = h.total
        yield from aggregate_families(total)
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
        clients = getattr(runner, "clients", None)  # a master's
        if clients is not None:
            yield GaugeMetricFamily("locust_workers_count", "Workers connected.", value=len(clients))
            yield GaugeMetricFamily("locust_workers_running_count", "Workers running.", value=len(clients.running))
            yield GaugeMetricFamily("locust_workers_missing_count", "Workers missing.", value=len(clients.missing))
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


def registry_for(environment: Environment) -> CollectorRegistry:
    run = run_context(environment)
    if run.prometheus is None:
        reg = CollectorRegistry(auto_describe=False)
        reg.register(LLMCollector(environment))
        ProcessCollector(registry=reg)  # process_resident_memory_bytes etc.: the soak dashboard
        run.prometheus = reg
    return run.prometheus


def install(environment: Environment, port: int, host: str = "127.0.0.1") -> None:
    """Serve /metrics on the web UI (when there is one) and on `port` (when given)."""
    reg = registry_for(environment)
    web_ui = environment.web_ui  # created before Locust's init event, where this is called
    if web_ui is not None:
        app = web_ui.app
        assert app is not None  # made by WebUI.__init__

        @app.route("/metrics")
        @web_ui.auth_required_if_enabled
        def metrics():  # noqa: ANN202 - Flask view
            return generate_latest(reg), 200, {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}

    if port:
        try:
            start_http_server(port, addr=host, registry=reg)
        except OSError as e:
            raise OSError(f"cannot serve Prometheus metrics on {host}:{port}: {e.strerror or e}") from None
        log.info("Prometheus metrics at http://%s:%d/metrics", host, port)
