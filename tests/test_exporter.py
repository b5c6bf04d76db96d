"""The Prometheus exporter: buckets from HDR histograms, a clean exposition (promtool), and a real
Prometheus scraping a real master + 2 workers run."""

import json
import random
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from support import free_port, need_binary, run_cli, scrape_until, start_run

from llm_locust.metrics.histogram import Histogram
from llm_locust.metrics.prometheus import cumulative_buckets
from llm_locust.sim.process import SimProcess


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def test_buckets_count_every_sample_at_or_below_each_bound():
    rng = random.Random(4)
    values = [rng.lognormvariate(-3, 1.5) for _ in range(5000)]
    h = Histogram()
    for v in values:
        h.record(v)
    bounds = (0.001, 0.01, 0.05, 0.1, 0.5, 1, 5)
    buckets = cumulative_buckets(h, bounds)
    assert buckets[-1] == ("+Inf", 5000)
    for (le, count), bound in zip(buckets, bounds, strict=False):  # buckets end with +Inf
        exact = sum(v <= bound for v in values)
        assert abs(count - exact) <= max(2, exact * 0.002), (le, count, exact)  # HDR precision at the bound


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """A master + 2 workers run against the simulator, its exporter on a free port."""
    tmp = tmp_path_factory.mktemp("exporter")
    port = free_port()
    with SimProcess(slots=16) as sim:
        proc = start_run(
            "--host",
            sim.url,
            "--workers",
            "2",
            "-u",
            "6",
            "-t",
            "30s",
            "--max-tokens-cap",
            "32",
            "--prometheus-port",
            str(port),
            "--results",
            str(tmp / "r.json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            yield proc, port, tmp
        finally:
            proc.wait(timeout=90)


def scrape_when(port: int, predicate, deadline: float = 30.0) -> str:
    held, text = scrape_until(port, predicate, timeout=deadline, every=0.5, read_timeout=5.0)
    if not held:
        raise AssertionError(f"condition not met within {deadline}s; last scrape:\n{text[-2000:]}")
    return text


def test_exposition_passes_promtool_and_prometheus_scrapes_every_series(live_run, tmp_path):
    promtool, prometheus = need_binary("promtool"), need_binary("prometheus")
    proc, port, _ = live_run
    text = scrape_when(
        port, lambda t: "llm_locust_output_tokens_total" in t and "llm_locust_output_tokens_total 0.0" not in t
    )
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    problems = [line for line in (check.stdout + check.stderr).splitlines() if line.strip()]
    # our own names lint clean; the locust_* names are locust_exporter's, kept as they are for
    # existing dashboards (promtool objects to locust_workers_count's suffix, for one)
    assert all(line.startswith("locust_") for line in problems), problems
    assert check.returncode in (0, 3)  # 3: lint problems only (parse errors give 1)
    assert 'llm_locust_workers{state="running"} 2.0' in text or 'llm_locust_workers{state="spawning"} 2.0' in text

    prom_port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: llm-locust\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    assert subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True).returncode == 0
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def query(q: str):
            url = f"http://127.0.0.1:{prom_port}/api/v1/query?query={urllib.parse.quote(q)}"
            return json.loads(get(url))["data"]["result"]

        end = time.monotonic() + 40
        result = []
        while time.monotonic() < end and not result:
            try:
                result = query("rate(llm_locust_output_tokens_total[5s]) > 0")
            except OSError:
                pass  # Prometheus still starting
            if not result:
                time.sleep(0.5)  # polling Prometheus's API, bounded by the deadline
        assert result, "Prometheus never saw output tokens growing"
        p50 = query("histogram_quantile(0.5, rate(llm_locust_ttft_seconds_bucket[10s]))")
        assert p50 and 0 < float(p50[0]["value"][1]) < 5
        assert float(query("sum(llm_locust_requests_total)")[0]["value"][1]) > 0
        assert float(query("locust_users")[0]["value"][1]) == 6
        assert query('locust_requests_current_rps{name="Aggregated"}')
    finally:
        prom.terminate()
        prom.wait(timeout=20)


def _gauge(text: str, name: str, **labels) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # exposition order
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_run_so_far_carries_its_intervals(live_run):
    """The master's /metrics says each headline figure's 95% interval (half width over the
    figure), from the workers' merged time blocks; a p99 with too few samples says how many it
    needs instead of a width."""
    _, port, _ = live_run
    name = "llm_locust_ci95_relative_half_width"
    text = scrape_when(port, lambda t: _gauge(t, name, window="run", figure="output_tokens_per_s", statistic="rate"))
    for figure, stat in (("ttft", "mean"), ("e2e", "p50"), ("output_tokens_per_s", "rate")):
        rel = _gauge(text, name, window="run", figure=figure, statistic=stat)
        assert rel is not None and 0 < rel < 1, (figure, stat, rel)
    count = [ln for ln in text.splitlines() if ln.startswith("llm_locust_ttft_seconds_count ")]
    if count and float(count[0].split()[1]) < 368:  # too few for a p99: it says what it needs
        needs = _gauge(text, "llm_locust_ci95_samples_needed", window="run", figure="ttft", statistic="p99")
        assert needs is not None and needs >= 368
        assert _gauge(text, name, window="run", figure="ttft", statistic="p99") is None


def test_web_ui_serves_metrics_too(tmp_path):
    port = free_port()
    with SimProcess(slots=8) as sim:
        proc = start_run(
            "--host",
            sim.url,
            "--web",
            "--web-port",
            str(port),
            "--web-host",
            "127.0.0.1",
            "--autostart",
            "--autoquit",
            "3",
            "-u",
            "2",
            "-t",
            "8s",
            "--max-tokens-cap",
            "8",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            text = scrape_when(port, lambda t: "llm_locust_requests_total" in t and 'outcome="ok"} 0.0' not in t)
        finally:
            proc.wait(timeout=60)
    assert (
        "llm_locust_ttft_seconds_bucket" in text and "locust_users" in text and "process_resident_memory_bytes" in text
    )


def test_a_taken_port_is_a_clear_error_before_any_load():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run_cli("--host", "http://127.0.0.1:9", "-t", "2s", "--prometheus-port", str(port), timeout=60)
    assert p.returncode == 2
    assert f"cannot serve Prometheus metrics on 127.0.0.1:{port}" in p.stderr and "Traceback" not in p.stderr
