"""`llm-locust suite stress`: burst, zigzag, microburst, connection churn, a long-context case and
a short soak, each a plan under plans/stress/, each run as a child process of the suite (as
`--repeat`'s repetitions: llm_locust.children), each judged PASS, FAIL or SKIP with its reason
(llm_locust.analysis.stress). Then one results file (DIR/suite.json), one page holding every case
(DIR/report.html, each case's own report linked) and a text table. docs/stress-suite.md.

Without --host, the suite starts the built-in simulator once per case, not once for the suite:
each case starts against an idle server with an empty queue and cache (a soak's or a burst's
backlog never leaks into the next case's baseline, as `--repeat` restarts it between
repetitions), a fault given with `--sim-fault CASE:SPEC=RATE` reaches that case alone, and each
plan's `sim:` keys apply to its own case. A start costs about a second. The simulator serves a
context of SIM_CONTEXT tokens, as a mid-sized model does: the long-context case (80,000 tokens)
is SKIPped there, and runs against a server whose context holds it.

Exit status: 0 every case PASS or SKIP, 1 any FAIL, 2 bad usage, 130 / 143 interrupted (what
finished is written, marked interrupted).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_locust.analysis import stress
from llm_locust.analysis.stress import FAIL, SKIP, Verdict
from llm_locust.children import Children, child_env, ended
from llm_locust.grid_runs import with_options
from llm_locust.report.files import write_atomic
from llm_locust.report.results import ResultsError, read_results
from llm_locust.report.suite_page import render
from llm_locust.settings import derive
from llm_locust.settings.ladder_spec import parse_ladder
from llm_locust.settings.units import run_time_seconds
from llm_locust.sim.options import fault_arg
from llm_locust.sim.process import SimProcess
from llm_locust.workload.synth import parse_spec_text

SIM_CONTEXT = 65_536  # tokens: the built-in simulator's context (its /v1/models max_model_len) in the suite
LIMIT_FACTOR, LIMIT_MARGIN_S = 2.0, 60.0  # a case is stopped past 2 x its planned length + 60 s
PLANS = Path(__file__).resolve().parent.parent / "plans" / "stress"


@dataclass(frozen=True)
class Case:
    """A case: its name, its plan file (under --plans) and how its results are judged
    (results doc, the tokens one request needs) -> Verdict."""

    name: str
    plan: str
    judge: Callable[[Mapping[str, Any], int], Verdict]
    what: str


CASES: tuple[Case, ...] = (
    Case("burst", "burst.yaml", lambda d, n: stress.judge_burst(d), "an 8x burst for 4 s, then recovery"),
    Case("zigzag", "zigzag.yaml", lambda d, n: stress.judge_swings("zigzag", d), "rate swings 1 <-> 8/s"),
    Case(
        "microburst", "microburst.yaml", lambda d, n: stress.judge_swings("microburst", d), "three 1 s spikes at 16/s"
    ),
    Case("churn", "churn.yaml", lambda d, n: stress.judge_churn(d), "connection churn: half cancelled mid-reply"),
    Case("long-context", "long-context.yaml", stress.judge_long_context, "80,000-token prompts"),
    Case("soak", "soak.yaml", lambda d, n: stress.judge_soak(d), "a short soak: 40 s in 10 s windows"),
)
NAMES = tuple(c.name for c in CASES)

USAGE = f"""usage: llm-locust suite stress [--host URL] [--cases NAME,...] [--out DIR]
                             [--sim-fault [CASE:]SPEC=RATE ...] [--plans DIR] [--case-reports]
                             [-- RUN OPTIONS]

Runs the stress cases ({", ".join(NAMES)}), each a plan under plans/stress/ run as
`llm-locust run PLAN` in a child process, and judges each PASS, FAIL or SKIP (docs/stress-suite.md).
Writes DIR/CASE.json per case (and DIR/CASE.html with --case-reports), DIR/suite.json and
DIR/report.html (all cases).
Exit status: 0 all PASS or SKIP, 1 any FAIL, 2 bad usage, 130 / 143 interrupted.
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-locust suite stress",
        usage="llm-locust suite stress [options] [-- RUN OPTIONS]",
        description=USAGE.split("\n\n", 1)[1],
    )
    p.add_argument("--host", default="", help="the server (default: the built-in simulator, started per case)")
    p.add_argument("--cases", default="", help=f"the cases to run, comma-separated (default all: {','.join(NAMES)})")
    p.add_argument("--out", default="", help="the folder for every file (default: stress-YYYYmmdd-HHMMSS)")
    p.add_argument("--plans", default=str(PLANS), help="the folder of the case plans (default: %(default)s)")
    p.add_argument(
        "--case-reports",
        action="store_true",
        help="each case's own HTML report too (DIR/CASE.html; ~15 s of CPU each: off by default)",
    )
    p.add_argument(
        "--sim-fault",
        action="append",
        default=[],
        metavar="[CASE:]SPEC=RATE",
        help="a fault of the built-in simulator (llm-locust sim --fault), for one case or every case",
    )
    return p


