"""Hooks llm-locust into Locust's events: options, metrics hub, end-of-run summary and results.

Imported by `llm_locust.users` (the public module locustfiles import), so any locustfile that uses
our users gets all of this, whether started by `llm-locust run` or by plain `locust -f`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import gevent
import locust.stats
import orjson
from locust import argument_parser, events

from llm_locust.analysis.load_facts import cache_state, first_cached
from llm_locust.loop.failfast import FailFast
from llm_locust.loop.progress import Progress
from llm_locust.loop.session_runner import load_workload
from llm_locust.loop.signals import Stopper
from llm_locust.metrics import histogram, recordlog
from llm_locust.metrics.records import WARMUP_STEP
from llm_locust.protocols import GRPC_APIS, get_adapter
from llm_locust.protocols.base import request_headers
from llm_locust.report import outcome
from llm_locust.report.files import check_outputs, plan_path, run_files, write_atomic
from llm_locust.report.html import render
from llm_locust.report.mlflow_log import log_run
from llm_locust.report.provenance import redact_argv, trace_changed, trace_facts
from llm_locust.report.results import read_results, results_json, write_results
from llm_locust.report.summary import width
from llm_locust.runtime import exporter, replay_shares, shapes
from llm_locust.runtime import precision_stop as precision
from llm_locust.runtime.closed_loop import scenario_failed
from llm_locust.runtime.context import Role, run_context
from llm_locust.runtime.hub import MetricsHub, hub, install
from llm_locust.runtime.replay_shares import ReplayUser
from llm_locust.safe import masking
from llm_locust.safe.terminal import terminal_safe
from llm_locust.schema import Figures, Plan, Precision, Worker, WorkerClock
from llm_locust.settings import derive
from llm_locust.settings.handoff import handoff
from llm_locust.transport import preflight
from llm_locust.transport.checkpoint import Checkpoints, coverage
from llm_locust.transport.probe import probe_server
from llm_locust.transport.scraper import Scraper, server_scrapers
from llm_locust.workload import load_trace
from llm_locust.workload.schedule import ReplayWindow, due_times
from llm_locust.workload.sessions import SessionTrace

log = logging.getLogger(__name__)
_connected = False  # a worker process got its init event: it reached the master


def _warn_while_master_silent(delay: float) -> None:
    """Locust's worker waits for its master silently for the first 30 s: say so sooner."""
    argv = sys.argv
    host = argv[argv.index("--master-host") + 1] if "--master-host" in argv[:-1] else "127.0.0.1"
    port = argv[argv.index("--master-port") + 1] if "--master-port" in argv[:-1] else "5557"
    gevent.sleep(delay)
    while not _connected:
        print(
            f"llm-locust: no answer yet from the master at {host}:{port}; is it running and reachable? "
            "(Locust keeps trying for 5 minutes)",
            file=sys.stderr,
            flush=True,
        )
        gevent.sleep(max(delay, 10.0))


def _server_scraper(environment, settings, url: str):
    """Read the inference server's /metrics (or the GPU sidecar's) while the test runs."""
    if url == "off" or not (url or environment.host):
        return None
    return _run_during_test(
        environment, Scraper(url or environment.host.rstrip("/") + "/metrics", interval=settings.metrics_interval)
    )


def _run_during_test(environment, scraper):
    environment.events.test_start.add_listener(lambda **_kw: scraper.start())
    environment.events.test_stop.add_listener(lambda **_kw: (scraper.scrape_once(), scraper.stop()))
    return scraper


def _server_scrapers(environment, settings) -> dict:
    """{endpoint URL: Scraper}: every endpoint's /metrics (--host first, then --endpoints; the
    first one's URL is --server-metrics when given), or {} with --server-metrics off. The first
    is what `server_metrics` in the results, the web UI and the efficiency table read."""
    if settings.api in GRPC_APIS and not settings.server_metrics:
        return {}  # a gRPC port answers no HTTP/1.1 GET: only a --server-metrics URL is read
    host = (environment.host or "").rstrip("/")
    extra = settings.endpoint_list[1:] if settings.host else settings.endpoint_list
    endpoints = ([host] if host else []) + [e for e in extra if e != host]
    scrapers = server_scrapers(endpoints, settings.server_metrics, settings.metrics_interval)
    return {url: _run_during_test(environment, s) for url, s in scrapers.items()}


