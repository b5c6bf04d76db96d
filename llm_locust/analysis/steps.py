"""Per-step results of a load ladder: pure arithmetic on an `Aggregate`, no Locust.

    step_result(agg, *, step, offered, offered_kind, window, warmup, slos) -> StepResult

Window definitions follow the metrics spec (docs/metrics.md, docs/load-shapes.md):

- **Steady-state output tokens/s**: tokens whose chunk arrived inside the measurement window
  (after warm-up), read from the per-second series, / the window's length. The series is kept by
  whole wall-clock second: the seconds wholly inside the window count fully, the two partial
  seconds at its edges by the fraction of them inside it (pro-rated: tokens are taken as evenly
  spread within one second). The error this can make is at most a quarter of the difference
  between two adjacent steps' rates over one second, while counting only whole seconds would
  drop up to two seconds of data, a large share of a short window.
- **Achieved requests/s**: ok requests that ended inside the window (same pro-rating) / its length.
- **Aggregate output tokens/s**: the spec's definition: N_out of the ok requests in `agg` /
  (last t_end - first t_sent), ramp-up and drain included.
- **Error rate**: failed / (finished - cancelled).
- **Goodput**: the steady-state rates scaled by the share of ok requests (and of their tokens) that
  met every per-request SLO, as counted by the aggregate when the requests were added.
- **Concurrency (Little's law)**: sum of E2E of the finished requests / the aggregate's span.

The SLO vocabulary (one SLO = an upper bound; a step "meets" it from its own percentiles):

- a per-request name of `SLO_METRICS` (`ttft`, `ttft_queue`, `tpot`, `e2e`, `e2e_queue`) applies
  to the step's p99 of that latency; `itl_max` (a request's largest per-token gap) to the step's
  largest ITL sample;
- `METRIC_STAT` with METRIC a latency (`ttft`, `ttft_content`, `ttft_queue`, `schedule_lag`,
  `itl`, `inter_chunk`, `tpot`, `e2e`, `e2e_queue`) and STAT one of p50, p90, p95, p99, p99.9
  (or p999), mean, max: that figure of the step, e.g. `ttft_p50`, `itl_p99`, `e2e_max`;
  a bare `itl`, `inter_chunk`, `ttft_content` or `schedule_lag` means its p99;
- `error_rate`: the step's error rate (a fraction, 0.01 = 1%).

Latencies are in seconds. A step with no ok request meets no SLO. Per-request goodput (counted by
the aggregate) uses the per-request names; a percentile-qualified SLO on a per-request metric
(`ttft_p50: 0.2`) also limits that metric per request when no bare SLO is given for it (the
loosest such limit is used): see `request_slos`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from llm_locust.metrics.aggregate import LATENCIES, SLO_METRICS, Aggregate, figures, validity
from llm_locust.metrics.records import Outcome
from llm_locust.schema import Accuracy, CacheFigures, Intervals, Latency

OFFERED_KINDS = ("concurrency", "rate", "speed")
OFFERED_UNITS = {"concurrency": "users", "rate": "req/s", "speed": "x"}

# ---- the SLO vocabulary ----

SLO_STATS = ("p50", "p90", "p95", "p99", "p99.9", "mean", "max")
_STAT_ALIASES = {"p999": "p99.9"}
STEP_LATENCIES = LATENCIES  # ttft, ttft_content, ttft_queue, schedule_lag, itl, inter_chunk, tpot, e2e, e2e_queue
ERROR_RATE = "error_rate"


def slo_vocabulary() -> str:
    """One line naming every accepted SLO name (for error messages)."""
    return (
        f"per request ({', '.join(m for m in SLO_METRICS if m != 'itl_max')}: the step's p99; "
        "itl_max: its largest ITL), "
        f"METRIC_STAT with METRIC one of {', '.join(STEP_LATENCIES)} and STAT one of "
        f"{', '.join(SLO_STATS)} (e.g. ttft_p50, itl_p99), a bare METRIC (its p99), or {ERROR_RATE}"
    )


def parse_slo_name(name: str) -> tuple[str, str | None]:
    """(histogram, stat) for a latency SLO, or ("error_rate", None). ValueError lists the vocabulary."""
    if name == ERROR_RATE:
        return ERROR_RATE, None
    if name == "itl_max":
        return "itl", "max"
    if name in STEP_LATENCIES:
        return name, "p99"
    metric, _, stat = name.rpartition("_")
    stat = _STAT_ALIASES.get(stat, stat)
    if metric in STEP_LATENCIES and stat in SLO_STATS:
        return metric, stat
    raise ValueError(f"unknown SLO metric {name!r}; known: {slo_vocabulary()}")


def check_slo_names(slos: dict[str, float]) -> None:
    """ValueError naming the first unknown SLO name or bad limit."""
    for name, limit in slos.items():
        parse_slo_name(name)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit < 0:
            raise ValueError(
                f"SLO {name}: the limit must be a number >= 0 (seconds, or a fraction for error_rate), got {limit!r}"
            )


def request_slos(slos: dict[str, float]) -> dict[str, float]:
    """The per-request SLOs (names of `SLO_METRICS`) an `Aggregate` counts goodput with.

    A bare per-request name is used as given; for a per-request metric given only with a stat
    (`ttft_p50: 0.2`, `e2e_p99: 3`), the loosest of those limits applies per request.
    """
    out: dict[str, float] = {}
    loosest: dict[str, float] = {}
    for name, limit in slos.items():
        if name in SLO_METRICS:
            out[name] = float(limit)
            continue
        metric, stat = parse_slo_name(name)
        if stat is not None and metric in SLO_METRICS and metric != "itl_max":
            loosest[metric] = max(loosest.get(metric, 0.0), float(limit))
    for metric, limit in loosest.items():
        out.setdefault(metric, limit)
    return out


# ---- per-step results ----

LATENCY_COLUMNS = ("ttft", "itl", "tpot", "e2e")  # the latencies every step reports p50/p90/p99 of


@dataclass
class StepResult:
    step: int
    offered: float
    offered_kind: str  # concurrency | rate | speed
    window_start: float  # wall clock, the measurement window (after warm-up)
    window_end: float
    warmup: float
    steady_seconds: tuple[float, float]  # the span the steady-state rates were read over
    sent: int
    ok: int
    failed: int
    cancelled: int
    error_rate: float
    requests_per_s: float  # achieved, steady state
    output_tokens_per_s: float  # steady state: used for saturation analysis
    aggregate_output_tokens_per_s: float  # spec: N_out / (last t_end - first t_sent)
    aggregate_requests_per_s: float
    latency: Latency  # metric -> summary (count, mean, min, max, p50 .. p99.9), seconds
    goodput_requests_per_s: float | None  # None: no per-request SLO given
    goodput_tokens_per_s: float | None
    slo_attainment: float | None  # share of ok requests that met every per-request SLO
    concurrency: float  # Little's law
    client_valid: bool
    length_checked: int
    length_mismatch: int
    tokens_out: int
    slos: dict[str, float] = field(default_factory=dict)
    slo_broken: list[str] = field(default_factory=list)  # "ttft p99 0.812 s > 0.5 s"
    flags: list[str] = field(default_factory=list)  # client_saturated, errors, length_mismatch, no_data
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    # prompt-cache reuse of the step (metrics.aggregate figures()["cache"]); None: nothing reported
    cache: CacheFigures | None = None
    # accuracy under load (--graded; metrics.aggregate figures()["accuracy"]): {graded, correct,
    # accuracy}; None: no graded item ended ok in the step
    accuracy: Accuracy | None = None
    # the 95% intervals of the step's figures over its requests (metrics/blocks.py); None: none kept
    intervals: Intervals | None = None

    @property
    def window(self) -> float:
        return self.window_end - self.window_start

    @property
    def slos_met(self) -> bool | None:
        """True when every SLO held, None when no SLO was given."""
        if not self.slos:
            return None
        return not self.slo_broken

    def stat(self, metric: str, stat: str = "p50") -> float | None:
        """A latency figure in seconds (None when the step has no sample of it)."""
        stats: Mapping[str, Any] = self.latency.get(metric) or {}
        return stats.get(stat)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steady_seconds"] = list(self.steady_seconds)
        d["window"] = self.window
        d["slos_met"] = self.slos_met
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepResult:
        d = dict(d)
        d.pop("window", None)
        d.pop("slos_met", None)
        d["steady_seconds"] = tuple(d["steady_seconds"])
        return cls(**d)


def steady_counts(
    series: dict[int, list[int]], start: float, end: float
) -> tuple[float, float, float, float, float, float]:
    """(tokens, ok, failed, seconds, span start, span end) of a series inside [start, end].

    Each second [s, s + 1) counts by the fraction of it inside the window: whole seconds fully,
    the two edge seconds pro-rated. A row folded into a wider bucket (metrics/timeseries.py
    Seconds: a run older than 6 h) counts by the fraction of its span inside, its counts taken as
    spread evenly over it.
    """
    tokens = ok = failed = 0.0
    for s, b, span in _rows(series, start, end):
        share = max(0.0, min(end, s + span) - max(start, s)) / span
        tokens += b[0] * share
        ok += b[1] * share
        failed += b[2] * share
    return tokens, ok, failed, max(0.0, end - start), start, end


def _rows(series: dict[int, list[int]], start: float, end: float) -> list[tuple[int, list[int], int]]:
    """The rows of a series that overlap [start, end), each with the seconds it spans: its own
    second, or the part of a folded bucket below the series' fold (rows of a plain dict with a
    4th item, as the results file keeps them, span that many seconds)."""
    tl = getattr(series, "timeline", None)
    folded = tl.folded if tl is not None else None
    lo, hi = math.floor(start), math.ceil(end)
    out = []
    if tl is not None and folded is not None and lo < folded:
        w = tl.width
        for s in range(lo - lo % w, min(hi, folded), w):
            b = series.get(s)
            if b:
                out.append((s, b, min(s + w, folded) - s))
        lo = max(lo, folded)
    for s in range(lo, hi):
        b = series.get(s)
        if b:
            out.append((s, b, b[3] if len(b) > 3 and b[3] > 1 else 1))
    return out


def window_rates(series: dict[int, list[int]], start: float, end: float, window: float) -> list[float]:
    """Output tokens/s of consecutive windows of `window` seconds from start (whole windows only
    that end by `end`), each read like the steady-state rate: the stability rule's input."""
    out = []
    t = start
    while t + window <= end + 1e-9:
        tokens, _ok, _failed, seconds, _s0, _s1 = steady_counts(series, t, t + window)
        out.append(tokens / seconds if seconds > 0 else 0.0)
        t += window
    return out


