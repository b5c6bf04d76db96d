"""The end of a run as a value: what it measured, what it prints, what it writes, and its exit code.

The runtime (runtime/plugin.py) gathers what a run left behind into an `Ended`: the merged figures,
the ladder's report, the server's and the GPU's series, the senders' state, how it stopped (its
interruption, the fail-fast's reason). `build` turns that into an `Outcome` with no I/O: the
summary's blocks of text, the results document, the exit code and the lines that explain it. The
runtime prints the text, writes the results and the report, and exits with the code. So every
figure and rule of the end of a run can be checked in a test without starting a process.

Exit codes (docs/security.md): 0 the run passed; 1 a gate failed (the error rate above
--max-error-rate, no request answered, the SLO attainment under --slo-attainment, an SLA search
whose lowest load broke its SLOs, server token counts not believed, a trace changed during the
run, counts that do not add up, results that could not be written); 2 a usage error; 3 the
target unreachable or not serving the API; 130 / 143 interrupted by SIGINT / SIGTERM (the figures
of an interrupted run are kept and marked, never judged).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from llm_locust.analysis.agents import format_agents, with_sidecar_power
from llm_locust.analysis.efficiency import verdicts, verdicts_table
from llm_locust.analysis.load_facts import cache_line, load_facts, load_line
from llm_locust.analysis.server_metrics import ServerSeries, efficiency, efficiency_table
from llm_locust.analysis.stability import format_stability, kv_pressure, overlong_mix, soak
from llm_locust.analysis.steady import steady, steady_line
from llm_locust.metrics import ceiling
from llm_locust.metrics.aggregate import CPU_LIMIT, Aggregate, figures
from llm_locust.metrics.records import SOURCE_REJECTED, WARMUP_STEP
from llm_locust.protocols.base import USAGE_FACTOR, USAGE_SLACK
from llm_locust.report.accounting import PARTS, count_problems
from llm_locust.report.compare.gates import Case, junit_xml
from llm_locust.report.precision import target_lines
from llm_locust.report.provenance import gpu_facts
from llm_locust.report.results import build_results, mixed_loads, plain
from llm_locust.report.summary import fit, format_summary, step_phase_lines, warmup_line
from llm_locust.schema import (
    CacheFigures,
    CeilingRow,
    Checkpoint,
    Efficiency,
    Figures,
    Gate,
    Interrupted,
    LadderDoc,
    LoadFacts,
    MetricsWindow,
    MetricsWindows,
    Plan,
    Precision,
    PrefixHit,
    ResultsDoc,
    Run,
    Soak,
    Stability,
    Steady,
    StepMetricsWindow,
    Verdicts,
    Warmup,
    WarmupLatency,
    Worker,
)

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal's number, as shells report it
# The share of answered requests that must meet every --slo for the run to pass (--slo-attainment):
# the field's convention (DistServe's and vLLM's goodput studies read 90-99%; 95% is the usual gate).
SLO_ATTAINMENT = 0.95


@dataclass
class Interruption:
    """A run stopped by a signal: which, when (wall clock) and in which phase."""

    signal: str  # "SIGINT" or "SIGTERM"
    at: float
    phase: str  # "before the test", "ramp-up", "running", "step 3 of 5", "shutdown" ...

    @property
    def exit_code(self) -> int:
        return SIGNAL_EXIT.get(self.signal, 130)

    def to_dict(self) -> Interrupted:
        return {"signal": self.signal, "at": self.at, "phase": self.phase}


@dataclass
class Ended:
    """Everything the end of a run reads, as plain data and core objects (no runner, no sockets)."""

    settings: Any  # settings.model.Settings
    total: Aggregate
    steps: dict[int, Aggregate]
    started_at: float | None
    ended_at: float
    ladder: dict[str, Any] | None = None  # the ladder controller's report (runtime/shapes.py)
    windows: list[dict[str, Any]] = field(default_factory=list)  # its step windows
    servers: dict[str, ServerSeries] = field(default_factory=dict)  # endpoint URL -> its /metrics (host first)
    gpu: ServerSeries | None = None
    status: dict[str, Any] = field(default_factory=dict)  # endpoints (sent, down), sessions
    workers: list[Worker] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)  # host, runner, load, command, ... (results' "run")
    server_info: dict[str, Any] = field(default_factory=dict)  # what the run learnt of the server (model)
    server_facts: dict[str, Any] = field(default_factory=dict)  # the start-of-test probe's answers
    trace: dict[str, Any] | None = None  # provenance.trace_facts, taken before the load
    plan: Plan | None = None  # the effective plan (a re-run's input)
    workers_why: str | None = None
    baseline_summary: Figures | None = None  # --overlong-baseline's summary
    interruption: Interruption | None = None
    stopped_early: str | None = None  # the fail-fast's reason
    slo_attainment: float = SLO_ATTAINMENT
    precision: Precision | None = None  # --precision's targets and checks (runtime/precision_stop.py)
    # a checkpoint's (the run goes on: --checkpoint-every): every_s, counted_until, workers_missing
    checkpoint: dict[str, Any] | None = None
    # each sending process's token rate against its ceiling: (name, CeilingWatch.to_wire())
    ceilings: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Outcome:
    """What a run amounts to: the summary's blocks, the results document, the exit code and why."""

    blocks: list[str]
    results: dict[str, Any]  # a ResultsDoc (build): the runtime writes it as a plain dict
    exit_code: int
    reasons: list[str]  # one line each: why the exit code is not 0
    measured: bool  # anything was sent (else: nothing to print or write)

    def text(self, cols: int | None = None) -> str:
        """The summary; `cols`: each line wrapped to that width (summary.width() on a terminal)."""
        text = "\n\n".join(b for b in self.blocks if b)
        return "\n".join(fit(text.splitlines(), cols)) if cols else text