class UsageError(ValueError):
    """Bad usage: exit 2, one line."""


def _cases(text: str) -> list[Case]:
    if not text:
        return list(CASES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names:
        raise UsageError(f"--cases: unknown case {', '.join(unknown) or repr(text)} (cases: {', '.join(NAMES)})")
    return [c for c in CASES if c.name in names]


def _faults(given: list[str], host: str) -> dict[str, list[str]]:
    """{case or '': [SPEC=RATE, ...]} ('' for every case), each checked as `llm-locust sim` does."""
    if given and host:
        raise UsageError("--sim-fault: faults are the built-in simulator's; with --host there is none")
    out: dict[str, list[str]] = {}
    for text in given:
        case, sep, spec = text.partition(":")
        if not sep or case not in NAMES:  # no case prefix (stall@K:SECONDS holds a colon of its own)
            case, spec = "", text
        try:
            fault_arg(spec)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"--sim-fault {text}: {e}") from None
        out.setdefault(case, []).append(spec)
    return out


def _out_dir(text: str) -> Path:
    """The output folder: made if missing; refused when it is a link or not a folder."""
    path = Path(text or time.strftime("stress-%Y%m%d-%H%M%S"))
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UsageError(f"--out {path}: not a folder (a link, a file or a device)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {path}: {e.strerror or e}") from None
    return path


def _plan_settings(plan: Path, run_options: list[str]):
    """The case's effective settings (its plan and the run options given after --)."""
    parser = derive.run_parser()
    namespace, _ = parser.parse_known_args(run_options)
    return derive.resolve(derive.load_plan(plan), derive.cli_values(namespace))


def _planned_s(settings) -> float:
    """The case's planned length in seconds (its ladder's, or its run time), for its time limit."""
    if settings.ladder:  # the parent of the series imports no Locust (runtime.shapes would)
        return parse_ladder(settings.ladder, warmup=settings.warmup, duration=settings.step_duration).planned_time()[1]
    return run_time_seconds(settings.run_time or "") or 60.0


def _needed_tokens(settings) -> int:
    """Tokens one request of the case needs: its longest prompt plus max_tokens."""
    if not settings.synthetic:
        return 0
    spec = parse_spec_text(settings.synthetic)
    longest = max((int(x) for x in re.findall(r"\d+", str(spec.input))), default=0)
    return longest + int(settings.max_tokens or spec.output or 0)


@dataclass
class Suite:
    """What every case shares: the options, the output folder, the run options, the children."""

    host: str
    out: Path
    plans: Path
    faults: dict[str, list[str]]
    run_options: list[str]
    children: Children
    case_reports: bool = False


def _start_sim(suite: Suite, case: Case, settings):
    faults = suite.faults.get("", []) + suite.faults.get(case.name, [])
    sim = SimProcess(
        slots=settings.sim_slots, fast=settings.sim_fast, kv_tokens=SIM_CONTEXT, fault=faults, own_session=True
    )
    sim.start()
    return sim, faults


def _run_case(suite: Suite, case: Case) -> dict[str, Any]:
    """One case: its server (the simulator, or --host), the long-context check, its run as a
    child, its verdict; the row kept in the suite's results."""
    plan = suite.plans / case.plan
    settings = _plan_settings(plan, suite.run_options)
    needed, limit = _needed_tokens(settings), _planned_s(settings) * LIMIT_FACTOR + LIMIT_MARGIN_S
    results, report = suite.out / f"{case.name}.json", suite.out / f"{case.name}.html"
    row: dict[str, Any] = {"case": case.name, "plan": str(plan), "what": case.what, "results": "", "report": ""}
    t0 = time.monotonic()
    try:
        sim, faults = _start_sim(suite, case, settings) if not suite.host else (None, [])
    except (RuntimeError, OSError) as e:  # said as the case's verdict; the suite goes on
        return {**row, **_verdict_row(Verdict(case.name, FAIL, f"the simulator did not start: {e}")), "code": None}
    row["faults"] = faults
    try:
        host = sim.url if sim is not None else suite.host
        if case.name == "long-context" and (skip := _context_skip(host, settings, needed)) is not None:
            return {**row, **_verdict_row(skip), "seconds": time.monotonic() - t0, "code": None}
        if results.exists():
            results.unlink()  # an earlier suite's file must not stand in for this case's
        extra = ["--host", host, "--results", str(results), "--report", str(report) if suite.case_reports else ""]
        cmd = [sys.executable, "-m", "llm_locust.cli", "run", str(plan), *with_options(suite.run_options, extra)]
        code = suite.children.run(cmd, child_env({}), phase=f"case {case.name}", limit_s=limit)
    finally:
        if sim is not None:
            sim.stop()
    row.update(seconds=time.monotonic() - t0, code=code, results=str(results))
    row["report"] = str(report) if report.exists() else ""
    return {**row, **_verdict_row(_judge(case, suite, results, code, needed, limit))}


