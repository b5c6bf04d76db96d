"""Longer fuzzing of every trace loader than tests/test_fuzz_traces.py: the same seeds, mutations
and checks, many more cases, and every finding counted instead of stopping at the first.

    python benchmarks/fuzz_traces.py [--cases 2000] [--formats mooncake,sharegpt] [--seed N]

The session formats with samples in traces/ (tracelab, tracelab-csv, h-cua-perf, claude-code, codex) are fuzzed the
same way through `load_sessions` (tests/test_coding_traces.py's properties).

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


def _load_props(name: str = "test_fuzz_traces"):
    sys.path.insert(0, str(REPO / "tests"))  # the test modules import tests/support.py
    spec = importlib.util.spec_from_file_location(f"fuzz_props_{name}", REPO / "tests" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _SessionProps:
    """The session formats' properties in the request loaders' shape (CASE, SEEDS, seed_bytes, run_case)."""

    def __init__(self) -> None:
        self.mod = _load_props("test_coding_traces")
        self.CASE = self.mod.CASE
        self.SEEDS = self.mod.SAMPLES

    def seed_bytes(self, fmt: str) -> list[bytes]:
        return [self.mod.seed_data(fmt)]

    def run_case(self, fmt: str, seeds: list[bytes], case, workdir: Path) -> tuple[str, str]:
        return self.mod.run_case(fmt, seeds[0], case, workdir)


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
    props, sessions = _load_props(), _SessionProps()
    fmts = [f for f in a.formats.split(",") if f] or sorted(props.SEEDS) + sorted(sessions.SEEDS)
    workdir = Path(tempfile.mkdtemp(prefix="fuzz-traces-bench-"))
    total = 0
    print(f"{'loader':20} {'cases':>7} {'forced ok/err':>14} {'detected ok/err':>16} {'findings':>9} {'s':>6}")
    report = []
    for fmt in fmts:
        out, found, secs = fuzz(sessions if fmt in sessions.SEEDS else props, fmt, a.cases, a.seed, workdir)
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
