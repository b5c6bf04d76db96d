"""What corrupts the client's figures, measured against the simulator's ground truth (issue 24 item 7).

The client-validity rule has to mark the runs whose figures the client distorted, and only them.
This measures, at several numbers of concurrent streams (closed loop, one client process, the
simulator in its own process with --token-log), what the client could see of its own state and
what actually went wrong with its figures:

  client-side signals (from the results file and the record log, as the run computes them):
    loop lag p99 and the share of loop-lag samples over 10 ms; the send delay p99 (schedule lag);
    the CPU samples at or above 90%; and the share of token gaps that are exactly 0: two token
    events of one stream stamped with one read's time (what metrics/aggregate.py counts as
    `read_together`);
  ground truth (the record log joined by request id with the simulator's token log, perf_counter
    being one clock for every process on the machine):
    coalesced: token events the server wrote at least 1 ms apart that the client read together
      (the earlier ones get the later one's time: late by a token interval); 1st coalesced: the
      requests whose first token was so read with the second (its TTFT late by an interval);
    late: token events whose arrival time is more than 1 ms after the server wrote them;
    the figures themselves: TTFT p50 / p99 and ITL p50 / p99 as the client measured them against
      the same figures from the server's write times (the client's t_sent to the server's first
      write; the server's gaps between writes), and their relative error.

Run:  python benchmarks/bench_validity.py [--users 32,500,1000] [--iter 0.05] [--duration 20]
                                          [--max-tokens 64] [--json out.json] [--pin] [--baseline DIR]
--pin puts the simulator on CPU 0 and the client on CPU 1, both SCHED_FIFO (root), so that other
jobs on a shared machine hardly reach them; --baseline DIR alternates another checkout's client
(e.g. a `git archive` of an older commit) with this one's, the same simulator for both.
Prints one table; no assertion on timing (a benchmark, not a test).
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
from bench_timing_error import load_jsonl, pct  # noqa: E402

from llm_locust.sim.process import SimProcess  # noqa: E402

APART_S = 0.001  # the server wrote two token events this far apart or more: apart
LATE_S = 0.001  # a token event stamped this much after its write, or more: late


def truth(ours: list[dict], sim: list[dict]) -> dict:
    """The client's record log against the simulator's token log, over ok requests with one
    chunk per token on both sides."""
    written = {r["id"]: r["t_tokens"] for r in sim if r["outcome"] == "ok"}
    gaps = zero = coalesced = tokens = late = joined = first_late = 0
    ttft_ours, ttft_true, itl_ours, itl_true = [], [], [], []
    for r in ours:
        t_tok = written.get(r["id"])
        chunks = r["chunks"]
        if r["outcome"] != "ok" or t_tok is None or len(chunks) != len(t_tok) or not chunks:
            continue
        joined += 1
        t0 = r["t_sent"]
        ttft_ours.append(chunks[0])
        ttft_true.append(t_tok[0] - t0)
        for k, (c, w) in enumerate(zip(chunks, t_tok, strict=True)):
            tokens += 1
            late += (t0 + c) - w >= LATE_S
            if k == 0:
                continue
            gaps += 1
            together = chunks[k] == chunks[k - 1]
            zero += together
            coalesced += together and (w - t_tok[k - 1]) >= APART_S
            first_late += k == 1 and together and (w - t_tok[0]) >= APART_S
            itl_ours.append(chunks[k] - chunks[k - 1])
            itl_true.append(w - t_tok[k - 1])
    out = {
        "requests_joined": joined,
        "gaps": gaps,
        "zero_gap_share": zero / gaps if gaps else 0.0,
        "coalesced_share": coalesced / gaps if gaps else 0.0,
        "late_share": late / tokens if tokens else 0.0,
        "first_coalesced_share": first_late / joined if joined else 0.0,
    }
    for name, ours_x, true_x in (("ttft", ttft_ours, ttft_true), ("itl", itl_ours, itl_true)):
        a, b = sorted(ours_x), sorted(true_x)
        for p in (50, 99):
            o, t = pct(a, p), pct(b, p)
            out[f"{name}_p{p}_ms"] = 1000 * o
            out[f"{name}_p{p}_true_ms"] = 1000 * t
            out[f"{name}_p{p}_error"] = (o - t) / t if t > 0 else float("nan")
    return out


def pin(sim_pid: int) -> list[str]:
    """--pin: the simulator on CPU 0 and the client on CPU 1, both SCHED_FIFO (root): what other
    jobs on a shared machine do then hardly reaches either. Returns the client's command prefix."""
    os.sched_setaffinity(sim_pid, {0})
    os.sched_setscheduler(sim_pid, os.SCHED_FIFO, os.sched_param(10))
    return ["taskset", "-c", "1", "chrt", "-f", "10"]