def _warn_if_steps_outpace_reads(ladder_controller, *scrapers) -> None:
    """Per-step server and GPU figures need a few reads inside each step's window."""
    interval = max((s.interval for s in scrapers if s is not None), default=0.0)
    if ladder_controller is None or not interval:
        return
    window = ladder_controller.ladder.window
    if window < 3 * interval:
        log.warning(
            "a step's %gs window gets about %d read(s) of the server / GPU metrics every %gs: "
            "give --metrics-interval %g or longer steps for per-step figures to rely on",
            window,
            max(1, int(window / interval)),
            interval,
            window / 4,
        )


def _load(environment, settings) -> dict[str, Any]:
    """How the load was offered: the mode and the Locust figures that shape it."""
    opts = environment.parsed_options
    replay = any(issubclass(u, ReplayUser) for u in environment.user_classes)
    mode = "ladder" if settings.ladder else "replay" if replay else "closed"
    return {
        "mode": mode,
        "users": getattr(opts, "num_users", None),
        "spawn_rate": getattr(opts, "spawn_rate", None),
        "run_time": getattr(opts, "run_time", None),
        "shape": type(environment.shape_class).__name__ if environment.shape_class else None,
    }


def _write_report(path: str, results: dict, secrets: tuple[str, ...], results_path: str = "") -> bool:
    """The HTML report, as `llm-locust report` would write it from the results file."""
    try:
        doc = orjson.loads(results_json(results, secrets, indent=False))  # what a reader of the file gets
        if results_path:
            doc["_path"] = results_path  # as read_results() gives it: the page names the file
        write_atomic(Path(path), render(doc))
    except Exception as e:  # noqa: BLE001 - the run's figures are printed and saved already
        log.error("could not write the HTML report to %s: %s: %s", path, type(e).__name__, e)
        return False
    print(f"report written to {path}", flush=True)
    return True


def _workload_facts(work, settings) -> dict[str, Any]:
    """What the run replays, as kept in run.server (the master's check read the whole file); a
    replay's records due and the seconds until the last one (its progress is counted against them)."""
    if isinstance(work, SessionTrace):
        return {"kind": "sessions", "format": work.format}
    facts: dict[str, Any] = {"kind": "requests", "format": getattr(work, "format", None)}
    if settings.replay and not settings.ladder:
        arrivals = load_trace(settings.trace_path, settings.trace_format or None).arrivals  # all of it: the count
        window = ReplayWindow(settings.speed, settings.start_offset, settings.duration or None, settings.loops)
        due = due_times(arrivals, window)
        facts["planned"] = {"records": len(due), "seconds": due[-1][0] if due else 0.0}
    return facts


def _effective_plan(settings, n_workers: int, mode: str) -> Plan:
    """The plan this run amounts to (re-run it with `llm-locust run RESULTS.json`): the settings,
    and what `llm-locust run` used itself (workers, the simulator, the locustfile)."""
    given = handoff()
    values = {"workers": n_workers, "replay": mode == "replay", **(given.run_only if given else {})}
    if values.pop("workers_why", None):  # chosen by `auto` for this machine: a re-run chooses for its own
        values["workers"] = "auto"
    if values.pop("sim_started", False):
        values["host"] = ""  # the built-in simulator: a re-run starts one again
    # built by each option's plan path (settings.derive, untyped there): Plan's keys
    return cast(Plan, derive.to_plan(settings.model_copy(update=values)))


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw: Any) -> None:
    derive.add_locust_arguments(parser)
    # Safe by default: the web UI and the master's worker port listen on this machine only;
    # --web-host / --master-bind-host open them (docs/security.md).
    parser.set_defaults(web_host="127.0.0.1", master_bind_host="127.0.0.1")


_master_watch: list[gevent.Greenlet] = []  # the worker's one warner, once started