# ---- the server's and the GPU's series, cut at the run's and the steps' windows ----


def series_windows(series: ServerSeries, started: float | None, ended: float, windows: list[dict]) -> MetricsWindows:
    """{"source", "run", "steps"?}: a series read over the whole run and over each step's
    measurement window."""
    out: MetricsWindows = {"source": series.to_dict(), "run": series.window(started or 0, ended)}
    if windows:
        out["steps"] = [
            # the step's number and level first, then its window's figures (a MetricsWindow)
            cast(
                StepMetricsWindow,
                {
                    "step": w["step"],
                    "level": w["level"],
                    **series.window(w["measured_from"] or w["started"], w["ended"] or ended),
                },
            )
            for w in windows
        ]
    return out


def server_line(series: ServerSeries, started: float | None, ended: float, endpoint: str | None = None) -> str:
    """One line: the server's running and waiting requests, KV cache and generated tokens/s."""
    w = series.window(started or 0, ended)
    parts = []
    for label, g in (
        ("running", w.get("running")),
        ("waiting", w.get("waiting")),
        ("KV cache", w.get("kv_cache_usage")),
    ):
        if g is not None:
            scale = 100 if label == "KV cache" else 1
            unit = "%" if label == "KV cache" else ""
            parts.append(f"{label} {g['mean'] * scale:.1f}{unit} (max {g['max'] * scale:.1f}{unit})")
    if "generation_tokens_total" in w and w["generation_tokens_total"]["per_s"] is not None:
        parts.append(f"{w['generation_tokens_total']['per_s']:.0f} tok/s generated")
    name = f"server {endpoint}" if endpoint else "server"
    return f"{name} ({series.server or 'unknown'}, {w['samples']} reads): " + ", ".join(parts)


def status_lines(status: dict[str, Any]) -> list[str]:
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
        down_on = f"down on {e['down_on']} of {e['processes']} processes" if e["down_on"] else "up"
        lines.append(f"endpoint {url}: {e['sent']} sent, {'DOWN' if e['down'] else down_on}")
    return lines


def describe(settings: Any, load: dict[str, Any], host: str | None, workload: dict[str, Any] | None = None) -> str:
    """One line: what the run offers, to which API and target, from which workload."""
    mode, users, run_time = load.get("mode"), load.get("users"), load.get("run_time")
    if mode == "ladder":
        how = f"ladder {settings.ladder}"
    elif mode == "replay":
        how = f"replay at {settings.speed:g}x trace time" if getattr(settings, "speed", 1) else "replay"
    else:
        how = f"closed loop of {users} user{'s' if users != 1 else ''}" + _ramp(users, load.get("spawn_rate"))
    if run_time and mode != "ladder":
        how += f" for {run_time:g} s"
    trace = settings.trace_path
    name = trace.rsplit("/", 1)[-1] if trace else "?"
    fmt = (workload or {}).get("format")
    return f"{how}; {settings.api} against {host or '?'}; workload {name}" + (f" ({fmt})" if fmt else "")


def _ramp(users: Any, rate: Any) -> str:
    """How long the users took to start when they did not start at once (Locust's -r): a closed
    loop of 64 users ramped at 1/s held far fewer in flight for its first minute."""
    if not isinstance(users, int) or not isinstance(rate, int | float) or rate <= 0 or rate >= users:
        return ""
    return f", started at {rate:g}/s over {users / rate:.0f} s (-r)"


