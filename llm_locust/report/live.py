"""The LLM view's data: compact JSON built from the hub's existing aggregates. No Flask, no Locust.

`LiveView.payload(get_inputs, since)` is what GET /llm/data returns. It is cheap for the master,
and short enough never to stall a local runner's event loop (the load runs in that same loop):

- the snapshot is computed at most once per `SAMPLE_S` (1 s), whoever polls; polls in between
  get the cached snapshot, sliced by `since`;
- "recent" percentiles (the last `WINDOW_S` seconds) come from the difference between the HDR
  counts now and a sparse snapshot of them taken about `WINDOW_S` seconds ago
  (`Histogram.percentiles_of`, numpy over the counts array);
- a ladder step's figures come from `steps.step_result`, as in the final report (figures, flags,
  SLO verdicts); a finished step is recomputed only when its aggregate changes (late worker
  reports); the saturation verdict (`saturation.analyse`) only when the set of finished steps
  changes;
- series are sent incrementally: points newer than `since` (the `now` of the client's previous
  payload), plus a re-sent tail of the per-second series, which keeps changing for about one
  E2E after each second (a request's tokens are folded in by arrival second when it ends).

Each figure the results also hold is read from the results' own code, never recomputed here:
the counts and whole-window rates from `metrics.aggregate.totals` (the summary's error rate,
duration, tokens/s, requests/s), the latencies from `latency_figures`, the client's validity from
`client_figures` / `client_line`, the prompt cache from `CacheCounts.figures`, each endpoint's and
model's row from `GroupFigures.figures`, a step's from `steps.step_result`, the verdict from
`saturation.analyse`. Only the "recent" figures are the view's own (`recent_counts`,
`CountsRing`): rates and percentiles over the last `WINDOW_S` seconds, a rolling window the
results have no counterpart of (they describe a whole window once it has ended).

While a test runs, `runtime.webui.install` takes one snapshot a second whether or not a page polls, so
the latency-over-time history (the hub keeps no per-second histograms) covers the whole test.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llm_locust.analysis import refine
from llm_locust.analysis.saturation import MIN_STEPS, analyse
from llm_locust.analysis.steps import OFFERED_UNITS, StepResult, step_result
from llm_locust.metrics.aggregate import (
    LAG_LIMIT,
    Aggregate,
    client_figures,
    client_line,
    latency_figures,
    totals,
    validity_rule,
)
from llm_locust.metrics.histogram import Histogram
from llm_locust.metrics.records import FAILURE_KINDS

VERSION = 1
LATENCY_VIEW = ("ttft", "itl", "tpot", "e2e")
# the request phases (docs/metrics.md "Request phases"), over the run: rows under the latencies
PHASE_VIEW = ("phase_connect", "phase_send", "phase_wait", "phase_first_token", "phase_receive")
PCTS = (50.0, 90.0, 99.0)
WINDOW_S = 10.0  # "recent": rates and percentiles over the last 10 s
SAMPLE_S = 1.0  # the snapshot is recomputed at most this often
HISTORY = 7200  # latency / load samples kept (2 h at one a second)
TAIL_MIN_S, TAIL_MAX_S = 10, 300  # per-second series re-sent each poll: lag + E2E p99, within these
MAX_ERROR_TEXTS = 3  # per failure kind, in the payload


# ---- percentiles over a recent window ----


class CountsRing:
    """Sparse snapshots of histogram counts, to read percentiles over a recent window."""

    def __init__(self, names: tuple[str, ...], window: float = WINDOW_S) -> None:
        self.names = names
        self.window = window
        self.snaps: list[tuple[float, dict[str, tuple[np.ndarray, np.ndarray]]]] = []

    def add(self, t: float, hists: dict[str, Histogram]) -> None:
        snap = {}
        for name in self.names:
            c = hists[name].counts()
            idx = np.flatnonzero(c)
            snap[name] = (idx, c[idx].astype(np.int64))
        self.snaps.append((t, snap))
        # keep the newest snapshot at or before t - window, and everything after it
        while len(self.snaps) > 1 and self.snaps[1][0] <= t - self.window:
            self.snaps.pop(0)

    def base(self, t: float) -> tuple[float, dict] | None:
        """The snapshot the recent window starts from (the oldest kept, at most `window` old)."""
        return self.snaps[0] if self.snaps and self.snaps[0][0] < t else None

    def recent(self, t: float, hists: dict[str, Histogram], pcts=PCTS) -> tuple[float | None, dict[str, dict | None]]:
        """(window start, {name: percentiles of the samples recorded since then})."""
        base = self.base(t)
        out: dict[str, dict | None] = {}
        for name in self.names:
            c = hists[name].counts().astype(np.int64)
            if base is not None:
                idx, vals = base[1][name]
                c[idx] -= vals
                if (c < 0).any():  # the histogram was reset: count from zero
                    c = hists[name].counts().astype(np.int64)
            out[name] = hists[name].percentiles_of(c, pcts)
        return (base[0] if base else None), out


def recent_counts(
    series: dict[int, list], now: float, lag: float, window: float, started_at: float | None
) -> tuple[int, float, tuple[float, float, float]]:
    """(end second, seconds covered, (tokens, ok, failed)) of the recent window: the complete
    seconds before `end` (now - lag), at most `window` of them, none before the test's start. The
    seconds before Start sent nothing: counted in, they made the first seconds' rates look low
    (3 s into a test, "last 10 s" was 3 s of tokens over 10). The start's own second counts from
    the start on (its requests were all sent after it), so 2.5 s in, the window is 2.5 s (0 or
    less: nothing complete yet, no rate). A rolling window, not the results' whole-window rates
    (`metrics.aggregate.totals`, shown under "totals"): these differ from them on purpose."""
    end = int(now - lag)
    start = float(end - int(window))
    if started_at is not None:
        start = max(start, started_at)
    tok = okn = fail = 0.0
    for sec in range(math.floor(start), end):
        b = series.get(sec)
        if b:
            tok += b[0]
            okn += b[1]
            fail += b[2]
    return end, max(0.0, end - start), (tok, okn, fail)


# ---- inputs ----


@dataclass
class LadderInputs:
    kind: str
    levels: list[float]
    warmup: float
    duration: float
    requests: int
    windows: list[dict[str, Any]]  # StepWindow.to_dict(): step, level, started, measured_from, ended, extended
    done: bool
    stop_reason: str | None
    slos: dict[str, float]
    refine_from: int = 0  # --refine: the first refine step's index (its verdict: the ladder's own steps'); 0: none


@dataclass
class Inputs:
    """Everything the view reads, as plain values (the Flask glue collects them)."""

    now: float
    state: str
    users: int
    in_flight: int
    total: Aggregate
    steps: dict[int, Aggregate]
    current_step: int = 0
    started_at: float | None = None
    lag: float = 1.0  # seconds until a second of the series is complete (master: one report interval)
    ladder: LadderInputs | None = None
    workers: list[dict[str, Any]] | None = None  # master only
    server: Any = None  # server_metrics.ServerSeries
    gpu: Any = None
    # shape, users, spawn_rate, host; run_time (s, -t: each start from the UI stops that long after
    # it) and stops_at (epoch s: when the running test stops; None when none is due)
    control: dict[str, Any] = field(default_factory=dict)
    slos: dict[str, float] = field(default_factory=dict)  # per-request SLOs (goodput)
    # the sending processes over their token-rate ceiling: "worker 1: 18,700 tokens/s over 14,000"
    over_ceiling: list[str] = field(default_factory=list)


# ---- the view ----


def _r(x: float | None, nd: int = 4) -> float | None:
    if x is None or isinstance(x, bool):
        return x
    if not math.isfinite(x):
        return None
    return round(x, nd)


def _lat(d: dict | None, keys=("p50", "p90", "p99")) -> dict | None:
    if not d:
        return None
    return {k: _r(d[k], 6) for k in keys if d.get(k) is not None}


class LiveView:
    def __init__(
        self, *, sample_s: float = SAMPLE_S, window: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sample_s = sample_s
        self.window = window
        self.clock = clock
        self._at = -math.inf  # monotonic time of the cached snapshot
        self._snap: dict[str, Any] | None = None
        self.ring = CountsRing(LATENCY_VIEW + ("loop_lag",), window)
        # samples while watched: columns
        self.samples: dict[str, list] = {
            k: []
            for k in (
                "t",
                "users",
                "in_flight",
                "step",
                *(f"{m}_{p}" for m in LATENCY_VIEW for p in ("p50", "p99")),
            )
        }
        self._step_cache: dict[int, tuple[Any, dict, StepResult]] = {}  # finished steps: index -> (key, row, result)
        self._verdict_key: Any = None
        self._verdict: dict | None = None
        self.computations = 0  # snapshots computed (for tests and benchmarks)
        self._refs: tuple = ({}, None, None)  # the total's per-second series, server and GPU series

    # -- the cached part --

    def snapshot(self, inp: Inputs) -> dict[str, Any]:
        """Compute the snapshot now (use `refresh` for the cached one)."""
        self._at = self.clock()
        self.computations += 1
        self._snap = self._compute(inp)
        return self._snap

    def _compute(self, inp: Inputs) -> dict[str, Any]:
        now = inp.now
        total = inp.total
        hists = total.hist
        self.ring.add(now, hists)
        since_t, recent_lat = self.ring.recent(now, hists)
        run_lat = dict(latency_figures(total, LATENCY_VIEW))
        run_lat.update({m: ph for m in PHASE_VIEW if m in hists and (ph := hists[m].summary())["count"]})
        # the counts and whole-window rates: the summary's own figures (metrics.aggregate.totals)
        tot = totals(total)
        span = tot["duration_s"]

        # recent rates from the per-second series, over the complete seconds since the test's start
        end_sec, w, (tok, okn, fail) = recent_counts(total.series, now, inp.lag, self.window, inp.started_at)

        # client validity, run so far and now
        lag_recent = recent_lat.get("loop_lag")
        client = client_figures(total)  # the same checks, thresholds and words as the summary's
        valid = client["valid"]
        reasons = list(client["reasons"])
        if inp.workers:
            busy = [w_ for w_ in inp.workers if (w_.get("cpu") or 0) >= 90]
            if busy:
                reasons.append(f"{len(busy)} worker(s) at >= 90% CPU now")
        # now: the last seconds' loop lag, at its p99, within the lag limit of the client checks
        valid_now = lag_recent is None or (lag_recent.get("p99") or 0) <= LAG_LIMIT

        # samples (the history, one a second while a test runs)
        s = self.samples
        s["t"].append(_r(now, 2))
        s["users"].append(inp.users)
        s["in_flight"].append(inp.in_flight)
        s["step"].append(inp.current_step)
        for m in LATENCY_VIEW:
            d = recent_lat.get(m) or {}
            s[f"{m}_p50"].append(_r(d.get("p50"), 6))
            s[f"{m}_p99"].append(_r(d.get("p99"), 6))
        if len(s["t"]) > 2 * HISTORY:
            for k in s:
                del s[k][: len(s[k]) - HISTORY]

        failures = {}
        for kind in FAILURE_KINDS:
            n = total.outcomes.get(kind, 0)
            if n:
                texts = sorted((total.errors.get(kind) or {}).items(), key=lambda kv: -kv[1])[:MAX_ERROR_TEXTS]
                failures[kind] = {"n": n, "texts": [[t[:200], c] for t, c in texts]}

        e2e_p99 = run_lat["e2e"].get("p99") or 0.0
        tail = int(min(TAIL_MAX_S, max(TAIL_MIN_S, inp.lag + e2e_p99 + 2)))
        snap: dict[str, Any] = {
            "v": VERSION,
            "now": _r(now, 3),
            "state": inp.state,
            "users": inp.users,
            "in_flight": inp.in_flight,
            "started_at": _r(inp.started_at, 3),
            "control": inp.control,
            "totals": {
                "sent": tot["sent"],
                "finished": tot["finished"],
                "ok": tot["ok"],
                "failed": tot["failed"],
                "cancelled": tot["cancelled"],
                "client_cancelled": tot["client_cancelled"],
                "error_rate": _r(tot["error_rate"], 5),
                "tokens_in": tot["tokens_in"],
                "tokens_out": tot["tokens_out"],
                "duration_s": _r(span, 2),
                "output_tokens_per_s": _r(tot["output_tokens_per_s"], 2),
                "requests_per_s": _r(tot["requests_per_s"], 3),
                "length_checked": tot["length_checked"],
                "length_mismatch": tot["length_mismatch"],
                "goodput_requests": total.goodput_requests if inp.slos else None,
            },
            "recent": {
                "window_s": _r(w, 1),
                "from": _r(since_t, 2),
                "output_tokens_per_s": _r(tok / w, 2) if w > 0 else None,
                "requests_per_s": _r(okn / w, 3) if w > 0 else None,
                "failures_per_s": _r(fail / w, 3) if w > 0 else None,
                "latency": {m: _lat(recent_lat.get(m), ("p50", "p99")) for m in LATENCY_VIEW},
            },
            "latency": {
                m: (
                    {"count": d["count"], **{k: _r(d[k], 6) for k in ("mean", "max", "p50", "p90", "p99")}}
                    if d["count"]
                    else None
                )
                for m, d in run_lat.items()
            },
            "failures": failures,
            "client": {
                "valid": valid,
                "verdict": client["verdict"],  # valid, suspect, unknown (no check had its samples)
                "valid_now": valid_now,
                "reasons": reasons,
                "line": client_line(client),  # the summary's line: each check against its limit
                "loop_lag_p99": _r(client["loop_lag"].get("p99"), 6),
                "loop_lag_p99_recent": _r((lag_recent or {}).get("p99"), 6),
                "cpu_max": _r(client["cpu_max_percent"], 1),
                "over_ceiling": inp.over_ceiling,
                "cpu_high_share": _r(client["cpu_high_samples"] / client["cpu_samples"], 3)
                if client["cpu_samples"]
                else None,
            },
            "workers": inp.workers,
            "series_tail": tail,
            "series_end": end_sec,  # seconds before this one are complete (up to late requests)
        }
        snap["cache"] = _cache_view(total)
        snap["groups"] = _groups_view(total, span)
        snap["step"], snap["ladder"] = self._ladder(inp)
        snap["_series_first"] = min(total.series) if total.series else None
        return snap

    def _ladder(self, inp: Inputs) -> tuple[dict | None, dict | None]:
        ld = inp.ladder
        if ld is None:
            return None, None
        now = inp.now
        rows, finished = [], []
        for w in ld.windows:
            if w["measured_from"] is None:
                rows.append(
                    {
                        "step": w["step"],
                        "offered": w["level"],
                        "started": _r(w["started"], 2),
                        "measured_from": None,
                        "ended": None,
                        "phase": "warmup",
                        "changed": _r(now, 3),
                    }
                )
                continue
            row, res = self._step(inp, ld, w)
            rows.append(row)
            if w["ended"] is not None:
                finished.append(res)
        cur = ld.windows[-1] if ld.windows else None
        step = None
        if cur is not None:
            if cur["ended"] is not None:
                phase = "done"
            elif cur["measured_from"] is None:
                phase = "warmup"
            else:
                phase = "measuring"
            step = {
                "index": cur["step"],
                "of": len(ld.levels),
                "level": cur["level"],
                "kind": ld.kind,
                "unit": OFFERED_UNITS.get(ld.kind, ""),
                "phase": phase,
                "elapsed": _r(now - cur["started"], 1),
                "planned": _r(ld.duration + (cur.get("extended") or 0.0), 1),
                "warmup": ld.warmup,
            }
        verdict = self._verdict_for(finished, ld, now)
        ladder = {
            "kind": ld.kind,
            "unit": OFFERED_UNITS.get(ld.kind, ""),
            "levels": ld.levels,
            "warmup": ld.warmup,
            "duration": ld.duration,
            "requests": ld.requests,
            "done": ld.done,
            "stop_reason": ld.stop_reason,
            "slos": ld.slos,
            "steps": rows,
            "verdict": verdict,
        }
        return step, ladder

    def _step(self, inp: Inputs, ld: LadderInputs, w: dict[str, Any]) -> tuple[dict[str, Any], StepResult]:
        """(table row, StepResult) of a measured step; a finished one is cached until its aggregate changes."""
        idx = w["step"]
        agg = inp.steps.get(idx) or Aggregate()
        key = (w["ended"], agg.sent, agg.finished, agg.client.cpu_samples, agg.hist["loop_lag"].count)
        cached = self._step_cache.get(idx)
        if cached is not None and cached[0] == key and w["ended"] is not None:
            return cached[1], cached[2]
        end = w["ended"] if w["ended"] is not None else inp.now
        # as LadderController.results() calls step_result: the final report's figures and flags
        res = step_result(
            agg,
            step=idx,
            offered=w["level"],
            offered_kind=ld.kind,
            window=(w["measured_from"], end),
            warmup=ld.warmup,
            slos=ld.slos,
            series=inp.total.series,
        )
        row = {
            "step": idx,
            "offered": w["level"],
            "started": _r(w["started"], 2),
            "measured_from": _r(w["measured_from"], 2),
            "ended": _r(w["ended"], 2),
            "phase": "done" if w["ended"] is not None else "measuring",
            **_step_row(res),
            "changed": _r(inp.now, 3),
        }
        self._step_cache[idx] = (key, row, res)
        return row, res

    def _verdict_for(self, finished: list[StepResult], ld: LadderInputs, now: float) -> dict | None:
        if not finished:
            return None
        key = (tuple((r.step, r.sent, r.ok, r.failed) for r in finished), ld.done)
        if key == self._verdict_key:
            return self._verdict
        if ld.refine_from:  # as the results' verdict: the ladder's own steps, narrowed by the refine steps
            own = sorted((r for r in finished if r.step < ld.refine_from), key=lambda r: r.offered)
            v = analyse(own, ld.slos) if own else analyse(finished, ld.slos)
            refine.apply(v, own, [r for r in finished if r.step >= ld.refine_from])
        else:
            v = analyse(finished, ld.slos)
        sat = v.saturation
        self._verdict_key = key
        self._verdict = {
            "final": ld.done,
            "steps_used": len(finished),
            "min_steps": MIN_STEPS,
            "found": sat is not None,
            "offered": sat["offered"] if sat else None,
            "step": sat["step"] if sat else None,
            "output_tokens_per_s": _r(sat["output_tokens_per_s"], 1) if sat else None,
            "knee_by": v.knee_by,
            "max_slo_load": v.max_slo_load,
            "max_slo_step": v.max_slo_step,
            "reason": v.reason,
            "text": v.format(),
            "changed": _r(now, 3),
        }
        return self._verdict

    # -- per request --

    def refresh(self, get_inputs: Callable[[], Inputs]) -> dict[str, Any]:
        """The cached snapshot, recomputed first when older than `sample_s`."""
        snap = self._snap
        if snap is None or self.clock() - self._at >= self.sample_s:
            inp = get_inputs()
            snap = self.snapshot(inp)
            self._refs = (inp.total.series, inp.server, inp.gpu)
        return snap

    def payload(self, get_inputs: Callable[[], Inputs], since: float = 0.0) -> dict[str, Any]:
        """The JSON for one poll: the cached snapshot plus what is newer than `since`; the ladder's
        step rows (by "step") and its verdict only where they changed after `since` (no "verdict"
        key: unchanged).

        `get_inputs` is called only when the snapshot is recomputed."""
        snap = self.refresh(get_inputs)
        series, server, gpu = self._refs
        out = {k: v for k, v in snap.items() if not k.startswith("_")}
        ladder = snap["ladder"]
        if ladder is not None and since:  # rows and verdict only where they changed since the last poll
            out["ladder"] = ld = {k: v for k, v in ladder.items() if k not in ("steps", "verdict")}
            ld["steps"] = [r for r in ladder["steps"] if r["changed"] > since]
            if ladder["verdict"] is None or ladder["verdict"]["changed"] > since:
                ld["verdict"] = ladder["verdict"]
        if not since:  # the page's first poll: the rule of docs/metrics.md "Client validity", word for word
            out["client"] = {**out["client"], "rule": validity_rule()}
        out["samples"] = _slice_columns(self.samples, since)
        out["series"] = self.series(series, since, snap)
        out["server"] = server_columns(server, since, "server") if server is not None else None
        out["gpu"] = server_columns(gpu, since, "gpu") if gpu is not None else None
        return out

    @staticmethod
    def series(series: dict[int, list[int]], since: float, snap: dict[str, Any]) -> dict[str, Any]:
        """Per-second columns: seconds from max(first, since - tail) up to the last complete one."""
        first = snap.get("_series_first")
        end = snap["series_end"]
        if first is None or not series:
            return {"sec": [], "tokens": [], "ok": [], "failed": []}
        start = first if not since else max(first, int(since) - snap["series_tail"])
        folded = _spread_folded(series, start, end) if end - start > FOLDED_SCAN_S else {}
        sec, tokens, ok, failed = [], [], [], []
        for s in range(start, end):
            b = series.get(s) if s not in folded else folded[s]
            sec.append(s)
            if b:
                tokens.append(b[0])
                ok.append(b[1])
                failed.append(b[2])
            else:
                tokens.append(0)
                ok.append(0)
                failed.append(0)
        return {"sec": sec, "tokens": tokens, "ok": ok, "failed": failed}


FOLDED_SCAN_S = 3600  # a poll over more seconds than this (the page's first) may reach folded rows


def _spread_folded(series: dict[int, list[int]], start: int, end: int) -> dict[int, list[float]]:
    """The rows of a long run folded into wider buckets ([tokens, ok, failed, width], metrics/
    timeseries.py) that reach [start, end), spread evenly over their seconds as the report's plot
    spreads them (report/html.py _per_second): a bucket is not a one-second spike."""
    out: dict[int, list[float]] = {}
    for s0, b in series.items():
        width = int(b[3]) if len(b) > 3 else 1
        if width > 1 and s0 < end and s0 + width > start:
            for k in range(s0, s0 + width):
                out[k] = [b[0] / width, b[1] / width, b[2] / width]
    return out


def _slice_columns(cols: dict[str, list], since: float) -> dict[str, list]:
    t = cols["t"]
    i = bisect_right(t, since) if since else 0
    return {k: v[i:] for k, v in cols.items()}


def server_columns(series, since: float, which: str) -> dict[str, Any]:
    """Columns of a ServerSeries newer than `since` (server: KV cache, running, waiting, generated
    tokens/s; gpu: memory GiB, utilisation %), with its kind, URL and last error."""
    samples = series.samples
    i = bisect_right(samples, since, key=lambda s: s.t) if since else 0
    out: dict[str, Any] = {"kind": series.server, "url": series.url, "error": series.error, "t": []}
    keys: dict[str, list[Any]]
    if which == "server":
        keys = {"kv": [], "running": [], "waiting": [], "gen_tps": [], "preempt": []}
    else:
        keys = {"mem_gib": [], "mem_total_gib": [], "util": []}
    out.update(keys)
    prev = samples[i - 1] if i > 0 else None
    for s in samples[i:]:
        f = s.figures
        out["t"].append(_r(s.t, 2))
        if which == "server":
            kv = f.get("kv_cache_usage")
            out["kv"].append(_r(kv * 100, 2) if kv is not None else None)
            out["running"].append(f.get("running"))
            out["waiting"].append(f.get("waiting"))
            out["gen_tps"].append(_rate(prev, s, "generation_tokens_total"))
            out["preempt"].append(_rate(prev, s, "preemptions_total", per_s=False))
        else:
            used, tot, util = f.get("gpu_memory_used_bytes"), f.get("gpu_memory_total_bytes"), f.get("gpu_utilization")
            out["mem_gib"].append(_r(used / 2**30, 3) if used is not None else None)
            out["mem_total_gib"].append(_r(tot / 2**30, 3) if tot is not None else None)
            out["util"].append(_r(util * 100, 1) if util is not None else None)
        prev = s
    return out


def _rate(prev, cur, q: str, per_s: bool = True) -> float | None:
    if prev is None or q not in prev.figures or q not in cur.figures:
        return None
    inc = cur.figures[q] - prev.figures[q]
    if inc < 0:  # the server restarted
        return None
    if not per_s:
        return inc
    dt = cur.t - prev.t
    return _r(inc / dt, 2) if dt > 0 else None


def _step_row(r: StepResult) -> dict[str, Any]:
    lat = r.latency
    flags = list(r.flags)
    return {
        "requests_per_s": _r(r.requests_per_s, 3),
        "output_tokens_per_s": _r(r.output_tokens_per_s, 1),
        "ttft_p50": _r(lat["ttft"].get("p50"), 6),
        "ttft_p99": _r(lat["ttft"].get("p99"), 6),
        "itl_p50": _r(lat["itl"].get("p50"), 6),
        "itl_p99": _r(lat["itl"].get("p99"), 6),
        "tpot_p50": _r(lat["tpot"].get("p50"), 6),
        "e2e_p99": _r(lat["e2e"].get("p99"), 6),
        "error_rate": _r(r.error_rate, 5),
        "ok": r.ok,
        "failed": r.failed,
        "sent": r.sent,
        "goodput_requests_per_s": _r(r.goodput_requests_per_s, 3),
        "client_valid": r.client_valid,
        "length_checked": r.length_checked,
        "length_mismatch": r.length_mismatch,
        "flags": flags,
        "slo_broken": r.slo_broken,
    }


def run_time_text(control: dict[str, Any]) -> str:
    """What -t does to the web UI's runs, in words ("" without one)."""
    run_time = control.get("run_time")
    if not run_time:
        return ""
    stops_at = control.get("stops_at")
    if stops_at:
        at = time.strftime("%H:%M:%S", time.localtime(stops_at))
        return f"this test stops at {at} ({run_time:g} s after its start)"
    return f"each test started here stops {run_time:g} s after its start"


