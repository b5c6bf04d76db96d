"""The master at N workers, over Locust's real ZMQ protocol (issue 37 item 4).

Starts a real llm-locust master (`llm-locust run --master --expect-workers N`, the exporter on),
and N worker stand-ins in PROCS other processes: each a real Locust WorkerRunner (Locust's own ZMQ
client: ready, spawn, heartbeats, reports every 3 s, stop), whose users send nothing; instead
each report carries figures made as a real worker's are (an Aggregate of STREAMS streams' worth
of finished requests since its last report, every histogram, GROUPS endpoint and model groups,
on the wire as metrics/aggregate.py to_wire), and each answers the master's final-report request.
A worker's CPU is not the master's: the stand-ins run in their own process.

Measured, over the steady part of the run (after every worker has reported):
- the master's CPU (utime + stime from /proc) per second and per report, and its RSS;
- report lag: the largest `llm_locust_worker_report_age_seconds` the exporter shows (a master
  that keeps up shows at most the 3 s interval plus a scrape's offset);
- the exporter's scrape time;
- exactness: the master's results count every request the stand-ins reported (sent = ok).

By default the workers of one stand-in process send the same figures, made once per report
interval (making them is ~10 ms of CPU; 200 workers' own every 3 s took the 2 shared cores from
the master); `--own-reports` makes each worker's its own.

    python benchmarks/bench_master_zmq.py [--workers 200] [--seconds 40] [--streams 5] [--groups 64] [--own-reports]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

INTERVAL = 3.0
SCRAPE_EVERY = 5.0  # s between the driver's scrapes (Prometheus's default is 15 s)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _scrape(port: int) -> tuple[str, float]:
    t = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return text, time.perf_counter() - t


def _gauges(text: str, name: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]


# ---- the stand-ins (their own process: `bench_master_zmq.py --stand-ins N PORT STREAMS GROUPS`) ----


def _made(k: int, n: int, since: float, groups: int, rng: random.Random) -> dict[str, Any]:
    """n finished requests from `since` as one worker's report carries them (Aggregate.to_wire)."""
    from bench_master import _records

    from llm_locust.metrics.aggregate import Aggregate

    agg = Aggregate()
    for rec in _records(k, n, since, groups, rng):
        agg.add_sent()
        agg.add(rec)
    return agg.to_wire()