def _context_skip(host: str, settings, needed: int) -> Verdict | None:
    from llm_locust.transport.served import context_length  # gevent, only when a case asks the server

    ctx = context_length(host, settings.api_key)
    return stress.context_skip(needed, ctx, "/v1/models max_model_len or /props n_ctx")


def _judge(case: Case, suite: Suite, results: Path, code: int | None, needed: int, limit: float) -> Verdict:
    """The case's verdict from its results; a case that wrote none, was stopped at its time limit
    or interrupted says so (FAIL, or SKIP when the suite itself was interrupted)."""
    if code is None:
        return Verdict(case.name, SKIP, "not run: the suite was interrupted", {})
    try:
        doc = read_results(results)
    except ResultsError as e:
        if suite.children.interruption is not None:
            return Verdict(case.name, SKIP, "interrupted before it wrote results", {})
        return Verdict(case.name, FAIL, f"the case's run {ended(code)} without results ({e})", {})
    if suite.children.over_limit:
        return Verdict(case.name, FAIL, f"did not end within its time limit of {limit:.0f} s", {})
    if code == 2:
        return Verdict(case.name, FAIL, "the case's run exited 2 (bad usage)", {})
    verdict = case.judge(doc, needed)
    if suite.children.interruption is not None:  # cut short: figures kept, not judged
        return Verdict(
            case.name, SKIP, f"interrupted: not judged ({verdict.status}: {verdict.reason})", verdict.figures
        )
    return verdict


def _verdict_row(v: Verdict) -> dict[str, Any]:
    return {"status": v.status, "reason": v.reason, "figures": v.figures}


def _write(suite: Suite, rows: list[dict[str, Any]], facts: dict[str, Any]) -> tuple[Path, Path]:
    """DIR/suite.json and DIR/report.html."""
    doc = {"suite": "stress", **facts, "cases": rows}
    path, page = suite.out / "suite.json", suite.out / "report.html"
    write_atomic(path, json.dumps(doc, indent=2, default=str) + "\n")
    write_atomic(page, render(doc, base=str(suite.out.resolve())))
    return path, page


def main(argv: list[str]) -> int:
    """`llm-locust suite stress ...`: the exit status of the suite (module docstring)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] != "stress":
        print(f"llm-locust suite: unknown suite {argv[0]!r} (suites: stress)\n{USAGE}", file=sys.stderr)
        return 2
    rest = argv[1:]
    run_options = rest[rest.index("--") + 1 :] if "--" in rest else []
    args = _parser().parse_args(rest[: rest.index("--")] if "--" in rest else rest)
    try:
        cases, faults, plans = _cases(args.cases), _faults(args.sim_fault, args.host), Path(args.plans)
        missing = [c.plan for c in cases if not (plans / c.plan).is_file()]
        if missing:
            raise UsageError(f"--plans {plans}: no {', '.join(missing)}")
        for c in cases:  # every plan read now: a bad one is refused before any case runs
            _plan_settings(plans / c.plan, run_options)
        out = _out_dir(args.out)
    except (UsageError, ValueError, OSError) as e:
        print(f"llm-locust suite: {e}", file=sys.stderr)
        return 2
    suite = Suite(args.host, out, plans, faults, run_options, Children(), args.case_reports)
    return _run(suite, cases, ["llm-locust", "suite", *argv])


def _run(suite: Suite, cases: list[Case], command: list[str]) -> int:
    host = suite.host
    server = host or f"the built-in simulator, started per case ({SIM_CONTEXT:,}-token context)"
    print(f"stress suite: {len(cases)} cases ({', '.join(c.name for c in cases)}) against {server}", flush=True)
    facts: dict[str, Any] = {"host": host or None, "started_at": time.time(), "planned": [c.name for c in cases]}
    facts["simulator"] = None if host else {"context": SIM_CONTEXT, "faults": suite.faults}
    facts["command"] = command
    rows: list[dict[str, Any]] = []
    with suite.children as children:
        for k, case in enumerate(cases, 1):
            row = _run_case(suite, case)
            rows.append(row)
            print(f"stress case {k}/{len(cases)} {case.name}: {row['status']}: {row['reason']}", flush=True)
            if children.interruption is not None:
                break
        stop = children.interruption
    facts["ended_at"] = time.time()
    facts["interrupted"] = stop.to_dict() if stop is not None else None
    path, page = _write(suite, rows, facts)
    print(stress.format_table(rows), flush=True)
    print(f"suite results written to {path}\nsuite report written to {page}", flush=True)
    if stop is not None:
        print(f"llm-locust: exit {stop.exit_code}: interrupted by {stop.signal}", file=sys.stderr)
        return stop.exit_code
    verdicts = [Verdict(r["case"], r["status"], r["reason"]) for r in rows]
    return stress.exit_status(verdicts)
