"""The regression gate against noise and against a real slowdown (issue 36, "The gate").

TRIALS times: a baseline run and a rerun against one simulator with the same settings, and a run
against a simulator whose every iteration cost is 20% higher (--iter-base, --iter-per-seq and
--iter-per-prefill-token x 1.2: each iteration, so each token, takes 20% longer). Each candidate is
gated by `llm-locust run --baseline BASE.json` (compare's regression gate by one run's 95%
intervals, docs/compare.md "Noise"). A gate that respects the noise exits 0 for every rerun and
non-zero for every slower run. Prints both tallies and the figures the slower runs failed on.

    python benchmarks/gate_trials.py [--trials 20] [--seconds 8] [--users 8]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_locust.sim.process import SimProcess  # noqa: E402

COSTS = {"iter_base": 0.005, "iter_per_seq": 0.0005, "iter_per_prefill_token": 0.00002}  # the simulator's defaults
WORKLOAD = "requests=1000,input=32,output=64,seed=1"
FAILED = re.compile(r"FAIL \S+: (\S+) ")


def _run(url: str, users: int, seconds: int, out: Path, baseline: Path | None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "llm_locust.cli", "run", "--host", url, "-u", str(users), "-t", f"{seconds}s"]
    argv += ["--synthetic", WORKLOAD, "--results", str(out)]
    if baseline is not None:
        argv += ["--baseline", str(baseline)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 10 + 60)


def _tpot(path: Path) -> float:
    return float(json.loads(path.read_text())["summary"]["latency"]["tpot"]["p50"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--slower", type=float, default=1.2, help="the slow simulator's iteration costs, x the baseline's")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="gate-trials-"))
    noise_pass = slow_fail = 0
    ratios: list[float] = []
    noise_failed: collections.Counter[str] = collections.Counter()
    slow_failed: collections.Counter[str] = collections.Counter()
    with (
        SimProcess(slots=a.users, **COSTS) as same,
        SimProcess(slots=a.users, **{k: v * a.slower for k, v in COSTS.items()}) as slow,
    ):
        for k in range(1, a.trials + 1):
            base = d / f"base{k}.json"
            p = _run(same.url, a.users, a.seconds, base, None)
            if p.returncode != 0:
                sys.exit(f"trial {k}: the baseline run exited {p.returncode}: {p.stderr[-500:]}")
            rerun = _run(same.url, a.users, a.seconds, d / f"rerun{k}.json", base)
            slower = _run(slow.url, a.users, a.seconds, d / f"slow{k}.json", base)
            ratios.append(_tpot(d / f"slow{k}.json") / _tpot(base))
            noise_pass += rerun.returncode == 0
            slow_fail += slower.returncode != 0
            noise_failed.update(FAILED.findall(rerun.stderr))
            slow_failed.update(FAILED.findall(slower.stderr))
            print(f"trial {k}: rerun exit {rerun.returncode}, slower exit {slower.returncode}", flush=True)
    print(f"noise-only rerun: exit 0 in {noise_pass} of {a.trials}; failed on {dict(noise_failed) or 'nothing'}")
    slower = f"{a.slower:.2f}x the iteration costs (TPOT p50 x {statistics.mean(ratios):.3f})"
    print(f"{slower}: exit non-zero in {slow_fail} of {a.trials}; failed on {dict(slow_failed)}")


if __name__ == "__main__":
    main()