def next_steps(settings: Any, load: dict[str, Any]) -> str:
    """The pointer printed when a run has neither an SLO nor a ladder: what would judge it."""
    if settings.slos or load.get("mode") == "ladder":
        return ""
    return (
        "next: --slo ttft=500ms,tpot=50ms holds the run to SLOs (goodput, attainment, a gate); "
        "--ladder concurrency:1..64 finds the load where the server saturates"
    )


LATE_S = 3.0  # a worker whose first report came this long after the start joined during the run


def worker_lines(workers: list[Worker], started: float | None) -> list[str]:
    """The workers that did not run the whole test: joined late, left, or lost (and back)."""
    t0, lines = started or 0.0, []
    for w in workers:
        name = f"worker {w.get('index') if w.get('index') is not None else w.get('id')}"
        joined, left, lost, back_at = w.get("joined_at"), w.get("left_at"), w.get("lost_at"), w.get("rejoined_at")
        if joined and started and joined - t0 > LATE_S:
            lines.append(f"{name} joined {joined - t0:.0f} s into the run and took a share of the load")
        if left:
            lines.append(f"{name} left {left - t0:.0f} s into the run (its final report is in)")
        if lost:
            back = f", back at {back_at - t0:.0f} s" if back_at else ""
            lines.append(f"{name} went missing {lost - t0:.0f} s into the run{back}")
        clock = w.get("clock")
        if clock and clock.get("flagged"):
            lines.append(
                f"{name}'s clock is known to the master's within {clock['uncertainty_s'] * 1000:.1f} ms only (bound "
                f"{clock['bound_s'] * 1000:.0f} ms): its share of a replay may be sent off schedule by as much"
            )
    return lines


# ---- the pieces of the outcome ----


@dataclass
class _Parts:
    """What build() computes once and both the text and the results use."""

    summary: Figures
    server_windows: MetricsWindows | None = None
    by_endpoint: dict[str, MetricsWindows] | None = None
    gpu_windows: MetricsWindows | None = None
    efficiency: Efficiency | None = None
    verdicts: Verdicts | None = None
    stability: Stability = field(default_factory=lambda: Stability())
    prefix_hit: PrefixHit | None = None
    steady: Steady | None = None
    load_facts: dict[str, Any] | None = None


def _steady(e: Ended) -> Steady:
    """The run's steady window (analysis/steady.py) from its merged in-flight series."""
    load = e.run.get("load") or {}
    mode = "ladder" if e.ladder is not None else str(load.get("mode") or "closed")
    t = e.total
    return steady(t.flow, t.sent_blocks, t.first_sent, t.last_end, mode, load.get("users"), e.settings.think_time)


def _parts(e: Ended) -> _Parts:
    p = _Parts(summary=figures(e.total))
    p.steady = _steady(e)
    load = e.run.get("load") or {}
    mode = "ladder" if e.ladder is not None else load.get("mode")
    p.load_facts = load_facts(
        mode, load.get("users"), e.settings.think_time, p.summary["concurrency"], e.total.flow.spans()
    )
    if mixed_loads(e.steps):  # a ladder: intervals per step only (report.results)
        p.summary.pop("intervals", None)
    servers = list(e.servers.values())
    if servers:
        p.server_windows = series_windows(servers[0], e.started_at, e.ended_at, e.windows)
    if len(servers) > 1:
        p.by_endpoint = {url: series_windows(s, e.started_at, e.ended_at, e.windows) for url, s in e.servers.items()}
    if e.gpu is not None:
        p.gpu_windows = series_windows(e.gpu, e.started_at, e.ended_at, e.windows)
    p.efficiency = _efficiency(e, p)
    p.prefix_hit = _prefix_hit(e, p)
    p.verdicts = _verdicts(e, p)
    _agents_power(e, p)
    p.stability = _stability(e, p)
    return p


def _judged(steps: list[dict] | None) -> list[dict]:
    """A ladder's steps that count: not the one an interruption cut."""
    return [s for s in steps or [] if not s.get("cut")]


def _same_steps(windows: list[StepMetricsWindow] | None, steps: list[dict]) -> list[StepMetricsWindow] | None:
    """A series' step windows for the steps given (matched by step number), in their order."""
    if windows is None:
        return None
    by_step = {w["step"]: w for w in windows}
    return [by_step[s["step"]] for s in steps if s["step"] in by_step]


