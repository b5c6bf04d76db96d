"""Client ingest: output tokens taken in per client CPU-second, with every metric on.

(a) burst: nginx serves a fixed 256-token vLLM-style /v1/completions stream (benchmarks/
    nginx_stream.py) as fast as the client reads it. Two clients, one after the other, same
    users, same duration, same request body:
      - ours: `python -m llm_locust.cli run --api openai-completions ...` (LLMUser: StreamClient,
        SSE decoding, JSON parsing of every chunk, HDR histograms, per-second series, CPU and
        loop-lag probes, Locust's request event);
      - bare: a plain Locust FastHttpUser that POSTs the same body with stream=True and reads
        the body with `r._response.readline(b"\\n")`, timing only TTFT and E2E.
(b) paced: ours against the simulator (not --fast): every stream gets one token per engine
    iteration (--iter-base 0.01 --iter-per-seq 0 -> ~100 tokens/s per stream).

CPU: each client runs as a child process (headless Locust, one process, no workers).
  - total:  utime+stime of the process and every descendant it reaped, from os.wait4()'s
            rusage when it exits (exact; includes interpreter start-up, imports, the end-of-run
            summary and results file);
  - load:   the CPU the process tree used between Locust's "Ramping to" log line (test start)
            and its "--run-time limit reached" line (test stop), each read from /proc: the sum
            of utime+stime+cutime+cstime over /proc/<pid>/stat of the process and its live
            descendants (found through /proc/<pid>/task/*/children), sampled by a thread that
            reads the client's log as it is written. tokens / load CPU is THE ingest figure, and
            the ours/bare ratio uses it;
  - after stop: total minus CPU at the stop line (end-of-run reporting, shown separately).
  /proc counts in clock ticks (10 ms); over a 15 s run that is well under 1%.
Tokens: every output token the client took in. Ours = results JSON summary.tokens_out (ok
requests; checked: each has 256 tokens from server usage, no failures, no length mismatch) +
tokens_out_failed (the partial streams of requests cancelled at the stop; with no failures that
is all it holds). Bare = its token lines (each ok request checked to end with 256 token lines, a
usage line and [DONE]) + the token lines of streams cut at the stop.

The burst pair is run --repeat times, alternating bare and ours, and the medians are compared:
on a small shared machine one run of either can be off by 10-20%.

--baseline DIR also runs ours from another checkout (alternated with the others: before/after in one
sitting), on the burst and on the paced simulator (--paced-repeat runs of each); --vllm also runs
vLLM's benchmark client (`vllm bench serve`, from the cached CPU venv, as bench_paced_vs_vllm.py
does) against the same nginx stream, its CPU from its main run's start line
to its result banner.

Run: python benchmarks/bench_client_ingest.py [--duration 15] [--users 32] [--repeat 3] [--paced-users 64]
     [--paced-repeat 1] [--skip-paced | --skip-burst] [--baseline DIR] [--vllm] [--vllm-prompts N]
     [--iter-lines] [--record-log] [--json FILE]
No assertions on timing: this prints figures, it does not judge them.
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

from nginx_stream import MODEL, N_TOKENS, NginxStream  # noqa: E402

from llm_locust.protocols import get_adapter  # noqa: E402
from llm_locust.protocols.base import RequestSpec  # noqa: E402
from llm_locust.sim.process import SimProcess  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PROMPT = " ".join(["hello"] * 128)

BARE_LOCUSTFILE = '''
"""Bare streaming user: POST, read lines (readline or iter_lines), time TTFT and E2E."""
import os
import time

import orjson
from locust import FastHttpUser, constant, events, task

BODY = open(os.environ["BARE_BODY"], "rb").read()
OUT = os.environ["BARE_OUT"]
# "readline": geventhttpclient's readline on the response (a private attribute: the fastest way);
# "iter_lines": FastHttpSession.iter_lines, Locust's own API for streamed replies
READ = os.environ.get("BARE_READ", "readline")
HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}
N_TOKENS = int(os.environ["BARE_TOKENS"])
stats = {"requests": 0, "ok": 0, "bad": 0, "tokens": 0, "ttft": [], "e2e": []}


class BareUser(FastHttpUser):
    wait_time = constant(0)

    @task
    def stream(self):
        perf = time.perf_counter
        t0 = perf()
        ttft = None
        n_lines = 0
        done = False
        stats["requests"] += 1
        status = 200
        try:
            if READ == "iter_lines":  # Locust's API: lines as str, read 1 KiB at a time
                for line in self.client.iter_lines("/v1/completions", method="POST", data=BODY, headers=HEADERS):
                    if line.startswith("data: "):
                        if ttft is None:
                            ttft = perf() - t0
                        if line.startswith("data: [DONE]"):
                            done = True
                        else:
                            n_lines += 1
            else:
                r = self.client.post("/v1/completions", data=BODY, headers=HEADERS, stream=True)
                status = r.status_code
                readline = r._response.readline
                while True:
                    line = readline(b"\\n")
                    if not line:
                        break
                    if line.startswith(b"data: "):
                        if ttft is None:
                            ttft = perf() - t0
                        if line.startswith(b"data: [DONE]"):
                            done = True
                        else:
                            n_lines += 1
        finally:  # also when the test stops mid-stream: count what arrived
            stats["tokens"] += min(n_lines, N_TOKENS)  # the usage line comes after the tokens
        e2e = perf() - t0
        if status == 200 and done and n_lines == N_TOKENS + 1:  # token lines + the usage line
            stats["ok"] += 1
            stats["ttft"].append(ttft)
            stats["e2e"].append(e2e)
        else:
            stats["bad"] += 1


@events.quit.add_listener
def _write(**_kw):
    with open(OUT, "wb") as f:
        f.write(orjson.dumps(stats))
'''


# ---- CPU of a process tree ----


def _stat_cpu(pid: int) -> float:
    """utime+stime+cutime+cstime of one process, seconds; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return 0.0
    fields = data[data.rindex(b")") + 2 :].split()
    return sum(int(x) for x in fields[11:15]) / CLK_TCK  # fields 14-17 of proc(5)


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree_cpu(pid: int) -> float:
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += _stat_cpu(p)
        todo += _children(p)
    return total