@events.init_command_line_parser.add_listener
def _watch_for_the_master(**_kw: Any) -> None:
    """A worker's: warn while its master stays silent. Nothing starts at import: Locust builds its
    parser after importing the locustfile and before the worker connects (creating the worker
    runner waits for the master; init fires only once connected), the one event in between."""
    if "--worker" in sys.argv and not _master_watch:
        delay = float(os.environ.get("LLM_LOCUST_MASTER_WARN_AFTER", "10"))
        _master_watch.append(gevent.spawn(_warn_while_master_silent, delay))


@events.init.add_listener
def _on_init(environment, **_kw: Any) -> None:
    _cache_locust_defaults()
    histogram.load_numpy()  # not at a worker's first report, with its streams in flight
    run = run_context(environment)
    role = run.role  # decided once, here: Locust made the runner before init; every later read returns it
    # first of the test_start listeners: the start form (master) and a spawn message (worker) have
    # just written Locust's options, and every later listener reads the settings from them
    environment.events.test_start.add_listener(lambda **_kw: run.options_changed())
    h = install(environment)
    replay_shares.install(environment)
    environment.events.user_error.add_listener(scenario_failed)  # a scenario that raises: a counted failure
    if role is Role.WORKER:
        global _connected
        _connected = True
        shapes.install(environment, None)
        return
    _init_runner(environment, h)


def _cache_locust_defaults() -> None:
    """Locust's default options built once a process, not once per option of every spawn message.

    Locust's WorkerRunner.handle_message tells the master's custom options from its own with
    `k not in argument_parser.default_args_dict()` inside a comprehension over every option, and
    each call builds a new argparse parser (~2 ms): with this plugin's 167 options, each spawn
    message (a ladder's step, a user count changed in the web UI) held the worker's event loop
    375 ms while its streams were in flight (benchmarks/README.md, "What one master merges").
    The defaults are Locust's own, fixed for the process; its callers only test membership."""
    real = argument_parser.default_args_dict
    if getattr(real, "cache_info", None) is None:  # once per process
        argument_parser.default_args_dict = functools.cache(real)


def _init_runner(environment, h: MetricsHub) -> None:
    """The master's or the local runner's part: refuse what cannot run before any load, then the
    scrapers, the fail-fast, the web view, the progress line and the end of the run."""
    stopper = Stopper(environment, ladder=lambda: shapes.controller(environment))
    stopper.install()  # before the preflight and a ladder's shape: Ctrl-C / SIGTERM end the run cleanly
    environment.events.test_start.add_listener(lambda **_kw: setattr(stopper, "started", True))
    _refuse_without_target(environment)
    try:  # options and the workload, where they are given, before any load is sent
        settings = run_context(environment).settings
        trace = _check(environment, settings, h)
        exporter.install(environment, settings.prometheus_port, settings.prometheus_host)
        scrapers = _server_scrapers(environment, settings)
        gpu_scraper = _server_scraper(environment, settings, settings.gpu_metrics or "off")
    except (ValueError, OSError) as e:  # TraceError, PlanError, bad SLOs and intervals are ValueErrors
        print(f"llm-locust: {e}", file=sys.stderr, flush=True)
        sys.exit(2)  # SystemExit passes through Locust's event handler guard
    if handoff() is not None and not settings.locust_stats:
        _quiet_locust_tables()  # `llm-locust run`: one latency table, ours (--locust-stats keeps Locust's)
    if _load(environment, settings)["mode"] == "closed":
        # a worker that joins late takes a share of the users, one that leaves hands its share on
        # (Locust's --enable-rebalancing; not for a replay: its shares of the trace are fixed)
        environment.parsed_options.enable_rebalancing = True
    stopper.phase = "during the preflight"
    _preflight(environment, settings)
    if fresh := recordlog.start_fresh(settings.record_log):  # after every refusal: a refused run keeps it
        print(fresh, flush=True)
    stopper.phase = "before the test"
    stopped_early = _install_fail_fast(environment, settings, h)
    precision.install(environment, settings)  # --precision: the run stops once its figures are precise
    h.slos = settings.request_slos
    _warn_if_steps_outpace_reads(shapes.controller(environment), *scrapers.values(), gpu_scraper)
    # the web UI's modules (numpy with them) are imported at init, in each process, as before issue 38's
    # hoisting: never before Locust forks its --processes (a library's threads do not survive a fork)
    from llm_locust.runtime.webui import guard  # at init: see above
    from llm_locust.runtime.webui import install as install_webui  # the "LLM" view on the web UI, when there is one

    if environment.web_ui is not None:
        guard.install(environment.web_ui)  # before any route: the start form's fields and the login
    install_webui(
        environment,
        next(iter(scrapers.values()), None),
        gpu_scraper,
        interrupted=lambda: stopper.interruption is not None,  # --web ends with its test, unless a signal ended it
    )
    server_facts = _during_the_test(environment, settings, h)
    end = _EndOfRun(environment, settings, h, scrapers, gpu_scraper, server_facts, trace, stopper, stopped_early)
    environment.events.quitting.add_listener(end.on_quitting)
    environment.events.quit.add_listener(end.on_quit)
    _checkpoints(environment, settings, h, end)


