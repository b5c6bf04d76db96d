#!/usr/bin/env python3
"""Run the test suite by tiers (tests/tiers.py says which test is in which), lint and types first.

    python scripts/suite.py            # everything: lint, types, then every tier (the README's test command)
    python scripts/suite.py fast       # the developer's loop: lint, types, the fast tier and the slow
                                       # tier's quick modules (under 3 min on 2 cores)
    python scripts/suite.py lint       # ruff and mypy only (seconds)
    python scripts/suite.py TIER ...   # some tiers: fast, timing, slow, real (-- PYTEST ARGS passed on)

Each tier is one pytest run, with its own parallelism: the fast tier (in-process tests) on every core;
the slow tier (tests that start processes and mostly wait on them: the CLI, Locust runs, clusters,
the simulator, Chromium) several at a time; the timing tier (wall-clock assertions) alone; the
real-server tier (llama-server, vLLM: CPU-bound) in two shards, nothing else beside them, whose
tests with wall-clock or load figures run alone while the other shard waits (tests/alone.py). Each
writes a JUnit file under test-reports/, and at the end this prints the slowest tests and the time
per tier, from those files.
Exit status: non-zero when lint, types or any test failed.

Parallel by shards, not pytest-xdist: Locust monkey-patches the process with gevent when a test
imports it, and an xdist worker then blocks forever on its own channel (gevent's LoopExit). Each
shard is a plain pytest process given whole modules (tests/tiers.py `shard`, balanced by the
seconds tests/durations.json records; `--save-durations` rewrites it from this run's JUnit files).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "test-reports"
# Each pytest process its own temporary directory: pytest keeps the last three of the shared
# /tmp/pytest-of-USER/pytest-N and deletes older ones, even while another session still uses it
# (a concurrent session's tmp_path vanished mid-test: results.json and the cwd gone).
BASETEMP = Path(os.environ.get("TMPDIR", "/tmp")) / f"llm-locust-suite-{os.getpid()}"
CORES = os.cpu_count() or 2
ANY = "slow or cluster or browser or timing or real_server"
ALONE_DIR = "LLM_LOCUST_ALONE_DIR"  # tests/alone.py: where a tier's shards take turns


@dataclass
class Tier:
    """One pytest run over the tests a mark expression selects."""

    name: str
    select: str
    workers: int  # pytest processes at once, each a shard of the tier's modules; 0 or 1: one process
    why: str
    modules: tuple[str, ...] = ()  # only these test files (none: every file)
    turns: bool = False  # its shards take turns around `timing` tests (tests/alone.py)


TIERS = {
    "fast": Tier("fast", f"not ({ANY})", CORES, "in-process tests, on every core"),
    "timing": Tier("timing", "timing and not real_server", 0, "wall-clock assertions, alone"),
    # Their processes mostly wait (runs of fixed length, ladders' steps): two shards a core. Three
    # a core (6 here) went red on a different load-sensitive test in each of three fresh-clone
    # runs once the tier grew to 552 tests (the hostile matrix, the series' signal runs).
    "slow": Tier(
        "slow",
        "(slow or cluster or browser) and not timing and not real_server",
        max(4, 2 * CORES),
        "processes of their own, several at a time",
    ),
    # Modules dealt to two shards by their seconds (those of the shared vLLM server together:
    # tests/tiers.py SHARED_VLLM), every server one busy thread, and nothing else of the suite
    # beside them (docs/testing.md). Their tests whose figures move with
    # the CPU they get (a knee, an SLA answer, a send's lateness, per-window counters) broke in turn
    # beside the other shard on 2 cores: they run alone, the other shard waiting (tests/alone.py),
    # among their module's tests and on its servers (a step of their own started vLLM twice more).
    "real": Tier(
        "real",
        "real_server",
        2,
        "real inference servers in two shards, `timing` tests alone",
        turns=True,
    ),
}
ORDER = ["fast", "timing", "slow", "real"]
# The developer's loop adds the slow tier's quick modules: a simulator or a server started once,
# then many short tests (test_sim_server: 51 tests in 8 s). Quick: under this many seconds in all,
# as tests/durations.json recorded them.
QUICK_MODULE_S = 10.0


def quick_tier() -> Tier:
    """The slow tier's modules that tests/durations.json says take under QUICK_MODULE_S in all."""
    path = ROOT / "tests" / "durations.json"
    slow = json.loads(path.read_text()).get("slow", {}) if path.exists() else {}
    modules = tuple(m for m, secs in sorted(slow.items()) if secs < QUICK_MODULE_S and (ROOT / m).exists())
    why = f"the slow tier's quick modules ({len(modules)}: under {QUICK_MODULE_S:.0f} s each, tests/durations.json)"
    return Tier("quick", TIERS["slow"].select, CORES, why, modules)


