"""How many local worker processes a run needs: `--workers auto`, planned from the token rate.

What one process can hold is a token rate, not a number of streams: each token a stream gets is
a read, and each request an accounting and a send (docs/load-shapes.md, "Worker processes"). The
planned rate is the planned concurrent streams times the tokens/s each is expected to get from
the server (`--stream-rate`, default STREAM_RATE). `auto` runs one process per
TOKENS_PER_PROCESS of it, and one per STREAMS_PER_PROCESS streams when that is more (a stream's
and a request's own costs: 1,000 streams at 20 tokens/s each were too many for one process),
never more workers than the machine has cores less one (the master's).

TOKENS_PER_PROCESS was measured on this project's 2-core machine (benchmarks/README.md, "One
process's ceiling"): against the simulator (10 ms iterations: 100 tokens/s a stream, 100 tokens a
request), the simulator and the client each on a core of its own, one process judged its own
figures valid at 150 streams (14,100 tokens/s, 35% of a core: first tokens read with the second
0-0.7%, send delay p99 45 ms) and suspect at 200 (18,700 tokens/s: send delay p99 53 ms, 3.4%).

The planned concurrency: a closed loop's users; a concurrency ladder's top step; a rate
ladder's top rate times a request's expected length (max tokens at the stream rate, or 10 s);
a replay's --max-in-flight when set (else one process: a trace's own peak is not known yet).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from llm_locust.settings.ladder_spec import parse_ladder
from llm_locust.settings.limits import MAX_STREAMS_PER_PROCESS

TOKENS_PER_PROCESS = 14_000
STREAMS_PER_PROCESS = 500
STREAM_RATE = 50.0  # tokens/s a stream is taken to get when --stream-rate is not given
DEFAULT_REQUEST_S = 10.0


CALIBRATION_FILE = "calibration.json"  # under the user's config dir: `llm-locust calibrate --write`


def calibration_path() -> Path:
    """Where `llm-locust calibrate --write` keeps this machine's ceiling: $XDG_CONFIG_HOME (else
    ~/.config)/llm-locust/calibration.json."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "llm-locust" / CALIBRATION_FILE


def ceiling() -> tuple[int, str]:
    """(tokens/s one process holds, where that figure comes from): the calibrated one when the
    user's config holds one (`llm-locust calibrate --write`), else the built-in TOKENS_PER_PROCESS.
    A file that cannot be read is said in the source, never a traceback: the built-in is used."""
    path = calibration_path()
    if not path.exists():
        return TOKENS_PER_PROCESS, "built-in"
    try:
        doc = json.loads(path.read_text())
        value = int(doc["tokens_per_process"])
        if value <= 0:
            raise ValueError("tokens_per_process must be > 0")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return TOKENS_PER_PROCESS, f"built-in; {path} unreadable ({type(e).__name__}: {e})"
    return value, f"calibrated, {path}"


def stream_rate(settings) -> float:
    """Tokens/s one stream is expected to get: --stream-rate, else STREAM_RATE."""
    return float(getattr(settings, "stream_rate", 0.0) or STREAM_RATE)


def planned_concurrency(settings) -> int:
    if settings.ladder:
        ld = parse_ladder(settings.ladder)
        top = max(ld.levels)
        if ld.kind == "concurrency":
            return int(top)
        if ld.kind == "rate":
            seconds = settings.max_tokens / stream_rate(settings) if settings.max_tokens else DEFAULT_REQUEST_S
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
    if not streams:  # a replay (or a speed ladder) without --max-in-flight: its peak is the trace's
        return 0, "auto: one process (a replay's concurrency is its trace's: --max-in-flight or --workers plan more)"
    rate = streams * stream_rate(settings)
    per_process, source = ceiling()
    need = max(math.ceil(rate / per_process), math.ceil(streams / STREAMS_PER_PROCESS), 1)
    most = max(cores - 1, 1)
    load = (
        f"{streams} planned concurrent streams x {stream_rate(settings):g} tokens/s = {rate:,.0f} tokens/s; "
        f"one process takes ~{per_process:,} tokens/s ({source}) and ~{STREAMS_PER_PROCESS} streams"
    )
    if need <= 1:
        return 0, f"auto: one process ({load})"
    if most < 2:
        return 0, f"auto: one process ({load}: {need} wanted, but {cores} cores leave one)"
    n = min(need, most)
    return n, f"auto: {n} workers ({load}; {cores} cores)"


def local_problem(settings, n_workers: int, cores: int | None = None) -> str | None:
    """Why `llm-locust run` cannot take this load on this machine, or None: more known concurrent
    streams (a closed loop's users, a concurrency ladder's top step) a local process than
    MAX_STREAMS_PER_PROCESS (settings.limits: 20,000 users in one process sent one request in 4 s)."""
    if settings.ladder:
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