def run_one(
    users: int,
    iter_s: float,
    duration: int,
    max_tokens: int,
    tmp: Path,
    extra: list[str],
    fast: bool = False,
    pinned: bool = False,
    tree: Path = ROOT,
    name_: str = "",
) -> dict:
    label = f"u{users}-i{iter_s * 1000:g}" + ("-fast" if fast else "") + (f"-{name_}" if name_ else "")
    run = sum(p.stem[len(label) + 3 :].isdigit() for p in tmp.glob(f"r-{label}-*.json"))  # a repeat: files of its own
    name = f"{label}-{run}"
    token_log, record_log, results = tmp / f"sim-{name}.jsonl", tmp / f"ours-{name}.jsonl", tmp / f"r-{name}.json"
    request_s = max_tokens * iter_s
    rate = users if users <= 64 else max(1, round(users / request_s))  # starts spread over one request
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
        str(rate),
        "-t",
        f"{duration}s",
        "--max-tokens",
        str(max_tokens),
        "--workers",
        "0",
        "--record-log",
        str(record_log),
        "--results",
        str(results),
        *extra,
    ]
    opts = dict(slots=users + 16, iter_base=iter_s, iter_per_seq=0.0, iter_per_prefill_token=0.0, fast=fast)
    with SimProcess(**opts, token_log=str(token_log)) as sim:
        cmd[cmd.index("--host") + 1] = sim.url
        if pinned:
            cmd = pin(sim.pid) + cmd
        sim_cpu0, t0 = tree_cpu(sim.pid), time.perf_counter()
        m = run_measured(cmd, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
        sim_cpu, wall = tree_cpu(sim.pid) - sim_cpu0, time.perf_counter() - t0
    if not results.exists():
        raise SystemExit(f"{label}: llm-locust exited {m['rc']}:\n{m['output'][-3000:]}")
    summ = orjson.loads(results.read_bytes())["summary"]
    client = summ["client"]
    checks = {c["check"]: c for c in client.get("checks") or []}
    return {
        "label": label,
        "users": users,
        "iter_ms": 0.0 if fast else iter_s * 1000,
        "rc": m["rc"],
        "ok": summ["ok"],
        "tokens_per_s": summ["output_tokens_per_s"],
        "client_cpu_pct": 100 * m["cpu_window"] / m["wall_window"] if m["wall_window"] > 0 else 0.0,
        "sim_cpu_pct": 100 * sim_cpu / wall,
        "loop_lag_p99_ms": 1000 * (client["loop_lag"].get("p99") or 0),
        "lag_over_10ms_share": (checks.get("loop_lag") or {}).get("value"),
        "send_delay_p99_ms": 1000 * ((summ["latency"].get("schedule_lag") or {}).get("p99") or 0),
        "cpu_high_share": (checks.get("cpu") or {}).get("value"),
        "valid_by_the_run": client["valid"],
        "reasons": client.get("reasons"),
        "read_together_by_the_run": (client.get("read_together") or {}).get("share"),
        "first_together_by_the_run": (client.get("read_together") or {}).get("first_share"),
        **truth(load_jsonl(record_log), load_jsonl(token_log)),
    }


COLUMNS = (
    ("run", "label", "{}"),
    ("users", "users", "{:g}"),
    ("iter ms", "iter_ms", "{:g}"),
    ("tok/s", "tokens_per_s", "{:,.0f}"),
    ("client CPU", "client_cpu_pct", "{:.0f}%"),
    ("lag p99 ms", "loop_lag_p99_ms", "{:.1f}"),
    ("lag>10ms", "lag_over_10ms_share", "{:.1%}"),
    ("send p99 ms", "send_delay_p99_ms", "{:.1f}"),
    ("CPU>=90%", "cpu_high_share", "{:.0%}"),
    ("0-gaps", "zero_gap_share", "{:.2%}"),
    ("coalesced", "coalesced_share", "{:.2%}"),
    ("late>1ms", "late_share", "{:.2%}"),
    ("1st coalesced", "first_coalesced_share", "{:.2%}"),
    ("TTFT p50 ms (true)", ("ttft_p50_ms", "ttft_p50_true_ms"), "{:.1f} ({:.1f})"),
    ("TTFT p99 ms (true)", ("ttft_p99_ms", "ttft_p99_true_ms"), "{:.1f} ({:.1f})"),
    ("ITL p50 ms (true)", ("itl_p50_ms", "itl_p50_true_ms"), "{:.1f} ({:.1f})"),
    ("ITL p99 ms (true)", ("itl_p99_ms", "itl_p99_true_ms"), "{:.1f} ({:.1f})"),
    ("read together (run)", "read_together_by_the_run", "{:.2%}"),
    ("1st (run)", "first_together_by_the_run", "{:.2%}"),
    ("valid (the run)", "valid_by_the_run", "{}"),
)


def table(rows: list[dict]) -> str:
    def cell(r, key, fmt):
        if isinstance(key, tuple):
            return fmt.format(*(r.get(k) or 0.0 for k in key))
        v = r.get(key)
        return "-" if v is None else fmt.format(v)

    cells = [[h for h, _k, _f in COLUMNS]] + [[cell(r, k, f) for _h, k, f in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", default="32,500,1000", help="concurrent streams per run, comma-separated")
    ap.add_argument("--iter", default="0.05", help="simulator iteration(s) in seconds, comma-separated (default 0.05)")
    ap.add_argument("--duration", type=int, default=20, help="seconds per run (default 20)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--client-args", default="", help="extra arguments for llm-locust run")
    ap.add_argument("--fast", action="store_true", help="the simulator in fast mode: every token written at once")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each configuration (default 1)")
    ap.add_argument("--json", default="", help="also write the rows to this JSON file")
    ap.add_argument(
        "--pin", action="store_true", help="simulator on CPU 0, client on CPU 1, both SCHED_FIFO (needs root)"
    )
    ap.add_argument("--baseline", default="", help="another checkout's client, alternated with this one's")
    a = ap.parse_args()
    trees = [("", ROOT)] + ([("base", Path(a.baseline).resolve())] if a.baseline else [])
    tmp = Path(tempfile.mkdtemp(prefix="bench-validity-"))
    rows = []
    print(f"{os.cpu_count()} CPUs, load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for _ in range(a.repeat):
        for it in (float(x) for x in a.iter.split(",")):
            for users in (int(x) for x in a.users.split(",")):
                for name, tree in trees:
                    print(f"running {users} streams, {it * 1000:g} ms iterations, {a.duration} s {name}...", flush=True)
                    extra = a.client_args.split()
                    rows.append(run_one(users, it, a.duration, a.max_tokens, tmp, extra, a.fast, a.pin, tree, name))
                if a.json:
                    Path(a.json).write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    print(table(rows), flush=True)
    for r in rows:
        print(f"  {r['label']}: the run said {'valid' if r['valid_by_the_run'] else 'SUSPECT'}: {r['reasons']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
