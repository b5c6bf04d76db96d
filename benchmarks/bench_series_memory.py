"""Memory of the per-second series against the run's length (issue 24 item 27).

Adds N synthetic finished requests, in process, to two Aggregates (a local run keeps the step's and
the total: runtime/hub.py), as a closed loop would send them: `--rate` requests a second, so N
requests span N / rate seconds of wall clock; each request has a TTFT of 50-250 ms and
`--tokens` tokens 10-30 ms apart (jittered, so the per-second ITL buckets are as many as a real
stream gives). Prints, every 10% of the records, the process's resident memory (from
/proc/self/statm) and the keys the series hold, then the growth per 100k requests and per hour.

Run:  python benchmarks/bench_series_memory.py [--records 1000000] [--rate 50] [--tokens 32]
Run it from another checkout's root to measure that checkout (the package is imported from the
current directory first).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time

sys.path.insert(0, os.getcwd())

from llm_locust.metrics.aggregate import Aggregate  # noqa: E402
from llm_locust.metrics.records import RequestRecord  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def records(n: int, rate: float, tokens: int, seed: int = 1):
    rng = random.Random(seed)
    t0 = 1_000.0
    wall = 1_800_000_000.0 - t0
    for i in range(n):
        t = t0 + i / rate
        first = t + 0.05 + rng.random() * 0.2
        times = [first]
        for _ in range(tokens - 1):
            times.append(times[-1] + 0.01 + rng.random() * 0.02)
        yield RequestRecord(
            request_id=str(i),
            api="openai-completions",
            t_sched=t,
            t_sent=t,
            wall_sent=t + wall,
            t_headers=t + 0.01,
            t_first=first,
            t_first_content=first,
            t_end=times[-1] + 0.001,
            chunk_times=times,
            chunk_tokens=[1] * tokens,
            n_out=tokens,
            n_out_source="usage",
            n_in=100,
            n_in_source="usage",
            requested_out=tokens,
        )


def keys(agg: Aggregate) -> tuple[int, int]:
    return len(agg.series), sum(len(v) for per in agg.by_sent.data.values() for v in per.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=50.0, help="requests per second of wall clock (default 50)")
    ap.add_argument("--tokens", type=int, default=32, help="output tokens per request (default 32)")
    a = ap.parse_args()
    gc.collect()
    base = rss_mib()
    step, total = Aggregate(), Aggregate()
    t_cpu, marks = time.process_time(), []
    every = max(1, a.records // 10)
    print(
        f"{a.records:,} requests at {a.rate:g}/s ({a.records / a.rate / 3600:.1f} h of wall clock), "
        f"{a.tokens} tokens each; RSS before: {base:.1f} MiB",
        flush=True,
    )
    for i, rec in enumerate(records(a.records, a.rate, a.tokens), 1):
        gaps = step.add(rec)
        total.add(rec, gaps=gaps)
        if i % every == 0:
            gc.collect()
            rows, buckets = keys(total)
            marks.append((i, rss_mib()))
            print(
                f"  {i:>10,} requests ({i / a.rate / 3600:5.1f} h): RSS {marks[-1][1]:8.1f} MiB; "
                f"series rows {rows:,}, latency-series bucket keys {buckets:,} (per Aggregate)",
                flush=True,
            )
    (n0, m0), (n1, m1) = marks[len(marks) // 2 - 1], marks[-1]
    per_100k = (m1 - m0) / (n1 - n0) * 100_000
    print(
        f"RSS after: {m1:.1f} MiB (+{m1 - base:.1f}); over the second half: {per_100k:+.2f} MiB per 100k "
        f"requests, {per_100k * a.rate * 3600 / 100_000:+.1f} MiB per hour of run; "
        f"{time.process_time() - t_cpu:.0f} CPU-s",
        flush=True,
    )
    assert total.tokens_out == a.records * a.tokens and sum(r[0] for r in total.series.values()) == total.tokens_out
    return 0


if __name__ == "__main__":
    sys.exit(main())