@dataclass
class Outcome:
    """What one step printed at the end: its name, wall time, exit status and the tests' figures."""

    name: str
    wall_s: float
    rc: int
    tests: list[tuple[str, float, str]] = field(default_factory=list)  # (test id, seconds, result)
    why: list[str] = field(default_factory=list)  # a line per failed test: its id and its failure's message
    alone: set[str] = field(default_factory=set)  # the tests that ran alone, the other shards waiting


def lint() -> list[Outcome]:
    """ruff (rules and format) and mypy: each a few seconds, and a failure stops the suite."""
    steps = [
        ("ruff check", [sys.executable, "-m", "ruff", "check", "."]),
        ("ruff format", [sys.executable, "-m", "ruff", "format", "--check", "--quiet", "."]),
        ("mypy", [sys.executable, "-m", "mypy"]),
    ]
    out = []
    for name, cmd in steps:
        t0 = time.monotonic()
        rc = subprocess.call(cmd, cwd=ROOT)
        out.append(Outcome(name, time.monotonic() - t0, rc))
        print(f"[suite] {name}: {'ok' if rc == 0 else 'FAILED'} ({time.monotonic() - t0:.1f} s)", flush=True)
    return out


def run_tier(tier: Tier, extra: list[str]) -> Outcome:
    """One tier: `tier.workers` pytest processes at once, each its shard of the tier's modules (or one
    process in the foreground); their JUnit files read back for the summary."""
    REPORTS.mkdir(exist_ok=True)
    BASETEMP.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", tier.select]
    base += ["-o", "junit_family=xunit1", *extra, *tier.modules]  # xunit1: each case names its file
    print(f"[suite] tier {tier.name}: {tier.why}", flush=True)
    t0 = time.monotonic()
    if tier.workers <= 1:
        junit = REPORTS / f"{tier.name}.xml"
        junit.unlink(missing_ok=True)
        cmd = [*base, f"--junitxml={junit}", f"--basetemp={BASETEMP / tier.name}"]
        print(f"[suite] $ {' '.join(cmd[1:])}", flush=True)
        rc = _ok_if_empty(subprocess.call(cmd, cwd=ROOT))
        return Outcome(tier.name, time.monotonic() - t0, rc, read_junit(junit), failures(junit))
    procs = []
    env = dict(os.environ)
    if tier.turns:  # one lock directory for the tier's shards: `timing` tests take their turn alone
        env[ALONE_DIR] = str(BASETEMP / f"{tier.name}-turns")
    for k in range(1, tier.workers + 1):
        junit, log = REPORTS / f"{tier.name}-{k}.xml", REPORTS / f"{tier.name}-{k}.log"
        junit.unlink(missing_ok=True)
        cmd = [
            *base,
            f"--shard={k}/{tier.workers}:{tier.name}",
            f"--junitxml={junit}",
            f"--basetemp={BASETEMP / f'{tier.name}-{k}'}",
        ]
        with open(log, "wb") as out:
            procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT), junit, log))
    print(f"[suite] $ {' '.join(base[1:])} --shard=K/{tier.workers}:{tier.name} (output in {REPORTS.name}/)")
    rc, tests, why, alone = 0, [], [], set()
    for proc, junit, log in procs:
        code = _ok_if_empty(proc.wait())
        rc = rc or code
        tests += read_junit(junit)
        why += failures(junit)
        alone |= read_alone(junit)
        print(_tail(log, code), flush=True)
    return Outcome(tier.name, time.monotonic() - t0, rc, tests, why, alone)


def _ok_if_empty(rc: int) -> int:
    """pytest's 5 (no test selected, e.g. a -k matching none of a shard) is not a failure."""
    return 0 if rc == 5 else rc


def _tail(log: Path, rc: int) -> str:
    """A shard's last line, or everything from its failures on when it failed."""
    lines = log.read_text(errors="replace").splitlines()
    if rc == 0:
        return f"[suite]   {log.name}: {lines[-1] if lines else '(no output)'}"
    marks = ("= FAILURES =", "= ERRORS =")
    start = next((i for i, ln in enumerate(lines) if any(m in ln for m in marks)), max(0, len(lines) - 80))
    return "\n".join([f"[suite]   {log.name} (exit {rc}):", *lines[start:]])


def read_junit(path: Path) -> list[tuple[str, float, str]]:
    """(test id, seconds, result) for every test case of a JUnit file (empty if there is none)."""
    if not path.exists():
        return []
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        result = "passed"
        for kind in ("failure", "error", "skipped"):
            if case.find(kind) is not None:
                result = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
        ident = f"{case.get('file') or case.get('classname', '')}::{case.get('name')}"
        out.append((ident, float(case.get("time") or 0.0), result))
    return out


def read_alone(path: Path) -> set[str]:
    """The ids of a JUnit file's tests that ran alone (conftest.py gives them the property
    ``alone``), as read_junit names them."""
    if not path.exists():
        return set()
    return {
        f"{case.get('file') or case.get('classname', '')}::{case.get('name')}"
        for case in ET.parse(path).getroot().iter("testcase")
        if any(p.get("name") == "alone" for p in case.iter("property"))
    }


