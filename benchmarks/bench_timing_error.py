"""Timing error of our TTFT and ITL against the simulator's ground truth.

The simulator (`python -m llm_locust.sim --token-log PATH`) logs, per request, the id it got in
X-Request-Id and `t_tokens`: perf_counter() just before each token's chunk was written to the
socket. `llm-locust run --record-log PATH` logs, per request, the same id, `t_sent` (absolute
perf_counter) and `chunks` (each token-bearing chunk's arrival, relative to t_sent). perf_counter
is CLOCK_MONOTONIC on Linux, one clock for every process on the machine, so the two join
exactly. For every request that ended ok on both sides with one chunk per token:

  arrival error (per token k)  = (t_sent + chunks[k]) - t_tokens[k]
  TTFT error (per request)     = (t_sent + first)     - t_tokens[0]       (k = 0)
  ITL error (per gap k >= 1)   = (chunks[k] - chunks[k-1]) - (t_tokens[k] - t_tokens[k-1])

Arrival and TTFT errors are >= 0 by construction (write, kernel, wake-up, read, stamp); the ITL
error is signed and its percentiles are of |error|. All in milliseconds.

Two configurations, each one simulator process and one client process (no workers):
  light: 4 users;   heavy: 1,000 users (1,000 concurrent streams on one worker process).
The simulator has more slots than users and a fixed iteration time with no per-sequence or
prefill cost (--iter-base A --iter-per-seq 0 --iter-per-prefill-token 0), so every stream gets a
token every A seconds and nothing queues. CPU% of both processes over the load window is shown,
(from /proc, see bench_client_ingest.py) to tell which one was short of CPU when errors are large.

Light users are spawned at once. Heavy users are spawned over one request's duration
(users / (max_tokens * iteration) per second) so that request ends and starts spread evenly, as in
a long closed-loop test; spawned at once, all 1,000 would end and restart in the same ~0.5 s every
request duration (lock-step), and the per-request work of the client makes large error spikes
then (use --spawn-rate 1000 to see it). The goal verdict uses all ok requests; a second set of
rows leaves out requests sent during the first --warmup seconds (ramp-up and connection set-up).

Run: python benchmarks/bench_timing_error.py [--duration 15] [--heavy-users 1000] [--heavy-iter 0.05]
No assertions on timing: this prints figures and whether the issue's goals were met.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_client_ingest import run_measured, tree_cpu  # noqa: E402

from llm_locust.sim.process import SimProcess  # noqa: E402

GOAL_MS = {"light": 1.0, "heavy": 2.0}  # the p99 goals


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    if not xs:
        return float("nan")
    k = max(0, min(len(xs) - 1, int(round(p / 100 * len(xs) + 0.5)) - 1))
    return xs[k]


def load_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def join_errors(ours: list[dict], sim: list[dict], warmup: float = 0.0) -> dict:
    """Errors of the ok requests sent at least `warmup` seconds after the first one."""
    truth = {r["id"]: r for r in sim if r["outcome"] == "ok"}
    t_start = min((r["t_sent"] for r in ours), default=0.0) + warmup
    ttft, arrival, itl = [], [], []
    joined = skipped = 0
    for r in ours:
        s = truth.get(r["id"])
        if r["outcome"] != "ok" or s is None or r["t_sent"] < t_start:
            continue
        t_tok, chunks = s["t_tokens"], r["chunks"]
        if len(chunks) != len(t_tok):  # one SSE event per token from the sim: must match
            skipped += 1
            continue
        joined += 1
        t0 = r["t_sent"]
        errs = [(t0 + c) - t for c, t in zip(chunks, t_tok, strict=True)]
        ttft.append((t0 + r["first"]) - t_tok[0])
        arrival += errs
        itl += [abs(errs[k] - errs[k - 1]) for k in range(1, len(errs))]
    out = {
        "requests_joined": joined,
        "requests_skipped": skipped,
        "ours_ok": sum(r["outcome"] == "ok" for r in ours),
        "sim_ok": len(truth),
    }
    for name, xs in (("ttft", ttft), ("arrival", arrival), ("itl_abs", itl)):
        xs = sorted(x * 1000 for x in xs)
        out[name] = {
            "n": len(xs),
            "p50": pct(xs, 50),
            "p99": pct(xs, 99),
            "p99.9": pct(xs, 99.9),
            "max": xs[-1] if xs else float("nan"),
            "min": xs[0] if xs else float("nan"),
        }
    return out


def run_config(
    label: str,
    users: int,
    duration: int,
    iter_s: float,
    max_tokens: int,
    tmp: Path,
    spawn_rate: float,
    warmup: float,
    extra: list[str],
) -> dict:
    token_log, record_log, results = tmp / f"sim-{label}.jsonl", tmp / f"ours-{label}.jsonl", tmp / f"res-{label}.json"
    slots = max(64, users + 24)
    sim_opts = dict(
        slots=slots, iter_base=iter_s, iter_per_seq=0.0, iter_per_prefill_token=0.0, token_log=str(token_log)
    )
    cmd = [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        "",
        "--api",
        "openai-completions",
        "--model",
        "llm-locust-sim",
        "-u",
        str(users),
        "-r",
        f"{spawn_rate:g}",
        "-t",
        f"{duration}s",
        "--max-tokens",
        str(max_tokens),
        "--record-log",
        str(record_log),
        "--results",
        str(results),
        *extra,
    ]
    with SimProcess(**sim_opts) as sim:
        cmd[cmd.index("--host") + 1] = sim.url
        sim_cpu0, t0 = tree_cpu(sim.pid), time.perf_counter()
        m = run_measured(cmd)
        sim_cpu, wall = tree_cpu(sim.pid) - sim_cpu0, time.perf_counter() - t0
    if m["rc"] != 0 or not results.exists():
        raise SystemExit(f"{label}: llm-locust exited {m['rc']}:\n{m['output'][-3000:]}")
    summ = orjson.loads(results.read_bytes())["summary"]
    ours, truth = load_jsonl(record_log), load_jsonl(token_log)
    err = join_errors(ours, truth)
    err["steady"] = join_errors(ours, truth, warmup)
    return {
        "warmup_s": warmup,
        "spawn_rate": spawn_rate,
        "client_user_s": m["cpu_user"],
        "client_sys_s": m["cpu_sys"],
        "label": label,
        "users": users,
        "slots": slots,
        "iter_s": iter_s,
        "max_tokens": max_tokens,
        "client_cpu_pct": 100 * m["cpu_window"] / m["wall_window"] if m["wall_window"] > 0 else 0.0,
        "client_cpu_load_s": m["cpu_window"],
        "load_wall_s": m["wall_window"],
        "sim_cpu_pct": 100 * sim_cpu / wall,
        "sim_cpu_s": sim_cpu,
        "tokens_per_s": summ["output_tokens_per_s"],
        "ok": summ["ok"],
        "failed": summ["failed"],
        "loop_lag_p99_ms": 1000 * (summ["client"]["loop_lag"].get("p99") or 0),
        "loop_lag_max_ms": 1000 * (summ["client"]["loop_lag"].get("max") or 0),
        "client_valid": summ["client"]["valid"],
        **err,
    }


def report(r: dict) -> list[str]:
    goal = GOAL_MS[r["label"]]
    p99s = (r["ttft"]["p99"], r["itl_abs"]["p99"], r["arrival"]["p99"])  # all requests, warm-up included
    met = all(x <= goal for x in p99s)
    lines = [
        f"{r['label']}: {r['users']} users (spawned at {r['spawn_rate']:g}/s), sim {r['slots']} slots, "
        f"{r['iter_s'] * 1000:g} ms iterations, "
        f"{r['max_tokens']} tokens/request; {r['ok']} ok, {r['failed']} failed; "
        f"{r['requests_joined']} joined ({r['requests_skipped']} skipped); {r['tokens_per_s']:,.0f} tokens/s",
        f"  {'error (ms)':<22}{'n':>9}{'p50':>9}{'p99':>9}{'p99.9':>9}{'max':>9}",
    ]
    for key, name in (("ttft", "TTFT"), ("arrival", "token arrival"), ("itl_abs", "ITL |error|")):
        e = r[key]
        lines.append(f"  {name:<22}{e['n']:>9}{e['p50']:>9.3f}{e['p99']:>9.3f}{e['p99.9']:>9.3f}{e['max']:>9.3f}")
    st = r["steady"]
    lines.append(f"  sent after the first {r['warmup_s']:.1f} s only ({st['requests_joined']} requests):")
    for key, name in (("ttft", "TTFT"), ("arrival", "token arrival"), ("itl_abs", "ITL |error|")):
        e = st[key]
        lines.append(f"  {name:<22}{e['n']:>9}{e['p50']:>9.3f}{e['p99']:>9.3f}{e['p99.9']:>9.3f}{e['max']:>9.3f}")
    lines.append(
        f"  client CPU {r['client_cpu_pct']:.0f}% of one core (load window), loop lag p99 "
        f"{r['loop_lag_p99_ms']:.1f} ms (max {r['loop_lag_max_ms']:.1f}), client valid: {r['client_valid']}; "
        f"simulator CPU {r['sim_cpu_pct']:.0f}%"
    )
    lines.append(f"  goal p99 <= {goal:g} ms (TTFT, ITL, arrival): {'MET' if met else 'NOT MET'}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=15, help="seconds per configuration (default 15)")
    ap.add_argument("--light-users", type=int, default=4)
    ap.add_argument("--heavy-users", type=int, default=1000)
    ap.add_argument("--light-iter", type=float, default=0.02, help="simulator iteration for light, s (default 0.02)")
    ap.add_argument("--heavy-iter", type=float, default=0.05, help="simulator iteration for heavy, s (default 0.05)")
    ap.add_argument(
        "--spawn-rate",
        type=float,
        default=0.0,
        help="heavy users spawned per second; default: users / request duration, so that starts "
        "and ends spread evenly (0 = that default; light always spawns at once)",
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=-1.0,
        help="the 'steady' rows leave out requests sent in the first N seconds (default: ramp + 1 s)",
    )
    ap.add_argument("--client-args", default="", help="extra arguments for llm-locust run (e.g. '-f my_locustfile.py')")
    ap.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (default 64)")
    ap.add_argument("--only", choices=["light", "heavy"], help="run one configuration")
    ap.add_argument("--json", default="", help="also write the figures to this JSON file")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-timing-"))
    out, lines = (
        {},
        [
            f"timing error vs the simulator's token log, {a.duration}s per configuration, "
            f"{os.cpu_count()} CPUs, load average before: {os.getloadavg()[0]:.2f}",
            "",
        ],
    )
    for label, users, iter_s in (("light", a.light_users, a.light_iter), ("heavy", a.heavy_users, a.heavy_iter)):
        if a.only and a.only != label:
            continue
        rate = float(users)
        if label == "heavy":
            rate = a.spawn_rate or round(users / (a.max_tokens * iter_s))
        warmup = a.warmup if a.warmup >= 0 else users / rate + 1.0
        print(f"running {label} ({users} users at {rate:g}/s, {a.duration}s) ...", flush=True)
        out[label] = run_config(
            label, users, a.duration, iter_s, a.max_tokens, tmp, rate, warmup, a.client_args.split()
        )
        lines += report(out[label]) + [""]
    print("\n".join(lines), flush=True)
    if a.json:
        Path(a.json).write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
