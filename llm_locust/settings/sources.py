"""What a plan or a results file may decide by itself, and where a re-run writes.

A plan or a results file is data: someone may send you one. Read without `--trust-plan`, it never
picks the target (host, endpoints, the metrics URLs read during the run), names the environment
variable whose value is sent as the key, runs a command (the reset hook), imports code (a
locustfile), opens the web UI to other sites' pages (web.origins) or names where every request's
record goes (record_log). Those values are dropped and each one is named, with how to allow it:
give it on the command line, or `--trust-plan` to take the file's. Which settings these are is
declared once, by `Opt.trust` in settings.model.

Nor does it choose a path over an existing file: an output the file names (results, report,
junit: `Opt.path == "out"`) where something is already is refused before anything runs (exit 2),
one line each, naming the key, the path and the two ways to allow it. Refused, not moved: a run
that wrote elsewhere would leave the earlier file where a script reads the new one.

`llm-locust run RESULTS.json` never overwrites its source: the outputs the effective plan names
(results, report, record log, JUnit file) that the command line does not move go beside the
source as RESULTS.rerun-K.* (the first K whose files are all free), said in one line.

Pure: no Locust.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from llm_locust.safe.masking import redact_url
from llm_locust.settings.derive import Given
from llm_locust.settings.model import options
from llm_locust.settings.units import PlanError

# a re-run's outputs, beside its source: the file name's tail for each output setting
RERUN_TAILS = {"results": ".json", "report": ".html", "record_log": ".records.jsonl", "junit": ".junit.xml"}
_RERUN_RE = re.compile(r"\.rerun-\d+$")
_RERUN_WHERE = "(a re-run writes beside its source)"


@dataclass
class Sourced:
    """A plan's values as the run may take them, and the lines that say what changed and why."""

    plan: Given
    ignored: list[str] = field(default_factory=list)  # one line per value a file may not decide
    outputs: str = ""  # a re-run's line: where it writes


def untrusted(plan: Given, cli: Given, *, trust: bool) -> tuple[Given, list[str]]:
    """The plan without the values that need trust (Opt.trust) and that the command line does not
    give, and a line for each one dropped; the plan as it is with `trust`. PlanError (before
    anything runs) when an output path the plan chooses is taken (`refuse_taken_outputs`)."""
    if trust:
        return plan, []
    refuse_taken_outputs(plan, cli)
    opts = options()
    values, where, lines = dict(plan.values), dict(plan.where), []
    for name, v in plan.values.items():
        default, opt = opts[name]
        if not opt.trust or name in cli.values or v in (default, "", None) or _rerun_chose(plan, name):
            continue
        del values[name]
        where.pop(name, None)
        flag = opt.flag_for(name)
        lines.append(f"  {opt.plan or name}: {_shown(v)} ({opt.trust}): give {flag} {_shown(v)} to use it")
    if lines:
        head = (
            f"llm-locust: {plan.source or 'the plan'} is data: not taken from it (give each on the command line, "
            "or --trust-plan to take the file's):"
        )
        lines.insert(0, head)
    return Given(values, where, plan.source, plan.problems), lines


def refuse_taken_outputs(plan: Given, cli: Given) -> None:
    """PlanError, one line per output path (Opt.path "out") the plan chooses, the command line
    does not give, and where a file (or anything else) already is: a plan may not choose to
    replace a file. A re-run's outputs (rerun_outputs) are llm-locust's choice, always free."""
    problems = []
    for name, v in plan.values.items():
        opt = options()[name][1]
        if opt.path != "out" or opt.trust or name in cli.values or not v or _rerun_chose(plan, name):
            continue
        if os.path.lexists(str(v)):
            flag = opt.flag_for(name)
            problems.append(
                f"{plan.where.get(name) or opt.plan}: {_shown(v)}: a file is there already, and a plan is data: "
                f"it may not replace a file: give {flag} {_shown(v)} to replace it, or another path, or --trust-plan"
            )
    if problems:
        raise PlanError(problems, plan.source or "")


def _rerun_chose(plan: Given, name: str) -> bool:
    """Whether `name`'s value is a re-run's output path beside its source (rerun_outputs)."""
    return plan.where.get(name, "").endswith(_RERUN_WHERE)


def _shown(v: Any) -> str:
    """A value as a line shows it: a URL's credentials masked (a plan's dropped `mlflow.uri`,
    `host`), quoted when it has spaces, cut at 80 characters."""
    text = redact_url(str(v))
    if len(text) > 80:
        text = text[:77] + "..."
    return repr(text) if (" " in text or not text) else text


def rerun_outputs(source: str, plan: Given, cli: Given) -> tuple[Given, str]:
    """A re-run of RESULTS.json: the outputs the plan names and the command line leaves, moved
    beside the source as RESULTS.rerun-K.* (results always: a re-run keeps its figures), and the
    line that says so. PlanError when an output given on the command line is the source itself."""
    src = os.path.abspath(source)
    for name in RERUN_TAILS:
        given = cli.values.get(name)
        if given and os.path.abspath(str(given)) == src:
            flag = options()[name][1].flag_for(name)
            raise PlanError(
                [
                    f"{flag} {given}: that is the results file this run reads its plan from; it is never "
                    f"overwritten: give another path, or none (the re-run writes {_shown_path(source, src, name)})"
                ],
                "command line",
            )
    moved = [n for n in RERUN_TAILS if n not in cli.values and (n == "results" or plan.values.get(n))]
    if not moved:
        return plan, ""
    k = 1
    while any(os.path.lexists(_beside(src, k, n)) for n in moved):
        k += 1
    values, where = dict(plan.values), dict(plan.where)
    for n in moved:
        values[n] = _beside(src, k, n)
        where[n] = f"{plan.source}: {options()[n][1].plan} {_RERUN_WHERE}"
    shown = ", ".join(_shown_path(source, values[n]) for n in moved)
    line = (
        f"re-run of {source}: writing {shown} (never over the source; "
        f"{', '.join(options()[n][1].flag_for(n) for n in moved)} choose other paths)"
    )
    return Given(values, where, plan.source, plan.problems), line


def _shown_path(source: str, path: str, name: str = "") -> str:
    """A path as the user wrote the source: relative when it was (`name`: the first re-run's)."""
    if name:
        k = 1
        while os.path.lexists(_beside(path, k, name)):
            k += 1
        path = _beside(path, k, name)
    return path if os.path.isabs(source) else os.path.relpath(path)


def _beside(src: str, k: int, name: str) -> str:
    """RESULTS.rerun-K.json and its siblings (a re-run of a re-run counts on: r.rerun-2.json)."""
    root = _RERUN_RE.sub("", os.path.splitext(src)[0])
    return f"{root}.rerun-{k}{RERUN_TAILS[name]}"