MARKERS = ("Ramping to", "limit reached")  # Locust's test start and stop lines


def run_measured(cmd: list[str], env: dict | None = None, cwd: Path = ROOT, markers: tuple[str, str] = MARKERS) -> dict:
    """Run cmd to its end; CPU seconds (total and between the two marker lines), wall seconds, output.
    `cwd` is first on the child's sys.path (`python -m`): another checkout's package runs there."""
    t_launch = time.perf_counter()
    start_marker, stop_marker = markers
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    mark: dict = {}
    lines: list[str] = []

    def reader() -> None:
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            if start_marker in line and "start" not in mark:
                mark["start"] = (tree_cpu(proc.pid), time.perf_counter())
            elif stop_marker in line and "start" in mark and "stop" not in mark:
                mark["stop"] = (tree_cpu(proc.pid), time.perf_counter())

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    _, status, ru = os.wait4(proc.pid, 0)
    t_exit = time.perf_counter()
    proc.returncode = os.waitstatus_to_exitcode(status)
    th.join(5)
    proc.stdout.close()
    total = ru.ru_utime + ru.ru_stime
    cpu0, t0 = mark.get("start", (0.0, t_launch))
    cpu1, t1 = mark.get("stop", (total, t_exit))
    return {
        "rc": proc.returncode,
        "cpu_total": total,
        "cpu_user": ru.ru_utime,
        "cpu_sys": ru.ru_stime,
        "cpu_window": cpu1 - cpu0,
        "cpu_after_stop": total - cpu1,
        "wall_total": t_exit - t_launch,
        "wall_window": t1 - t0,
        "output": "".join(lines),
    }


# ---- the runs ----


def ours_cmd(
    url: str, users: int, duration: int, results: Path, trace: Path, api: str = "openai-completions"
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        url,
        "--api",
        api,
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
        "--no-preflight",
    ]