def failures(path: Path, width: int = 400) -> list[str]:
    """A line per failed or errored test of a JUnit file: its id and the start of its message, so
    that the end of a long log (what a CI page shows) says what broke, not only that it did."""
    if not path.exists():
        return []
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            bad = case.find(kind)
            if bad is not None:
                message = " ".join((bad.get("message") or bad.text or "").split())
                ident = f"{case.get('file') or case.get('classname', '')}::{case.get('name')}"
                out.append(f"  {ident}: {message[:width]}")
    return out


def summary(outcomes: list[Outcome], started: float, slowest: int = 30) -> str:
    """The tests each tier ran (by module), the slowest over all tiers, then one line per step:
    tests by result, wall and test time."""
    lines = []
    for o in outcomes:
        if o.tests:
            per: dict[str, int] = {}
            for ident, _, _ in o.tests:
                module = Path(ident.split("::")[0]).stem
                per[module] = per.get(module, 0) + 1
            listed = ", ".join(f"{m} {n}" for m, n in sorted(per.items()))
            lines.append(f"[suite] tier {o.name}: {len(o.tests)} tests: {listed}")
    cases = [(secs, ident, o.name) for o in outcomes for ident, secs, _ in o.tests]
    if cases:
        lines.append(f"[suite] the {min(slowest, len(cases))} slowest tests (seconds, tier, test):")
        for secs, ident, name in sorted(cases, reverse=True)[:slowest]:
            lines.append(f"  {secs:7.1f}  {name:<6}  {ident}")
    lines.append("[suite] per step:  tests  passed  failed  skipped   wall s   test s")
    for o in outcomes:
        counts = {k: sum(1 for t in o.tests if t[2] == k) for k in ("passed", "failed", "error", "skipped")}
        test_s = sum(t[1] for t in o.tests)
        status = "ok" if o.rc == 0 else f"FAILED (exit {o.rc})"
        lines.append(
            f"  {o.name:<12} {len(o.tests):>5}  {counts['passed']:>6}  {counts['failed'] + counts['error']:>6}  "
            f"{counts['skipped']:>7}  {o.wall_s:>7.1f}  {test_s:>7.1f}  {status}"
        )
    why = [line for o in outcomes for line in o.why]
    if why:
        lines.append(f"[suite] {len(why)} failed (test: the start of its message):")
        lines += why
    total = sum(len(o.tests) for o in outcomes)
    lines.append(f"[suite] {total} tests in {time.monotonic() - started:.0f} s (wall, lint and types included)")
    return "\n".join(lines)


def save_durations(outcomes: list[Outcome]) -> None:
    """tests/durations.json: {tier: {module path: seconds}}, this run's tiers replacing theirs; for a
    tier whose shards take turns, also {"TIER-alone": {module path: seconds of its tests that ran
    alone}} (tests/tiers.py `shard` deals by the rest: the time alone stops every shard alike)."""
    path = ROOT / "tests" / "durations.json"
    table = json.loads(path.read_text()) if path.exists() else {}
    for o in outcomes:
        if o.name not in TIERS or not o.tests:
            continue
        per: dict[str, float] = {}
        alone: dict[str, float] = {}
        for ident, secs, _ in o.tests:
            module = ident.split("::")[0]
            per[module] = round(per.get(module, 0.0) + secs, 1)
            if ident in o.alone:
                alone[module] = round(alone.get(module, 0.0) + secs, 1)
        table[o.name] = dict(sorted(per.items()))
        if TIERS[o.name].turns:
            table[f"{o.name}-alone"] = dict(sorted(alone.items()))
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"[suite] wrote {path.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="*", default=["all"], help="all, fast, lint, or tiers: " + ", ".join(ORDER))
    parser.add_argument("--no-lint", action="store_true", help="skip ruff and mypy")
    parser.add_argument(
        "--save-durations",
        action="store_true",
        help="write each tier's seconds per module to tests/durations.json (what shards are dealt by)",
    )
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    what = args.what
    tiers = ORDER if what == ["all"] else [] if what == ["lint"] else [t for t in what if t in TIERS]
    loop = what == ["fast"]  # the developer's loop: the fast tier and the slow tier's quick modules
    unknown = [w for w in what if w not in TIERS and w not in ("all", "lint")]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)} (all, fast, lint, {', '.join(ORDER)})")
    started = time.monotonic()
    outcomes = [] if args.no_lint else lint()
    if any(o.rc for o in outcomes):
        print("[suite] lint or types failed: fix them first (no test was run)", flush=True)
        print(summary(outcomes, started))
        return 1
    for name in tiers:
        outcomes.append(run_tier(TIERS[name], extra))
    if loop and quick_tier().modules:
        outcomes.append(run_tier(quick_tier(), extra))
    print(summary(outcomes, started), flush=True)
    if args.save_durations:
        save_durations(outcomes)
    if not any(o.rc for o in outcomes):
        shutil.rmtree(BASETEMP, ignore_errors=True)  # kept when something failed, for its files
    return 1 if any(o.rc for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
