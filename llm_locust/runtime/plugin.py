"""Hooks llm-locust into Locust's events: options, metrics hub, end-of-run summary and results.

Imported by `llm_locust.users` (the public module locustfiles import), so any locustfile that uses
our users gets all of this, whether started by `llm-locust run` or by plain `locust -f`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from llm_locust.metrics.aggregate import figures
from llm_locust.protocols import GRPC_APIS, get_adapter
from llm_locust.protocols.base import request_headers
from llm_locust.report.provenance import gpu_facts, redact_argv, trace_facts
from llm_locust.report.results import build_results, write_results
from llm_locust.report.summary import format_summary
from llm_locust.runtime import exporter, shapes
from llm_locust.runtime.hub import install
from llm_locust.settings import derive

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


if "--worker" in sys.argv:
    gevent.spawn(_warn_while_master_silent, float(os.environ.get("LLM_LOCUST_MASTER_WARN_AFTER", "10")))


def _server_scraper(environment, settings, url: str):
    """Read the inference server's /metrics (or the GPU sidecar's) while the test runs."""
    from llm_locust.runtime.scraper import Scraper

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
    from llm_locust.runtime.scraper import server_scrapers

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


def _utc(t: float | None) -> str | None:
    import datetime

    return None if t is None else datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def _load(environment, settings) -> dict[str, Any]:
    """How the load was offered: the mode and the Locust figures that shape it."""
    opts = environment.parsed_options
    from llm_locust.runtime.dispatcher import ReplayUser

    replay = any(issubclass(u, ReplayUser) for u in environment.user_classes)
    mode = "ladder" if settings.ladder else "replay" if replay else "closed"
    return {
        "mode": mode,
        "users": getattr(opts, "num_users", None),
        "spawn_rate": getattr(opts, "spawn_rate", None),
        "run_time": getattr(opts, "run_time", None),
        "shape": type(environment.shape_class).__name__ if environment.shape_class else None,
    }


def _write_report(path: str, results: dict, secrets: tuple[str, ...], results_path: str = "") -> None:
    """The HTML report, as `llm-locust report` would write it from the results file."""
    import orjson

    from llm_locust.report.files import write_atomic
    from llm_locust.report.html import render
    from llm_locust.report.results import results_json

    try:
        doc = orjson.loads(results_json(results, secrets, indent=False))  # what a reader of the file gets
        if results_path:
            doc["_path"] = results_path  # as load_results() gives it: the page names the file
        write_atomic(Path(path), render(doc))
    except Exception as e:  # noqa: BLE001 - the run's figures are printed and saved already
        log.error("could not write the HTML report to %s: %s: %s", path, type(e).__name__, e)
        return
    print(f"report written to {path}", flush=True)


def _workload_facts(work) -> dict[str, Any]:
    """What the run replays, as kept in run.server (the master's check read the whole file)."""
    from llm_locust.workload.sessions import SessionTrace

    if isinstance(work, SessionTrace):
        return {"kind": "sessions", "format": work.format}
    return {"kind": "requests", "format": getattr(work, "format", None)}


def _status_lines(status: dict[str, Any]) -> list[str]:
    """The senders' state at the end: sessions, and each endpoint (down when every process
    sending to it had it down)."""
    lines = []
    sess = status.get("sessions")
    if sess:
        lines.append(
            f"sessions: {sess['started']} started, {sess['done']} answered in full, "
            f"{sess['broken']} ended by a failed turn"
        )
    for url, e in (status.get("endpoints") or {}).items():
        state = (
            "DOWN" if e["down"] else (f"down on {e['down_on']} of {e['processes']} processes" if e["down_on"] else "up")
        )
        lines.append(f"endpoint {url}: {e['sent']} sent, {state}")
    return lines


def _server_windows(scraper, h, ctl) -> dict:
    series = scraper.series
    out = {"source": series.to_dict(), "run": series.window(h.started_at or 0, time.time())}
    if ctl is not None:
        out["steps"] = [
            {"step": w.index, "level": w.level, **series.window(w.measured_from or w.started, w.ended or time.time())}
            for w in ctl.windows
        ]
    return out


def _server_line(scraper, h, endpoint: str | None = None) -> str:
    w = scraper.series.window(h.started_at or 0, time.time())
    parts = []
    for q, label in (("running", "running"), ("waiting", "waiting"), ("kv_cache_usage", "KV cache")):
        if q in w:
            scale = 100 if q == "kv_cache_usage" else 1
            unit = "%" if q == "kv_cache_usage" else ""
            parts.append(f"{label} mean {w[q]['mean'] * scale:.1f}{unit} max {w[q]['max'] * scale:.1f}{unit}")
    if "generation_tokens_total" in w and w["generation_tokens_total"]["per_s"] is not None:
        parts.append(f"generated {w['generation_tokens_total']['per_s']:.0f} tok/s")
    name = f"server {endpoint}" if endpoint else "server"
    return f"{name} ({scraper.series.server or 'unknown'}, {w['samples']} scrapes): " + ", ".join(parts)


def _effective_plan(settings, n_workers: int, mode: str) -> dict:
    """The plan this run amounts to (re-run it with `llm-locust run RESULTS.json`): the settings,
    and what `llm-locust run` used itself (workers, the simulator, the locustfile)."""
    run_only = json.loads(os.environ.get(derive.RUN_ONLY_ENV, "{}") or "{}")
    values = {"workers": n_workers, "replay": mode == "replay", **run_only}
    values.pop("workers_why", None)
    if values.pop("sim_started", False):
        values["host"] = ""  # the built-in simulator: a re-run starts one again
    return derive.to_plan(settings.model_copy(update=values))


def _stability(
    settings, h, ladder: dict | None, gpu_scraper, server_windows: dict | None = None, scraper=None
) -> dict[str, Any]:
    """results["stability"]: the burst's recovery (from the ladder), the overlong mix, KV pressure
    and the soak verdict (analysis/stability.py)."""
    out: dict[str, Any] = {}
    if settings.kv_pressure and ladder and ladder.get("steps"):
        from llm_locust.analysis.stability import kv_pressure

        out["kv_pressure"] = kv_pressure(
            ladder["steps"], (server_windows or {}).get("steps"), min_load=settings.kv_min_load
        )
    if ladder and ladder.get("burst"):
        out["burst"] = ladder["burst"]
    if settings.overlong_share:
        from llm_locust.analysis.stability import overlong_mix

        baseline = None
        if settings.overlong_baseline:
            from llm_locust.report.results import load_results

            baseline = load_results(settings.overlong_baseline).get("summary") or {}
        out["overlong"] = overlong_mix(
            h.total.overlong,
            figures(h.total),
            share=settings.overlong_share,
            tokens=settings.overlong_tokens,
            baseline=baseline,
            tolerance=settings.overlong_tolerance,
        )
    if settings.soak_window and h.started_at is not None:
        from llm_locust.analysis.stability import soak

        memory = {}
        for name, src in (("server_memory_bytes", scraper), ("gpu_memory_used_bytes", gpu_scraper)):
            pts = [(s.t, s.figures[name]) for s in src.series.samples if name in s.figures] if src is not None else []
            if pts:
                memory[name] = pts
        out["soak"] = soak(
            h.total.by_sent,
            h.total.series,
            h.started_at,
            h.total.last_end or time.time(),
            window=settings.soak_window,
            max_drift=settings.soak_max_drift,
            max_error_rate=settings.soak_max_error_rate,
            memory=memory,
            max_memory_growth=settings.soak_max_memory_growth * 2**20,
        )
    return out


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw: Any) -> None:
    derive.add_locust_arguments(parser)
    # Safe by default: the web UI and the master's worker port listen on this machine only;
    # --web-host / --master-bind-host open them (docs/security.md).
    parser.set_defaults(web_host="127.0.0.1", master_bind_host="127.0.0.1")


