"""What the LLM view (/llm, /llm/data) costs the master.

(a) in-process, `--part compute`: a populated hub without Locust: a total `Aggregate` of
    `--requests` requests (`--tokens` output tokens each, one chunk per token, spread over
    `--seconds` seconds, lognormal TTFT/ITL) and a ladder of `--steps` step aggregates, all steps
    finished but the last. Then `llm_locust.report.live.LiveView` on it, with a fake clock:
      - cold: the first snapshot (every step's `step_result`, the saturation verdict);
      - warm: a snapshot one second later (finished steps cached, the running step read again);
      - one step's figures: `steps.step_result` (histogram percentiles read through numpy);
      - cached poll: a poll within the same second (`since` = the last `now`): slicing + orjson;
      - first poll of a page (since=0, the whole per-second series), its size;
      - an incremental poll's size.
    Times are the median of `--repeat` runs of each (time.perf_counter).
(b) real processes, `--part cpu`: the simulator (`SimProcess(slots=16)`) and
    `python -m locust -f llm_locust/locustfiles/ladder.py --processes 1 --autostart` (a master and
    one worker process) with the web UI on 127.0.0.1, in the first step of `--ladder concurrency:24,32
    --step-duration 600` (no step ends while measured: a step end costs the master the
    controller's own `results()` of every step, tens of ms, which would swamp the figures). The
    master's CPU (utime+stime of its own pid from /proc/PID/stat, children excluded) is read
    over consecutive windows of `--window` seconds: no page open; /llm open in headless Chromium
    (Debian's chromium via playwright; it polls /llm/data every 1.5 s); Locust's own page open
    (it polls /stats/requests every 2 s, which carries the LLM tab's rows); no page again.
    The windows alternate (none, /llm, none, Locust's page, none, /llm) since the master's own
    work grows with the ladder's load. Then bursts of GET /llm/data from Python (urllib, one at a
    time): `--calls` requests 1.05 s apart (each recomputes the snapshot) and 10x as many back to
    back (cached); master CPU per request = its CPU over the burst / requests.

Run: python benchmarks/webui_refresh.py [--part compute|cpu|both] [--requests 50000] [--window 20]
No assertions on timing: this prints figures, it does not judge them.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_locust.analysis.steps import step_result  # noqa: E402
from llm_locust.metrics.aggregate import Aggregate  # noqa: E402
from llm_locust.metrics.records import RequestRecord  # noqa: E402
from llm_locust.report.live import Inputs, LadderInputs, LiveView  # noqa: E402

T0 = 1_700_000_000.0


def populate(n: int, tokens: int, seconds: int, n_steps: int, seed: int = 1):
    rng = random.Random(seed)
    total = Aggregate()
    steps = {i: Aggregate() for i in range(1, n_steps + 1)}
    per_step = seconds / n_steps
    for k in range(n):
        t = T0 + seconds * k / n
        step = min(n_steps, int((t - T0) // per_step) + 1)
        first = t + rng.lognormvariate(-3, 0.6)
        times, x = [], first
        for _ in range(tokens):
            times.append(x)
            x += rng.lognormvariate(-4.6, 0.3)
        r = RequestRecord(
            request_id=str(k),
            api="openai-chat",
            t_sched=t,
            t_sent=t,
            wall_sent=t,
            t_first=first,
            t_first_content=first,
            t_end=times[-1],
            chunk_times=times,
            chunk_tokens=[1] * tokens,
            n_out=tokens,
            n_in=100,
            n_in_source="usage",
            requested_out=tokens,
            step=step,
        )
        for a in (steps[step], total):
            a.add_sent()
            a.add(r)
    for a in (total, *steps.values()):  # as on a master, where merging has folded every record in
        for h in a.hist.values():
            h.count  # noqa: B018
    windows = []
    for i in range(1, n_steps + 1):
        start = T0 + (i - 1) * per_step
        windows.append(
            {
                "step": i,
                "level": float(2**i),
                "started": start,
                "measured_from": start + 5,
                "ended": start + per_step if i < n_steps else None,
                "extended": 0.0,
            }
        )
    ladder = LadderInputs(
        kind="concurrency",
        levels=[float(2**i) for i in range(1, n_steps + 1)],
        warmup=5.0,
        duration=per_step,
        requests=0,
        windows=windows,
        done=False,
        stop_reason=None,
        slos={},
    )
    return total, steps, ladder


def part_compute(a) -> None:
    t = time.perf_counter()
    total, steps, ladder = populate(a.requests, a.tokens, a.seconds, a.steps)
    print(
        f"populated: {a.requests:,} requests x {a.tokens} tokens over {a.seconds} s, {a.steps} steps "
        f"({time.perf_counter() - t:.1f} s to build)"
    )
    now0 = T0 + a.seconds - 0.5

    def timed(fn):
        out = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return statistics.median(out) * 1000

    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    def fresh():
        c = Clock()
        return LiveView(clock=c), c

    def inp(c):
        return lambda: Inputs(
            now=now0 + c.t,
            state="running",
            users=64,
            in_flight=60,
            total=total,
            steps=steps,
            current_step=a.steps,
            ladder=ladder,
        )

    def cold():
        v, c = fresh()
        v.payload(inp(c), 0)

    views = []

    def warm_setup():
        v, c = fresh()
        v.payload(inp(c), 0)
        views.append((v, c))

    cold_ms = timed(cold)
    warm, cached = [], []
    for _ in range(a.repeat):
        warm_setup()
        v, c = views[-1]
        last = v.payload(inp(c), 0)["now"]
        c.t += 1.0  # one second on: the snapshot (and the running step's figures) are read again
        t = time.perf_counter()
        p = v.payload(inp(c), last)
        warm.append(time.perf_counter() - t)
        t = time.perf_counter()
        body = orjson.dumps(v.payload(inp(c), p["now"]))
        cached.append(time.perf_counter() - t)
    v, c = views[-1]
    full = orjson.dumps(v.payload(inp(c), 0))
    t = time.perf_counter()
    for _ in range(a.repeat):
        orjson.dumps(v.payload(inp(c), 0))
    full_ms = (time.perf_counter() - t) / a.repeat * 1000
    c.t += 1.0
    p = v.payload(inp(c), 0)
    c.t += 1.0
    inc = orjson.dumps(v.payload(inp(c), p["now"]))
    w = ladder.windows[0]
    kw = dict(
        step=1,
        offered=w["level"],
        offered_kind="concurrency",
        window=(w["measured_from"], w["ended"]),
        warmup=5.0,
        slos={},
        series=total.series,
    )
    exact_ms = timed(lambda: step_result(steps[1], **kw))
    med = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    print(f"one step's figures: steps.step_result {exact_ms:.2f} ms")
    print(f"cold snapshot (all {a.steps} steps' figures + verdict):  {cold_ms:8.2f} ms")
    print(f"snapshot one second later (running step re-read):     {med(warm):8.2f} ms")
    print(f"cached poll (same second, since=last) incl. orjson:   {med(cached):8.3f} ms, {len(body):,} bytes")
    print(f"first poll of a page (since=0) incl. orjson:          {full_ms:8.2f} ms, {len(full):,} bytes")
    print(f"incremental poll one second on: {len(inc):,} bytes")


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def part_cpu(a) -> None:
    import socket

    from llm_locust.sim.process import SimProcess

    hz = os.sysconf("SC_CLK_TCK")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    with SimProcess(slots=16) as sim:
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "llm_locust" / "locustfiles" / "ladder.py"),
            "--host",
            sim.url,
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--processes",
            "1",
            "--autostart",
            "--ladder",
            "concurrency:24,32",
            "--warmup",
            "2",
            "--step-duration",
            "600",
            "--no-early-stop",
            "--max-tokens",
            "64",
        ]
        log = open("/tmp/webui_refresh_locust.log", "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    d = orjson.loads(urllib.request.urlopen(base + "/llm/data", timeout=2).read())
                    if d["totals"]["finished"] > 0 and d["step"]["phase"] == "measuring":
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the test did not start; see /tmp/webui_refresh_locust.log")
                time.sleep(0.5)
            print(
                f"master pid {proc.pid}; load: ladder step 1 (24 users, 600 s: no step ends while measured) "
                "against the simulator (16 slots), 1 worker process"
            )

            base_rate = [0.0]  # CPU seconds per second with no page open (the last such window)

            def window(label: str) -> None:
                c0, t0 = _cpu_ticks(proc.pid), time.monotonic()
                time.sleep(a.window)
                c1, t1 = _cpu_ticks(proc.pid), time.monotonic()
                rate = (c1 - c0) / hz / (t1 - t0)
                if label == "no page open":
                    base_rate[0] = rate
                print(f"  master CPU, {label:38s} {100.0 * rate:6.2f} %  ({a.window:g} s)")

            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                b = pw.chromium.launch(
                    executable_path="/usr/bin/chromium",
                    args=[
                        "--headless",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-quic",
                        "--no-first-run",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                    ],
                )
                for label in (
                    "no page open",
                    "/llm open (polls every 1.5 s)",
                    "no page open",
                    "Locust's page open (polls every 2 s)",
                    "no page open",
                    "/llm open (polls every 1.5 s)",
                ):
                    page = None
                    if label.startswith("/llm"):
                        page = b.new_page(viewport={"width": 1400, "height": 1000})
                        page.goto(base + "/llm")
                        page.wait_for_function("window.llmView && window.llmView.polls >= 1")
                    elif label.startswith("Locust"):
                        page = b.new_page(viewport={"width": 1400, "height": 1000})
                        page.goto(base + "/")
                        page.wait_for_timeout(1000)
                    window(label)
                    if page is not None:
                        page.close()
                b.close()
            # CPU per request, from the master's own counters over a burst of requests
            for label, n, gap in (
                ("GET /llm/data, snapshot recomputed", a.calls, 1.05),
                ("GET /llm/data, cached snapshot", 10 * a.calls, 0.0),
            ):
                lat, c0, t0 = [], _cpu_ticks(proc.pid), time.monotonic()
                since = time.time() - 3
                for _ in range(n):
                    if gap:
                        time.sleep(gap)
                    t = time.perf_counter()
                    body = urllib.request.urlopen(f"{base}/llm/data?since={since}", timeout=5).read()
                    lat.append(time.perf_counter() - t)
                c1, t1 = _cpu_ticks(proc.pid), time.monotonic()
                net = (c1 - c0) / hz - base_rate[0] * (t1 - t0)
                print(
                    f"  {label:36s} master CPU {1000.0 * net / n:6.2f} ms per request "
                    "(burst CPU less the no-page rate), "
                    f"{statistics.median(lat) * 1000:.2f} ms median round trip, {len(body):,} bytes, n={n}"
                )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("compute", "cpu", "both"), default="both")
    p.add_argument("--requests", type=int, default=50_000)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--seconds", type=int, default=3600)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--window", type=float, default=15.0)
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args()
    if a.part in ("compute", "both"):
        part_compute(a)
    if a.part in ("cpu", "both"):
        part_cpu(a)


if __name__ == "__main__":
    main()
