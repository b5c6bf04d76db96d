"""`llm-locust run --grid isl=A,B:osl=C,D`: the plan's ladder or SLA search once per cell of input
and output lengths, as `--repeat` runs a plan N times (cli.run_repeated): each cell is a normal
run in its own process, on a synthetic workload whose every request has the cell's lengths
(`--synthetic ...,input=ISL,output=OSL`; the plan's other synthetic keys kept), writing
RESULTS.cell-islISL-oslOSL.json (and .html with --report). Then the grid results file (one row
per cell: report/grid_table.py), the table printed, and with --report the grid's page with heatmaps.

Why separate processes: a cell is exactly the run a user would make by hand with those lengths
(its own results, report and re-run), and the run path stays untouched.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

from llm_locust.children import Children, child_env, ended, stop_status
from llm_locust.report.files import write_atomic
from llm_locust.report.grid_table import cell_row, format_grid, grid_doc, render
from llm_locust.report.results import ResultsError, read_results, write_results
from llm_locust.schema import ResultsDoc
from llm_locust.settings.grid_spec import cell_name, parse_grid

# output options a cell writes to a file of its own (PATH.cell-islI-oslO.EXT); the grid's own
# --results and --report are the grid results file and page
_PER_CELL = (("report", "--report"), ("junit", "--junit"), ("record_log", "--record-log"))


def cell_path(path: str, isl: int, osl: int) -> str:
    """PATH.cell-islI-oslO.EXT beside PATH (results.json -> results.cell-isl128-osl64.json)."""
    root, ext = os.path.splitext(path)
    return f"{root}.{cell_name(isl, osl)}{ext}"


def cell_synthetic(synthetic: str, isl: int, osl: int) -> str:
    """The plan's synthetic workload (or the defaults) with every request of the cell's lengths."""
    keep = [p for p in synthetic.split(",") if p.strip() and p.partition("=")[0].strip() not in ("input", "output")]
    return ",".join([*keep, f"input={isl}", f"output={osl}"])


def cell_options(settings: Any, results: str, isl: int, osl: int) -> list[str]:
    """The options that make a run of the plan this cell's run: no grid, the cell's workload and
    its own output files."""
    out = ["--grid", "", "--synthetic", cell_synthetic(settings.synthetic, isl, osl)]
    out += ["--results", cell_path(results, isl, osl)]
    for name, flag in _PER_CELL:
        if getattr(settings, name):
            out += [flag, cell_path(getattr(settings, name), isl, osl)]
    return out


def with_options(argv: list[str], extra: list[str]) -> list[str]:
    """argv with `extra` added where llm-locust reads its options: before a `--` (what follows it
    is Locust's), so later values win over the plan's and the command line's."""
    if "--" in argv:
        i = argv.index("--")
        return [*argv[:i], *extra, *argv[i:]]
    return [*argv, *extra]


def _context(settings: Any, argv: list[str], plan: Any, results: str) -> dict[str, Any]:
    """What every cell shared, kept in the grid results; the effective plan as the grid's (its
    workload the plan's synthetic, its outputs the grid's)."""
    if isinstance(plan, dict):
        plan = {**plan, "grid": settings.grid, "results": results, "report": settings.report}
        workload = {**(plan.get("workload") or {}), "trace": ""}
        if settings.synthetic:
            workload["synthetic"] = settings.synthetic
        plan["workload"] = workload
    return {
        "ladder": settings.ladder,
        "slos": dict(settings.slo),
        "synthetic": settings.synthetic,
        "gpus": settings.gpus,
        "gpu_hour_price": settings.gpu_hour_price,
        "command": ["llm-locust", "run", *argv],
        "plan": plan,
    }


def _cell_line(k: int, n: int, row: dict[str, Any]) -> str:
    unit = row.get("unit") or ""
    knee = "not found" if row["knee_load"] is None else f"{row['knee_load']:g} {unit}".rstrip()
    if row["sla_load"] is None:
        sla = ""
    elif row.get("sla_lower_bound"):  # no higher load broke an SLO: the limit lies at or above it
        top = "the search's highest probe" if str(row.get("sla_how")).startswith("search") else "the ladder's top step"
        sla = f"; highest load meeting every SLO at least {row['sla_load']:g} {unit} ({top} met every SLO)"
    else:
        sla = f"; highest load meeting every SLO {row['sla_load']:g} {unit}".rstrip()
    return f"grid cell {k}/{n} isl={row['isl']} osl={row['osl']}: knee {knee}{sla}; results {row['results']}"


def _run_cell(
    children: Children, cmd: list[str], env: dict[str, str], path: str, phase: str
) -> tuple[int | None, ResultsDoc | str]:
    """One cell's run, a child of the grid: (exit status, its results or why there are none);
    (None, "") when a signal came before it started."""
    if os.path.exists(path):
        os.unlink(path)  # an earlier grid's file must not stand in for this cell's
    code = children.run(cmd, env, phase=phase)
    if code is None:
        return None, ""
    try:
        return code, read_results(path)
    except ResultsError as e:
        return code, str(e)


def _cell_cmd(argv: list[str], settings: Any, results: str, isl: int, osl: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        *with_options(argv, cell_options(settings, results, isl, osl)),
    ]


def run_grid(argv: list[str], settings: Any, child_extra: dict[str, str]) -> int:
    """Every cell in turn (ISL outer, OSL inner); a cell that writes no results stops the grid
    (the same would befall the rest). Each cell is a child of the grid (llm_locust.children): a
    SIGINT or SIGTERM stops the running cell and the grid, whose results then hold the cells that
    wrote theirs, marked interrupted. Exit status: 130 / 143 interrupted; else the highest of the
    cells' (1: a cell's gate failed, e.g. its SLA search found no load meeting the SLOs), 0 when all
    passed."""
    grid = parse_grid(settings.grid)
    results = settings.results or os.path.join(tempfile.mkdtemp(prefix="llm-locust-grid-"), "grid.json")
    env = child_env(child_extra)
    os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)  # a cell's workload is written there first
    cells = grid.cells()
    print(f"grid: {len(cells)} cells ({grid.spec()}), each runs --ladder {settings.ladder}", flush=True)
    rows: list[dict[str, Any]] = []
    plan, worst, started = None, 0, time.time()
    with Children() as children:
        for k, (isl, osl) in enumerate(cells, 1):
            path = cell_path(results, isl, osl)
            phase = f"grid cell {k} of {len(cells)} (isl={isl} osl={osl})"
            code, doc = _run_cell(children, _cell_cmd(argv, settings, results, isl, osl), env, path, phase)
            if code is None:
                break
            if isinstance(doc, str):
                if children.interruption is not None:
                    break
                print(
                    f"llm-locust: grid cell isl={isl} osl={osl} {ended(code)} without results ({doc}): stopped",
                    file=sys.stderr,
                )
                return stop_status(code)
            if children.interruption is None:
                worst = max(worst, code)
            plan = plan or doc.get("plan")
            row = cell_row(doc, isl, osl, path, code)
            row["report"] = cell_path(settings.report, isl, osl) if settings.report else ""
            rows.append(row)
            print(_cell_line(k, len(cells), row), flush=True)
            if children.interruption is not None:
                break
        context = _context(settings, argv, plan, results)
        context.update(started_at=started, ended_at=time.time(), planned_cells=len(cells))
        if children.interruption is not None:
            context["interrupted"] = children.interruption.to_dict()
        _write_grid(settings, results, grid_doc(grid.spec(), rows, context))
        if children.interruption is not None:
            stop = children.interruption
            print(f"llm-locust: exit {stop.exit_code}: interrupted by {stop.signal}", file=sys.stderr)
            return stop.exit_code
    return worst


def _write_grid(settings: Any, results: str, doc: dict[str, Any]) -> None:
    """The grid results file, the table printed, the page with --report."""
    write_results(results, doc)
    print(format_grid(doc), flush=True)
    print(f"grid results written to {results}", flush=True)
    if settings.report:
        write_atomic(settings.report, render(doc, base=os.path.dirname(os.path.abspath(settings.report))))
        print(f"grid report written to {settings.report}", flush=True)