def step_result(
    agg: Aggregate,
    *,
    step: int,
    offered: float,
    offered_kind: str,
    window: tuple[float, float],
    warmup: float,
    slos: dict[str, float],
    series: dict[int, list[int]] | None = None,
    max_error_rate: float = 0.01,
) -> StepResult:
    """The figures of one step (see the module doc for the definitions).

    agg: the step's aggregate (its latencies, outcomes, goodput counts). window: the wall-clock
    measurement window (after warm-up). series: the per-second series to read the steady-state
    rates from; default `agg.series`. Pass the whole run's merged series when requests of the
    previous step may still deliver tokens inside this window (their tokens count: they arrived
    inside it). max_error_rate: above it the step is flagged "errors".
    The step's `intervals`: see _intervals.
    """
    if offered_kind not in OFFERED_KINDS:
        raise ValueError(f"offered_kind must be one of {', '.join(OFFERED_KINDS)}, got {offered_kind!r}")
    start, end = float(window[0]), float(window[1])
    if end < start:
        raise ValueError(f"window ends before it starts: {window!r}")
    check_slo_names(slos)
    f = figures(agg)
    tokens, ok_n, _failed_n, seconds, s0, s1 = steady_counts(agg.series if series is None else series, start, end)
    tps = tokens / seconds if seconds > 0 else 0.0
    rps = ok_n / seconds if seconds > 0 else 0.0
    ok = agg.outcomes.get(Outcome.OK.value, 0)
    per_request = request_slos(slos)
    attainment: float | None
    good_rps: float | None
    good_tps: float | None
    if per_request and ok:
        attainment = agg.goodput_requests / ok
        token_share = agg.goodput_tokens / agg.tokens_out if agg.tokens_out else attainment
        good_rps, good_tps = rps * attainment, tps * token_share
    elif per_request:
        attainment, good_rps, good_tps = 0.0, 0.0, 0.0
    else:
        attainment = good_rps = good_tps = None
    latency = f["latency"]
    valid = f["client"]["valid"]
    flags = validity(f, max_error_rate)
    res = StepResult(
        step=step,
        offered=float(offered),
        offered_kind=offered_kind,
        window_start=start,
        window_end=end,
        warmup=float(warmup),
        steady_seconds=(s0, s1),
        sent=agg.sent,
        ok=ok,
        failed=agg.failed,
        cancelled=agg.cancelled,
        error_rate=f["error_rate"],
        requests_per_s=rps,
        output_tokens_per_s=tps,
        aggregate_output_tokens_per_s=f["output_tokens_per_s"],
        aggregate_requests_per_s=f["requests_per_s"],
        latency=latency,
        goodput_requests_per_s=good_rps,
        goodput_tokens_per_s=good_tps,
        slo_attainment=attainment,
        concurrency=f["concurrency"],
        client_valid=valid,
        length_checked=agg.length_checked,
        length_mismatch=agg.length_mismatch,
        tokens_out=agg.tokens_out,
        slos=dict(slos),
        errors=agg.errors,
        flags=flags,
        cache=f.get("cache"),
        accuracy=f.get("accuracy"),
        intervals=_intervals(agg, f, start, end),
    )
    res.slo_broken = broken_slos(res, slos)
    return res


