"""`llm-locust run | sim`: a thin layer over Locust.

`run` starts the simulated server when no --host is given, then hands the command line to
Locust's own main (headless unless --web), so every Locust option passes through.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from llm_locust.settings.model import Settings
    from llm_locust.sim.process import SimProcess


class _Defaults(TypedDict):
    """`llm-locust run`'s closed-loop defaults."""

    users: int
    run_time: str


DEFAULTS: _Defaults = {"users": 8, "run_time": "15s"}  # a closed loop under `llm-locust run` (plain Locust: its own)
LOCUSTFILES = {"closed": "closed.py", "replay": "replay.py", "ladder": "ladder.py"}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _has(passthrough: list[str], *options: str) -> bool:
    return any(a == o or a.startswith(o + "=") for a in passthrough for o in options)


def _write_synthetic(settings) -> str:
    """Generate the workload and write it as a trace beside the results (or in a temp folder)."""
    import os
    import tempfile

    from llm_locust.workload.prefix_dist import law_line, parse_prefix_dist
    from llm_locust.workload.rate_curve import parse_rate_curve
    from llm_locust.workload.synth import generate, parse_spec_text, write

    spec = parse_spec_text(settings.synthetic)
    if settings.prefix_hit:  # every prompt begins with the same block of R x N tokens (hash 0), then its own
        from dataclasses import replace

        spec = replace(spec, prefix_tokens=max(1, round(settings.prefix_hit * int(spec.input))))
    if settings.results:
        path = f"{os.path.splitext(settings.results)[0]}.workload.jsonl"
    else:
        path = os.path.join(tempfile.mkdtemp(prefix="llm-locust-"), "workload.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # the results' folder, made as they are
    curve = parse_rate_curve(settings.rate_curve) if settings.rate_curve else None
    law = parse_prefix_dist(settings.prefix_dist) if settings.prefix_dist else None
    write(generate(spec, curve, law), path, spec, curve, law)
    if law is not None:
        print(law_line(law, spec.requests), flush=True)
    print(f"synthetic workload written to {path}", flush=True)
    return path


def _read_settings(argv: list[str]):
    """(settings, Locust's own options) from `[PLAN.yaml | RESULTS.json] [options]`; SettingsError
    (exit 2) for any bad value or unknown option, before anything starts. A file's values that
    need trust are dropped unless --trust-plan (settings.sources); a re-run writes beside its source."""
    from llm_locust.cli_args import check_passthrough, check_ports, option_strings
    from llm_locust.settings import derive

    path = ""
    if argv and not argv[0].startswith("-") and argv[0].endswith((".yaml", ".yml", ".json")):
        path, argv = argv[0], argv[1:]
    if any(a in ("-h", "--help") for a in argv[: argv.index("--") if "--" in argv else len(argv)]):
        from llm_locust.cli_args import locust_help_options

        derive.run_parser(locust_help_options()).parse_args(["--help"])  # prints the help, exits 0
    parser = derive.run_parser()
    namespace, passthrough = parser.parse_known_args(argv)
    cli = derive.cli_values(namespace)
    plan = _read_plan(path, cli) if path else None
    settings = derive.resolve(plan, cli)
    check_passthrough(passthrough, option_strings(parser), settings.locustfile)
    check_ports(passthrough)
    if settings.mlflow and not _installed("mlflow"):  # said now, not at the end of a long run
        raise ValueError("--mlflow: the MLflow client is not installed: pip install 'llm-locust[mlflow]'")
    return settings, passthrough


def _run_series(argv: list[str], settings: Settings) -> int:
    """`--repeat N` (run_repeated) or `--grid` (one run of the ladder per ISL/OSL cell:
    llm_locust.grid_runs), each run a child process; the series' own files checked first."""
    _check_series_outputs(settings, argv)
    if settings.repeat > 1:
        return run_repeated(argv, settings)
    from llm_locust.grid_runs import run_grid

    return run_grid(argv, settings, {_REPETITION_ENV: "1"})


def _check_series_outputs(settings: Settings, argv: list[str]) -> None:
    """`--repeat` and `--grid` write their combined results and report themselves, after their
    children: refused before the first child runs (ValueError) when either is a link, a device,
    an input or the other, as a single run refuses its own before any load."""
    from llm_locust.report.files import check_outputs, plan_path

    outputs = {"--results": settings.results, "--report": settings.report}
    inputs = {"the plan": plan_path(["llm-locust", "run", *argv])}
    if settings.trace:
        inputs["--trace"] = settings.trace
    check_outputs(outputs, inputs)


def _installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (mlflow's import takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_REPETITION_ENV = "LLM_LOCUST_REPETITION"  # set in a repetition's process (run_repeated)


def _read_plan(path: str, cli):
    """The plan file's values as this run may take them, the lines that say what was dropped or
    moved printed: a file is data (settings.sources), a re-run never writes over its source."""
    import os

    from llm_locust.settings import derive, sources
    from llm_locust.settings.units import PlanError

    if path.endswith(".json"):  # a results file: run its effective plan again
        from llm_locust.report.results import read_results

        data = read_results(path).get("plan")
        if not isinstance(data, dict):
            raise PlanError([f"{path}: no effective plan in these results"])
        plan = derive.plan_values(data, source=path, written=True)
        plan, moved = sources.rerun_outputs(path, plan, cli)
    else:
        plan, moved = derive.load_plan(path), ""
    plan, ignored = sources.untrusted(plan, cli, trust=bool(cli.values.get("trust_plan")))
    for line in ignored if not os.environ.get(_REPETITION_ENV) else []:  # said once, not again by each repetition
        print(line, file=sys.stderr, flush=True)
    if moved:
        print(moved, flush=True)
    return plan


def run(argv: list[str]) -> int:
    import os

    from llm_locust.settings import derive
    from llm_locust.settings.handoff import Handoff, RunOnly, hand_off
    from llm_locust.settings.units import PlanError
    from llm_locust.settings.workers import choose, local_problem

    try:
        settings, passthrough = _read_settings(argv)
        n_workers, workers_why = choose(settings)
        problem = local_problem(settings, n_workers)
        if problem:
            raise ValueError(problem)
        if settings.repeat > 1 or settings.grid:
            return _run_series(argv, settings)
        if settings.prefix_hit:  # flush before the load, prime with each user's first request (warm-up)
            settings = settings.model_copy(
                update={"reset_cache": "repeat", "warmup_requests": max(1, settings.warmup_requests)}
            )
        if settings.synthetic:
            replay = settings.replay or bool(settings.rate_curve)  # a rate curve is an open loop
            # the written trace carries the curve's arrivals and the drawn prefixes (its recipe,
            # TRACE.spec.json, the curve and the law)
            trace = _write_synthetic(settings)
            written = {"synthetic": "", "trace": trace, "replay": replay, "rate_curve": "", "prefix_dist": ""}
            settings = settings.model_copy(update=written)
        gate = _baseline_gate(settings)
        settings = gate.run_settings
    except (PlanError, OSError, ValueError) as e:
        print(f"llm-locust: {e}", file=sys.stderr)
        return 2
    mode = settings.mode
    if settings.workers == "auto":
        from llm_locust.report.summary import fit, width

        print("\n".join(fit([f"workers: {workers_why}"], width())), flush=True)
    settings = settings.model_copy(update={"workers": n_workers})
    locustfile = settings.locustfile or str(resources.files("llm_locust.locustfiles") / LOCUSTFILES[mode])
    run_only: RunOnly = {
        "workers": settings.workers,
        "sim_slots": settings.sim_slots,
        "sim_fast": settings.sim_fast,
        "sim_graded_accuracy": settings.sim_graded_accuracy,
        "locustfile": settings.locustfile,
        "workers_why": workers_why,
        "stream_rate": settings.stream_rate,
        "web_keep_open": settings.web_keep_open,  # else --web ends the run when its test ends (runtime.webui)
    }
    sim = None
    host = settings.host
    from llm_locust.protocols import GRPC_APIS

    if not host and settings.api in GRPC_APIS:
        print(
            f"llm-locust: --api {settings.api} needs --host (the gRPC server's address); the built-in simulator "
            "speaks HTTP only",
            file=sys.stderr,
        )
        return 2
    if not host:
        sim = _start_sim(settings)
        host = sim.url
        run_only["sim_started"] = True
        print(f"no --host given: started the simulated server at {host}", flush=True)
    if settings.overlong_share and not settings.overlong_tokens:
        with_ctx = _with_overlong_tokens(settings, host)
        if with_ctx is None:
            if sim is not None:
                sim.stop()
            return 2
        settings = with_ctx
    hand_off(Handoff(command=["llm-locust", "run", *argv], run_only=run_only))  # one typed object to Locust's processes
    locust_argv = ["locust", "-f", locustfile, "--host", host, "--only-summary"]
    locust_argv += _load_argv(settings, mode) + _process_argv(settings, passthrough)
    locust_argv += derive.to_locust_argv(settings) + passthrough
    from locust.main import main as locust_main

    sys.argv = locust_argv
    parent = os.getpid()
    try:
        locust_main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        # --workers: Locust forks its workers from this process, and each returns here too; the
        # simulator is the parent's (a worker's stop of it waited 10 s, the worker left behind)
        if sim is not None and os.getpid() == parent:
            sim.stop()
    if os.getpid() != parent:
        return code
    return gate.judge(code)


@dataclass(frozen=True)
class _BaselineGate:
    """`run --baseline BASE.json` of one run: the run writes its results (to a file of its own when
    --results is not given) and no JUnit file; then compare's regression gate, by the one run's 95%
    intervals (docs/compare.md "Noise"), judges them against the baseline and writes the JUnit
    file. Without --baseline, the run is unchanged and its exit status stands."""

    run_settings: Settings
    baseline: str = ""
    results: str = ""
    tolerance: str = "5%"
    junit: str = ""
    made: float = field(default_factory=time.time)

    def judge(self, code: int) -> int:
        """The run's exit status, or the gate's when the run ended by itself: an interrupted run
        (130 / 143) is kept, not judged; a run whose results are missing is not judged either."""
        import os

        if not self.baseline or code in (130, 143):
            return code
        if not os.path.exists(self.results) or os.path.getmtime(self.results) < self.made - 1:
            print("llm-locust: the run wrote no results: nothing for --baseline's gate to judge", file=sys.stderr)
            return code or 1
        from llm_locust.report.compare import main as compare_main

        cargs = [self.baseline, self.results, "--fail-on", "regression", "--tolerance", self.tolerance]
        if self.junit:
            cargs += ["--junit", self.junit]
        return max(code, compare_main(cargs))


def _baseline_gate(settings: Settings) -> _BaselineGate:
    """The single run's --baseline gate (run_repeated has the series' own)."""
    import os
    import tempfile

    if not settings.baseline:
        return _BaselineGate(settings)
    results = settings.results or os.path.join(tempfile.mkdtemp(prefix="llm-locust-baseline-"), "results.json")
    run_settings = settings.model_copy(update={"results": results, "junit": ""})
    return _BaselineGate(run_settings, settings.baseline, results, settings.tolerance, settings.junit)


def _start_sim(settings: Settings) -> SimProcess:
    """The built-in simulator for a run without --host (answering a graded set's items, if any)."""
    from llm_locust.sim.process import SimProcess

    graded: dict[str, Any] = {}
    if settings.graded:  # the simulator answers the set's items, right at --sim-graded-accuracy
        from llm_locust.workload.graded import resolve_path

        graded = {
            "graded_set": str(resolve_path(settings.graded)),
            "graded_accuracy": settings.sim_graded_accuracy,
            "seed": settings.seed,
        }
    cache: dict[str, Any] = {"prefix_cache": True} if settings.prefix_hit else {}  # --prefix-hit: a cache
    sim = SimProcess(slots=settings.sim_slots, fast=settings.sim_fast, own_session=True, **graded, **cache)
    sim.start()
    return sim


def _with_overlong_tokens(settings: Settings, host: str) -> Settings | None:
    """--overlong-share without --overlong-tokens: the server's context plus 10% (None: it says none)."""
    from llm_locust.transport.served import context_length

    ctx = context_length(host, settings.api_key)
    if ctx is None:
        print(
            f"llm-locust: --overlong-share: the server at {host} says no context length (/v1/models "
            "max_model_len, /props n_ctx): give --overlong-tokens N",
            file=sys.stderr,
        )
        return None
    settings = settings.model_copy(update={"overlong_tokens": ctx + max(16, ctx // 10)})
    print(
        f"overlong mix: the server's context is {ctx} tokens: {settings.overlong_tokens}-token prompts "
        f"for {settings.overlong_share:.0%} of the requests",
        flush=True,
    )
    return settings


def _load_argv(settings: Settings, mode: str) -> list[str]:
    """Locust's -u/-r/-t: closed runs get defaults; replays and ladders set their own load and end."""
    if mode == "closed":
        users = settings.users or DEFAULTS["users"]
        return [
            "-u",
            str(users),
            "-r",
            f"{settings.spawn_rate or users:g}",
            "-t",
            settings.run_time or DEFAULTS["run_time"],
        ]
    out: list[str] = []
    for flag, value in (("-u", settings.users), ("-r", settings.spawn_rate), ("-t", settings.run_time)):
        if value is not None:
            out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return out


def _process_argv(settings: Settings, passthrough: list[str]) -> list[str]:
    """Locust's web/headless and worker-process flags, unless given through."""
    out: list[str] = []
    if settings.web:
        if not _has(passthrough, "--web-host"):
            out += ["--web-host", "127.0.0.1"]
    else:
        out.append("--headless")
    if settings.workers:
        out += ["--processes", str(settings.workers)]
        if not _has(passthrough, "--master-bind-port"):
            port = str(_free_port())  # not Locust's fixed 5557: runs side by side must not collide
            out += ["--master-bind-port", port, "--master-port", port]
        if not _has(passthrough, "--master-bind-host"):
            out += ["--master-bind-host", "127.0.0.1"]
    return out


def _rep_path(results: str, k: int, ext: str = ".json") -> str:
    import os

    root, _ = os.path.splitext(results)
    return f"{root}.rep{k}{ext}"


def _rep_options(settings, path: str, k: int) -> list[str]:
    """What makes the plan repetition k's run: one run, no hook, no gate, its own files."""
    extra = ["--repeat", "1", "--reset-hook", "", "--baseline", "", "--tolerance", "5%", "--junit", ""]
    extra += ["--results", path]
    if settings.report:
        extra += ["--report", _rep_path(settings.report, k, ".html")]
    if settings.record_log:  # a run's record log starts fresh: each repetition its own, as its results
        import os

        extra += ["--record-log", _rep_path(settings.record_log, k, os.path.splitext(settings.record_log)[1])]
    return extra


def _reset(children, hook: str, k: int) -> int | None:
    """The reset hook before repetition k, a child of the series: None when it ran (or a signal
    stopped it: the series stops), else the exit status that stops the series (1)."""
    code = children.run(["/bin/sh", "-c", hook], phase=f"the reset hook before repetition {k}")
    if code in (0, None) or children.interruption is not None:
        return None
    print(f"llm-locust: the reset hook exited {code} before repetition {k}: stopped", file=sys.stderr)
    return 1


def run_repeated(argv: list[str], settings) -> int:
    """`llm-locust run --repeat N`: the same plan N times, each a normal run in its own process
    (RESULTS.repK.json), the reset hook before each; then the combined results (headline figures'
    means and 95% t-intervals, docs/verdicts.md) and, with --baseline, compare's regression gate.
    Each repetition is a child of the series (llm_locust.children): a SIGINT or SIGTERM stops the
    running one and the series, and what finished is combined, marked interrupted (exit 130 / 143)."""
    import os
    import tempfile

    from llm_locust.analysis.repeats import FRESH_SIM, NOT_RESET, rep_line
    from llm_locust.children import Children, child_env, ended, stop_status
    from llm_locust.report.results import ResultsError, read_results

    n = settings.repeat
    results = settings.results or os.path.join(tempfile.mkdtemp(prefix="llm-locust-repeat-"), "results.json")
    if settings.reset_hook:
        reset = f"reset before each repetition by: {settings.reset_hook}"
    elif not settings.host:
        reset = FRESH_SIM
    else:
        reset = NOT_RESET
    print(f"repeat: {n} repetitions; {reset}", flush=True)
    env = child_env({_REPETITION_ENV: "1"})
    docs, files = [], []
    worst = 0  # the highest exit status of a repetition that still wrote its results
    with Children() as children:
        for k in range(1, n + 1):
            if settings.reset_hook and (stop := _reset(children, settings.reset_hook, k)) is not None:
                return stop
            path = _rep_path(results, k)
            if os.path.exists(path):
                os.unlink(path)  # an earlier series' file must not stand in for this repetition's
            argv_k = [sys.executable, "-m", "llm_locust.cli", "run", *argv, *_rep_options(settings, path, k)]
            code = children.run(argv_k, env, phase=f"repetition {k} of {n}")
            if code is None:  # a signal came before it started
                break
            try:
                doc = read_results(path)
            except ResultsError as e:  # the run wrote no results: nothing to count, the series stops
                if children.interruption is not None:
                    break
                print(f"llm-locust: repetition {k}/{n} {ended(code)} without results ({e}): stopped", file=sys.stderr)
                return stop_status(code)
            if code != 0 and children.interruption is None:  # e.g. Locust's 1 when a request failed
                print(f"llm-locust: repetition {k}/{n} exited {code}; its results are kept", file=sys.stderr)
                worst = max(worst, code)
            docs.append(doc)
            files.append(path)
            print(rep_line(k, n, doc, path), flush=True)
            if children.interruption is not None:
                break
        return _write_repeated(argv, settings, results, reset, docs, files, children) or worst


def _write_repeated(argv, settings, results: str, reset: str, docs, files, children) -> int:
    """The combined results of the repetitions that wrote theirs (marked interrupted after a
    signal), their report, and --baseline's gate (not for an interrupted series: its figures are
    kept, never judged). Exit status: 130 / 143 interrupted, 1 the gate failed or the counts do not
    add up, else 0."""
    from llm_locust.analysis.repeats import combine, format_repeats
    from llm_locust.report.accounting import count_problems
    from llm_locust.report.results import write_results

    n, stop = settings.repeat, children.interruption
    if not docs:
        if stop is not None:
            print(
                f"llm-locust: exit {stop.exit_code}: interrupted by {stop.signal} ({stop.phase}) "
                "before any repetition wrote results: no combined results",
                file=sys.stderr,
            )
            return stop.exit_code
        return 1
    combined = combine(docs, files, reset, planned=n)
    combined["run"]["command"] = ["llm-locust", "run", *argv]
    plan = combined.get("plan")
    if isinstance(plan, dict):
        plan["repeat"] = {**(plan.get("repeat") or {}), "count": n, "reset_hook": settings.reset_hook}
    if stop is not None:
        combined["run"]["interrupted"] = stop.to_dict()
        combined["gates"] = []  # an interrupted series is kept, not judged
    write_results(results, combined)  # counts that do not add up are logged and carried in the file
    mismatch = count_problems(combined)  # ... and fail the series (report.accounting)
    print(format_repeats(combined["repeats"]), flush=True)
    if stop is not None:
        print(
            f"INTERRUPTED by {stop.signal} ({stop.phase}): {len(docs)} of {n} repetitions combined; "
            "figures kept, not judged",
            flush=True,
        )
    print(f"combined results written to {results}", flush=True)
    if settings.report:
        from llm_locust.report.html import main as report_main

        report_main([results, "-o", settings.report])
    if stop is not None:
        print(f"llm-locust: exit {stop.exit_code}: interrupted by {stop.signal}", file=sys.stderr)
        return stop.exit_code
    if settings.baseline:
        from llm_locust.report.compare import main as compare_main

        cargs = [settings.baseline, results, "--fail-on", "regression", "--tolerance", settings.tolerance]
        if settings.junit:
            cargs += ["--junit", settings.junit]
        return compare_main(cargs) or int(bool(mismatch))
    return int(bool(mismatch))


USAGE = """usage: llm-locust COMMAND ...

  run                load-test a server (default: the built-in simulator)
  sim                start the simulated server
  trace record       record production traffic as a trace (streaming-transparent proxy)
  trace anonymize    turn a trace with text into a length-and-hash-only one
  trace synth        write a synthetic workload as a trace file
  gpu-sidecar        export NVML GPU figures to Prometheus (--fake N without a GPU)
  report RESULTS     write a self-contained HTML report of one run
  compare A B ...    runs side by side and a weighted decision matrix (--weights W.yaml)
  export FORMAT IN   a run in another format: llmd (the llm-d Benchmark Report), parquet
  suite stress       burst, zigzag, microburst, churn, long context, soak: PASS/FAIL/SKIP each
  calibrate          measure the tokens/s one process holds here (--write: --workers auto uses it)
"""


TRACE_USAGE = """usage: llm-locust trace {record,anonymize,synth} ...

  record      a streaming-transparent proxy that writes production traffic as a trace
  anonymize   a trace with text -> lengths and prefix hashes only
  synth       a seeded synthetic workload written as a trace

`llm-locust trace SUBCOMMAND --help` for each one's options.
"""


def _agentic_help(argv: list[str]) -> list[str]:
    """`trace synth --agentic --help`: --agentic takes a value, so argparse read --help as a missing
    one and failed; the help asked for is the agentic one (its keys), as `--agentic '' --help` gives."""
    if "--agentic" in argv and any(a in ("-h", "--help") for a in argv):
        i = argv.index("--agentic")
        if i + 1 == len(argv) or argv[i + 1].startswith("-"):
            return [*argv[: i + 1], "", *argv[i + 1 :]]
    return argv


def trace(argv: list[str]) -> int:
    # asyncio tools: never import locust (gevent monkey-patching) on these paths
    sub, rest = (argv[0], argv[1:]) if argv else ("", [])
    if sub in ("-h", "--help"):
        print(TRACE_USAGE)
        return 0
    if sub == "record":
        from llm_locust.tools.record_proxy import main as record_main

        return record_main(rest)
    if sub == "anonymize":
        from llm_locust.tools.anonymize import main as anonymize_main

        return anonymize_main(rest)
    if sub == "synth":
        from llm_locust.workload.synth import main as synth_main

        return synth_main(_agentic_help(rest))
    print(f"llm-locust trace: expected record, anonymize or synth, got {sub!r}\n{TRACE_USAGE}", file=sys.stderr)
    return 2


class _SafeStream:
    """A text stream whose every write is made terminal-safe (safe/terminal.py, lines kept): the
    one choke point between what a command prints and the terminal, whatever a server or a file
    put in the text. The rest of the stream (flush, fileno, encoding ...) is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        from llm_locust.safe.terminal import terminal_safe

        self._stream.write(terminal_safe(text, lines=True))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _terminal_safe_streams(live_panel: bool) -> None:
    """Every command's stdout and stderr through `_SafeStream`; `run`'s too unless they are a
    terminal, where its live panel (rich) draws with escapes of its own: there each text a server
    or a file supplies is escaped where it is printed (safe/terminal.py)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _SafeStream):
            continue
        if live_panel and stream.isatty():
            continue
        setattr(sys, name, _SafeStream(stream))


def main(argv: list[str] | None = None) -> int:
    """Exit status: the command's; 2 for a missing or unknown command (the usage on stderr)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        from importlib.metadata import version

        print(f"llm-locust {version('llm-locust')} (locust {version('locust')})")
        return 0
    cmd, rest = argv[0], argv[1:]
    _terminal_safe_streams(live_panel=cmd == "run")
    if cmd == "run":
        return run(rest)
    if cmd == "sim":
        from llm_locust.sim.options import main as sim_main

        return sim_main(rest)
    if cmd == "trace":
        return trace(rest)
    if cmd == "report":
        from llm_locust.report.html import main as report_main

        return report_main(rest)
    if cmd == "compare":
        from llm_locust.report.compare import main as compare_main

        return compare_main(rest)
    if cmd == "export":
        from llm_locust.report.export import main as export_main

        return export_main(rest)
    if cmd == "suite":
        from llm_locust.stress_suite import main as suite_main

        return suite_main(rest)
    if cmd == "calibrate":
        from llm_locust.calibrate import main as calibrate_main

        return calibrate_main(rest)
    if cmd == "gpu-sidecar":
        from llm_locust.gpu.sidecar import main as sidecar_main

        return sidecar_main(rest)
    print(f"llm-locust: unknown command {cmd!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
