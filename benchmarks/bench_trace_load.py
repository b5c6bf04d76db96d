"""Trace loading speed and memory.

Generates, in a temporary directory, a 1M-row Azure-2024-style CSV (mixed ``+00:00`` timestamp
forms, as in the real week-long files) and a 1M-row Mooncake JSONL (hash_ids of ~10 blocks), each
plain and gzipped, then loads each with and without ``share=(0, 2)`` and prints rows/s and memory:
the bytes the finished `Trace` holds per row (tracemalloc, after loading) and the peak while loading.
Figures only, no asserts.

    python benchmarks/bench_trace_load.py [--rows 1000000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_locust.workload import load_trace  # noqa: E402


def write_azure2024(path: Path, rows: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    t = 0.0
    with open(path, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        buf = []
        for _ in range(rows):
            t += rng.expovariate(45.0)  # ~45 req/s, as the 2024 conversation week
            if rng.random() < 0.05:
                t = float(int(t) + 1)  # a whole second: written without a fraction (the mixed format)
            s = int(t)
            us = int((t - s) * 1e6)
            day, rem = divmod(s, 86400)
            h, rem = divmod(rem, 3600)
            m, sec = divmod(rem, 60)
            frac = f".{us:06d}" if us else ""
            buf.append(
                f"2024-05-{12 + day:02d} {h:02d}:{m:02d}:{sec:02d}{frac}+00:00,"
                f"{rng.randint(1, 8000)},{rng.randint(1, 600)}\n"
            )
            if len(buf) >= 10000:
                f.writelines(buf)
                buf.clear()
        f.writelines(buf)


def write_mooncake(path: Path, rows: int, seed: int = 2) -> None:
    rng = random.Random(seed)
    t = 0.0
    nxt = 0
    with open(path, "w") as f:
        buf = []
        for _ in range(rows):
            t += rng.expovariate(3.4)  # ms steps as in the conversation trace
            n_in = rng.randint(500, 10000)
            nb = -(-n_in // 512)
            hs = list(range(nxt, nxt + nb))
            nxt += nb
            buf.append(
                f'{{"timestamp": {int(t * 1000) // 1000}, "input_length": {n_in}, '
                f'"output_length": {rng.randint(1, 800)}, "hash_ids": {hs}}}\n'
            )
            if len(buf) >= 10000:
                f.writelines(buf)
                buf.clear()
        f.writelines(buf)


def gz(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    with open(path, "rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out


def measure(path: Path, share, repeat: int):
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        tr = load_trace(path, share=share)
        best = min(best, time.perf_counter() - t)
        del tr
    gc.collect()
    tracemalloc.start()
    tr = load_trace(path, share=share)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return tr, best, held, peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    try:
        t = time.perf_counter()
        az = tmp / "azure2024.csv"
        mc = tmp / "mooncake.jsonl"
        write_azure2024(az, a.rows)
        write_mooncake(mc, a.rows)
        files = [az, gz(az), mc, gz(mc)]
        print(
            f"generated {a.rows:,} rows x 2 formats in {time.perf_counter() - t:.1f}s "
            f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus)"
        )
        print(
            f"{'file':<22} {'MB':>6} {'share':>6} {'rows kept':>10} {'s':>6} {'rows/s':>10} "
            f"{'B/row held':>10} {'MB/Mrow held':>12} {'MB/Mrow peak':>12}"
        )
        for f in files:
            for share in (None, (0, 2)):
                tr, secs, held, peak = measure(f, share, a.repeat)
                total = tr.total_rows
                per_row = held / max(1, len(tr))
                print(
                    f"{f.name:<22} {f.stat().st_size / 1e6:>6.1f} {str(share or '-'):>6} {len(tr):>10,} "
                    f"{secs:>6.2f} {total / secs:>10,.0f} {per_row:>10.1f} "
                    f"{held / total * 1e6 / 2**20:>12.1f} {peak / total * 1e6 / 2**20:>12.1f}"
                )
                del tr
        print(
            "rows/s counts every row parsed (a share still reads the whole file); 'held' is what the "
            "Trace keeps (tracemalloc), per kept row and per million file rows; 'peak' the most "
            "memory in use while loading, per million file rows."
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
