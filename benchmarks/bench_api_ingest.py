"""Client ingest per API: output tokens taken in per client CPU-second, each streaming API beside openai-completions.

Burst: one nginx (benchmarks/nginx_stream.py) serves, at each API's own path, a complete static
256-token stream shaped like the real server's (vLLM for openai-completions /v1/completions,
openai-chat /v1/chat/completions, openai-responses /v1/responses and anthropic-messages
/v1/messages; SGLang's native stream, cumulative text and output_ids, for sglang-generate
/generate), as fast as the client reads it. For each API ours runs as a child process,
`python -m llm_locust.cli run --api API --host URL --model bench-model -u U -r U -t Ns
--max-tokens 256 --trace T --results R --no-preflight` (every metric on), same users, duration
and one-prompt trace for all. A round runs every API once (the order rotates each round, so no
API always runs first or last); --repeat rounds.

CPU and tokens as in bench_client_ingest.py, whose functions this reuses (run_ours ->
run_measured / tree_cpu): load CPU = the client process tree's utime+stime (+ reaped children)
from /proc between Locust's "Ramping to" line (test start) and its "--run-time limit reached"
line (test stop); tokens = summary.tokens_out + tokens_out_failed from the results JSON.
tokens / load CPU-s is the ingest figure. Each run's results are checked (run_ours): no failed
requests; every ok request's length checked against the 256 asked for and none mismatched
(length_checked == ok, length_mismatch == 0), tokens_out = ok x 256, every count from server
usage (n_out_sources == {"usage": ok}); a run that fails the check is flagged.
Per API: the median over the rounds and its ratio to openai-completions' median measured in
the same process (and the ratio per round). The issue's goal: each API within 20% of
openai-completions (ratio >= 0.8).

--in-process adds the decoder + adapter cost alone, in this process: each API's whole nginx
body split into its events, fed one event per SSEDecoder.feed call and every payload to the
adapter (bench_api_adapters.tokens_per_second), best of 7, million tokens per second; and the
decoder alone, to tell the cost of the bytes from that of the adapter's parsing.

Run: python benchmarks/bench_api_ingest.py [--duration 10] [--users 16] [--repeat 3]
     [--apis openai-chat,...] [--in-process] [--json out.json]
No assertions on timing: this prints figures, it does not judge them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_api_adapters import tokens_per_second  # noqa: E402
from bench_client_ingest import HEADER, LEGEND, PROMPT, row, run_ours  # noqa: E402
from nginx_stream import N_TOKENS, STREAMS, NginxStream  # noqa: E402

BASELINE = "openai-completions"
APIS = ("openai-completions", "openai-chat", "openai-responses", "anthropic-messages", "sglang-generate")
GOAL_RATIO = 0.8  # "within 20% of openai-completions"


def write_trace(path: Path) -> Path:
    """The one-request trace every run replays: PROMPT, N_TOKENS output tokens."""
    path.write_bytes(orjson.dumps({"timestamp": 0, "prompt": PROMPT, "output_tokens": N_TOKENS}) + b"\n")
    return path


def split_events(body: bytes) -> list[bytes]:
    """A whole SSE body cut into its events (each keeps its blank-line terminator)."""
    return [part + b"\n\n" for part in body.split(b"\n\n") if part]


def in_process_rates(apis: list[str], with_adapter: bool = True) -> dict[str, float]:
    """Million tokens per second through the decoder (+ the adapter when with_adapter) for each
    API's whole nginx body."""
    return {api: tokens_per_second(api, split_events(STREAMS[api][1]()), N_TOKENS, with_adapter) for api in apis}


def round_order(apis: list[str], i: int) -> list[str]:
    """Round i's order: the list rotated by i."""
    k = i % len(apis)
    return apis[k:] + apis[:k]


def run_rounds(
    url: str, apis: list[str], users: int, duration: int, repeat: int, tmp: Path, trace: Path
) -> dict[str, list[dict]]:
    """--repeat rounds of one run per API; the runs per API, in round order."""
    runs: dict[str, list[dict]] = {api: [] for api in apis}
    for i in range(repeat):
        order = round_order(apis, i)
        print(f"[{i + 1}/{repeat}] {', '.join(order)} ({users} users, {duration}s each) ...", flush=True)
        for api in order:
            runs[api].append(run_ours(url, users, duration, tmp, trace, f"{api}-{i}", api=api))
    return runs