def run_ours(
    url: str,
    users: int,
    duration: int,
    tmp: Path,
    trace: Path,
    label: str,
    extra=(),
    api: str = "openai-completions",
    root: Path = ROOT,
) -> dict:
    """Ours from the checkout at `root` (default this one; --baseline: another, e.g. an older
    commit's `git archive`); a checkout without the preflight check runs without --no-preflight."""
    results = tmp / f"results-{label}.json"
    cmd = ours_cmd(url, users, duration, results, trace, api) + list(extra)
    if root != ROOT and subprocess.run(["grep", "-rqs", "preflight", str(root / "llm_locust")]).returncode:
        cmd.remove("--no-preflight")
    m = run_measured(cmd, cwd=root)
    if m["rc"] != 0 or not results.exists():
        raise SystemExit(f"{label}: llm-locust exited {m['rc']}:\n{m['output'][-3000:]}")
    s = orjson.loads(results.read_bytes())["summary"]
    ok = s["ok"]
    tokens = s["tokens_out"] + s["tokens_out_failed"]  # ok requests + the partial ones cut at the stop
    problems = []
    if s["failed"]:
        problems.append(f"{s['failed']} failed: {s['errors']}")
    # every ok request: its length checked against the 256 asked for, equal, counted from usage
    if (
        s["tokens_out"] != ok * N_TOKENS
        or s.get("length_mismatch", 0)  # .get: a --baseline checkout's results may predate these
        or s.get("length_checked", ok) != ok
        or s.get("n_out_sources", {"usage": ok}) != {"usage": ok}
    ):
        problems.append(
            f"tokens {s['tokens_out']} for {ok} ok requests (sources {s['n_out_sources']}, "
            f"length checked {s['length_checked']}, mismatches {s['length_mismatch']})"
        )
    if problems:
        print(f"WARNING {label}: " + "; ".join(problems), flush=True)
    lat = s["latency"]
    return {
        **m,
        "ok": ok,
        "tokens": tokens,
        "failed": s["failed"],
        "problems": problems,
        "ttft_p50_ms": 1000 * (lat["ttft"].get("p50") or 0),
        "e2e_p50_ms": 1000 * (lat["e2e"].get("p50") or 0),
        "loop_lag_p99_ms": 1000 * (s.get("client", {}).get("loop_lag", {}).get("p99") or 0),
        "itl_p50_ms": 1000 * (lat["itl"].get("p50") or 0),
    }


