"""How many local worker processes a run needs: `--workers auto`.

One client process takes about 55,000 output tokens per CPU-second with every metric on (the
paced benchmark in benchmarks/README.md: ~18 us of CPU a token). A stream paced at a typical
50 tokens/s then costs ~0.1% of a core: one process saturates near 1,100 concurrent streams.
`auto` keeps each process at half of that (STREAMS_PER_PROCESS), so its event loop stays on
time, and never runs more workers than the machine has cores less one (the master's).

The planned concurrency: a closed loop's users; a concurrency ladder's top step; a rate
ladder's top rate times a request's expected length (max tokens at 50 tokens/s, or 10 s);
a replay's --max-in-flight when set (else one process: a trace's own peak is not known yet).
"""

from __future__ import annotations

import math
import os

STREAMS_PER_PROCESS = 500
TOKENS_PER_S_PER_STREAM = 50.0
DEFAULT_REQUEST_S = 10.0


def planned_concurrency(settings) -> int:
    if settings.ladder:
        from llm_locust.settings.ladder_spec import parse_ladder

        ld = parse_ladder(settings.ladder)
        top = max(ld.levels)
        if ld.kind == "concurrency":
            return int(top)
        if ld.kind == "rate":
            seconds = settings.max_tokens / TOKENS_PER_S_PER_STREAM if settings.max_tokens else DEFAULT_REQUEST_S
            return int(math.ceil(top * seconds))
        return settings.max_in_flight or 0
    if settings.replay:
        return settings.max_in_flight or 0
    return settings.users or 8


def choose(settings, cores: int | None = None) -> tuple[int, str]:
    """(workers, why) for `settings.workers`; a number given by the user is kept as it is."""
    if settings.workers != "auto":
        return int(settings.workers), "given"
    cores = cores or os.cpu_count() or 1
    streams = planned_concurrency(settings)
    need = math.ceil(streams / STREAMS_PER_PROCESS) if streams else 1
    most = max(cores - 1, 1)
    if not streams:  # a replay (or a speed ladder) without --max-in-flight: its peak is the trace's
        return 0, "auto: one process (a replay's concurrency is its trace's: --max-in-flight or --workers plan more)"
    if need <= 1 or most < 2:
        why = (
            f"auto: one process ({streams} planned concurrent streams; one process takes ~{STREAMS_PER_PROCESS})"
            if need <= 1
            else f"auto: one process ({streams} planned streams would want {need}, but {cores} cores leave one)"
        )
        return 0, why
    n = min(need, most)
    return (
        n,
        f"auto: {n} workers ({streams} planned concurrent streams, ~{STREAMS_PER_PROCESS} a process, {cores} cores)",
    )


def local_problem(settings, n_workers: int, cores: int | None = None) -> str | None:
    """Why `llm-locust run` cannot take this load on this machine, or None: more known concurrent
    streams (a closed loop's users, a concurrency ladder's top step) a local process than
    MAX_STREAMS_PER_PROCESS (settings.limits: 20,000 users in one process sent one request in 4 s)."""
    from llm_locust.settings.limits import MAX_STREAMS_PER_PROCESS

    if settings.ladder:
        from llm_locust.settings.ladder_spec import parse_ladder

        ld = parse_ladder(settings.ladder)
        if ld.kind != "concurrency":
            return None
        streams, what = int(max(ld.levels)), f"--ladder {settings.ladder}"
    elif settings.replay:
        return None
    else:
        streams, what = settings.users or 8, f"-u/--users {settings.users or 8}"
    processes = max(n_workers, 1)
    if streams <= processes * MAX_STREAMS_PER_PROCESS:
        return None
    cores = cores or os.cpu_count() or 1
    return (
        f"{what}: {math.ceil(streams / processes)} streams a local process ({processes} on {cores} cores), more "
        f"than {MAX_STREAMS_PER_PROCESS}, the most one process runs (it saturates near 1,100): fewer users, more "
        "--workers on a machine with more cores, or a cluster over several machines (README: plain Locust)"
    )