def _efficiency(e: Ended, p: _Parts) -> Efficiency | None:
    if e.ladder is None or not (p.server_windows or p.gpu_windows):
        return None
    first = e.gpu.samples[0].figures if e.gpu is not None and e.gpu.samples else {}
    steps = _judged(e.ladder["steps"])
    return efficiency(
        steps,
        _same_steps((p.server_windows.get("steps") if p.server_windows else None), steps),
        _same_steps((p.gpu_windows.get("steps") if p.gpu_windows else None), steps),
        first.get("gpu_memory_used_bytes"),
    )


def _verdicts(e: Ended, p: _Parts) -> Verdicts:
    ladder = e.ladder or {}
    return verdicts(
        _judged(ladder.get("steps")),
        (p.gpu_windows.get("steps") if p.gpu_windows else None),
        gpu_facts(e.gpu.info) if e.gpu is not None else [],
        e.settings,
        step_tokens={k: (a.tokens_in, a.tokens_out) for k, a in e.steps.items()},
        summary=p.summary,
        gpu_run=(p.gpu_windows["run"] if p.gpu_windows else None),
        saturation=ladder.get("saturation"),
    )


def _agents_power(e: Ended, p: _Parts) -> None:
    """--agent-tier: agents per megawatt from the GPU sidecar's power over the answer's probe,
    where the run has a sidecar (analysis/agents.py with_sidecar_power)."""
    sla = (e.ladder or {}).get("sla") or {}
    if sla.get("agents") and p.gpu_windows:
        old = sla["agents"]
        sla["agents"] = with_sidecar_power(old, p.verdicts["steps"] if p.verdicts else None)
        if e.ladder and e.ladder.get("table"):  # the search's line under the step table, as measured
            e.ladder["table"] = e.ladder["table"].replace(format_agents(old), format_agents(sla["agents"]))


def _stability(e: Ended, p: _Parts) -> Stability:
    """results["stability"]: the burst's recovery (from the ladder), the overlong mix, KV pressure
    and the soak verdict (analysis/stability.py)."""
    s, ladder, out = e.settings, e.ladder, Stability()
    if s.kv_pressure and ladder and ladder.get("steps"):
        out["kv_pressure"] = kv_pressure(
            _judged(ladder["steps"]),
            (p.server_windows.get("steps") if p.server_windows else None),
            min_load=s.kv_min_load,
        )
    if ladder and ladder.get("burst"):
        out["burst"] = ladder["burst"]
    if s.overlong_share:
        out["overlong"] = overlong_mix(
            e.total.work.overlong,
            p.summary,
            share=s.overlong_share,
            tokens=s.overlong_tokens,
            baseline=e.baseline_summary,
            tolerance=s.overlong_tolerance,
        )
    if s.soak_window and e.started_at is not None:
        out["soak"] = _soak(e)
    return out


def _soak(e: Ended) -> Soak:
    s = e.settings
    memory = {}
    server = next(iter(e.servers.values()), None)
    for name, src in (("server_memory_bytes", server), ("gpu_memory_used_bytes", e.gpu)):
        pts = [(x.t, x.figures[name]) for x in src.samples if name in x.figures] if src is not None else []
        if pts:
            memory[name] = pts
    assert e.started_at is not None
    return soak(
        e.total.by_sent,
        e.total.series,
        e.started_at,
        e.total.last_end or e.ended_at,
        window=s.soak_window,
        max_drift=s.soak_max_drift,
        max_error_rate=s.soak_max_error_rate,
        memory=memory,
        max_memory_growth=s.soak_max_memory_growth * 2**20,
    )


# ---- a closed loop's or a replay's warm-up ----


def warmup_rule(s: Any) -> str | None:
    """What the run took as its warm-up, in the words of --help (None: no warm-up)."""
    parts = []
    if s.run_warmup:
        parts.append(f"what was sent in its first {s.run_warmup:g} s" + (" of trace time" if s.replay else ""))
    if s.warmup_requests:
        n = s.warmup_requests
        parts.append("each user's first request" if n == 1 else f"each user's first {n} requests")
    return " and ".join(parts) or None


def warmup_figures(agg: Aggregate | None, s: Any) -> Warmup | None:
    """The results' `warmup`: the rule, and the warm-up's own counts and latencies (sent = ok +
    failed + cancelled + client_cancelled + lost, apart from the run's); None without a warm-up."""
    rule = warmup_rule(s)
    if rule is None or s.ladder:
        return None
    f = figures(agg if agg is not None else Aggregate())
    lat: dict[str, WarmupLatency] = {
        m: {"count": f["latency"][m].get("count"), "p50": f["latency"][m].get("p50"), "p99": f["latency"][m].get("p99")}
        for m in ("ttft", "e2e")
    }
    return {
        "rule": rule,
        "sent": f["sent"],
        "ok": f["ok"],
        "failed": f["failed"],
        "cancelled": f["cancelled"],
        "client_cancelled": f["client_cancelled"],
        "lost": f["lost"],
        "tokens_out": f["tokens_out"],
        "latency": lat,
    }


