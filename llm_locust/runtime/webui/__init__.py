"""The "LLM" view on Locust's web UI: live token-level figures, charts, load steps and validity.

`install(environment, scraper, gpu_scraper)` (called from the plugin's init listener on the
master or local runner, when the web UI is on) adds to the web UI's Flask app:

  GET /llm              the page (static HTML + JS; charts by the vendored uPlot, no network)
  GET /llm/data?since=T compact JSON from the hub's aggregates (llm_locust.report.live)
  GET /llm/static/NAME  the page's scripts and styles

under Locust's --web-base-path and behind its --web-login when those are set, and to Locust's
own UI an "LLM" tab (a summary table, through Locust's `extended_tabs` / `extended_tables` /
`extended_stats`) and a link to /llm under Reports (`extended_csv_files`).

`--run-time` / `-t` in web mode: Locust applies a run time only with --headless or --autostart
(its first start), so a run started from the UI would go on until stopped. `RunClock` stops each
test that long after its start, however it was started (Locust's form, the LLM view's Start, a
script's POST /swarm); a run time typed in Locust's form is that start's. Both pages say when the
running test stops.

`llm-locust run --web` ends when its test ends (`ends_with_its_test`): -t reached, the ladder or
the replay done, the fail-fast rule, Stop pressed. A normal end, as headless: the summary, the
results, the gates' exit code. Before, only Ctrl-C ended it, so a test that had reached -t came out
interrupted (exit 130, no gates). --web-keep-open keeps the UI for more tests; plain `locust -f`
keeps Locust's way (open until Ctrl-C, or its own --autostart --autoquit N).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

import gevent
import orjson
from flask import Blueprint, Response, request, send_from_directory
from locust.runners import STATE_RUNNING, STATE_SPAWNING

from llm_locust.analysis import saturation
from llm_locust.report.live import SAMPLE_S, Inputs, LadderInputs, LiveView, summary_rows
from llm_locust.runtime import shapes
from llm_locust.runtime.context import Role, run_context
from llm_locust.runtime.hub import hub
from llm_locust.safe import masking
from llm_locust.settings.handoff import handoff

log = logging.getLogger(__name__)

TAB_KEY = "llm"
STATIC = resources.files(__name__) / "static"
REPORT_LAG = 3.5  # master: the per-second series trails the workers by one report interval


class RunClock:
    """Stops a test started from the web UI `run_time` seconds after its start (-t, or the run
    time Locust's form last set: Locust keeps it in the parsed options). Off when headless:
    Locust's own timer ends a headless run (it quits)."""

    def __init__(self, environment) -> None:
        self.env = environment
        self.ends_at: float | None = None  # when the running test stops (wall clock)
        self._timer: Any = None

    @property
    def run_time(self) -> float | None:
        value = getattr(self.env.parsed_options, "run_time", None)
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    def install(self) -> None:
        if getattr(self.env.parsed_options, "headless", False):
            return
        self.env.events.test_start.add_listener(self.on_start)
        self.env.events.test_stop.add_listener(self.on_stop)

    def on_start(self, **_kw: Any) -> None:
        self.cancel()
        run_time = self.run_time
        if run_time is None:
            return
        self.ends_at = time.time() + run_time
        self._timer = gevent.spawn_later(run_time, self._stop, run_time)

    def _stop(self, run_time: float) -> None:
        self._timer = None  # the stop below fires test_stop: on_stop must not kill this greenlet
        log.info("--run-time %gs reached: stopping the test (started from the web UI)", run_time)
        self.env.runner.stop()

    def on_stop(self, **_kw: Any) -> None:
        self.cancel()

    def cancel(self) -> None:
        self.ends_at = None
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None

    def control(self) -> dict[str, Any]:
        """-t and when the running test stops. None once it is stopping: Locust says "stopped"
        before its test_stop listeners (on_stop) have run, and a poll in between saw the old time."""
        runner = self.env.runner
        live = runner is not None and runner.state in (STATE_RUNNING, STATE_SPAWNING)
        return {"run_time": self.run_time, "stops_at": self.ends_at if live else None}


def ends_with_its_test(environment) -> bool:
    """Whether this web UI's process ends when its test ends: under `llm-locust run --web`
    (which says so in its handoff, settings/handoff.py), unless --web-keep-open. Not headless (Locust ends
    that itself), not with --autostart --autoquit N (Locust's own end, N s after)."""
    opts = environment.parsed_options
    if getattr(opts, "headless", False) or environment.web_ui is None:
        return False
    if getattr(opts, "autostart", False) and getattr(opts, "autoquit", -1) != -1:
        return False
    given = handoff()
    if given is None:
        return False  # plain `locust -f`
    return not given.run_only.get("web_keep_open")


def end_with_the_test(environment, interrupted: Callable[[], bool]) -> None:
    """At the end of the first test (not a Stop before any Start, not the stop a signal makes:
    the signal's own end marks the run), stop the runner and the web UI as Locust's --autoquit
    does: Locust's main then shuts down (quitting, quit: the plugin's end of the run)."""
    seen = {"started": False, "ending": False}

    def on_start(**_kw: Any) -> None:
        seen["started"] = True

    def on_stop(**_kw: Any) -> None:
        if not seen["started"] or seen["ending"] or interrupted():
            return
        seen["ending"] = True
        print(
            "llm-locust: the test ended: ending the run (--web-keep-open keeps the web UI open for more tests)",
            file=sys.stderr,
            flush=True,
        )
        gevent.spawn(_quit, environment)  # not inside test_stop: its other listeners run first

    def on_quitting(**_kw: Any) -> None:
        seen["ending"] = True  # ended otherwise (a signal): no second stop

    environment.events.test_start.add_listener(on_start)
    environment.events.test_stop.add_listener(on_stop)
    environment.events.quitting.add_listener(on_quitting)


def _quit(environment) -> None:
    try:
        environment.runner.quit()
    finally:
        environment.web_ui.stop()


def _inputs(environment, h, scraper, gpu_scraper, lag: float, clock: RunClock | None = None) -> Inputs:
    runner = environment.runner
    run = run_context(environment)
    master = run.role is Role.MASTER
    workers = None
    if master:
        now = time.time()
        workers = []
        for c in list(runner.clients.values()):
            ws = h.workers.get(c.id)
            workers.append(
                {
                    "id": c.id,
                    "index": ws.index if ws else None,
                    "state": c.state,
                    "cpu": round(c.cpu_usage or 0, 1),
                    "report_age": round(now - ws.last_report, 1) if ws and ws.last_report else None,
                    "in_flight": ws.in_flight if ws else 0,
                    "finished": ws.finished if ws else 0,
                }
            )
        workers.sort(key=lambda w: (w["index"] is None, w["index"] or 0, w["id"]))
        in_flight = sum(w.in_flight for w in h.workers.values())
    else:
        in_flight = h.in_flight
    ladder = None
    ctl = shapes.controller(environment)
    if ctl is not None:
        ld = ctl.ladder
        ladder = LadderInputs(
            kind=ld.kind,
            levels=list(ld.levels),
            warmup=ld.warmup,
            duration=ld.duration,
            requests=ld.requests,
            windows=[w.to_dict() for w in ctl.windows],
            done=ctl.done,
            stop_reason=ctl.stop_reason,
            slos=dict(ctl.slos),
            refine_from=len(ld.levels) + 1 if ctl.refine and ctl.search is None else 0,
        )
    opts = environment.parsed_options
    control = {
        "shape": environment.shape_class is not None,
        "users": getattr(opts, "num_users", None),
        "spawn_rate": getattr(opts, "spawn_rate", None),
        "host": environment.host or "",
        **(clock.control() if clock is not None else {"run_time": None, "stops_at": None}),
    }
    return Inputs(
        now=time.time(),
        state=getattr(runner, "state", "") or "",
        users=getattr(runner, "user_count", 0) or 0,
        in_flight=in_flight,
        total=h.total,
        steps=h.steps,
        current_step=h.step,
        started_at=h.started_at,
        lag=lag,
        ladder=ladder,
        workers=workers,
        server=scraper.series if scraper is not None else None,
        gpu=gpu_scraper.series if gpu_scraper is not None else None,
        control=control,
        slos=dict(h.slos),
        over_ceiling=_over_ceiling(h, master),
    )


def _over_ceiling(h, master: bool) -> list[str]:
    """The sending processes whose peak token rate went over their ceiling (metrics/ceiling.py)."""
    if master:
        parts = [(f"worker {w.index if w.index is not None else w.client_id}", w.ceiling) for w in h.workers.values()]
    else:
        parts = [("this process", h.ceiling.to_wire())]
    return [
        f"{name}: {wire['peak']:,.0f} tokens/s over {wire['ceiling']:,}"
        for name, wire in parts
        if wire and wire["peak"] > wire["ceiling"]
    ]


def install(
    environment, scraper=None, gpu_scraper=None, interrupted: Callable[[], bool] = lambda: False
) -> LiveView | None:
    """Serve the LLM view on the web UI's Flask app (master / local runner with a web UI), and
    end the process with its test where `ends_with_its_test` (`interrupted`: a signal ended it)."""
    web_ui = getattr(environment, "web_ui", None)
    role = run_context(environment).role
    if web_ui is None or role is Role.WORKER:
        return None
    h = hub(environment)
    lag = REPORT_LAG if role is Role.MASTER else 1.0
    if shapes.controller(environment) is not None:
        saturation.preload()  # the view computes verdicts while the ladder runs: import kneed now
    run = run_context(environment)
    view = run.live_view = LiveView()
    shown_run = [h.run_number]
    clock = RunClock(environment)
    clock.install()
    run.run_clock = clock
    if ends_with_its_test(environment):
        end_with_the_test(environment, interrupted)

    def get_inputs() -> Inputs:
        return _inputs(environment, h, scraper, gpu_scraper, lag, clock)

    def current_view() -> LiveView:
        nonlocal view
        if shown_run[0] != h.run_number:  # a new test: start the charts and caches afresh
            shown_run[0] = h.run_number
            view = run.live_view = LiveView()
        return view

    prefix = (getattr(environment.parsed_options, "web_base_path", "") or "").rstrip("/")
    _serve_pages(web_ui, prefix, current_view, get_inputs)
    _add_locust_tab(web_ui, prefix, current_view, get_inputs)
    _sample_while_running(environment, current_view, get_inputs)
    log.info("LLM live view at %s/llm on the web UI", prefix)
    return view


def _serve_pages(web_ui, prefix: str, current_view: Callable[[], LiveView], get_inputs: Callable[[], Inputs]) -> None:
    """The live view's own routes (/llm, its data poll, its static files), behind the web UI's login."""
    bp = Blueprint("llm_locust_webui", __name__, url_prefix=prefix or None)
    auth = web_ui.auth_required_if_enabled
    page = (STATIC / "llm.html").read_bytes()

    @bp.route("/llm")
    @auth
    def llm_page():  # noqa: ANN202 - Flask view
        return Response(page, mimetype="text/html", headers={"Cache-Control": "no-cache"})

    @bp.route("/llm/data")
    @auth
    def llm_data():  # noqa: ANN202
        try:
            since = float(request.args.get("since", "0") or 0)
        except ValueError:
            since = 0.0
        body = masking.mask(orjson.dumps(current_view().payload(get_inputs, since)).decode())
        return Response(body, mimetype="application/json", headers={"Cache-Control": "no-store"})

    @bp.route("/llm/static/<path:name>")
    @auth
    def llm_static(name: str):  # noqa: ANN202
        return send_from_directory(str(STATIC), name, max_age=3600)

    web_ui.app.register_blueprint(bp)


def _add_locust_tab(
    web_ui, prefix: str, current_view: Callable[[], LiveView], get_inputs: Callable[[], Inputs]
) -> None:
    """An "LLM" tab (a two-column table) in Locust's own UI and a /llm link under Reports: found from there."""
    ta = web_ui.template_args
    ta["extended_tabs"] = [*ta.get("extended_tabs", []), {"title": "LLM", "key": TAB_KEY}]
    ta["extended_tables"] = [
        *ta.get("extended_tables", []),
        {
            "key": TAB_KEY,
            "structure": [{"key": "metric", "title": "LLM metric"}, {"key": "value", "title": "Value"}],
        },
    ]
    ta["extended_csv_files"] = [
        *ta.get("extended_csv_files", []),
        {
            "href": "./llm",
            "title": "LLM live view: charts, load steps, validity (/llm)",
        },
    ]
    stats_path = f"{prefix}/stats/requests"

    @web_ui.app.after_request
    def llm_tab_rows(response):  # noqa: ANN202 - rows of the "LLM" tab ride on Locust's own poll
        if request.path != stats_path or response.status_code != 200 or response.mimetype != "application/json":
            return response
        try:
            data: dict[str, Any] = orjson.loads(response.get_data())
            rows = summary_rows(current_view().refresh(get_inputs))
            data["extended_stats"] = [*(data.get("extended_stats") or []), {"key": TAB_KEY, "data": rows}]
            response.set_data(masking.mask(orjson.dumps(data).decode()))
        except Exception:  # noqa: BLE001 - never break Locust's own page
            log.exception("LLM tab rows failed")
        return response


def _sample_while_running(environment, current_view: Callable[[], LiveView], get_inputs: Callable[[], Inputs]) -> None:
    """A snapshot a second while a test runs, watched or not: a page opened mid-run shows the history from the start."""
    # about 2 ms of the master's time a second
    sampler: list[Any] = []

    def sample_while_running() -> None:
        while True:
            try:
                current_view().refresh(get_inputs)
            except Exception:  # noqa: BLE001 - a failed sample must not end the sampling
                log.exception("LLM view sample failed")
            gevent.sleep(SAMPLE_S)

    def start_sampling(**_kw: Any) -> None:
        if not sampler:
            sampler.append(gevent.spawn(sample_while_running))

    def stop_sampling(**_kw: Any) -> None:
        while sampler:
            sampler.pop().kill(block=False)

    environment.events.test_start.add_listener(start_sampling)
    environment.events.test_stop.add_listener(stop_sampling)
