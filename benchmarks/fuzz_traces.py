"""Longer fuzzing of every trace loader than tests/test_fuzz_traces.py: the same seeds, mutations
and checks, many more cases, and every finding counted instead of stopping at the first.

    python benchmarks/fuzz_traces.py [--cases 2000] [--formats mooncake,sharegpt] [--seed N]

Prints, per loader: cases run (each loads the mutated file twice: format forced, then detected),
how many loaded, how many raised TraceError, and the findings (any other exception, a TraceError
that does not name the file or that came from load_trace's safety net, a loaded trace that breaks
an invariant, a load over the time limit), grouped by kind with one example each. Exit status 1
when there is a finding.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _load_props():
    spec = importlib.util.spec_from_file_location("fuzz_props", REPO / "tests" / "test_fuzz_traces.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f for f in tb if "llm_locust" in f.filename] or tb
    f = frames[-1] if frames else None
    at = f"{Path(f.filename).name}:{f.lineno}" if f else "?"
    return f"{type(e).__name__} at {at}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def fuzz(props, fmt: str, cases: int, seed: int, workdir: Path) -> tuple[Counter, dict[str, tuple], float]:
    seeds = props.seed_bytes(fmt)
    outcomes: Counter = Counter()
    findings: dict[str, tuple] = {}
    wd = workdir / fmt
    wd.mkdir(exist_ok=True)

    @settings(
        max_examples=cases, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )
    @given(props.CASE)
    def prop(case):
        outcomes["cases"] += 1
        try:
            forced, detected = props.run_case(fmt, seeds, case, wd)
            outcomes[f"forced {forced}"] += 1
            outcomes[f"detected {detected}"] += 1
        except Exception as e:  # noqa: BLE001 - every finding is counted, none stops the run
            key = _where(e)
            outcomes["findings"] += 1
            findings.setdefault(key, (case, 0))
            findings[key] = (findings[key][0], findings[key][1] + 1)

    import random

    random.seed(seed)
    t0 = time.perf_counter()
    prop()
    return outcomes, findings, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=2000, help="cases per loader (default %(default)s)")
    p.add_argument("--formats", default="", help="comma-separated loaders (default: all)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    props = _load_props()
    fmts = [f for f in a.formats.split(",") if f] or sorted(props.SEEDS)
    workdir = Path(tempfile.mkdtemp(prefix="fuzz-traces-bench-"))
    total = 0
    print(f"{'loader':20} {'cases':>7} {'forced ok/err':>14} {'detected ok/err':>16} {'findings':>9} {'s':>6}")
    report = []
    for fmt in fmts:
        out, found, secs = fuzz(props, fmt, a.cases, a.seed, workdir)
        total += out["findings"]
        print(
            f"{fmt:20} {out['cases']:7} {out['forced ok']:>6}/{out['forced error']:<7} "
            f"{out['detected ok']:>7}/{out['detected error']:<8} {out['findings']:9} {secs:6.1f}",
            flush=True,
        )
        for key, (case, n) in found.items():
            report.append(f"  [{fmt}] {n} x {key}\n      e.g. case={case!r}"[:600])
    if report:
        print("\nfindings:")
        print("\n".join(report))
    print(f"\n{total} finding(s)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