def _intervals(agg: Aggregate, f: Mapping[str, Any], start: float, end: float) -> Intervals | None:
    """The step's intervals: its latencies' over its requests; its rates' over the window, from
    the time blocks its requests ended in, the first median E2E of the window left out (few of
    its requests can have ended yet: a ramp, not noise)."""
    own: Intervals | None = f.get("intervals")
    e2e = (f["latency"].get("e2e") or {}).get("p50") or 0.0
    window = agg.blocks.intervals(start + e2e, end) if end > start + e2e else None
    if own is None or window is None:
        return own
    return cast(Intervals, {**own, "rates": window["rates"], "blocks": window["blocks"], "block_s": window["block_s"]})


def slo_value(step: StepResult, name: str) -> float | None:
    """The step's figure an SLO name is judged on (None: no sample)."""
    metric, stat = parse_slo_name(name)
    if stat is None:  # error_rate, the one SLO name without a stat
        return step.error_rate
    return step.stat(metric, stat)


def broken_slos(step: StepResult, slos: dict[str, float]) -> list[str]:
    """Why the step failed its SLOs, one string per SLO broken; empty when all held."""
    out = []
    if slos and not step.ok:
        return ["no successful request"]
    for name, limit in slos.items():
        metric, stat = parse_slo_name(name)
        if metric == ERROR_RATE:
            if step.error_rate > limit:
                out.append(f"error_rate {step.error_rate:.1%} > {limit:.1%}")
            continue
        value = slo_value(step, name)
        if value is None:
            out.append(f"{metric} {stat}: no sample")
        elif value > limit:
            out.append(f"{metric} {stat} {_secs(value)} > {_secs(limit)}")
    return out


def _secs(v: float) -> str:
    return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"


# ---- the table ----


def _num(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    ms = v * 1000
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"