# ---- a controlled prefix-cache hit ratio (--prefix-hit) ----

PREFIX_HIT_TOLERANCE = 0.1  # achieved within 10 points of the target: a cache's blocks round the prefix


def _prefix_hit(e: Ended, p: _Parts) -> PrefixHit | None:
    """--prefix-hit: checked over the run after its warm-up (the priming requests' misses are not
    the ratio asked for), from the first server's series."""
    if not e.settings.prefix_hit:
        return None
    warm = e.steps.get(WARMUP_STEP)
    start = warm.last_end if warm is not None and warm.last_end else e.started_at
    series = next(iter(e.servers.values()), None)
    window = series.window(start or 0, e.ended_at) if series is not None and series.samples else None
    return prefix_hit_check(e.settings.prefix_hit, window, p.summary.get("cache"))


def prefix_hit_check(target: float, run: MetricsWindow | None, cache: CacheFigures | None) -> PrefixHit | None:
    """--prefix-hit R: the hit ratio the server's counters report over `run` (a window of its
    series: hit tokens / queried prompt tokens, docs/metrics.md) against R, and the client's (the
    usage's cached tokens of the measured requests) beside it; None without --prefix-hit."""
    if not target:
        return None
    run = run or {"samples": 0}
    achieved = run.get("prefix_cache_hit_ratio")
    client = cache.get("hit_ratio") if cache and cache.get("requests_reported") else None
    within = None if achieved is None else abs(achieved - target) <= PREFIX_HIT_TOLERANCE
    return {
        "target": target,
        "achieved": achieved,
        "source": run.get("prefix_cache_hit_ratio_source"),
        "client": client,
        "tolerance": PREFIX_HIT_TOLERANCE,
        "within": within,
    }


def prefix_hit_line(h: PrefixHit) -> str:
    """The summary's line: the target, what the server's counters say, and the verdict."""
    client = "" if h["client"] is None else f"; the responses' usage {h['client']:.1%}"
    if h["achieved"] is None:
        return (
            f"prefix hit: target {h['target']:.0%}; the server's counters said nothing (no prefix-cache "
            f"counters read: --server-metrics){client}"
        )
    verdict = "within" if h["within"] else "OFF by more than"
    return (
        f"prefix hit: target {h['target']:.0%}, the server's counters {h['achieved']:.1%} after the warm-up "
        f"({verdict} {h['tolerance']:.0%} points){client}"
    )


# ---- the text ----


def _blocks(e: Ended, p: _Parts) -> list[str]:
    load = (e.run.get("load") or {}).get("mode")
    open_loop = load == "replay" or (e.ladder or {}).get("ladder", {}).get("kind") in ("rate", "speed")
    title = "llm-locust summary: " + describe(
        e.settings, e.run.get("load") or {}, e.run.get("host"), e.server_info.get("workload")
    )
    head = [format_summary(p.summary, title, open_loop=open_loop)]
    warm = warmup_figures(e.steps.get(WARMUP_STEP), e.settings)
    if warm is not None:
        head.append(warmup_line(warm))
    if p.prefix_hit is not None:
        head.append(prefix_hit_line(p.prefix_hit))
    steady = steady_line(p.steady)
    if steady is not None:
        head.append(steady)
    head += [line for line in (load_line(p.load_facts), cache_line(e.run.get("cache_state"))) if line]
    if e.workers_why:
        head.append(f"workers: {e.workers_why}")
    over = ceiling.summary_line(cast(list, ceiling_rows(e, p.summary)))
    if over:
        head.append(over)
    for url, s in e.servers.items():  # one line per endpoint (named when there are several)
        if s.samples:
            head.append(server_line(s, e.started_at, e.ended_at, url if len(e.servers) > 1 else None))
    head += status_lines(e.status) + worker_lines(e.workers, e.started_at)
    blocks = ["\n".join(head)]
    if e.ladder and e.ladder.get("table"):
        blocks.append(e.ladder["table"])
        steps = sorted((k, figures(agg).get("phases")) for k, agg in e.steps.items() if k > 0)
        blocks.append("\n".join(step_phase_lines(steps)))
    blocks.append(efficiency_table(p.efficiency) if p.efficiency is not None else "")
    blocks.append(verdicts_table(p.verdicts))
    blocks.append(_stability_text(e, p))
    blocks.append("\n".join(target_lines(e.precision)))
    return blocks


