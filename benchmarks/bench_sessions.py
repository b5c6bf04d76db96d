"""Session traces: memory and time to load 100k session turns (figures printed, not asserted).

    python benchmarks/bench_sessions.py [--turns 100000] [--seed 0]

Writes a synthetic agentic session JSONL (workload/agentic/synth_sessions.py, ``llm-locust-sessions``) of at
least --turns turns in a temporary folder, then loads it with `load_sessions` under tracemalloc:
peak and retained bytes, per 100k turns, and the load time. Also the same for the history-mode
same turns as a Mooncake-style block-mode file (hash ids, sessions rebuilt by prefix chaining).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_locust.workload.agentic import load_sessions  # noqa: E402
from llm_locust.workload.agentic.synth_sessions import AgenticSpec, generate, write  # noqa: E402


def _measure(path: Path, fmt: str | None):
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    tr = load_sessions(path, fmt)
    dt = time.perf_counter() - t0
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return tr, dt, retained, peak


def _plain(path: Path, fmt: str | None) -> float:
    t0 = time.perf_counter()
    load_sessions(path, fmt)
    return time.perf_counter() - t0


def _report(label: str, tr, dt: float, retained: int, peak: int, plain: float) -> None:
    per = 100_000 / tr.turns
    print(f"{label}: {tr.turns} turns, {len(tr.sessions)} sessions ({len(tr)} top-level)")
    print(
        f"  retained {retained / 2**20:.1f} MiB ({retained * per / 2**20:.1f} MiB per 100k turns, "
        f"{retained / tr.turns:.0f} B/turn); peak while loading {peak / 2**20:.1f} MiB "
        f"({peak * per / 2**20:.1f} MiB per 100k turns)"
    )
    print(f"  load {plain:.2f} s ({tr.turns / plain / 1e3:.0f}k turns/s); {dt:.2f} s under tracemalloc")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "agentic.jsonl"
        n = max(1, a.turns // 14)  # ~14 turns per top-level session with its subagents at the defaults
        rows = generate(AgenticSpec(sessions=n, seed=a.seed))
        n = max(1, round(n * a.turns / len(rows)))  # one correction: close to --turns
        rows = generate(AgenticSpec(sessions=n, seed=a.seed))
        write(rows, path)
        print(f"session JSONL: {path.stat().st_size / 2**20:.1f} MiB")
        tr, dt, retained, peak = _measure(path, None)
        _report("llm-locust-sessions (history mode)", tr, dt, retained, peak, _plain(path, None))
        del tr
        # block mode: the same turns as Mooncake lines with growing hash ids, rebuilt by prefix chaining
        mc = Path(d) / "mooncake.jsonl"
        next_id = 0
        blocks: dict[str, list[int]] = {}
        t = 0
        with open(mc, "wb") as f:
            for r in rows[: a.turns]:
                h = blocks.setdefault(r["session"], [])
                add = max(1, r["new_tokens"] // 512)
                h.extend(range(next_id, next_id + add))
                next_id += add
                t += 10
                f.write(
                    orjson.dumps(
                        {
                            "timestamp": t,
                            "input_length": len(h) * 512,
                            "output_length": r["output_tokens"],
                            "hash_ids": h,
                        }
                    )
                    + b"\n"
                )
        print(f"mooncake JSONL: {mc.stat().st_size / 2**20:.1f} MiB")
        tr, dt, retained, peak = _measure(mc, "mooncake-sessions")
        _report(
            "mooncake-sessions (block mode, prefix chaining)", tr, dt, retained, peak, _plain(mc, "mooncake-sessions")
        )


if __name__ == "__main__":
    main()
