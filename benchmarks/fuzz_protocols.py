"""A longer fuzz run of the stream decoders, every adapter and the HTTP/2 frame reader (the checks
of tests/test_fuzz_protocols.py and tests/test_h2_frames.py, with random seeds and many more
cases).

Unlike the tests, a failing case does not stop the run: every crash is counted (by exception
type and message start) and the run goes on, so one run shows how many distinct problems there
are. A crash is anything a check raises: an exception other than ProtocolError out of a decoder
or an adapter, results that differ between two splits of the same bytes, a stored value of the
wrong type. The slowest case per target is printed too (a hang shows as a huge figure, or as a
run that never ends).

Run: python benchmarks/fuzz_protocols.py [--cases 5000] [--seed N] [--only NAME]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import test_fuzz_protocols as fz  # noqa: E402
import test_h2_frames as h2  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from llm_locust.protocols import API_NAMES  # noqa: E402


def targets():
    """(name, strategy of one argument tuple, check taking that tuple's items)."""
    yield "mutated captures, two splits", fz.capture_and_splits(), fz.check_capture
    for api in API_NAMES:
        yield f"{api}: any JSON", fz.JSON.map(lambda v, a=api: (a, fz.dumps(v))), fz.check_payload
        yield f"{api}: any bytes", fz.PAYLOAD_BYTES.map(lambda b, a=api: (a, b)), fz.check_payload
    yield "SSE decoder, any split", fz.body_and_pieces(), fz.check_sse
    yield "NDJSON decoder, any split", fz.body_and_pieces(), fz.check_ndjson
    yield "error_text, any body", fz.PAYLOAD_BYTES.map(lambda b: (b,)), fz.check_error_text
    yield "HTTP/2 frames, mutated, any split", h2.wire_and_cuts(), h2.check_reader


def run(name, strategy, check, cases: int, run_seed: int | None) -> dict:
    stats = {"cases": 0, "crashes": Counter(), "slowest": 0.0, "examples": {}}

    def body(args):
        stats["cases"] += 1
        t0 = time.perf_counter()
        try:
            check(*args)
        except Exception as e:  # noqa: BLE001 - counted, not raised: the run goes on
            key = f"{type(e).__name__}: {str(e)[:80]}"
            stats["crashes"][key] += 1
            stats["examples"].setdefault(key, args)
        stats["slowest"] = max(stats["slowest"], time.perf_counter() - t0)

    test = settings(
        max_examples=cases,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )(given(strategy)(body))
    if run_seed is not None:
        test = seed(run_seed)(test)
    test()
    return stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=5000, help="cases per target (default 5000)")
    ap.add_argument("--seed", type=int, default=None, help="a fixed seed (default: random)")
    ap.add_argument("--only", default=None, help="only targets whose name contains this")
    args = ap.parse_args()

    total_cases = total_crashes = 0
    t_start = time.perf_counter()
    print(f"{'target':<40} {'cases':>7} {'crashes':>8} {'slowest ms':>11}  time s")
    for name, strategy, check in targets():
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        stats = run(name, strategy, check, args.cases, args.seed)
        n_crash = sum(stats["crashes"].values())
        total_cases += stats["cases"]
        total_crashes += n_crash
        print(
            f"{name:<40} {stats['cases']:>7} {n_crash:>8} "
            f"{stats['slowest'] * 1000:>11.1f}  {time.perf_counter() - t0:6.1f}"
        )
        for key, n in stats["crashes"].most_common(5):
            print(f"    {n:>5} x {key}")
            print(f"          e.g. {stats['examples'][key]!r:.300}")
    print(f"\n{total_cases} cases, {total_crashes} crashes, {time.perf_counter() - t_start:.0f} s")
    return 1 if total_crashes else 0


if __name__ == "__main__":
    sys.exit(main())