def _stability_text(e: Ended, p: _Parts) -> str:
    if not p.stability:
        return ""
    if not (e.ladder or {}).get("burst"):
        return format_stability(p.stability)
    if p.stability.get("soak"):  # the ladder's table printed the burst's line
        return format_stability({"soak": p.stability["soak"]})
    return ""


# ---- the results document ----


def _results(e: Ended, p: _Parts) -> ResultsDoc:
    s = e.settings
    # the runtime's facts (runtime.plugin _run_facts, untyped there) and the end's: a Run
    run = cast(Run, {**e.run, "started_at": e.started_at, "ended_at": e.ended_at, "server": e.server_info})
    run["started_at_utc"] = _utc(e.started_at)
    # endpoints (sent, down) and sessions (started, done, broken): runtime.hub _status_over's
    if "endpoints" in e.status:
        run["endpoints"] = e.status["endpoints"]
    if "sessions" in e.status:
        run["sessions"] = e.status["sessions"]
    run["load_facts"] = cast(LoadFacts, p.load_facts)
    run["workers_why"] = e.workers_why
    run["interrupted"] = e.interruption.to_dict() if e.interruption else None
    run["stopped_early"] = e.stopped_early
    measured = {k: v for k, v in e.steps.items() if k != WARMUP_STEP}  # the warm-up is in `warmup`
    results = build_results(e.total, measured, run, e.workers, s.max_error_rate, goodput=bool(s.request_slos))
    results["warmup"] = warmup_figures(e.steps.get(WARMUP_STEP), s)
    _ceiling_validity(results, e)
    if e.checkpoint is not None:
        _mark_partial(results, e)
    results["prefix_hit"] = p.prefix_hit
    results["steady"] = cast(Steady, p.steady)  # _parts set it
    env = results["environment"]
    server = next(iter(e.servers.values()), None)
    env["server"] = {
        "url": e.run.get("host"),
        "kind": server.server if server is not None else None,
        "model": e.server_info.get("model") or s.model or None,
        **e.server_facts,
    }
    env["gpus"] = gpu_facts(e.gpu.info) if e.gpu is not None else []
    env["trace"] = e.trace
    if p.server_windows is not None:  # the first endpoint's (the host's)
        results["server_metrics"] = p.server_windows
    if p.by_endpoint is not None:  # {endpoint URL: windows}
        results["server_metrics_by_endpoint"] = p.by_endpoint
    if p.gpu_windows is not None:
        results["gpu_metrics"] = p.gpu_windows
    if p.efficiency is not None:
        results["efficiency"] = p.efficiency
    if p.verdicts is not None:
        results["verdicts"] = p.verdicts
    if p.stability:
        results["stability"] = p.stability
    results["plan"] = e.plan
    if e.precision is not None:
        results["precision"] = e.precision
    if e.ladder is not None:
        # the controller's report (runtime.shapes, untyped there) less its printed table: a LadderDoc
        results["ladder"] = cast(LadderDoc, {k: v for k, v in e.ladder.items() if k != "table"})
    problems = count_problems(results)
    if problems:  # a bug of the counting: carried, said, and the run fails its `counts` gate
        results["count_problems"] = problems
    results["gates"] = _gates(e, p)
    if problems and e.interruption is None:  # an interrupted run's figures are kept, not judged
        results["gates"].append(_gate("counts", False, f"counts do not add up (a bug): {'; '.join(problems)}"))
    return results


def ceiling_rows(e: Ended, summary: Figures) -> list[CeilingRow]:
    """Each sending process's peak token rate against its ceiling (metrics/ceiling.py row)."""
    suspect = (summary.get("client") or {}).get("verdict") == "suspect"
    return [cast(CeilingRow, ceiling.row(name, wire, CPU_LIMIT, suspect)) for name, wire in e.ceilings]


def _ceiling_validity(results: ResultsDoc, e: Ended) -> None:
    """`validity.ceiling`, and the flag `over_ceiling` when a process was over its ceiling."""
    rows = ceiling_rows(e, results["summary"])
    results["validity"]["ceiling"] = rows
    if any(r["over"] for r in rows):
        results["validity"]["flags"].append("over_ceiling")


