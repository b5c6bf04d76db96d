"""What one finished request's fold costs (Aggregate.add), this checkout against a baseline tree.

Adds N synthetic finished requests (bench_series_memory.records: `--tokens` tokens 10-30 ms apart,
jittered) to a fresh Aggregate, best of `--repeat`, in a child process per tree (so each imports
its own llm_locust), and prints the microseconds per request of each and their ratio; then the
size of one worker report of them (to_wire, msgpack) and the master's merge of it.

Run:  python benchmarks/bench_fold_cost.py --baseline DIR [--records 20000] [--tokens 64] [--repeat 5] [--rounds 3]
(the trees alternated `--rounds` times; each figure the best of its tree's rounds)
DIR: another checkout (e.g. `git archive <commit> | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time
root, n, tokens, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sys.path[:0] = [root, root + "/benchmarks"]
import msgpack
import bench_series_memory as b
from llm_locust.metrics.aggregate import Aggregate
recs = list(b.records(n, 50.0, tokens))
best = float("inf")
for _ in range(repeat):
    agg = Aggregate()
    t = time.perf_counter()
    for r in recs:
        agg.add(r)
    best = min(best, time.perf_counter() - t)
wire = agg.to_wire()
t = time.perf_counter()
Aggregate().merge_wire(wire)
merge = time.perf_counter() - t
print(json.dumps({"add_us": best / n * 1e6, "wire_kb": len(msgpack.packb(wire, use_bin_type=True)) / 1e3,
                  "merge_ms": merge * 1e3}))
"""


def measure(root: str, records: int, tokens: int, repeat: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, root, str(records), str(tokens), str(repeat)],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,  # bench_series_memory imports llm_locust from the current directory
        env={**os.environ, "PYTHONPATH": root},
    )
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="another checkout's root")
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    here = os.getcwd()
    roots = {"baseline": os.path.abspath(a.baseline), "this tree": here}
    got: dict[str, list[dict]] = {k: [] for k in roots}
    for _ in range(a.rounds):  # alternated, the best of each: a shared machine's noise is one-sided
        for name, root in roots.items():
            got[name].append(measure(root, a.records, a.tokens, a.repeat))
    base, ours = ({k: min(d[k] for d in got[name]) for k in got[name][0]} for name in roots)
    for name, d in (("baseline", base), ("this tree", ours)):
        print(
            f"{name:<10} add {d['add_us']:.1f} us/request, report {d['wire_kb']:.0f} kB, merge {d['merge_ms']:.1f} ms"
        )
    print(
        f"ratio      add {ours['add_us'] / base['add_us']:.2f}, report {ours['wire_kb'] / base['wire_kb']:.2f}, "
        f"merge {ours['merge_ms'] / base['merge_ms']:.2f}"
    )


if __name__ == "__main__":
    main()
