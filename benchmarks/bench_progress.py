#!/usr/bin/env python3
"""What the progress view costs the client (issue 27 item 5): CPU per refresh of the live panel
(rich, rendered to a terminal-sized console) and of the plain line, and the share of one core each
takes at its refresh rate. The view reads the hub's counters on its own greenlet; the per-request
path does not know it exists, so this is its whole cost.

    python benchmarks/bench_progress.py [--refreshes 2000]
"""

from __future__ import annotations

import argparse
import io
import time

from rich.console import Console

from llm_locust.loop import progress
from llm_locust.metrics.aggregate import Aggregate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--refreshes", type=int, default=2000)
    n = ap.parse_args().refreshes
    agg = Aggregate()
    agg.sent, agg.tokens_out = 123_456, 9_876_543
    snap = progress._snapshot(42.0, 600.0, "step 3/8 (concurrency 16)", "measuring", agg, 40_000, 812.0)
    console = Console(file=io.StringIO(), width=100, force_terminal=True)
    t0 = time.process_time()
    for _ in range(n):
        console.print(progress.panel(snap))
    live_s = (time.process_time() - t0) / n
    t0 = time.process_time()
    for _ in range(n):
        progress.plain(snap)
    plain_s = (time.process_time() - t0) / n
    print(
        f"live panel: {live_s * 1e6:,.0f} us CPU a refresh, every {progress.LIVE_REFRESH_S:g} s: "
        f"{live_s / progress.LIVE_REFRESH_S:.3%} of a core"
    )
    print(
        f"plain line: {plain_s * 1e6:,.1f} us CPU a line, every {progress.DEFAULT_INTERVAL:g} s: "
        f"{plain_s / progress.DEFAULT_INTERVAL:.5%} of a core"
    )


if __name__ == "__main__":
    main()