def summary_rows(snap: dict[str, Any]) -> list[dict[str, str]]:
    """A few rows for the "LLM" tab inside Locust's own UI (a plain two-column table)."""

    def ms(d: dict | None, k: str) -> str:
        v = (d or {}).get(k)
        return "-" if v is None else f"{v * 1000:.1f}"

    rec = snap["recent"]
    lat = rec["latency"]
    rows = [{"metric": "Live charts, steps and validity", "value": "open /llm (also linked under Reports)"}]
    stops = run_time_text(snap.get("control") or {})
    if stops:
        rows.append({"metric": "Run time (-t)", "value": stops})
    st = snap.get("step")
    if st:
        rows.append(
            {"metric": "Load step", "value": f"{st['index']}/{st['of']}: {st['level']:g} {st['unit']} ({st['phase']})"}
        )
    v = (snap.get("ladder") or {}).get("verdict")
    if v:
        what = f"{v['offered']:g} (step {v['step']}, by {v['knee_by']})" if v["found"] else "not found yet"
        rows.append({"metric": "Saturation" + ("" if v["final"] else " (so far)"), "value": what})
    tps, rps = rec["output_tokens_per_s"], rec["requests_per_s"]
    rows += [
        {"metric": f"Output tokens/s (last {rec['window_s']:g} s)", "value": "-" if tps is None else f"{tps:,.0f}"},
        {"metric": f"Requests/s (last {rec['window_s']:g} s)", "value": "-" if rps is None else f"{rps:.3g}"},
        {"metric": "In flight", "value": str(snap["in_flight"])},
        {"metric": "TTFT p50 / p99 ms (recent)", "value": f"{ms(lat['ttft'], 'p50')} / {ms(lat['ttft'], 'p99')}"},
        {"metric": "ITL p50 / p99 ms (recent)", "value": f"{ms(lat['itl'], 'p50')} / {ms(lat['itl'], 'p99')}"},
        {"metric": "TPOT p50 / p99 ms (recent)", "value": f"{ms(lat['tpot'], 'p50')} / {ms(lat['tpot'], 'p99')}"},
        {"metric": "E2E p50 / p99 ms (recent)", "value": f"{ms(lat['e2e'], 'p50')} / {ms(lat['e2e'], 'p99')}"},
        {"metric": "Requests ok / failed", "value": f"{snap['totals']['ok']} / {snap['totals']['failed']}"},
        {
            "metric": "Failures by kind",
            "value": ", ".join(f"{k} {d['n']}" for k, d in snap["failures"].items()) or "none",
        },
        {
            "metric": "Client",
            "value": snap["client"].get("verdict", "valid")
            if snap["client"]["valid"]
            else "SUSPECT: " + "; ".join(snap["client"]["reasons"]),
        },
    ]
    t = snap["totals"]
    if t["length_mismatch"]:
        rows.append({"metric": "Output length mismatches", "value": f"{t['length_mismatch']} of {t['length_checked']}"})
    return rows


