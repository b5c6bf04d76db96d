"""One run's 95% intervals against real llama-server (issue 36, "On real llama-server").

    bash scripts/real-servers.sh llama      # once: llama-server and SmolLM2, cached
    python benchmarks/intervals_real.py [--runs 10] [--seconds 20] [--users 4] [--synthetic SPEC]

RUNS identical closed-loop runs of the bundled sample trace (USERS users, SECONDS each) against
one llama-server (SmolLM2-135M, 4 slots). Prints each run's TTFT mean and p99 with their 95%
intervals (or "insufficient"), the runs' spread (min, max, max/min) and how many runs' intervals
hold the median of the others. Then:
- `compare --fail-on regression` of the last two runs (identical settings, a warm prompt cache):
  every figure should be "within noise", exit 0;
- one run against a second llama-server with 1 slot, not 4 (requests queue: TTFT several times
  longer), after a first run that warms its prompt cache, compared with the last run: the
  figures that changed should be "significant", exit 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import realservers as rs  # noqa: E402


def _run(url: str, out: Path, users: int, seconds: int, more: list[str]) -> dict:
    cmd = [sys.executable, "-m", "llm_locust.cli", "run", "--host", url, "--api", "openai-chat"]
    cmd += ["-u", str(users), "-t", f"{seconds}s", "--results", str(out), *more]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 5 + 120)
    if p.returncode not in (0, 1):
        sys.exit(f"{out.name}: exit {p.returncode}: {p.stderr[-800:]}")
    return json.loads(out.read_text())


def _fig(doc: dict, stat: str) -> tuple[float | None, dict]:
    s = doc["summary"]
    ivs = ((s.get("intervals") or {}).get("latency") or {}).get("ttft", {})
    return s["latency"]["ttft"].get(stat), ivs.get(stat, {})


def _say(value: float | None, iv: dict) -> str:
    if value is None:
        return "     no requests ended"
    if iv.get("low") is not None:
        return f"{value * 1000:8.1f} ms [{iv['low'] * 1000:.1f}, {iv['high'] * 1000:.1f}] ± {iv['rel'] * 100:.1f}%"
    return f"{value * 1000:8.1f} ms {iv.get('reason') or 'no interval'}"


def _spread(docs: list[dict], stat: str) -> None:
    docs = [d for d in docs if _fig(d, stat)[0] is not None]
    if len(docs) < 2:
        print(f"ttft {stat}: fewer than 2 runs with requests ended")
        return
    vals = [v for d in docs if (v := _fig(d, stat)[0]) is not None]
    held = with_iv = 0
    for i, d in enumerate(docs):
        others = statistics.median(v for j, v in enumerate(vals) if j != i)
        _, iv = _fig(d, stat)
        if iv.get("low") is not None:
            with_iv += 1
            held += iv["low"] <= others <= iv["high"]
    print(
        f"ttft {stat}: min {min(vals) * 1000:.1f} ms, max {max(vals) * 1000:.1f} ms, "
        f"max/min {max(vals) / min(vals):.2f}; "
        f"{with_iv} of {len(docs)} runs have an interval, {held} of them hold the others' median"
    )


def _compare(a: Path, b: Path) -> int:
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "compare", str(a), str(b), "--fail-on", "regression"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = [ln for ln in p.stdout.splitlines() if "within noise" in ln or "significant" in ln or "too few" in ln]
    print("\n".join(rows[:14]))
    print("\n".join(ln for ln in p.stderr.splitlines() if "FAIL" in ln))
    return p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=0, help="cap each reply (more requests a run); 0: the trace's")
    ap.add_argument(
        "--synthetic",
        default="",
        metavar="SPEC",
        help="a synthetic workload (llm-locust run --synthetic), not the bundled sample: short prompts give "
        "a 1-slot server enough requests for intervals",
    )
    a = ap.parse_args()
    more = ["--max-tokens", str(a.max_tokens)] if a.max_tokens else []
    more += ["--synthetic", a.synthetic] if a.synthetic else []
    d = Path(tempfile.mkdtemp(prefix="intervals-real-"))
    model = rs.smollm2_gguf()
    if model is None:
        sys.exit(f"SmolLM2 is not provisioned: {rs.PROVISION_HINT}")
    docs = []
    with rs.LlamaServer(model, slots=4) as srv:
        for k in range(1, a.runs + 1):
            doc = _run(srv.url, d / f"run{k}.json", a.users, a.seconds, more)
            docs.append(doc)
            mean, p99 = _fig(doc, "mean"), _fig(doc, "p99")
            n = doc["summary"]["latency"]["ttft"]["count"]
            print(f"run {k:2}: n {n:4}  ttft mean {_say(*mean)}  p99 {_say(*p99)}", flush=True)
    warm = docs[len(docs) // 2 :]  # the prompt cache warms over the first runs
    for stat in ("mean", "p99"):
        print("all runs: ", end="")
        _spread(docs, stat)
        print(f"last {len(warm)}: ", end="")
        _spread(warm, stat)
    last, before = d / f"run{a.runs}.json", d / f"run{a.runs - 1}.json"
    print(f"\ncompare of two identical runs (run {a.runs - 1}, run {a.runs}):")
    print(f"exit {_compare(before, last)}")
    with rs.LlamaServer(model, slots=1) as one:  # a first run warms its prompt cache, as runs 1-5 did the other's
        _run(one.url, d / "one-slot-cold.json", a.users, a.seconds, more)
        _run(one.url, d / "one-slot.json", a.users, a.seconds, more)
    print(f"\ncompare of run {a.runs} (4 slots) and a run against 1 slot:")
    print(f"exit {_compare(last, d / 'one-slot.json')}")
    print(f"files: {d}")


if __name__ == "__main__":
    main()
