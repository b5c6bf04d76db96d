"""The master's reads of a /metrics URL (the inference server's or the GPU sidecar's) during a test.

Each read is bounded (transport/probe.py `fetch`): the whole read within the scraper's `timeout`
(2 s) and at most METRICS_BODY_BYTES; past either it is a failed read, counted, and the test goes
on. A URL's credentials (http://user:password@host/metrics, a token in its query) are sent (Basic
auth; the query as written) and registered as secrets, so every output masks them
(safe/masking.py `protect_url`).

The parsing and windowing of what it reads are pure and live in analysis.server_metrics."""

from __future__ import annotations

import logging
import random
import time
from urllib.parse import urlsplit

import gevent

from llm_locust.analysis.server_metrics import Sample, ServerSeries, _figures, info_series, samples
from llm_locust.safe import masking
from llm_locust.transport.probe import fetch

log = logging.getLogger(__name__)

# vLLM's /metrics is 50-300 KB; a reply this large is not an exporter's (and parsing it would hold
# the event loop for seconds)
METRICS_BODY_BYTES = 8 * 1024 * 1024


class Scraper:
    """Polls one /metrics URL every `interval` seconds while a test runs (master / local).

    Read k is due at k x `interval` +- a quarter interval, drawn at random: gauges are read at
    single instants, and at a fixed period a closed-loop load whose requests last a divisor of it
    is read at the same point of every request (seen on a real vLLM: 1 s requests, 2 s scrapes,
    every read in the 0.1 s between one request's end and the next one's first step, running 0 for
    a whole step). On the grid, a step still gets as many reads as its length allows."""

    def __init__(self, url: str, interval: float = 2.0, timeout: float = 2.0, seed: int | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"the metrics interval must be > 0 seconds, got {interval!r}")
        masking.protect_url(url)  # before anything can print it: its credentials are secrets
        self.series = ServerSeries(url)
        parts = urlsplit(url)
        self._target = url if parts.path else parts._replace(path="/metrics").geturl()  # a bare host: its /metrics
        self.interval = interval
        self.timeout = timeout
        self._random = random.Random(seed)
        self._greenlet = None

    def due(self, k: int) -> float:
        """When read k is due, in seconds after the first (call in order of k: one draw each)."""
        return self.interval * (k + self._random.uniform(-0.25, 0.25))

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def scrape_once(self) -> bool:
        try:
            t_asked = time.time()
            r = fetch(self._target, connect_timeout=self.timeout, total=self.timeout, body_bytes=METRICS_BODY_BYTES)
            # the server's counters are as of some moment between the question and the whole
            # answer; parsing (tens of ms for vLLM's text on a loaded core) is not part of it
            t_read = (t_asked + time.time()) / 2
            if r.status != 200:
                raise ValueError(f"HTTP {r.status}")
            by_name = samples(r.body.decode("utf-8", "replace"))
            server, figures = _figures(by_name)
            if not self.series.info:
                self.series.info = info_series(by_name)
        except Exception as e:  # noqa: BLE001 - a missing endpoint must not stop the test
            self.series.error = f"{type(e).__name__}: {e}"
            self.series.failed += 1
            return False
        self.series.server = self.series.server or server
        self.series.samples.append(Sample(t_read, figures))
        return True

    def _run(self) -> None:
        if not self.scrape_once():
            log.warning(
                "no server metrics at %s (%s): the test goes on without them", self.series.url, self.series.error
            )
            return
        log.info("reading %s server metrics from %s", self.series.server or "unknown", self.series.url)
        start, k = time.monotonic(), 0
        while True:
            k += 1
            delay = start + self.due(k) - time.monotonic()
            if delay >= 0:  # else a slow read overran this one's time: on to the next
                gevent.sleep(delay)
                self.scrape_once()


def metrics_url(base: str) -> str:
    """An endpoint's Prometheus URL: its base URL + /metrics."""
    return base.rstrip("/") + "/metrics"


def server_scrapers(
    endpoints: list[str], server_metrics: str = "", interval: float = 2.0, timeout: float = 2.0
) -> dict[str, Scraper]:
    """{endpoint URL: Scraper} for the inference servers' /metrics, first endpoint first.

    `server_metrics` is --server-metrics: 'off' gives {}; a URL replaces the first endpoint's
    (the host's) /metrics URL; empty reads every endpoint's URL/metrics. One endpoint gives one
    scraper, as before several endpoints existed; none (no host) and no URL gives {}."""
    if server_metrics == "off":
        return {}
    endpoints = [e.rstrip("/") for e in endpoints if e]
    if not endpoints:
        return {server_metrics: Scraper(server_metrics, interval=interval, timeout=timeout)} if server_metrics else {}
    out: dict[str, Scraper] = {}
    for i, e in enumerate(endpoints):
        url = server_metrics if (i == 0 and server_metrics) else metrics_url(e)
        out[e] = Scraper(url, interval=interval, timeout=timeout)
    return out