def _cache_view(total: Aggregate) -> dict[str, Any] | None:
    """The run's prompt-cache figures (docs/metrics.md, "Prompt cache"); None when nothing was reported."""
    c = total.cache
    if not c.any:
        return None
    f = c.figures()
    hit, miss = total.hist["ttft_cache_hit"], total.hist["ttft_cache_miss"]
    return {
        "reported": c.reported,
        "cached_tokens": c.cached,
        "prompt_tokens": c.prompt,
        "hit_ratio": _r(f["hit_ratio"], 4),
        "ideal_hit_ratio": _r(f["ideal_hit_ratio"], 4),
        "achieved_vs_ideal": _r(f["achieved_vs_ideal"], 4),
        "hits": c.hits,
        "misses": c.misses,
        "ttft_hit_p50": _r(hit.percentile(50), 6) if hit.count else None,
        "ttft_miss_p50": _r(miss.percentile(50), 6) if miss.count else None,
    }


def _groups_view(total: Aggregate, span: float) -> dict[str, list[dict[str, Any]]] | None:
    """Rows per endpoint and per model (a dimension with more than one value only), or None."""
    out = {}
    for dim, groups in total.groups.items():
        if len(groups) < 2:
            continue
        rows = []
        for key, g in sorted(groups.items()):
            f = g.figures(span)
            lat = f["latency"]
            rows.append(
                {
                    "key": key,
                    "ok": f["ok"],
                    "failed": f["failed"],
                    "output_tokens_per_s": _r(f["output_tokens_per_s"], 2),
                    "ttft_p50": _r(lat["ttft"].get("p50"), 6),
                    "ttft_p99": _r(lat["ttft"].get("p99"), 6),
                    "tpot_p50": _r(lat["tpot"].get("p50"), 6),
                    "e2e_p50": _r(lat["e2e"].get("p50"), 6),
                    "hit_ratio": _r((f.get("cache") or {}).get("hit_ratio"), 4),
                }
            )
        out[dim] = rows
    return out or None