def _mark_partial(results: ResultsDoc, e: Ended) -> None:
    """A checkpoint's document (the run goes on): marked partial, with when it was written and what
    it covers; each section's requests sent with no outcome yet are its `in_flight`, so that sent ==
    ok + failed + cancelled + client_cancelled + lost + in_flight holds in it as the end's sum does
    without in_flight (report.accounting). Its gates are left empty: figures of a run not ended are
    kept, not judged."""
    assert e.checkpoint is not None
    results["partial"] = True
    # from each section's own counts, not the live Aggregates': the run goes on while the document
    # is built, and a request sent in between (a CI run: summary sent 0, in_flight 1) made a
    # checkpoint whose sums did not add up
    in_flight = results["summary"]["in_flight"] = _in_flight(results["summary"])
    for row in results["steps"]:
        row["in_flight"] = _in_flight(row)
    warmup = results.get("warmup")
    if warmup is not None and e.steps.get(WARMUP_STEP) is not None:
        warmup["in_flight"] = _in_flight(warmup)
    c: Checkpoint = {
        "at": e.ended_at,
        "at_utc": _utc(e.ended_at) or "",
        "every_s": float(e.checkpoint["every_s"]),
        "counted_until": float(e.checkpoint.get("counted_until") or e.ended_at),
        "in_flight": in_flight,
        "workers_missing": int(e.checkpoint.get("workers_missing") or 0),
    }
    results["checkpoint"] = c


def _in_flight(fig: Mapping[str, Any]) -> int:
    """A section's requests sent with no outcome yet, from its own counts: what makes sent == ok +
    failed + cancelled + client_cancelled + lost + in_flight hold (report.accounting)."""
    return int(fig.get("sent") or 0) - sum(int(fig.get(k) or 0) for k in PARTS)


def _utc(t: float | None) -> str | None:
    return None if t is None else datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


# ---- the gates and the exit code ----


def _gates(e: Ended, p: _Parts) -> list[Gate]:
    """Each pass/fail rule the run was held to: {"name", "passed", "line"} (results["gates"], the
    summary's last lines, the JUnit file). None for an interrupted run: its figures are kept, not
    judged."""
    s, fig = e.settings, p.summary
    gates: list[Gate] = []
    if e.interruption is not None or e.checkpoint is not None:
        return gates
    answered = fig["ok"] + fig["failed"]
    if fig["sent"]:
        none_ok = fig["ok"] == 0
        gates.append(
            _gate(
                "answered",
                not none_ok,
                f"no request was answered: {fig['sent']} sent, {fig['failed']} failed, {fig['cancelled']} cancelled "
                f"at the stop (in flight), {fig.get('client_cancelled', 0)} cancelled by the client (--cancel), "
                f"{fig.get('lost', 0)} lost"
                if none_ok
                else f"{fig['ok']} of {fig['sent']} requests answered",
            )
        )
    rate = fig["error_rate"]
    gates.append(
        _gate(
            "error_rate",
            rate <= s.max_error_rate,
            f"error rate {rate:.1%} ({fig['failed']} of {answered} answered) "
            f"{'is above' if rate > s.max_error_rate else 'within'} --max-error-rate {s.max_error_rate:.1%}",
        )
    )
    if s.request_slos and answered and e.ladder is None:  # a ladder's steps are judged one by one
        met = e.total.goodput_requests / answered
        gates.append(
            _gate(
                "slo_attainment",
                met >= e.slo_attainment,
                f"SLO attainment {met:.1%} ({e.total.goodput_requests} of {answered} answered met every --slo: "
                f"{_slo_text(s.request_slos)}) {'is under' if met < e.slo_attainment else 'meets'} "
                f"--slo-attainment {e.slo_attainment:.0%}",
            )
        )
    changed = (e.trace or {}).get("changed")
    if changed:  # the requests sent may come from another file than the one the results name
        gates.append(_gate("trace", False, changed))
    rejected = (fig.get("n_out_sources") or {}).get(SOURCE_REJECTED, 0)
    if rejected:  # a server's token counts not believed: the throughput it would have given is not the run's
        gates.append(_gate("server_counts", False, usage_rejected_line(rejected, fig["ok"])))
    hit = p.prefix_hit
    if hit is not None:  # --prefix-hit: a run that got another hit ratio measured another workload
        gates.append(_gate("prefix_hit", bool(hit["within"]), prefix_hit_line(hit)))
    sla = (e.ladder or {}).get("sla") or {}
    if sla.get("reached") == "lowest_breaks":
        gates.append(_gate("sla_search", False, f"the SLA search's lowest load broke its SLOs: {sla.get('reason')}"))
    return gates


