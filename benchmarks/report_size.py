"""HTML report generation time and size for the results of a 1-hour run.

Builds a realistic 1-hour results file with the project's own code paths, then times
`llm-locust report` on it. The run: a closed-loop concurrency ladder of 12 steps of 5 minutes
(1 minute warm-up each), 1 .. 64 users, driven through the simulator's engine (`sim.engine.Engine`,
16 slots, a KV cache that fills near saturation) on a virtual clock, as
tests/test_saturation.py does: prompts of 128 .. 2,048 and replies of 64 .. 512 tokens (forced
length), each token's arrival jittered by the client's network (exponential, mean 0.3 ms), 0.3%
of requests failing with HTTP 503. Every request goes through `Aggregate.add` (run, warm-up and
measured steps, goodput against the seed plan's SLOs), with loop-lag and CPU samples; then
`build_results`, `steps.step_result` per window, `saturation.analyse`, the server's and GPU
sidecar's series sampled every 2 s (`server_metrics.ServerSeries.window`) and
`server_metrics.efficiency`, as the plugin assembles them at the end of a run. 3,600 series
seconds, full distributions.

Timing: `llm-locust report FILE -o OUT` as a fresh process (imports included), --repeat times,
median and range; and `render()` in-process (no imports), median. Prints figures, asserts nothing.

    python benchmarks/report_size.py [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_locust.analysis.saturation import analyse, format_steps  # noqa: E402
from llm_locust.analysis.server_metrics import Sample, ServerSeries, efficiency  # noqa: E402
from llm_locust.analysis.steps import request_slos, step_result  # noqa: E402
from llm_locust.metrics.aggregate import Aggregate  # noqa: E402
from llm_locust.metrics.records import Outcome, RequestRecord  # noqa: E402
from llm_locust.report.results import build_results, read_results, write_results  # noqa: E402
from llm_locust.runtime.shapes import StepWindow  # noqa: E402
from llm_locust.settings import derive  # noqa: E402
from llm_locust.sim.engine import Engine, Seq, SimConfig  # noqa: E402

W = 1_790_000_000.0  # wall clock of the virtual run's start
LEVELS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
STEP_S, WARMUP_S = 300.0, 60.0
SLOS = {"ttft": 0.5, "ttft_p50": 0.2, "tpot_p50": 0.05}
GIB = 2**30


def _step_of(t: float) -> int:
    """The step a send time falls in: its number, negative during the step's warm-up."""
    i = min(int(t // STEP_S), len(LEVELS) - 1)
    return (i + 1) if t >= i * STEP_S + WARMUP_S else -(i + 1)


class _HourRun:
    """The 1-hour ladder on the simulator's engine, on a virtual clock, with the client's and server's samples."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.cfg = SimConfig(slots=16, kv_tokens=24_000)
        self.eng = Engine(self.cfg)
        self.per_request = request_slos(SLOS)
        self.total = Aggregate()
        self.steps: dict[int, Aggregate] = {}
        self.pending: list[Seq] = []
        self.server = ServerSeries(url="http://10.0.0.5:8000/metrics", server="vllm")
        self.gpu = ServerSeries(
            url="http://10.0.0.5:9401/metrics",
            server="llm-locust-gpu-sidecar",
            info={
                "llm_locust_gpu_info": [
                    {
                        "gpu": "0",
                        "model_name": "NVIDIA H200",
                        "uuid": "GPU-0",
                        "driver_version": "550.54.15",
                        "cuda_version": "12.4",
                    }
                ]
            },
        )
        self.counters = {"generation_tokens_total": 0.0, "ttft_seconds_sum": 0.0, "ttft_seconds_count": 0.0}
        self.end_all = STEP_S * len(LEVELS)
        self.now, self.users, self.step_i, self.n = 0.0, 0, 0, 0
        self.next_sample, self.next_second = 0.0, 0.0

    def finish(self, r: RequestRecord) -> None:
        """Count a finished request in the run and in its step."""
        s = _step_of(r.t_sent)
        r.step = s
        for agg in (self.total, self.steps.setdefault(s, Aggregate())):
            agg.add_sent()
            agg.add(r, self.per_request)

    def new_request(self, t: float) -> None:
        """Send one request at t: queued for the engine, or failed at once with HTTP 503."""
        self.n += 1
        p, o = self.rng.randint(128, 2048), self.rng.randint(64, 512)
        r = RequestRecord(
            request_id=str(self.n),
            api="openai-chat",
            t_sched=t,
            t_sent=t,
            wall_sent=W + t,
            n_in=p,
            n_in_source="usage",
            requested_out=o,
        )
        if self.rng.random() < 0.003:
            r.outcome, r.status, r.t_end = Outcome.HTTP_ERROR, 503, t + 0.02
            r.error = 'HTTP 503: {"error": "server overloaded, retry later", "type": "ServiceUnavailable"}'
            self.finish(r)
            self.pending.append(None)  # the user sends its next request right away
            return
        self.pending.append(Seq(n_in=p, target=o, reserve=p + o, owner=r))

    def run(self) -> None:
        """Drive the engine until the last step has ended and every request has finished."""
        while True:
            self._ramp()
            self._client_samples()
            self._scrape()
            self._resend_failed()
            dur = self.eng.begin()
            for s in self.pending:
                self.eng.submit(s)
            self.pending.clear()
            if dur is None:
                if not self.eng.has_work():
                    break
                continue
            self.now += dur
            self._tokens()

    def _ramp(self) -> None:
        """Start the users of every step that has begun."""
        while self.step_i < len(LEVELS) and self.now >= self.step_i * STEP_S:
            for _ in range(LEVELS[self.step_i] - self.users):
                self.new_request(self.now)
            self.users = LEVELS[self.step_i]
            self.step_i += 1

    def _client_samples(self) -> None:
        """The client's own validity samples (CPU, loop lag), one a second."""
        while self.next_second <= self.now and self.next_second < self.end_all:
            agg = self.steps.setdefault(_step_of(self.next_second), Aggregate())
            for a in (self.total, agg):
                a.add_cpu_sample(20 + 40 * self.users / 64)
                for _ in range(10):
                    a.hist["loop_lag"].record(self.rng.expovariate(1 / 0.0008))
            self.next_second += 1.0

    def _scrape(self) -> None:
        """The master's scrapes of the server's and GPU sidecar's /metrics, every 2 s."""
        while self.next_sample <= self.now and self.next_sample < self.end_all:
            t = W + self.next_sample
            self.server.samples.append(
                Sample(
                    t,
                    {
                        "running": len(self.eng.running),
                        "waiting": len(self.eng.waiting),
                        "kv_cache_usage": self.eng.kv_usage,
                        "preemptions_total": 0.0,
                        **self.counters,
                    },
                )
            )
            busy = len(self.eng.running) / self.cfg.slots
            self.gpu.samples.append(
                Sample(
                    t,
                    {
                        "gpu_memory_used_bytes": 62 * GIB + self.eng.kv_usage * 70 * GIB + self.rng.random() * 2**26,
                        "gpu_memory_total_bytes": 141 * GIB,
                        "gpu_utilization": min(1.0, 0.05 + 0.95 * busy),
                    },
                )
            )
            self.next_sample += 2.0

    def _resend_failed(self) -> None:
        """A user whose request failed sends its next one now, while the run lasts."""
        while None in self.pending:
            self.pending.remove(None)
            if self.now < self.end_all:
                self.new_request(self.now)

    def _tokens(self) -> None:
        """Record the tokens of the engine's iteration that just ended; finished requests make room for new ones."""
        for s in self.eng.end():
            r = s.owner
            t = max(self.now + self.rng.expovariate(1 / 0.0003), r.chunk_times[-1] if r.chunk_times else 0.0)
            r.chunk_times.append(t)
            r.chunk_tokens.append(1)
            self.counters["generation_tokens_total"] += 1
            if r.t_first is None:
                r.t_first = r.t_first_content = t
                self.counters["ttft_seconds_sum"] += t - r.t_sent
                self.counters["ttft_seconds_count"] += 1
            if s.state == "done":
                r.t_end, r.n_out, r.n_out_source = t, s.n_out, "usage"
                self.finish(r)
                if self.now < self.end_all:
                    self.new_request(self.now)


def synthesize(seed: int = 1) -> dict:
    """The results document of the 1-hour run, assembled as the plugin does at the end of a run."""
    sim = _HourRun(seed)
    sim.run()
    total, steps, server, gpu = sim.total, sim.steps, sim.server, sim.gpu
    end_all, n = sim.end_all, sim.n

    windows = [
        StepWindow(
            index=i + 1,
            level=float(u),
            started=W + i * STEP_S,
            measured_from=W + i * STEP_S + WARMUP_S,
            ended=W + (i + 1) * STEP_S,
        )
        for i, u in enumerate(LEVELS)
    ]
    results = [
        step_result(
            steps.get(w.index, Aggregate()),
            step=w.index,
            offered=w.level,
            offered_kind="concurrency",
            window=(w.measured_from, w.ended),
            warmup=WARMUP_S,
            slos=SLOS,
            series=total.series,
            max_error_rate=0.05,
        )
        for w in windows
    ]
    verdict = analyse(results, SLOS)
    print(format_steps(results, verdict), "\n")
    server_w = {
        "source": server.to_dict(),
        "run": server.window(W, W + end_all),
        "steps": [{"step": w.index, "level": w.level, **server.window(w.measured_from, w.ended)} for w in windows],
    }
    gpu_w = {
        "source": gpu.to_dict(),
        "run": gpu.window(W, W + end_all),
        "steps": [{"step": w.index, "level": w.level, **gpu.window(w.measured_from, w.ended)} for w in windows],
    }
    plan = derive.to_plan(
        derive.resolve(
            derive.plan_values(
                {
                    "name": "1-hour concurrency ladder (synthetic)",
                    "host": "http://10.0.0.5:8000",
                    "workload": {
                        "synthetic": {
                            "requests": 100000,
                            "input": "uniform:128:2048",
                            "output": "uniform:64:512",
                            "seed": 1,
                        }
                    },
                    "ladder": {"kind": "concurrency", "steps": LEVELS, "duration": STEP_S, "warmup": WARMUP_S},
                    "slos": SLOS,
                    "results": "hour.json",
                }
            )
        )
    )
    run = {
        "host": "http://10.0.0.5:8000",
        "started_at": W,
        "ended_at": W + end_all,
        "runner": "MasterRunner",
        "server": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "seed": 0,
        "started_at_utc": "2026-09-21T12:53:20+00:00",
        "command": ["llm-locust", "run", "hour.yaml", "--workers", "4", "--results", "hour.json"],
        "settings": {
            "api": "openai-chat",
            "model": "",
            "api_key_env": "OPENAI_API_KEY",
            "api_key_set": True,
            "trace": "/data/hour.workload.jsonl",
            "max_tokens": 0,
            "force_length": True,
            "slos": SLOS,
            "ladder": {
                "spec": "concurrency:" + ",".join(map(str, LEVELS)),
                "warmup": WARMUP_S,
                "step_duration": STEP_S,
                "max_error_rate": 0.05,
                "early_stop": False,
            },
            "seed": 0,
        },
    }
    workers = [
        {
            "id": f"worker-{i}",
            "index": i,
            "reports": 1200,
            "sent": n // 4,
            "finished": n // 4,
            "in_flight_at_last_report": 0,
            "lost_at": None,
            "rejoined_at": None,
        }
        for i in range(4)
    ]
    doc = build_results(total, steps, run, workers, 0.05)
    doc["environment"].update(
        server={
            "url": run["host"],
            "kind": "vllm",
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "models": [{"id": "meta-llama/Llama-3.1-8B-Instruct", "owned_by": "vllm", "max_model_len": 131072}],
            "version": {"version": "0.11.0"},
            "version_endpoint": "/version",
        },
        gpus=[
            {
                "gpu": "0",
                "model_name": "NVIDIA H200",
                "uuid": "GPU-0",
                "driver_version": "550.54.15",
                "cuda_version": "12.4",
            }
        ],
        trace={"path": "/data/hour.workload.jsonl", "format": None, "sha256": "0" * 64, "bytes": 5_400_000},
    )
    doc["server_metrics"], doc["gpu_metrics"] = server_w, gpu_w
    doc["efficiency"] = efficiency(
        [s.to_dict() for s in results],
        server_w["steps"],
        gpu_w["steps"],
        gpu.samples[0].figures["gpu_memory_used_bytes"],
    )
    doc["plan"] = plan
    doc["ladder"] = {
        "ladder": plan["ladder"],
        "windows": [w.to_dict() for w in windows],
        "steps": [s.to_dict() for s in results],
        "saturation": verdict.to_dict(),
        "stop_reason": None,
    }
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", default="", help="write the results and the report into this folder and keep them")
    args = ap.parse_args()
    d = Path(args.keep or tempfile.mkdtemp(prefix="llm-locust-report-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    src, out = d / "hour.json", d / "hour.html"

    t = time.perf_counter()
    doc = synthesize()
    write_results(src, doc)
    r = read_results(src)
    print(
        f"synthesized in {time.perf_counter() - t:.1f} s: {src} ({src.stat().st_size / 1024:,.0f} KiB), "
        f"{r['summary']['sent']:,} requests, {r['summary']['tokens_out']:,} output tokens, "
        f"{len(r['series']):,} series seconds, "
        f"{len(r['ladder']['steps'])} steps, {sum(len(v) for v in r['distributions'].values())} histogram bins, "
        f"{r['server_metrics']['source']['samples']} server / {r['gpu_metrics']['source']['samples']} GPU samples"
    )

    cmd = [sys.executable, "-m", "llm_locust.cli", "report", str(src), "-o", str(out)]
    walls = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        walls.append(time.perf_counter() - t)
        if p.returncode != 0:
            sys.exit(f"report failed ({p.returncode}): {p.stderr}")
    from llm_locust.report.html import render

    inproc = []
    render(r)  # warm: imports, font cache
    for _ in range(args.repeat):
        t = time.perf_counter()
        page = render(r)
        inproc.append(time.perf_counter() - t)
    size = out.stat().st_size
    svg = sum(len(part.split("</svg>")[0]) for part in page.split("<svg")[1:])
    print(
        f"`{' '.join(['llm-locust', 'report', src.name, '-o', out.name])}` as a process, {args.repeat} runs: "
        f"median {statistics.median(walls):.2f} s (min {min(walls):.2f}, max {max(walls):.2f})"
    )
    print(f"render() in-process, {args.repeat} runs: median {statistics.median(inproc):.2f} s")
    print(
        f"report: {size:,} bytes ({size / 1024:,.0f} KiB), of which inline SVG ~{svg / size:.0%};"
        f" results JSON {src.stat().st_size:,} bytes"
    )
    if not args.keep:
        for f in (src, out):
            f.unlink(missing_ok=True)
        d.rmdir()


if __name__ == "__main__":
    main()
