"""Server metrics: name tables, detection, per-window figures, and reading real servers' /metrics
(the simulator's vLLM names; llama.cpp's own `llamacpp:*`)."""

import json
import subprocess
import sys
import urllib.request

import pytest

from llm_locust.analysis.server_metrics import Sample, ServerSeries, read
from llm_locust.sim.process import SimProcess
from llm_locust.transport.scraper import Scraper

TRITON = """# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="ensemble",request_type="active",version="1"} 3
nv_trt_llm_request_metrics{model="ensemble",request_type="waiting",version="1"} 5
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="ensemble",version="1"} 0.25
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="ensemble",version="1"} 1000
"""
SGLANG = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 7
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 2
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.5
"""
OLD_VLLM = """# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="a"} 0.1
vllm:gpu_cache_usage_perc{model_name="b"} 0.2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 1
vllm:num_requests_running{model_name="b"} 2
"""


def test_the_simulator_is_told_from_vllm_whose_names_it_exports():
    text = OLD_VLLM + '# TYPE llm_locust_sim_info gauge\nllm_locust_sim_info{slots="8"} 1\n'
    server, figures = read(text)
    assert server == "llm-locust-sim" and figures["running"] == 3  # read by vLLM's names all the same
    assert ServerSeries("u", server).to_dict()["dialect"] == "vllm"
    assert ServerSeries("u", "sglang").to_dict()["dialect"] == "sglang"


def test_each_server_is_detected_and_read_by_its_own_names():
    assert read(TRITON) == ("triton-trtllm", {"running": 3, "waiting": 5, "kv_cache_usage": 0.25})
    assert read(SGLANG) == ("sglang", {"running": 7, "waiting": 2, "kv_cache_usage": 0.5})
    server, figures = read(OLD_VLLM)  # the old KV name, summed over two models
    assert server == "vllm" and figures["kv_cache_usage"] == pytest.approx(0.3) and figures["running"] == 3
    assert read("# TYPE x gauge\nx 1\n") == (None, {})


def test_window_means_gauges_and_rates_counters():
    s = ServerSeries(
        "u",
        "vllm",
        [
            Sample(
                10.0, {"running": 2, "generation_tokens_total": 100, "ttft_seconds_sum": 1.0, "ttft_seconds_count": 10}
            ),
            Sample(
                11.0, {"running": 4, "generation_tokens_total": 300, "ttft_seconds_sum": 2.0, "ttft_seconds_count": 20}
            ),
            Sample(
                12.0, {"running": 6, "generation_tokens_total": 500, "ttft_seconds_sum": 4.0, "ttft_seconds_count": 30}
            ),
            Sample(20.0, {"running": 100, "generation_tokens_total": 9999}),
        ],
    )
    w = s.window(10, 12)
    assert w["samples"] == 3 and w["running"] == {"mean": 4, "max": 6}
    assert w["generation_tokens_total"] == {"increase": 400, "per_s": 200}
    assert (w["t_from"], w["t_to"]) == (10.0, 12.0)  # the reads the increase lies between
    assert w["server_ttft_mean_s"] == pytest.approx(0.15)  # 3 s over 20 first tokens


def test_reads_are_jittered_on_their_grid_so_a_periodic_load_is_not_read_at_one_phase():
    # A closed loop of 1 s requests whose gauge reads 0 for the first 0.15 s of each (between one
    # request's end and the next one's first engine step): what a real vLLM showed.
    def running(t: float) -> int:
        return 0 if t % 1.0 < 0.15 else 1

    for start in (0.05, 0.5):  # a fixed 2 s period reads one phase for ever: all 0 or all 1
        assert len({running(start + 2.0 * k) for k in range(40)}) == 1

    scraper = Scraper("http://127.0.0.1:1/metrics", interval=2.0, seed=7)
    times = [scraper.due(k) for k in range(1, 2001)]
    assert all(abs(t - 2.0 * k) <= 0.5 for k, t in enumerate(times, 1))  # on the grid: ~L/2 reads in L s
    assert all(1.0 <= b - a <= 3.0 for a, b in zip(times, times[1:], strict=False))
    for start in (0.05, 0.5):  # jittered: the zero phase is read about as often as it lasts
        seen = [running(start + t) for t in times[:400]]
        assert 0.08 < seen.count(0) / len(seen) < 0.22
    a, b = (Scraper("http://127.0.0.1:1/metrics", interval=2.0, seed=7) for _ in range(2))
    assert [a.due(k) for k in range(5)] == [b.due(k) for k in range(5)]  # a seed repeats a run


@pytest.mark.parametrize("interval, warned", [("2", True), ("0.5", False)])
def test_a_ladder_whose_steps_are_short_for_the_reads_is_warned(tmp_path, interval, warned):
    with SimProcess(slots=2) as sim:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llm_locust.cli",
                "run",
                "--host",
                sim.url,
                "--ladder",
                "concurrency:1",
                "--warmup",
                "1",
                "--step-duration",
                "3",
                "--max-tokens",
                "8",
                "--metrics-interval",
                interval,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode == 0, p.stderr[-1500:]
    assert ("2s window gets about 1 read(s)" in p.stderr and "give --metrics-interval 0.5" in p.stderr) == warned, (
        p.stderr[-1500:]
    )


@pytest.mark.parametrize("bad", ["0", "-1", "nan"])
def test_a_bad_metrics_interval_is_refused_before_any_load(tmp_path, bad):
    with SimProcess(slots=2, token_log=str(tmp_path / "t.jsonl")) as sim:
        p = subprocess.run(
            [sys.executable, "-m", "llm_locust.cli", "run", "--host", sim.url, "-t", "2s", "--metrics-interval", bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode == 2, p.stderr[-1500:]
    assert "\n  --metrics-interval: " in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "t.jsonl").exists() or (tmp_path / "t.jsonl").read_text() == ""  # nothing was sent


def test_the_simulators_metrics_are_read_beside_each_ladder_step(tmp_path):
    results = tmp_path / "r.json"
    with SimProcess(slots=4, iter_base=0.005, iter_per_seq=0.0005) as sim:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llm_locust.cli",
                "run",
                "--host",
                sim.url,
                "--ladder",
                "concurrency:1,8",
                "--warmup",
                "1",
                "--step-duration",
                "5",
                "--max-tokens",
                "32",
                "--no-early-stop",
                "--results",
                str(results),
                "--metrics-interval",
                "0.5",
            ],  # ~8 reads in each 4 s window
            capture_output=True,
            text=True,
            timeout=120,
        )
        body = urllib.request.urlopen(sim.url + "/metrics").read().decode()
    assert p.returncode == 0, p.stderr[-2000:]
    assert "server (llm-locust-sim" in p.stdout  # the simulator names itself; its metrics are vLLM's
    sm = json.loads(results.read_text())["server_metrics"]
    assert sm["source"]["server"] == "llm-locust-sim" and sm["source"]["error"] is None
    assert sm["source"]["dialect"] == "vllm" and sm["source"]["info"]["llm_locust_sim_info"][0]["slots"] == "4"
    low, high = sm["steps"]
    assert low["running"]["max"] <= 1 and low["waiting"]["max"] == 0
    assert high["running"]["max"] == 4 and high["waiting"]["max"] >= 1  # 8 users on 4 slots queue
    assert high["generation_tokens_total"]["per_s"] > low["generation_tokens_total"]["per_s"]
    assert read(body)[1]["generation_tokens_total"] > 0


def test_a_server_without_metrics_is_one_warning_and_the_test_goes_on(tmp_path):
    results = tmp_path / "r.json"
    with SimProcess(slots=4) as sim:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llm_locust.cli",
                "run",
                "--host",
                sim.url,
                "-t",
                "3s",
                "-u",
                "2",
                "--server-metrics",
                sim.url + "/nothing-here",
                "--results",
                str(results),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr.count("no server metrics at") == 1
    r = json.loads(results.read_text())
    src = r["server_metrics"]["source"]
    assert r["summary"]["ok"] > 0 and "HTTP 404" in src["error"] and src["failed"] >= 1 and src["samples"] == 0


def test_a_read_that_fails_mid_run_is_counted_and_the_reads_go_on():
    import http.server
    import threading

    answers = iter([200, 503, 200])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code = next(answers)
            body = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n" if code == 200 else b"busy"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        scraper = Scraper(f"http://127.0.0.1:{server.server_port}/metrics")
        assert [scraper.scrape_once() for _ in range(3)] == [True, False, True]
    finally:
        server.shutdown()
    series = scraper.series
    assert len(series.samples) == 2 and series.failed == 1 and "HTTP 503" in series.error
    assert series.to_dict()["failed"] == 1 and [s.figures["running"] for s in series.samples] == [3, 3]


@pytest.mark.real_server
def test_llama_server_metrics_are_read(tmp_path, llama_server_bin, tiny_model):
    from realservers import LlamaServer

    results, trace = tmp_path / "r.json", tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"input_tokens": 40, "output_tokens": 32}) + "\n" for _ in range(10)))
    with LlamaServer(tiny_model, slots=2, ctx=4096, alias="tiny", threads=1) as srv:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llm_locust.cli",
                "run",
                "--host",
                srv.url,
                "--api",
                "openai-completions",
                "-u",
                "4",
                "-t",
                "6s",
                "--trace",
                str(trace),
                "--results",
                str(results),
                "--metrics-interval",
                "0.5",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert p.returncode == 0, p.stderr[-2000:]
    sm = json.loads(results.read_text())["server_metrics"]
    assert sm["source"]["server"] == "llama.cpp"
    run = sm["run"]
    assert run["running"]["max"] == 2 and run["waiting"]["max"] >= 1  # 4 users on 2 slots
    assert run["generation_tokens_total"]["increase"] > 0


def test_efficiency_finds_the_load_before_kv_saturation_or_preemption():
    from llm_locust.analysis.server_metrics import efficiency

    steps = [{"step": i + 1, "offered": n, "output_tokens_per_s": 100.0 * n} for i, n in enumerate((1, 2, 4, 8))]
    server = [
        {"kv_cache_usage": {"max": k}, "preemptions_total": {"increase": p}}
        for k, p in ((0.1, 0), (0.5, 0), (0.9, 3), (1.0, 9))
    ]
    gpu = [{"gpu_memory_used_bytes": {"mean": (80 + n) * 2**30}} for n in (1, 2, 4, 8)]
    e = efficiency(steps, server, gpu, 80 * 2**30)
    assert e["max_load_before_kv_saturation"] == 2  # step 3 preempted requests
    assert e["steps"][1]["gpu_memory_beyond_baseline_gib"] == pytest.approx(2)
    assert e["steps"][1]["output_tokens_per_s_per_gib"] == pytest.approx(200 / 82)


def test_gpu_sidecar_figures_are_read_beside_each_step(tmp_path):
    results = tmp_path / "r.json"
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.gpu.sidecar", "--fake", "2", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = sidecar.stdout.readline()
        url = line[line.index("http://") :].strip()
        with SimProcess(slots=4) as sim:
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "llm_locust.cli",
                    "run",
                    "--host",
                    sim.url,
                    "--ladder",
                    "concurrency:1,4",
                    "--warmup",
                    "1",
                    "--step-duration",
                    "4",
                    "--max-tokens",
                    "16",
                    "--no-early-stop",
                    "--gpu-metrics",
                    url + "/metrics",
                    "--metrics-interval",
                    "0.5",
                    "--results",
                    str(results),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        sidecar.terminate()
        sidecar.wait(timeout=20)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(results.read_text())
    assert r["gpu_metrics"]["source"]["server"] == "llm-locust-gpu-sidecar"
    eff = r["efficiency"]
    assert eff["baseline_gpu_memory_gib"] > 0 and len(eff["steps"]) == 2
    for row in eff["steps"]:
        assert row["gpu_memory_used_gib"] > 0 and row["output_tokens_per_s_per_gib"] > 0
        assert 0 <= row["gpu_utilization_mean"] <= 1
    assert eff["max_load_before_kv_saturation"] == 4  # the simulator's KV cache never filled up


# ---- prefix cache and speculative decoding, per window ----

VLLM_CACHE_SPEC = """# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {q}
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {h}
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {d}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {dt}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {a}
"""


def vllm_sample(t, q, h, d, dt, a):
    server, figures = read(VLLM_CACHE_SPEC.format(q=q, h=h, d=d, dt=dt, a=a))
    assert server == "vllm"
    return Sample(t, figures)


def test_vllm_prefix_cache_and_spec_decode_from_counter_deltas_of_the_window():
    s = ServerSeries(
        "u",
        "vllm",
        [
            vllm_sample(0.0, 1000, 900, 50, 150, 140),  # before the window: must not count
            vllm_sample(10.0, 2000, 1000, 100, 300, 200),
            vllm_sample(11.0, 2600, 1300, 180, 540, 330),
            vllm_sample(12.0, 3000, 1400, 300, 900, 560),
        ],
    )
    w = s.window(10, 12)
    assert w["prefix_cache_queries_total"] == {"increase": 1000, "per_s": 500}
    assert w["prefix_cache_hit_ratio"] == 400 / 1000 and w["prefix_cache_hit_ratio_source"] == "counters"
    assert w["spec_decode_accepted_tokens_total"]["increase"] == 360
    assert w["spec_acceptance_rate"] == 360 / 600  # accepted / draft tokens
    assert w["spec_mean_accepted_length"] == 1 + 360 / 200  # 1 + accepted / drafts
    assert w["spec_decode_source"] == "counters"
    whole = s.window(0, 12)  # a different window, different deltas
    assert whole["prefix_cache_hit_ratio"] == 500 / 2000 and whole["spec_acceptance_rate"] == 420 / 750


def test_sglang_cache_and_spec_gauges_are_averaged_over_the_window():
    text = """# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{model_name="m"}} {c}
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{model_name="m"}} {r}
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{model_name="m"}} {n}
"""
    samples = []
    for t, (c, r, n) in enumerate([(0.2, 0.5, 2.5), (0.4, 0.7, 3.1)]):
        server, fig = read(text.format(c=c, r=r, n=n))
        assert server == "sglang" and fig == {
            "prefix_cache_hit_rate": c,
            "spec_accept_rate": r,
            "spec_accept_length": n,
        }
        samples.append(Sample(float(t), fig))
    w = ServerSeries("u", "sglang", samples).window(0, 1)
    assert w["prefix_cache_hit_ratio"] == pytest.approx(0.3) and w["prefix_cache_hit_ratio_source"] == "gauge"
    assert w["spec_acceptance_rate"] == pytest.approx(0.6) and w["spec_mean_accepted_length"] == pytest.approx(2.8)
    assert w["spec_decode_source"] == "gauge"


def test_llama_server_cache_and_spec_counters():
    text = """# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {p}
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total {c}
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {d}
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {dt}
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total {a}
"""
    samples = [
        Sample(float(t), read(text.format(p=p, c=c, d=d, dt=dt, a=a))[1])
        for t, (p, c, d, dt, a) in enumerate([(100, 0, 0, 0, 0), (160, 240, 10, 80, 20)])
    ]
    w = ServerSeries("u", "llama.cpp", samples).window(0, 1)
    # llama-server's prompt_tokens_total counts the prompt tokens it processed (not the cached ones)
    assert w["prefix_cache_hit_ratio"] == 240 / (240 + 60)
    assert w["spec_acceptance_rate"] == 20 / 80 and w["spec_mean_accepted_length"] == 1 + 20 / 10


def test_no_cache_or_spec_figures_without_their_metrics():
    s = ServerSeries("u", "vllm", [Sample(0.0, {"running": 1}), Sample(1.0, {"running": 2})])
    w = s.window(0, 1)
    assert not {"prefix_cache_hit_ratio", "spec_acceptance_rate", "spec_mean_accepted_length"} & set(w)
    # counters that did not move over the window: no ratio out of 0 / 0
    flat = ServerSeries("u", "vllm", [vllm_sample(0.0, 10, 5, 1, 3, 2), vllm_sample(1.0, 10, 5, 1, 3, 2)]).window(0, 1)
    assert "prefix_cache_hit_ratio" not in flat and "spec_acceptance_rate" not in flat


def test_the_simulators_cache_and_spec_counters_are_read_exactly():
    import http.client

    def post(port, body):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"})
        obj = json.loads(c.getresponse().read())
        c.close()
        return obj

    def scrape(port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            return Sample(0.0, read(r.read().decode())[1])

    with SimProcess(
        iter_base=0.001,
        iter_per_seq=0.0001,
        iter_per_prefill_token=0,
        prefix_cache=True,
        cache_block=4,
        spec_tokens=4,
        spec_accept=0.5,
    ) as sim:
        s0 = scrape(sim.port)
        cached = [
            post(sim.port, {"prompt": "a b c d e f g h i j", "max_tokens": 30})["usage"]["prompt_tokens_details"][
                "cached_tokens"
            ]
            for _ in range(3)
        ]
        s1 = scrape(sim.port)
    s1.t = 1.0
    w = ServerSeries(sim.url, "vllm", [s0, s1]).window(0, 1)
    assert cached == [0, 8, 8] and w["prefix_cache_hit_ratio"] == 16 / 30
    assert w["generation_tokens_total"]["increase"] == 90
    acc, drafts = w["spec_decode_accepted_tokens_total"]["increase"], w["spec_decode_drafts_total"]["increase"]
    assert (
        w["spec_mean_accepted_length"] == 1 + acc / drafts and 0 < acc < w["spec_decode_draft_tokens_total"]["increase"]
    )


def test_format_steps_shows_cache_hit_and_spec_acceptance_beside_itl():
    from llm_locust.analysis.saturation import format_steps
    from llm_locust.analysis.steps import StepResult

    def step(i):
        return StepResult(
            step=i,
            offered=i,
            offered_kind="concurrency",
            window_start=0,
            window_end=10,
            warmup=0,
            steady_seconds=(0, 10),
            sent=10,
            ok=10,
            failed=0,
            cancelled=0,
            error_rate=0.0,
            requests_per_s=1.0,
            output_tokens_per_s=10.0 * i,
            aggregate_output_tokens_per_s=10.0,
            aggregate_requests_per_s=1.0,
            latency={},
            goodput_requests_per_s=None,
            goodput_tokens_per_s=None,
            slo_attainment=None,
            concurrency=1.0,
            client_valid=True,
            length_checked=0,
            length_mismatch=0,
            tokens_out=100,
        )

    steps = [step(1), step(2), step(3)]
    plain = format_steps(steps)
    assert "cache hit" not in plain and "spec acc" not in plain
    server = [
        {"prefix_cache_hit_ratio": 0.4, "spec_acceptance_rate": 0.6, "spec_mean_accepted_length": 2.8},
        {"samples": 0},
        {"prefix_cache_hit_ratio": 0.125},
    ]
    lines = format_steps(steps, server=server).splitlines()
    head = lines[0]
    assert (
        head.index("ITL p50/p99 ms")
        < head.index("cache hit %")
        < head.index("spec acc %/len")
        < head.index("TPOT p50 ms")
    )
    end_hit, end_spec = (
        head.index("cache hit %") + len("cache hit %"),
        head.index("spec acc %/len") + len("spec acc %/len"),
    )
    cells = [(line[:end_hit].split()[-1], line[:end_spec].split()[-1]) for line in lines[2:5]]
    assert cells == [("40.0", "60/2.80"), ("-", "-"), ("12.5", "-")]  # right-aligned under their headers
    assert format_steps(steps, server=[{}, {}, {}]) == plain


@pytest.mark.real_server
def test_llama_server_prefix_cache_counters_match_its_replies(llama_server_bin, smollm2_model):
    """llama-server's prompt_tokens_total counts only the prompt tokens it processed, and
    prompt_tokens_cached_total the reused ones: the window's hit ratio is exactly the replies'."""
    from realservers import LlamaServer, http_get

    def scrape(url, t):
        return Sample(t, read(http_get(url + "/metrics")[1].decode())[1])

    prompt = "the quick brown fox jumps over the lazy dog " * 20
    with LlamaServer(smollm2_model, slots=1, ctx=2048, alias="s") as srv:
        s0 = scrape(srv.url, 0.0)
        usages = []
        for _ in range(2):
            req = urllib.request.Request(
                srv.url + "/v1/completions",
                json.dumps({"prompt": prompt, "max_tokens": 4, "cache_prompt": True}).encode(),
                {"content-type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=120) as r:
                usages.append(json.loads(r.read())["usage"])
        s1 = scrape(srv.url, 1.0)
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usages]
    assert cached[0] == 0 and cached[1] > 0
    w = ServerSeries("llama-server", "llama.cpp", [s0, s1]).window(0, 1)
    assert w["prefix_cache_hits_total"]["increase"] == sum(cached)
    assert w["prefix_cache_hit_ratio"] == sum(cached) / sum(u["prompt_tokens"] for u in usages)
    assert "spec_acceptance_rate" not in w  # its spec-decode counters are there, at 0, without a draft model