def usage_rejected_line(rejected: int, ok: int) -> str:
    """Why the server_counts gate failed: the rule of protocols.base count_believed, in its words."""
    return (
        f"the server's output token counts of {rejected} of {ok} answered requests were far from the count read "
        f"from the stream (above {USAGE_FACTOR}x it or the length asked, + {USAGE_SLACK}, or below it less "
        f"{USAGE_SLACK} over {USAGE_FACTOR}): not used; those requests' tokens are the count read "
        "(n_out_sources usage_rejected)"
    )


def _gate(name: str, passed: bool, line: str) -> Gate:
    return {"name": name, "passed": passed, "line": line}


def _slo_text(slos: dict[str, float]) -> str:
    return ", ".join(f"{k} {v * 1000:g} ms" if k != "error_rate" else f"{k} {v:.1%}" for k, v in slos.items())


def exit_code(e: Ended, gates: list[Gate]) -> tuple[int, list[str]]:
    """The process's exit code and the lines that say why (see the module docstring)."""
    if e.interruption is not None:
        i = e.interruption
        return i.exit_code, [f"interrupted by {i.signal} ({i.phase}): figures kept, not judged"]
    if e.stopped_early:
        return EXIT_UNREACHABLE, [f"stopped early: {e.stopped_early}"]
    failed = [g["line"] for g in gates if not g["passed"]]
    return (EXIT_GATE, failed) if failed else (EXIT_OK, [])


def junit(out: Outcome, label: str) -> str:
    """The run's gates as JUnit XML, one test case each (--junit); an interrupted or early-stopped
    run is one failed case saying so."""
    cases = [Case(label, f"gate: {g['name']}", bool(g["passed"]), g["line"]) for g in out.results.get("gates", [])]
    if out.exit_code and not any(not c.passed for c in cases):
        cases.append(Case(label, "run completed", False, "; ".join(out.reasons) or f"exit {out.exit_code}"))
    return junit_xml(cases)


def _nothing_sent(e: Ended) -> str:
    """Why a test that ran has no figures: all it sent was warm-up, or it sent nothing (a master
    that no worker joined before its -t ran out)."""
    warm = e.steps.get(WARMUP_STEP)
    if warm is not None and warm.sent:
        return f"every request ({warm.sent}) was warm-up: nothing was measured (a shorter warm-up, or a longer -t)"
    why = (
        "no worker joined the master (start them with --worker; --expect-workers N waits for them)"
        if (e.run.get("runner") == "MasterRunner" and not e.workers)
        else "no user sent (-u 0?, or the run time ran out before the first send)"
    )
    return f"the test ran {e.ended_at - (e.started_at or e.ended_at):.0f} s and sent no request: {why}"


def build(e: Ended) -> Outcome:
    """The outcome of a run (no I/O). One that never started a test (nothing sent, not started)
    has nothing to print or write; one interrupted after its start is written, even empty, and so
    is a checkpoint (the first, at the test's start: the path then holds this run's file)."""
    if e.total.empty and (e.interruption is None and e.checkpoint is None or e.started_at is None):
        reasons = []
        code = EXIT_OK
        if e.interruption is not None:
            code, reasons = e.interruption.exit_code, [f"interrupted by {e.interruption.signal} before any request"]
        elif e.started_at is not None:  # a test ran and measured nothing: never a pass
            code, reasons = EXIT_GATE, [_nothing_sent(e)]
        return Outcome([], {}, code, reasons, measured=False)
    p = _parts(e)
    results = _results(e, p)
    code, reasons = exit_code(e, results["gates"])
    if e.checkpoint is not None:  # written, never printed: no summary to compose
        return Outcome([], plain(results), code, reasons, measured=True)
    blocks = _blocks(e, p) + [_end_lines(e, results["gates"])]
    return Outcome(blocks, plain(results), code, reasons, measured=True)


def _end_lines(e: Ended, gates: list[Gate]) -> str:
    """The summary's last lines: how the run stopped, and each gate passed or failed."""
    lines = []
    if e.interruption is not None:
        i = e.interruption
        lines.append(
            f"INTERRUPTED by {i.signal} at {time.strftime('%H:%M:%S', time.localtime(i.at))} ({i.phase}): "
            "the figures above are what was measured until then; no verdict is drawn from them"
        )
    if e.stopped_early:
        lines.append(f"STOPPED EARLY: {e.stopped_early}")
    for g in gates:
        lines.append(f"{'pass' if g['passed'] else 'FAIL'}: {g['line']}")
    hint = next_steps(e.settings, e.run.get("load") or {})
    if hint and e.interruption is None:
        lines.append(hint)
    return "\n".join(lines)