def _checkpoints(environment, settings, h: MetricsHub, end: _EndOfRun) -> None:
    """--checkpoint-every: the results so far written while each test runs (transport.checkpoint),
    until it stops; the end's write replaces them."""
    cp = Checkpoints(
        settings.results,
        settings.checkpoint_every,
        lambda facts: end.gather(checkpoint=facts),
        secrets=masking.SECRETS.all,
        facts=lambda: coverage(h.workers),
    )
    end.checkpoints = cp
    environment.events.test_start.add_listener(cp.start)
    environment.events.test_stopping.add_listener(cp.stop)
    environment.events.test_stop.add_listener(cp.stop)
    environment.events.quitting.add_listener(cp.stop)


def _quiet_locust_tables() -> None:
    """Locust's end-of-run tables (requests, percentiles, errors by response time in ms without a
    unit, 175 columns wide) printed before our summary: under `llm-locust run` the summary's own
    table says it, in milliseconds, per metric of docs/metrics.md."""
    for name in ("print_stats", "print_percentile_stats", "print_error_report"):
        setattr(locust.stats, name, lambda *_a, **_kw: None)


def _refuse_without_target(environment) -> None:
    """A run without a target would send nothing and pass (the README's cluster lines once did)."""
    if environment.host or all(getattr(u, "host", None) for u in environment.user_classes):
        return
    print(
        "llm-locust: no --host: give the server's URL (e.g. --host http://127.0.0.1:8000), on the master when "
        "there are workers; `llm-locust run` without --host starts the built-in simulator",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(2)


def _check(environment, settings, h: MetricsHub) -> dict[str, Any] | None:
    """What is refused before any load (ValueError / OSError): outputs that cannot be written, the
    workload, the ladder, the overlong mix's options and baseline. Returns the trace's facts (its
    hash taken before the load, not after)."""
    masking.protect(settings.api_key)
    # before any load: no output over an input, another output, a link or a device; all writable
    command = _command()
    outputs, inputs = run_files(settings, plan=plan_path(command))
    check_outputs({**outputs, **recordlog.outputs(settings.record_log, _local_workers(environment))}, inputs)
    # reads and checks the whole file, keeps almost none of it (the senders load their shares)
    work = load_workload(settings.trace_path, settings.trace_format or None, share=(0, 2**31))
    h.info["workload"] = _workload_facts(work, settings)
    shapes.install(environment, settings)  # a bad ladder is refused here
    if settings.overlong_share and not settings.overlong_tokens:
        raise ValueError(
            "--overlong-share needs --overlong-tokens N (a prompt past the server's context): "
            "`llm-locust run` reads the context from the server, plain locust does not"
        )
    if settings.overlong_baseline:
        read_results(settings.overlong_baseline)  # a bad baseline is refused before any load
    return trace_facts(settings.trace_path, settings.trace_format or h.info["workload"].get("format"))


def _local_workers(environment) -> int:
    """How many worker processes this master forks (Locust's --processes; -1: one per core)."""
    n = getattr(environment.parsed_options, "processes", None) or 0
    return (os.cpu_count() or 1) if n == -1 else n


def _install_fail_fast(environment, settings, h: MetricsHub) -> Callable[[], str | None]:
    """The fail-fast watch (loop/failfast.py) on the master or the local runner (workers only
    send), over the hub's merged figures, from each test's start to its stop. Returns what says
    why the run was stopped early (None when it was not)."""

    def stop() -> None:
        runner = environment.runner
        headless = getattr(environment.parsed_options, "headless", False) or environment.web_ui is None
        (runner.quit if headless else runner.stop)()

    watch = FailFast(lambda: h.total, settings.fail_fast_after, settings.fail_fast, stop)
    environment.events.test_start.add_listener(watch.start)
    environment.events.test_stop.add_listener(watch.stop_watching)
    return lambda: watch.reason


def _preflight(environment, settings) -> None:
    """Does the target answer the API? One line and exit 3 (or 2) when it does not."""
    if not (settings.preflight and environment.host):
        return
    headers = request_headers(get_adapter(settings.api), settings.api_key) if settings.api not in GRPC_APIS else {}
    problem = preflight.check(
        environment.host,
        settings.api,
        headers,
        settings.connect_timeout,
        endpoints=preflight.endpoint_apis(settings.api, settings.mix),
    )
    if problem is not None:  # it may quote the server (a gRPC error's details): terminal-safe
        print(f"llm-locust: {terminal_safe(problem.message)}", file=sys.stderr, flush=True)
        sys.exit(problem.code)


def _during_the_test(environment, settings, h: MetricsHub) -> dict[str, Any]:
    """At each test's start: the line saying what runs, the server's probe (its facts land in the
    dict returned) and, headless, the progress line."""
    server_facts: dict[str, Any] = {}

    def at_start(**_kw: Any) -> None:
        line = outcome.describe(settings, _load(environment, settings), environment.host, h.info.get("workload"))
        print(f"llm-locust: {line}", file=sys.stderr, flush=True)
        if environment.host and not server_facts:
            headers = (
                request_headers(get_adapter(settings.api), settings.api_key) if settings.api not in GRPC_APIS else {}
            )
            gevent.spawn(lambda: server_facts.update(probe_server(environment.host, headers)))

    environment.events.test_start.add_listener(at_start)
    if getattr(environment.parsed_options, "headless", False):
        run_time = getattr(environment.parsed_options, "run_time", None) or None
        due = (h.info.get("workload") or {}).get("planned")
        planned = (due["records"], due["seconds"]) if due else None
        progress = Progress(
            environment, h, run_time, settings.progress_interval, planned, ladder=lambda: shapes.controller(environment)
        )
        environment.events.test_start.add_listener(progress.start)
        environment.events.test_stop.add_listener(progress.stop)
    return server_facts


class _EndOfRun:
    """The end of a run on the master or the local runner: what the run left, gathered into an
    outcome.Ended at quitting (the workers' final reports are in), built into an Outcome (its exit
    code set before Locust reads it), then printed and written at quit."""

    def __init__(
        self, environment, settings, h: MetricsHub, scrapers, gpu_scraper, server_facts, trace, stopper, stopped_early
    ) -> None:
        self.env, self.settings, self.h = environment, settings, h
        self.scrapers, self.gpu_scraper, self.server_facts = scrapers, gpu_scraper, server_facts
        self.trace, self.stopper, self.stopped_early = trace, stopper, stopped_early
        self.outcome: outcome.Outcome | None = None
        self.done = False  # printed and written (once, whatever fires quit again)
        self.trace_checked = False  # note_trace: the trace hashed again at the end
        self.checkpoints: Checkpoints | None = None  # --checkpoint-every's writer (_checkpoints)

    def on_quitting(self, **_kw: Any) -> None:
        # A run ended by the time limit or the shape has collected its workers' final reports at
        # test_stop (hub.install); one ended by SIGTERM / Ctrl-C on the master gets here first,
        # while Locust still receives: collect them now, before its quit stops listening.
        h = self.h
        if run_context(self.env).role is Role.MASTER:
            if not h.finals_collected and h.started_at is not None:
                h.collect_final_reports()
            h.account_lost()  # what lost workers had in flight: counted as lost, not dropped
        self.stopper.phase = "shutdown"
        self.note_trace()
        self.outcome = outcome.build(self.gather())
        self.env.process_exit_code = self.outcome.exit_code

    def note_trace(self) -> str | None:
        """The trace checked against its start's hash, once, before the outcome is built: a changed
        one is marked in the results (environment.trace `changed`, and `at_end`: its hash then) and
        fails the run's `trace` gate. The line that says so, or None."""
        facts = self.trace  # the results' environment.trace
        if facts is None or self.trace_checked:
            return None if facts is None else facts.get("changed")
        self.trace_checked = True
        changed = trace_changed(facts)
        if changed:
            facts["changed"] = changed
            end = trace_facts(facts["path"], facts.get("format") or "")
            facts["at_end"] = {k: v for k, v in (end or {}).items() if k in ("sha256", "bytes", "mtime_ns", "error")}
        return changed

    def on_quit(self, **_kw: Any) -> None:
        if self.done:
            return
        self.done = True
        changed = self.note_trace()
        out = self.outcome or outcome.build(self.gather())
        if not out.measured and self.checkpoints is not None:
            self.checkpoints.discard()  # nothing measured: no results file, as without checkpoints
        if out.measured:
            print(out.text(width()), file=sys.stdout, flush=True)
            if changed:
                print(f"llm-locust: warning: {changed}", file=sys.stderr, flush=True)
            if not self.write(out):
                out.exit_code = out.exit_code or outcome.EXIT_GATE  # an interrupted run keeps its 130 / 143
                out.reasons.append("the results or the report could not be written (above)")
        lost = self.h.record_log_failures()  # complete here: the record logs are closed at quitting, before quit
        if lost:
            out.exit_code = out.exit_code or outcome.EXIT_GATE
            out.reasons.extend(lost)
        for line in out.reasons:
            print(f"llm-locust: exit {out.exit_code}: {line}", file=sys.stderr, flush=True)
        if out.exit_code != (self.env.process_exit_code or 0):
            sys.exit(out.exit_code)  # a write failed after Locust read the code: SystemExit passes its guard

    def gather(self, checkpoint: dict[str, Any] | None = None) -> outcome.Ended:
        """What the run left, as outcome.Ended (plain data and core objects); `checkpoint`: what it
        holds while it goes on (transport.checkpoint), a ladder's running step counted as cut."""
        env, s, h = self.env, self.settings, self.h
        ended = time.time()
        ctl = shapes.controller(env)
        windows = [w.to_dict() for w in ctl.windows] if ctl is not None else []
        first = next(iter(self.scrapers.values()), None)
        server_steps = (
            outcome.series_windows(first.series, h.started_at, ended, windows).get("steps") if first and ctl else None
        )
        cut = self.stopper.interruption is not None or checkpoint is not None
        return outcome.Ended(
            settings=s,
            total=h.total,
            steps=h.steps,
            started_at=h.started_at,
            ended_at=ended,
            ladder=ctl.report(server_steps, cut=cut) if ctl is not None else None,
            windows=windows,
            servers={url: sc.series for url, sc in self.scrapers.items()},
            gpu=self.gpu_scraper.series if self.gpu_scraper is not None else None,
            status=h.status(),
            workers=_workers(h),
            run=_run_facts(env, s),
            server_info=h.info,
            server_facts=dict(self.server_facts),
            trace=self.trace,
            plan=_effective_plan(s, len(h.workers), _load(env, s)["mode"]),
            workers_why=(given.run_only.get("workers_why") if (given := handoff()) else None),
            baseline_summary=_baseline_summary(s),
            interruption=self.stopper.interruption,
            stopped_early=self.stopped_early(),
            slo_attainment=s.slo_attainment,
            precision=_precision_report(env),
            checkpoint=checkpoint,
            ceilings=_ceilings(h),
        )

    def write(self, out: outcome.Outcome) -> bool:
        """The results file and the HTML report; False (each failure said in one line) when one
        could not be written."""
        s, ok = self.settings, True
        signals = self.stopper.signals  # one more while the files are written and sent ends the upload
        if s.results:
            try:
                write_results(s.results, out.results, secrets=masking.SECRETS.all())
                print(f"results written to {s.results}", flush=True)
            except OSError as e:
                print(f"llm-locust: could not write the results to {s.results}: {e}", file=sys.stderr, flush=True)
                ok = False
        if s.report:
            ok = _write_report(s.report, out.results, masking.SECRETS.all(), s.results) and ok
        if s.junit:
            try:
                write_atomic(Path(s.junit), outcome.junit(out, s.name or "llm-locust run"))
                print(f"gates written to {s.junit} (JUnit)", flush=True)
            except OSError as e:
                print(f"llm-locust: could not write the JUnit file {s.junit}: {e}", file=sys.stderr, flush=True)
                ok = False
        if s.mlflow:  # after the files: they go along as artifacts; a failure is said, never fatal
            problem = log_run(s, out.results, masking.SECRETS.all(), stop=lambda: self.stopper.signals > signals)
            if problem:
                print(f"llm-locust: {problem}", file=sys.stderr, flush=True)
        return ok


def _ceilings(h: MetricsHub) -> list[tuple[str, dict[str, Any]]]:
    """Each sending process's token rate against its ceiling (metrics/ceiling.py): the workers' as
    their last reports said, else this process's own."""
    if run_context(h.env).role is Role.MASTER:
        named = [(f"worker {w.index if w.index is not None else w.client_id}", w.ceiling) for w in h.workers.values()]
        return sorted(((name, wire) for name, wire in named if wire), key=lambda part: part[0])
    return [("local", h.ceiling.to_wire())]


def _workers(h: MetricsHub) -> list[Worker]:
    return [
        {
            "id": w.client_id,
            "index": w.index,
            "reports": w.reports,
            "sent": w.sent,
            "finished": w.finished,
            "in_flight_at_last_report": w.in_flight,
            "lost": w.lost,
            "final_report": w.final == -1 or (w.final > 0 and w.final >= h.final_token),
            "lost_at": w.lost_at,
            "rejoined_at": w.rejoined_at,
            "left_at": w.left_at,
            "joined_at": w.joined_at,
            # against the master's: offset, uncertainty, flagged (loop.clock Estimate.as_dict,
            # as the worker's report carried it: the hub keeps it untyped)
            "clock": cast("WorkerClock | None", w.clock),
        }
        for w in h.workers.values()
    ]


def _run_facts(environment, settings) -> dict[str, Any]:
    """results["run"]'s facts that the runtime knows: host, settings, runner, command, load."""
    return {
        "host": environment.host,
        "settings": settings.public(),
        "runner": type(environment.runner).__name__,
        "command": redact_argv(_command()),
        "seed": settings.seed,
        "load": _load(environment, settings),
        "name": settings.name,
        # --reset-cache: the reset before the run's load (a ladder's per step: ladder.windows)
        "cache_reset": getattr(run_context(environment).cache_reset, "run", None),
        "cache_state": _cache_state(environment),
    }


def _cache_state(environment) -> dict[str, str]:
    """The prompt cache's state before the load (analysis.load_facts.cache_state)."""
    h = hub(environment)
    warm = h.steps.get(WARMUP_STEP)
    first = first_cached(h.total.first_cached, warm.first_cached if warm is not None else None)
    given = handoff()
    reset = getattr(run_context(environment).cache_reset, "run", None)
    return cache_state(reset, bool(given and given.run_only.get("sim_started")), first)


def _command() -> list[str]:
    """The command line as typed (`llm-locust run ...`), or Locust's own under plain `locust -f`."""
    given = handoff()
    return given.command if given is not None else sys.argv


def _precision_report(environment) -> Precision | None:
    """--precision's targets and whether they were met (runtime/precision_stop.py)."""
    return precision.report(environment)


def _baseline_summary(settings) -> Figures | None:
    if not (settings.overlong_share and settings.overlong_baseline):
        return None
    return read_results(settings.overlong_baseline)["summary"]  # required: read_results checked it
