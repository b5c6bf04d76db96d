"""Sensible limits on the sizes a run may be given, in one place (stated in `llm-locust run --help`).

Past these a run does not measure anything: it ends in MemoryError or an overloaded machine
(issue 24: `-u 1000000` spent minutes at 100% CPU and 3 GB; `--synthetic requests=1e9` and
`--workers 1000` ran out of memory). Each value is refused with a clear line (exit 2) before
anything starts. The limits sit well above any run that gives meaningful figures, so no flag goes
past them: a larger run is a cluster of several machines, each under its own limits.

Measured on a 2-core machine (`llm-locust run -u N -t 4s`, the built-in simulator): one process
took 3,000 users with a 1.6 s loop lag (figures flagged suspect) and 255 MB; 20,000 users sent one
request in 4 s. Generating a synthetic workload of a million requests takes ~4 s and ~250 MB.
Pure: no Locust.
"""

from __future__ import annotations

import os

# concurrent users (closed loop, a concurrency ladder's step, a replay's max in flight) in one run:
# 200 worker processes of ~500 streams each (settings.workers.STREAMS_PER_PROCESS)
MAX_USERS = 100_000
# one local process of `llm-locust run`: ten times what `--workers auto` plans a process for
MAX_STREAMS_PER_PROCESS = 5_000
# a rate ladder's requests per second
MAX_RATE = 100_000.0
# a synthetic workload is generated in memory before the run
MAX_SYNTH_REQUESTS = 1_000_000
# replay passes over the trace window: the schedule holds every pass
MAX_LOOPS = 1_000
# output or prompt tokens of one request: past any model's context
MAX_TOKENS = 10_000_000
# the largest reply header block, event or body a request may be allowed
MAX_LIMIT_BYTES = 1 << 30
# the simulator's batch slots
MAX_SIM_SLOTS = 10_000
# any duration a run is given (-t, a step, a timeout, a think time, a replay window ...): 30 days.
# A soak runs for days; past a month the figures of one run are no longer one measurement, and a
# typo (`-t 1e12s`, `-t 99999999h`) would hold the machine for ever (issue 35)
MAX_SECONDS = 30 * 86_400.0

# --refine: the knee's bracket halves with each refine step: 16 narrow any ladder's far below 1%
MAX_REFINE = 16


def max_local_workers(cores: int | None = None) -> int:
    """Local worker processes `llm-locust run --workers N` may start: twice the cores (at least 4).
    More only share the same cores, and every process's figures go suspect with its loop lag."""
    return max(4, 2 * (cores or os.cpu_count() or 1))