def run_bare(url: str, users: int, duration: int, tmp: Path, body: bytes, read: str = "readline") -> dict:
    lf, body_path, out = tmp / "bare_locustfile.py", tmp / "bare_body.json", tmp / f"bare_out_{read}.json"
    lf.write_text(BARE_LOCUSTFILE)
    body_path.write_bytes(body)
    env = dict(os.environ, BARE_BODY=str(body_path), BARE_OUT=str(out), BARE_TOKENS=str(N_TOKENS), BARE_READ=read)
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(lf),
        "--host",
        url,
        "--headless",
        "--only-summary",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{duration}s",
    ]
    m = run_measured(cmd, env)
    if m["rc"] != 0 or not out.exists():
        raise SystemExit(f"bare: locust exited {m['rc']}:\n{m['output'][-3000:]}")
    st = orjson.loads(out.read_bytes())
    if st["bad"]:
        print(f"WARNING bare: {st['bad']} requests did not end with {N_TOKENS} tokens + usage + [DONE]", flush=True)
    med = lambda xs: 1000 * sorted(xs)[len(xs) // 2] if xs else 0.0  # noqa: E731
    return {
        **m,
        "ok": st["ok"],
        "tokens": st["tokens"],
        "failed": st["bad"],
        "ttft_p50_ms": med(st["ttft"]),
        "e2e_p50_ms": med(st["e2e"]),
    }


def run_vllm(url: str, users: int, prompts: int, tmp: Path, label: str) -> dict:
    """vLLM's benchmark client (`vllm bench serve`, bench_paced_vs_vllm's set-up) against the same
    nginx stream: `prompts` requests at `users` concurrency; CPU from its "Starting main benchmark
    run" line to its result banner (the load and its metric calculation); tokens from its result
    JSON (the stream's usage: 256 per request)."""
    from bench_paced_vs_vllm import TOKENIZER, VLLM_BENCH, VLLM_VENV

    out = f"vllm-{label}.json"
    cmd = [str(VLLM_VENV / "bin" / "python"), "-c", VLLM_BENCH, "--backend", "openai", "--base-url", url]
    cmd += ["--endpoint", "/v1/completions", "--model", MODEL, "--tokenizer", str(TOKENIZER)]
    cmd += ["--dataset-name", "random", "--random-input-len", "64", "--random-output-len", str(N_TOKENS)]
    cmd += ["--max-concurrency", str(users), "--num-prompts", str(prompts), "--ignore-eos", "--disable-tqdm"]
    cmd += ["--save-result", "--result-dir", str(tmp), "--result-filename", out]
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    m = run_measured(cmd, env, markers=("Starting main benchmark run", " Serving Benchmark Result "))
    path = tmp / out
    if m["rc"] != 0 or not path.exists():
        raise SystemExit(f"{label}: vllm bench serve exited {m['rc']}:\n{m['output'][-3000:]}")
    r = orjson.loads(path.read_bytes())
    if r.get("failed") or r["total_output_tokens"] != r["completed"] * N_TOKENS:
        print(f"WARNING {label}: {r.get('failed')} failed; {r['total_output_tokens']} tokens", flush=True)
    return {
        **m,
        "ok": r["completed"],
        "tokens": r["total_output_tokens"],
        "failed": r.get("failed") or 0,
        "ttft_p50_ms": r.get("median_ttft_ms") or 0.0,
        "e2e_p50_ms": r.get("median_e2el_ms") or 0.0,
    }


def row(name: str, r: dict) -> str:
    r["tok_per_cpu_load"] = r["tokens"] / r["cpu_window"] if r["cpu_window"] > 0 else 0.0
    r["tok_per_cpu_total"] = r["tokens"] / r["cpu_total"] if r["cpu_total"] > 0 else 0.0
    r["cpu_pct"] = 100 * r["cpu_window"] / r["wall_window"] if r["wall_window"] > 0 else 0.0
    return (
        f"{name:<26}{r['ok']:>8}{r['tokens']:>10}{r['cpu_window']:>8.2f}{r['cpu_after_stop']:>7.2f}"
        f"{r['cpu_total']:>8.2f}{r['tok_per_cpu_load']:>12,.0f}{r['tok_per_cpu_total']:>12,.0f}"
        f"{r['cpu_pct']:>6.0f}%{r['ttft_p50_ms']:>9.2f}{r['e2e_p50_ms']:>9.2f}"
    )


HEADER = (
    f"{'client':<26}{'ok req':>8}{'tokens':>10}{'cpu ld':>8}{'cpu st':>7}{'cpu tot':>8}"
    f"{'tok/cpu ld':>12}{'tok/cpu tot':>12}{'cpu%':>7}{'ttft p50':>9}{'e2e p50':>9}"
)
LEGEND = """cpu ld: client CPU-s from test start to test stop (the load); cpu st: after the stop (end-of-run
summary and results); cpu tot: whole process incl. start-up. tok/cpu ld = tokens / cpu ld (the
ingest figure); tok/cpu tot = tokens / cpu tot. cpu%: cpu ld / wall over the same window
(100% = one core). ttft/e2e p50 in ms, as each client measured them."""


def _burst_run(key: str, url: str, a, tmp: Path, trace: Path, body: bytes, i: int) -> dict:
    """One burst run of the client `key` (round i)."""
    if key == "bare":
        return run_bare(url, a.users, a.duration, tmp, body)
    if key == "bare_lines":
        return run_bare(url, a.users, a.duration, tmp, body, "iter_lines")
    if key == "vllm":
        return run_vllm(url, a.users, a.vllm_prompts, tmp, f"vllm{i}")
    if key == "base":
        return run_ours(url, a.users, a.duration, tmp, trace, f"base{i}", root=Path(a.baseline).resolve())
    extra = ["--record-log", str(tmp / f"records{i}.jsonl")] if key == "ours_log" else []
    return run_ours(url, a.users, a.duration, tmp, trace, f"{key}{i}", extra)


def _burst(a, tmp: Path, trace: Path, body: bytes) -> tuple[list[str], dict]:
    """(a): every client against nginx's burst, alternated --repeat times."""
    lines: list[str] = []
    res: dict = {"bare": [], "bare_lines": [], "ours": [], "ours_log": [], "base": [], "vllm": []}
    keys = ["bare"] + (["bare_lines"] if a.iter_lines else []) + ["ours"]
    keys += (["ours_log"] if a.record_log else []) + (["base"] if a.baseline else [])
    keys += ["vllm"] if a.vllm else []
    with NginxStream() as srv:
        print(f"nginx at {srv.url}: {len(srv.body)} bytes per response, {N_TOKENS} tokens", flush=True)
        for i in range(a.repeat):  # alternate, so that a noisy neighbour hits all alike
            for key in keys if i % 2 == 0 else keys[::-1]:
                print(f"[{i + 1}/{a.repeat}] {key} ({a.users} users) ...", flush=True)
                res[key].append(_burst_run(key, srv.url, a, tmp, trace, body, i))
    lines += [f"(a) burst: nginx, fixed {N_TOKENS}-token stream, {a.users} users", HEADER, "-" * len(HEADER)]
    names = {
        "bare": "bare FastHttpUser",
        "bare_lines": "bare, iter_lines",
        "ours": "llm-locust (all metrics)",
        "ours_log": "llm-locust + --record-log",
        "base": "llm-locust --baseline",
        "vllm": "vllm bench serve",
    }
    for i in range(a.repeat):
        for key in keys:
            lines.append(row(f"{names[key]}{f' #{i + 1}' if a.repeat > 1 else ''}", res[key][i]))
    med = {k: statistics.median(r["tok_per_cpu_load"] for r in v) for k, v in res.items() if v}
    med_tot = {k: statistics.median(r["tok_per_cpu_total"] for r in v) for k, v in res.items() if v}
    lines += [
        "",
        "median tokens per CPU-s (load window): " + ", ".join(f"{names[k]} {med[k]:,.0f}" for k in keys),
        f"ours / bare: {med['ours'] / med['bare']:.3f} (load window, medians); "
        f"{med_tot['ours'] / med_tot['bare']:.3f} (whole process, medians); per pair: "
        + ", ".join(
            f"{o['tok_per_cpu_load'] / b['tok_per_cpu_load']:.3f}"
            for b, o in zip(res["bare"], res["ours"], strict=True)
        ),
    ]
    for other in ("bare_lines", "vllm", "base"):
        if res[other]:
            lines.append(
                f"ours / {names[other]}: {med['ours'] / med[other]:.3f} (medians); per pair: "
                + ", ".join(
                    f"{o['tok_per_cpu_load'] / b['tok_per_cpu_load']:.3f}"
                    for b, o in zip(res[other], res["ours"], strict=True)
                )
            )
    if res["base"]:
        lines.append(
            f"baseline / bare: {med['base'] / med['bare']:.3f}"
            + (f"; baseline / vLLM's: {med['base'] / med['vllm']:.3f}" if res["vllm"] else "")
        )
    lines.append(
        "ours after the stop (end-of-run summary + results): "
        + ", ".join(f"{r['cpu_after_stop']:.2f}" for r in res["ours"])
        + " CPU-s; bare: "
        + ", ".join(f"{r['cpu_after_stop']:.2f}" for r in res["bare"])
        + " CPU-s"
    )
    res = {k: v for k, v in res.items() if v}
    return lines, res


def _paced(a, tmp: Path, trace: Path) -> tuple[list[str], dict]:
    """(b): ours against the paced simulator, --paced-repeat times (alternated with --baseline's
    when given: before/after in one sitting); one simulator for all runs."""
    n = a.paced_users
    sim_opts = dict(slots=n, iter_base=0.01, iter_per_seq=0.0, iter_per_prefill_token=0.0)
    keys = ["ours"] + (["base"] if a.baseline else [])
    runs: dict[str, list[dict]] = {k: [] for k in keys}
    sim_cpu: list[float] = []
    with SimProcess(**sim_opts) as sim:
        for i in range(a.paced_repeat):
            for key in keys if i % 2 == 0 else keys[::-1]:
                print(f"[{i + 1}/{a.paced_repeat}] {key} paced against the simulator ({n} users) ...", flush=True)
                root = Path(a.baseline).resolve() if key == "base" else ROOT
                cpu0 = tree_cpu(sim.pid)
                runs[key].append(
                    run_ours(sim.url, n, a.duration, tmp, trace, f"paced-{key}{i}", api=a.paced_api, root=root)
                )
                sim_cpu.append(tree_cpu(sim.pid) - cpu0)
    lines = [
        "",
        f"(b) paced: simulator, {n} slots, 10 ms iterations (~100 tokens/s per stream), {n} users, {a.paced_api}",
    ]
    lines += [HEADER, "-" * len(HEADER)]
    names = {"ours": "llm-locust (all metrics)", "base": "llm-locust --baseline"}
    for i in range(a.paced_repeat):
        for key in keys:
            lines.append(row(f"{names[key]}{f' #{i + 1}' if a.paced_repeat > 1 else ''}", runs[key][i]))
    p = runs["ours"][-1]
    lines.append(
        f"simulator CPU per run: {statistics.median(sim_cpu):.2f} s (median); ours ITL p50 "
        f"{p['itl_p50_ms']:.2f} ms, loop lag p99 {p['loop_lag_p99_ms']:.1f} ms (the last run)"
    )
    med = {k: statistics.median(r["tok_per_cpu_load"] for r in v) for k, v in runs.items()}
    lines.append("median tokens per CPU-s (load window): " + ", ".join(f"{names[k]} {med[k]:,.0f}" for k in keys))
    if a.baseline:
        pairs = ", ".join(
            f"{o['tok_per_cpu_load'] / b['tok_per_cpu_load']:.3f}"
            for b, o in zip(runs["base"], runs["ours"], strict=True)
        )
        lines.append(f"ours / llm-locust --baseline: {med['ours'] / med['base']:.3f} (medians); per pair: {pairs}")
    return lines, runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=15, help="seconds per run (default 15)")
    ap.add_argument("--users", type=int, default=32, help="users for the burst runs (default 32)")
    ap.add_argument("--paced-users", type=int, default=64, help="users (and sim slots) for the paced run (default 64)")
    ap.add_argument("--repeat", type=int, default=3, help="burst runs of each client, alternated (default 3)")
    ap.add_argument("--skip-paced", action="store_true", help="only the burst runs")
    ap.add_argument(
        "--paced-repeat",
        type=int,
        default=1,
        help="paced runs of ours (and of --baseline's, alternated) (default 1)",
    )
    ap.add_argument("--skip-burst", action="store_true", help="only the paced runs")
    ap.add_argument(
        "--paced-api",
        default="openai-completions",
        help="the API of the paced runs, served by the simulator in its wire format (default openai-completions)",
    )
    ap.add_argument("--record-log", action="store_true", help="add a burst run of ours with --record-log on")
    ap.add_argument(
        "--baseline",
        default="",
        help="also run ours from this other checkout (e.g. an older commit's `git archive` export), "
        "alternated with the others: before/after figures in one sitting",
    )
    ap.add_argument(
        "--iter-lines",
        action="store_true",
        help="also run a bare user that reads with FastHttpSession.iter_lines (Locust's API for streams)",
    )
    ap.add_argument("--vllm", action="store_true", help="also run vLLM's client (`vllm bench serve`) on the burst")
    ap.add_argument(
        "--vllm-prompts", type=int, default=4000, help="requests of each vLLM run (default 4000: ~15 s on 2 cores)"
    )
    ap.add_argument("--json", default="", help="also write the figures to this JSON file")
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    trace = tmp / "trace.jsonl"
    trace.write_bytes(orjson.dumps({"timestamp": 0, "prompt": PROMPT, "output_tokens": N_TOKENS}) + b"\n")
    spec = RequestSpec(model=MODEL, prompt=PROMPT, max_tokens=N_TOKENS, force_length=True)
    _, body = get_adapter("openai-completions").request(spec)  # the exact body our client sends

    lines = [
        f"client ingest, {a.duration}s per run, {os.cpu_count()} CPUs, load average before: {os.getloadavg()[0]:.2f}",
        "",
    ]
    res: dict = {}
    if not a.skip_burst:
        burst_lines, res = _burst(a, tmp, trace, body)
        lines += burst_lines
    if not a.skip_paced:
        paced_lines, paced = _paced(a, tmp, trace)
        lines += paced_lines
        res.update({f"paced_{k}": v for k, v in paced.items()})
    lines += ["", LEGEND]
    print("\n".join(lines), flush=True)
    if a.json:
        strip = lambda r: {x: v for x, v in r.items() if x != "output"}  # noqa: E731
        Path(a.json).write_bytes(
            orjson.dumps(
                {k: [strip(r) for r in v] if isinstance(v, list) else strip(v) for k, v in res.items()},
                option=orjson.OPT_INDENT_2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