def stand_ins(n: int, port: int, streams: int, groups: int, e2e: float, out: str, own: bool) -> None:
    """N Locust workers in this process, each reporting made figures (see the module doc)."""

    import gevent
    from locust import User, argument_parser, constant, task
    from locust.env import Environment

    from llm_locust.runtime.hub import FINAL, REPORT_KEY

    # Locust's worker rebuilds its default argument parser (~2 ms) for every option of every spawn
    # message (runners.py, WorkerRunner.handle_message): harmless in a worker of its own, but 50
    # stand-ins on one loop held it for seconds per spawn round, missed their heartbeats, and each
    # worker the master then marked missing made it send every worker a new spawn round
    defaults = argument_parser.default_args_dict()
    argument_parser.default_args_dict = lambda: defaults

    class StreamingUser(User):  # the master spawns users of this name; these send nothing
        wait_time = constant(60)

        @task
        def idle(self) -> None:
            pass

    per_report = max(1, round(streams * INTERVAL / e2e))
    totals = {"sent": 0}
    made: dict[str, Any] = {"slot": None, "wire": None}

    def figures(k: int, since: float, rng: random.Random) -> dict[str, Any]:
        """A report's figures: its own (--own-reports: ~10 ms of this process's CPU each, which
        at 200 workers on 2 cores was the stand-ins' ceiling, not the master's) or, by default, one
        made per report interval and process and sent by each of its workers: the same size, keys
        and merge work for the master, made once (its wall times are this interval's)."""
        if own:
            return _made(k, per_report, since, groups, rng)
        slot = int(time.time() // INTERVAL)
        if made["slot"] != slot:
            made["slot"], made["wire"] = slot, _made(k, per_report, slot * INTERVAL - INTERVAL, groups, rng)
        return made["wire"]

    def worker(k: int):
        env = Environment(user_classes=[StreamingUser])
        runner = env.create_worker_runner("127.0.0.1", port)
        rng = random.Random(k)
        state = {"final": 0, "last": time.time()}

        def report(client_id, data):
            now = time.time()
            n = per_report if state["final"] == 0 else 0
            wire = figures(k, state["last"], rng) if n else None
            state["last"] = now
            totals["sent"] += n
            Path(out).write_text(json.dumps(totals))  # read by the driver once the master is done
            data[REPORT_KEY] = {
                "steps": {"0": wire} if n else {},
                "in_flight": 0,
                "idle": False,
                "index": getattr(runner, "worker_index", None),
                "info": {},
                "status": None,
                "step": 0,
                "final": state["final"],
                "record_log": [],
                "clock": None,
            }

        def final(environment, msg, **_kw):
            state["final"] = msg.data["token"]
            runner._send_stats()  # noqa: SLF001 - Locust's own report message, as the real worker's

        env.events.report_to_master.add_listener(report)
        runner.register_message(FINAL, final, concurrent=True)
        return runner

    for k in range(n):
        worker(k)
        gevent.sleep(0.005)
    print(f"stand-ins: {n} connected", flush=True)
    gevent.sleep(3600)  # until the driver ends this process, once the master is done


# ---- the driver ----


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--stand-ins":
        n, port, streams, groups, e2e, out, own = sys.argv[2:9]
        stand_ins(int(n), int(port), int(streams), int(groups), float(e2e), out, own == "own")
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--streams", type=int, default=5)
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--e2e", type=float, default=1.2)
    ap.add_argument("--procs", type=int, default=4, help="processes the stand-ins share (each a gevent loop)")
    ap.add_argument(
        "--own-reports",
        action="store_true",
        help="each stand-in makes its own figures every report (the stand-ins' CPU grows with N); by default "
        "one report's figures a process and interval, sent by each of its workers",
    )
    a = ap.parse_args()
    from llm_locust.sim.process import SimProcess

    d = Path(tempfile.mkdtemp(prefix="bench-master-"))
    port, prom = _free_port(), _free_port()
    with SimProcess(slots=8, fast=True) as sim:
        master_argv = [sys.executable, "-m", "llm_locust.cli", "run", "--host", sim.url, "-u", str(a.workers)]
        master_argv += ["-t", f"{a.seconds}s", "--master", "--expect-workers", str(a.workers)]
        master_argv += ["--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
        master_argv += ["--prometheus-port", str(prom), "--results", str(d / "r.json")]
        master = subprocess.Popen(master_argv, stdout=open(d / "master.log", "w"), stderr=subprocess.STDOUT)
        time.sleep(2.0)  # the master binds its port (a bench, not a test: no readiness signal to poll)
        shares = [a.workers // a.procs + (k < a.workers % a.procs) for k in range(a.procs)]
        stands = [
            subprocess.Popen(
                [sys.executable, __file__, "--stand-ins", str(n), str(port), str(a.streams), str(a.groups)]
                + [str(a.e2e), str(d / f"sent{k}.json"), "own" if a.own_reports else "shared"],
                stdout=subprocess.DEVNULL,
                stderr=open(d / f"stand-ins{k}.log", "w"),
            )
            for k, n in enumerate(shares)
        ]
        ages: list[float] = []
        scrapes: list[float] = []
        cpu0 = t0 = None
        reports0 = 0.0
        deadline = time.monotonic() + a.seconds + 120
        while master.poll() is None and time.monotonic() < deadline:
            time.sleep(SCRAPE_EVERY if t0 is not None else 0.5)
            try:
                text, took = _scrape(prom)
            except OSError:
                continue
            done = _gauges(text, "llm_locust_worker_finished_requests")
            if len(done) < a.workers or min(done) == 0:
                continue  # not every worker has reported yet
            if t0 is None:
                cpu0, t0 = _cpu_s(master.pid), time.monotonic()
                reports0 = sum(done)
                continue
            ages += _gauges(text, "llm_locust_worker_report_age_seconds")
            scrapes.append(took)
            cpu1, t1, rss = _cpu_s(master.pid), time.monotonic(), _rss_mib(master.pid)
            reports = sum(done)
        master.wait(timeout=180)
        for stand in stands:
            stand.terminate()
            stand.wait(timeout=30)
    if t0 is None or cpu0 is None:
        sys.exit(f"the workers never all reported; logs in {d}")
    window = t1 - t0
    n_reports = a.workers * window / INTERVAL
    doc = json.loads((d / "r.json").read_text())
    sent = sum(json.loads((d / f"sent{k}.json").read_text())["sent"] for k in range(a.procs))
    cpu = cpu1 - cpu0
    per, median = cpu / n_reports * 1e3, sorted(ages)[len(ages) // 2]
    summary = doc["summary"]
    print(f"{a.workers} workers, {a.streams} streams each, {a.groups} groups, a report every {INTERVAL:g} s")
    print(f"steady window {window:.0f} s: master CPU {cpu / window:.1%} of a core, ~{per:.2f} ms a report")
    print(f"  (scraped every {SCRAPE_EVERY:g} s: the scrapes' CPU included)")
    print(f"master RSS at the end of the window: {rss:.0f} MiB")
    print(f"report age (lag): max {max(ages):.2f} s, median {median:.2f} s over {len(ages)} samples")
    print(f"exporter scrape: median {sorted(scrapes)[len(scrapes) // 2] * 1e3:.0f} ms, max {max(scrapes) * 1e3:.0f} ms")
    print(f"exact: the stand-ins reported {sent} requests; the master: sent {summary['sent']}, ok {summary['ok']}")
    print(f"files: {d}; finished requests counted in the window: {reports - reports0:.0f}")


if __name__ == "__main__":
    main()