@events.init.add_listener
def _on_init(environment, **_kw: Any) -> None:  # noqa: C901 (the end of a run as a pure function: issue 25)
    h = install(environment)
    from llm_locust.runtime import dispatcher

    dispatcher.install(environment)
    runner = environment.runner
    from llm_locust.runtime.users import scenario_failed

    environment.events.user_error.add_listener(scenario_failed)  # a scenario that raises: a counted failure
    if isinstance(runner, WorkerRunner):
        global _connected
        _connected = True
        shapes.install(environment, None)
        return
    # validate options and the workload where they are given, before any load is sent
    try:
        settings = derive.from_options(environment.parsed_options)
        from llm_locust.report import masking

        masking.protect(settings.api_key)
        from llm_locust.report.files import check_writable

        for out in (settings.results, settings.report, settings.record_log):
            if out:
                check_writable(out)  # before any load: a full run must not end with its figures lost
        # reads and checks the whole file, keeps almost none of it (the senders load their shares)
        from llm_locust.runtime.sessions import load_workload

        work = load_workload(settings.trace_path, settings.trace_format or None, share=(0, 2**31))
        h.info["workload"] = _workload_facts(work)
        shapes.install(environment, settings)  # a bad ladder is refused here
        if settings.overlong_share and not settings.overlong_tokens:
            raise ValueError(
                "--overlong-share needs --overlong-tokens N (a prompt past the server's context): "
                "`llm-locust run` reads the context from the server, plain locust does not"
            )
        if settings.overlong_baseline:
            from llm_locust.report.results import load_results

            load_results(settings.overlong_baseline)  # a bad baseline is refused before any load
        exporter.install(environment, settings.prometheus_port, settings.prometheus_host)
        scrapers = _server_scrapers(environment, settings)
        scraper = next(iter(scrapers.values()), None)  # the first endpoint's (the host's)
        gpu_scraper = _server_scraper(environment, settings, settings.gpu_metrics or "off")
    except (ValueError, OSError) as e:  # TraceError, PlanError, bad SLOs and intervals are ValueErrors
        print(f"llm-locust: {e}", file=sys.stderr, flush=True)
        sys.exit(2)  # SystemExit passes through Locust's event handler guard
    if settings.preflight and environment.host:
        from llm_locust.runtime import preflight

        headers = request_headers(get_adapter(settings.api), settings.api_key) if settings.api not in GRPC_APIS else {}
        problem = preflight.check(
            environment.host,
            settings.api,
            headers,
            settings.connect_timeout,
            endpoints=preflight.endpoint_apis(settings.api, settings.mix),
        )
        if problem is not None:
            print(f"llm-locust: {problem.message}", file=sys.stderr, flush=True)
            sys.exit(problem.code)
    from llm_locust.runtime import failfast

    failfast.install(environment, settings)
    h.slos = settings.request_slos
    _warn_if_steps_outpace_reads(shapes.controller(environment), *scrapers.values(), gpu_scraper)
    from llm_locust.runtime.webui import guard
    from llm_locust.runtime.webui import install as install_webui  # the "LLM" view on the web UI, when there is one

    if environment.web_ui is not None:
        guard.install(environment.web_ui)  # before any route: the start form's fields and the login
    install_webui(environment, scraper, gpu_scraper)
    server_facts: dict[str, Any] = {}

    def probe(**_kw: Any) -> None:
        from llm_locust.runtime.probe import probe_server

        if environment.host and not server_facts:
            headers = (
                request_headers(get_adapter(settings.api), settings.api_key) if settings.api not in GRPC_APIS else {}
            )
            gevent.spawn(lambda: server_facts.update(probe_server(environment.host, headers)))

    environment.events.test_start.add_listener(probe)

    def on_quitting(**_kw: Any) -> None:
        # A run ended by the time limit or the shape has collected its workers' final reports at
        # test_stop (hub.install); one ended by SIGTERM / Ctrl-C on the master gets here first,
        # while Locust still receives: collect them now, before its quit stops listening.
        if isinstance(runner, MasterRunner) and not h.finals_collected and h.started_at is not None:
            h.collect_final_reports()

    def on_quit(**_kw: Any) -> None:  # noqa: C901 (the end of a run as a pure function: issue 25)
        if isinstance(runner, MasterRunner):
            h.account_lost()  # what lost workers had in flight: counted as lost, not dropped
        if h.total.empty:
            return
        print(format_summary(figures(h.total)), file=sys.stdout, flush=True)
        why = json.loads(os.environ.get(derive.RUN_ONLY_ENV, "{}") or "{}").get("workers_why")
        if why:
            print(f"workers: {why}", file=sys.stdout, flush=True)
        ctl = shapes.controller(environment)
        server_windows = _server_windows(scraper, h, ctl) if scraper is not None else None
        ladder = ctl.report((server_windows or {}).get("steps")) if ctl is not None else None
        for url, s in scrapers.items():  # one line per endpoint (named when there are several)
            if s.series.samples:
                print(_server_line(s, h, url if len(scrapers) > 1 else None), file=sys.stdout, flush=True)
        status = h.status()
        for line in _status_lines(status):
            print(line, file=sys.stdout, flush=True)
        if ladder and ladder["table"]:
            print("\n" + ladder["table"], file=sys.stdout, flush=True)
        by_endpoint = {url: _server_windows(s, h, ctl) for url, s in scrapers.items()} if len(scrapers) > 1 else None
        gpu_windows = _server_windows(gpu_scraper, h, ctl) if gpu_scraper is not None else None
        eff = None
        if ladder is not None and (server_windows or gpu_windows):
            from llm_locust.analysis.server_metrics import efficiency, efficiency_table

            first = (
                gpu_scraper.series.samples[0].figures if gpu_scraper is not None and gpu_scraper.series.samples else {}
            )
            eff = efficiency(
                ladder["steps"],
                (server_windows or {}).get("steps"),
                (gpu_windows or {}).get("steps"),
                first.get("gpu_memory_used_bytes"),
            )
            table = efficiency_table(eff)
            if table:
                print("\n" + table, file=sys.stdout, flush=True)
        from llm_locust.analysis.efficiency import verdicts, verdicts_table

        verdict = verdicts(
            (ladder or {}).get("steps") or [],
            (gpu_windows or {}).get("steps"),
            gpu_facts(gpu_scraper.series.info) if gpu_scraper is not None else [],
            settings,
            step_tokens={k: (a.tokens_in, a.tokens_out) for k, a in h.steps.items()},
            summary=figures(h.total),
            gpu_run=(gpu_windows or {}).get("run"),
            saturation=(ladder or {}).get("saturation"),
        )
        table = verdicts_table(verdict)
        if table:
            print("\n" + table, file=sys.stdout, flush=True)
        stability = _stability(settings, h, ladder, gpu_scraper, server_windows, scraper)
        if stability:
            from llm_locust.analysis.stability import format_stability

            if not (ladder or {}).get("burst"):  # the ladder's table printed the burst's line
                print("\n" + format_stability(stability), file=sys.stdout, flush=True)
            elif stability.get("soak"):
                print("\n" + format_stability({"soak": stability["soak"]}), file=sys.stdout, flush=True)
        report_path = settings.report
        if settings.results or report_path:
            run = {
                "host": environment.host,
                "settings": settings.public(),
                "started_at": h.started_at,
                "ended_at": time.time(),
                "runner": type(runner).__name__,
                "server": h.info,
            }
            workers = [
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
                }
                for w in h.workers.values()
            ]
            run["command"] = redact_argv(json.loads(os.environ.get("LLM_LOCUST_COMMAND", "null")) or sys.argv)
            run["seed"] = settings.seed
            run["started_at_utc"] = _utc(h.started_at)
            run["load"] = _load(environment, settings)
            run["name"] = settings.name
            run.update(status)  # endpoints (sent, down) and sessions (started, done, broken)
            run["workers_why"] = json.loads(os.environ.get(derive.RUN_ONLY_ENV, "{}") or "{}").get("workers_why")
            results = build_results(h.total, h.steps, run, workers, settings.max_error_rate, goodput=bool(h.slos))
            env = results["environment"]
            env["server"] = {
                "url": environment.host,
                "kind": scraper.series.server if scraper is not None else None,
                "model": h.info.get("model") or settings.model or None,
                **server_facts,
            }
            env["gpus"] = gpu_facts(gpu_scraper.series.info) if gpu_scraper is not None else []
            env["trace"] = trace_facts(settings.trace_path, settings.trace_format)
            if server_windows is not None:
                results["server_metrics"] = server_windows  # the first endpoint's (the host's)
            if by_endpoint is not None:
                results["server_metrics_by_endpoint"] = by_endpoint  # {endpoint URL: windows}
            if gpu_windows is not None:
                results["gpu_metrics"] = gpu_windows
            if eff is not None:
                results["efficiency"] = eff
            results["verdicts"] = verdict
            if stability:
                results["stability"] = stability
            results["plan"] = _effective_plan(settings, len(workers), run["load"]["mode"])
            if ladder is not None:
                results["ladder"] = {k: v for k, v in ladder.items() if k != "table"}
            if settings.results:
                write_results(settings.results, results, secrets=masking.SECRETS.all())
                print(f"results written to {settings.results}", flush=True)
            if report_path:
                _write_report(report_path, results, masking.SECRETS.all(), settings.results)

    environment.events.quitting.add_listener(on_quitting)
    environment.events.quit.add_listener(on_quit)
