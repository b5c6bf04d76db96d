"""`llm-locust calibrate`: measure what one client process can hold on this machine, in tokens/s,
and (with --write) keep it in the user's config, where `--workers auto` and each run's ceiling
watch read it (settings/workers.py `ceiling`; docs/load-shapes.md "Worker processes").

A short bounded search: the built-in simulator started once (10 ms iterations: 100 tokens/s a
stream, 100-token replies, its token log on), then one closed-loop run of one process (a child,
under llm_locust.children's signal handling) per step of analysis/calibration.py's STEPS, in
order, each judged by the run's own client-validity verdict and its TTFT error against the
simulator's log (analysis/calibration.py). The search stops at the first step that did not hold,
at a step the simulator could not serve in full, or when the next step would end past --budget
seconds (default 110). --quick: two tiny steps of 2 s (a check that the command works, not a
measurement; never --write).

Exit status: 0 a ceiling was found (and written with --write); 1 none (not even the first step
held); 2 bad usage; 130 / 143 interrupted (nothing written).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llm_locust.analysis import calibration
from llm_locust.children import Children, child_env, ended
from llm_locust.report.files import refuse_special, write_atomic
from llm_locust.settings.workers import calibration_path
from llm_locust.sim.process import SimProcess

BUDGET_S = 110.0  # default: the whole search within about 2 minutes
STEP_S, QUICK_STEP_S = 6, 2  # seconds each step's run sends load
ITER_S = 0.01  # the simulator's iteration: 100 tokens/s a stream
MAX_TOKENS, QUICK_MAX_TOKENS = 100, 20
START_S = 5.0  # a step's own start and end (interpreter, Locust, results), on top of its load


class UsageError(ValueError):
    pass


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0 or value > 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds, more than 0 and at most 3600")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-locust calibrate",
        description="Measure the token rate one llm-locust process holds on this machine, against the built-in "
        "simulator; --write keeps it for --workers auto.",
    )
    p.add_argument("--write", action="store_true", help="save the ceiling to the user's config (calibration.json)")
    p.add_argument("--quick", action="store_true", help="two tiny steps: check the command works (never written)")
    p.add_argument(
        "--budget",
        type=_budget,
        default=BUDGET_S,
        metavar="SECONDS",
        help=f"stop the search by then (default {BUDGET_S:g})",
    )
    return p


def main(argv: list[str]) -> int:
    try:
        a = parser().parse_args(argv)
        if a.quick and a.write:
            raise UsageError("--quick measures nothing worth keeping: give --write without --quick")
        path = _target() if a.write else None
    except (UsageError, OSError) as e:
        print(f"llm-locust calibrate: {e}", file=sys.stderr)
        return 2
    steps = calibration.QUICK_STEPS if a.quick else calibration.STEPS
    seconds = QUICK_STEP_S if a.quick else STEP_S
    max_tokens = QUICK_MAX_TOKENS if a.quick else MAX_TOKENS
    print(
        f"calibrate: one process against the built-in simulator ({calibration.TOKENS_PER_STREAM} tokens/s a stream), "
        f"up to {len(steps)} steps of {seconds} s, within {a.budget:g} s",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="llm-locust-calibrate-") as tmp, Children() as children:
        rows = _search(children, Path(tmp), steps, seconds, max_tokens, a.budget)
        stop = children.interruption
    print(calibration.table(rows), flush=True)
    if stop is not None:
        print(f"calibrate: interrupted by {stop.signal}: nothing written", file=sys.stderr, flush=True)
        return stop.exit_code
    value, how = calibration.ceiling(rows)
    if value is None:
        print(f"calibrate: no ceiling: {how}", flush=True)
        return 1
    print(f"calibrate: one process holds ~{value:,} tokens/s ({how})", flush=True)
    if path is not None:
        return _write(path, value, how, rows)
    print("calibrate: not written (--write keeps it for --workers auto)", flush=True)
    return 0


def _target() -> Path:
    """Where --write goes, checked before any load: a regular file or nothing there (files.refuse_special)."""
    path = calibration_path()
    refuse_special(path)
    return path


def _write(path: Path, value: int, how: str, rows: list[dict[str, Any]]) -> int:
    doc = {"tokens_per_process": value, "how": how, "measured_at": time.time(), "steps": rows}
    try:
        write_atomic(path, json.dumps(doc, indent=2) + "\n")
    except OSError as e:
        print(f"llm-locust calibrate: could not write {path}: {e}", file=sys.stderr)
        return 2
    print(f"calibrate: written to {path} (--workers auto now plans with it)", flush=True)
    return 0


def _search(
    children: Children, tmp: Path, steps: tuple[int, ...], seconds: int, max_tokens: int, budget: float
) -> list:
    """The steps, in order, until one does not hold, falls short, or would end past the budget."""
    t0, last = time.monotonic(), seconds + START_S
    rows: list[dict[str, Any]] = []
    token_log = tmp / "tokens.jsonl"
    sim_process = SimProcess(
        slots=max(steps) + 16,
        iter_base=ITER_S,
        iter_per_seq=0.0,
        iter_per_prefill_token=0.0,
        token_log=str(token_log),
        own_session=True,
    )
    with sim_process as sim:
        for streams in steps:
            if rows and time.monotonic() - t0 + last > budget:
                print(f"calibrate: {streams} streams would end past the budget ({budget:g} s): stopped", flush=True)
                break
            began = time.monotonic()
            print(f"calibrate: {streams} streams for {seconds} s ...", flush=True)
            row = _step(children, tmp, sim.url, streams, seconds, max_tokens, token_log)
            if row is None:  # a signal: the search stops
                break
            last = time.monotonic() - began
            rows.append(row)
            print(f"calibrate: {streams} streams: {'held' if row['held'] else 'did not hold'}", flush=True)
            if not row["held"] or row["short"]:
                break
    return rows


def _step(
    children: Children, tmp: Path, host: str, streams: int, seconds: int, max_tokens: int, token_log: Path
) -> dict[str, Any] | None:
    """One step's run (a child), judged; None when a signal stopped it."""
    records, results, out = tmp / f"records-{streams}.jsonl", tmp / f"r-{streams}.json", tmp / f"run-{streams}.txt"
    argv = [
        *(sys.executable, "-m", "llm_locust.cli", "run", "--host", host, "--api", "openai-completions"),
        *("--model", "llm-locust-sim", "-u", str(streams), "-r", str(streams), "-t", f"{seconds}s"),
        *("--max-tokens", str(max_tokens), "--workers", "0", "--record-log", str(records), "--results", str(results)),
    ]
    with out.open("wb") as f:
        code = children.run(argv, child_env({}), phase=f"step {streams} streams", limit_s=seconds * 4 + 60, output=f)
    if code is None or children.interruption is not None:
        return None
    if not results.exists():
        tail = out.read_text(errors="replace")[-1500:]
        print(f"calibrate: the {streams}-stream run {ended(code)} without results:\n{tail}", file=sys.stderr)
        return calibration.judge_step(streams, None, [], code or 1)
    summary = json.loads(results.read_text())["summary"]
    errors = calibration.ttft_errors(_jsonl(records), _jsonl(token_log))
    return calibration.judge_step(streams, summary, errors, code)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines log, its lines that parse (a line cut by the writer's stop is left out)."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