def report(runs: dict[str, list[dict]], users: int, duration: int) -> tuple[list[str], dict]:
    """The table of every run, then per API the median tok/load CPU-s and its ratio to the
    baseline's median (and per round); also returns those figures."""
    lines = [
        f"burst: nginx, fixed {N_TOKENS}-token stream per API, {users} users, {duration}s per run",
        HEADER,
        "-" * len(HEADER),
    ]
    for api, rs in runs.items():
        for i, r in enumerate(rs):
            lines.append(row(f"{api} #{i + 1}", r) + ("  CHECK FAILED" if r["problems"] else ""))
    med = {api: statistics.median(r["tok_per_cpu_load"] for r in rs) for api, rs in runs.items()}
    base = med.get(BASELINE)
    summary: dict = {}
    lines += ["", f"{'api':<22}{'median tok/CPU-s':>17}{'ratio':>8}  per round (ratio to {BASELINE} in the same round)"]
    for api, rs in runs.items():
        ratio = med[api] / base if base else float("nan")
        per_round = (
            [r["tok_per_cpu_load"] / b["tok_per_cpu_load"] for r, b in zip(rs, runs[BASELINE], strict=True)]
            if base
            else []
        )
        checked = (
            "results ok"
            if not any(r["problems"] for r in rs)
            else "CHECK FAILED: " + "; ".join(p for r in rs for p in r["problems"])
        )
        goal = "" if api == BASELINE or not base else ("  >= 0.8" if ratio >= GOAL_RATIO else "  BELOW 0.8")
        lines.append(
            f"{api:<22}{med[api]:>17,.0f}{ratio:>8.3f}  "
            + ", ".join(f"{x:.3f}" for x in per_round)
            + f"{goal}  [{checked}]"
        )
        summary[api] = {
            "median_tok_per_cpu_load": med[api],
            "ratio": ratio,
            "per_round": per_round,
            "problems": [p for r in rs for p in r["problems"]],
        }
    return lines, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--users", type=int, default=16, help="users per run (default 16)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds, each running every API once (default 3)")
    ap.add_argument(
        "--apis",
        default=",".join(APIS),
        help=f"comma-separated APIs (default all; {BASELINE} is always added, for the ratios)",
    )
    ap.add_argument("--in-process", action="store_true", help="also the in-process decoder + adapter rates")
    ap.add_argument("--no-runs", action="store_true", help="only the in-process part (implies --in-process)")
    ap.add_argument("--json", default="", help="also write the figures to this JSON file")
    a = ap.parse_args()
    apis = [x.strip() for x in a.apis.split(",") if x.strip()]
    unknown = [x for x in apis if x not in STREAMS]
    if unknown:
        ap.error(f"no nginx stream for {unknown}; known: {', '.join(STREAMS)}")
    if BASELINE not in apis:
        apis.insert(0, BASELINE)

    out: dict = {}
    lines: list[str] = []
    if a.in_process or a.no_runs:
        rates = in_process_rates(apis)
        decoder = in_process_rates(apis, with_adapter=False)
        out["in_process_mtok_per_s"] = {"decoder_adapter": rates, "decoder_only": decoder}
        lines += [
            f"in-process, whole nginx bodies, one event per feed (M tok/s, best of 7; ratio to {BASELINE}):",
            f"  {'api':<22}{'decoder+adapter':>16}{'ratio':>7}{'decoder only':>14}{'ratio':>7}",
        ]
        lines += [
            f"  {api:<22}{rates[api]:>16.3f}{rates[api] / rates[BASELINE]:>7.3f}"
            f"{decoder[api]:>14.3f}{decoder[api] / decoder[BASELINE]:>7.3f}"
            for api in apis
        ]
        lines.append("")
    if not a.no_runs:
        tmp = Path(tempfile.mkdtemp(prefix="bench-api-ingest-"))
        trace = write_trace(tmp / "trace.jsonl")
        head = (
            f"client ingest per API, {a.duration}s per run, {a.users} users, {os.cpu_count()} CPUs, "
            f"load average before: {os.getloadavg()[0]:.2f}"
        )
        print(head, flush=True)
        with NginxStream() as srv:
            for api in apis:
                path, body = srv.bodies[api]
                print(f"  {api}: POST {srv.url}{path}, {len(body):,} bytes per response", flush=True)
            runs = run_rounds(srv.url, apis, a.users, a.duration, a.repeat, tmp, trace)
        table, out["burst"] = report(runs, a.users, a.duration)
        lines += [head, ""] + table + ["", LEGEND]
        out["runs"] = {api: [{k: v for k, v in r.items() if k != "output"} for r in rs] for api, rs in runs.items()}
    print("\n".join(lines), flush=True)
    if a.json:
        Path(a.json).write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
