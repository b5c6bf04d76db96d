"""Saturation analysis of a load ladder: where throughput stops growing, and the highest load
that still met every SLO. Pure: reads `StepResult`s, knows nothing of Locust.

    analyse(steps, slos, *, sensitivity=1.0, ...) -> Verdict
    early_stop(steps, slos, *, max_error_rate, flat_steps=2, flat_tolerance=0.05) -> str | None

The method (docs/load-shapes.md has the long form):

1. **Kneedle** (Satopaa, Albrecht, Irwin, Raghavan 2011, "Finding a 'Kneedle' in a Haystack:
   Detecting Knee Points in System Behavior", through the `kneed` library: `KneeLocator`,
   concave, increasing, sensitivity S) on steady-state output tokens/s against offered load. The
   curve given to it is the running maximum of the throughputs (a server that thrashes past its
   knee, or a noisy dip, does not bend the curve back), and the load axis is log2 of the offered
   load when the ladder is geometric (a constant ratio between levels), linear otherwise, so every
   step weighs the same.
2. **Plateau rules** correct the candidate on noisy data. A later step j is a *significant gain*
   over step i when its throughput exceeds the best up to i by at least `flat_tolerance` (5%)
   AND by at least `min_elasticity` (0.1) times the relative load added (a doubling of the load
   must bring 10% more throughput). The knee moves back while the knee step was no significant
   gain over the step before (the plateau began earlier), then forward to the first later step
   that is a significant gain, if the median of the steps from there on is one too and it is
   backed by at least as many steps as the flat ones it skips (a lone noisy high does not move
   it). A knee pushed to the last step means "no knee found (still rising)". When Kneedle finds
   no knee the same forward rule is run from the first step.
3. **Latency criterion**: the step before the first one whose latency p50 (TTFT; E2E when no step
   has TTFT samples) is more than `1 + latency_rise` times (default 3x) the lowest-load step's AND
   grew more than `latency_growth` (1.5) times as fast as the offered load over the previous step
   (more than 3x for a doubling): queueing. Batching or CPU contention alone make latency grow at
   most about as fast as the load. (Past saturation a closed loop's E2E grows only as fast as the
   load, so without TTFT the throughput knee decides there.)
4. The **saturation point** is the lower of the throughput knee and the latency knee; `Verdict`
   says which rule set it. Fewer than 3 steps: no knee (too few points); a throughput flat within
   `flat_tolerance` over the whole ladder: saturated at (or below) the first step.

`max_slo_load` is the highest offered load whose step met every SLO (see `steps` for the SLO
vocabulary: `ttft` is judged on the step's p99, `ttft_p50` on its p50, ...). A step with no ok
request meets nothing.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llm_locust.analysis.steps import (
    LATENCY_COLUMNS,
    OFFERED_UNITS,
    StepResult,
    _ms,
    _num,
    broken_slos,
    check_slo_names,
)
from llm_locust.schema import KneePoint

FLAT_TOLERANCE = 0.05
MIN_ELASTICITY = 0.1
LATENCY_RISE = 2.0
LATENCY_GROWTH = 1.5
MIN_STEPS = 3


@dataclass
class Verdict:
    saturation: KneePoint | None  # the step at the knee: offered load, throughput, latencies
    max_slo_load: float | None  # highest offered load whose step met every SLO
    max_slo_step: int | None
    reasons: list[str] = field(default_factory=list)
    method: str = ""
    knee_by: str | None = None  # throughput | latency | flat | None
    candidates: dict[str, float | None] = field(default_factory=dict)  # offered load per rule
    offered_kind: str = ""
    knee_range: dict[str, Any] | None = None  # the knee's bracket (analysis.refine knee_range)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reason"] = self.reason
        return d

    def format(self) -> str:
        unit = OFFERED_UNITS.get(self.offered_kind, "")
        lines = []
        s = self.saturation
        if s is None:
            lines.append("saturation: not found")
        else:
            lat = s.get("latency", {})
            lines.append(
                f"saturation: {_load(s['offered'], unit)} (step {s['step']}, by {self.knee_by}): "
                f"{s['output_tokens_per_s']:,.0f} tok/s, {s['requests_per_s']:.3g} req/s, "
                f"TTFT p50/p99 {_ms(lat.get('ttft_p50'))}/{_ms(lat.get('ttft_p99'))} ms, "
                f"ITL p50 {_ms(lat.get('itl_p50'))} ms, "
                f"E2E p50/p99 {_ms(lat.get('e2e_p50'))}/{_ms(lat.get('e2e_p99'))} ms"
            )
        if self.knee_range and self.knee_range.get("text"):
            lines.append(f"  {self.knee_range['text']}")
        if self.max_slo_load is not None:
            lines.append(f"highest load meeting every SLO: {_load(self.max_slo_load, unit)} (step {self.max_slo_step})")
        lines += [f"  - {r}" for r in self.reasons]
        lines.append(f"  method: {self.method}")
        return "\n".join(lines)


def _load(v: float, unit: str) -> str:
    return f"{v:g} {unit}".rstrip()


def _throughput(s: StepResult) -> float:
    """Steady-state tokens/s; the aggregate figure when the step had no steady window."""
    if s.steady_seconds[1] - s.steady_seconds[0] <= 0:
        return s.aggregate_output_tokens_per_s
    return s.output_tokens_per_s


def _geometric(x: list[float]) -> bool:
    if len(x) < 3 or min(x) <= 0:
        return False
    ratios = [b / a for a, b in zip(x, x[1:], strict=False)]
    lo, hi = min(ratios), max(ratios)
    return lo > 1.2 and hi / lo < 1.15


def point(s: StepResult) -> KneePoint:
    """A step's headline figures (the saturation point of a verdict)."""
    lat: dict[str, float | None] = {}
    for m in LATENCY_COLUMNS:
        for stat in ("p50", "p90", "p99"):
            lat[f"{m}_{stat}"] = s.stat(m, stat)
    return {
        "step": s.step,
        "offered": s.offered,
        "offered_kind": s.offered_kind,
        "output_tokens_per_s": _throughput(s),
        "requests_per_s": s.requests_per_s,
        "error_rate": s.error_rate,
        "concurrency": s.concurrency,
        "latency": lat,
        "flags": list(s.flags),
    }


def significant(
    x: list[float],
    env: list[float],
    y: list[float],
    i: int,
    j: int,
    *,
    tol: float,
    elasticity: float,
    sustained: bool = False,
) -> bool:
    """Step j > i gained significantly over the best throughput up to step i. sustained: the
    median of steps j.. too, so a lone noisy high followed by lower steps does not count."""
    if sustained and not significant(x, env, y, i, j, tol=tol, elasticity=elasticity):
        return False
    base = env[i]
    top = statistics.median(y[j:]) if sustained else y[j]
    if base <= 0:
        return top > 0
    gain = top / base - 1
    load = x[j] / x[i] - 1 if x[i] > 0 else math.inf
    return gain >= tol and gain >= elasticity * load


def _kneed_available() -> bool:
    """kneed is a dependency; without it the plateau rule still answers at the end of a run."""
    return importlib.util.find_spec("kneed") is not None


def preload() -> None:
    """Import kneed now (about 1 s: it imports matplotlib's pyplot when matplotlib is there), so a
    verdict computed while the load runs (the web UI's live view) does not stall the event loop."""
    if _kneed_available():
        import kneed  # noqa: F401


def _kneedle(xs: list[float], env: list[float], sensitivity: float) -> int | None:
    from kneed import KneeLocator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kneed warns when it finds no knee; we say so ourselves
        kl = KneeLocator(
            xs, env, S=sensitivity, curve="concave", direction="increasing", interp_method="interp1d", online=False
        )
    if kl.knee is None:
        return None
    for i, v in enumerate(xs):
        if v == kl.knee:
            return i
    return None


def throughput_knee(
    steps: list[StepResult],
    *,
    sensitivity: float = 1.0,
    flat_tolerance: float = FLAT_TOLERANCE,
    min_elasticity: float = MIN_ELASTICITY,
) -> tuple[int | None, str, list[str], dict[str, Any]]:
    """(index of the knee step or None, how, reasons, details) for steps sorted by offered load."""
    x = [s.offered for s in steps]
    y = [_throughput(s) for s in steps]
    reasons: list[str] = []
    details: dict[str, Any] = {"kneedle": None, "axis": None}
    n = len(steps)
    if n == 0:
        return None, "none", ["no step"], details
    if max(y) <= 0:
        return None, "none", ["no output tokens in any step: nothing to analyse"], details
    if n < MIN_STEPS:
        return None, "none", [f"too few steps for a knee: {n} (need at least {MIN_STEPS})"], details
    if max(y) - min(y) <= flat_tolerance * max(y):
        return (
            0,
            "flat",
            [
                f"throughput flat (within {flat_tolerance:.0%}) across the whole ladder: "
                "saturated at or below the first step"
            ],
            details,
        )
    env = []
    best = 0.0
    for v in y:
        best = max(best, v)
        env.append(best)
    geometric = _geometric(x)
    xs = [math.log2(v) for v in x] if geometric else list(x)
    details["axis"] = "log2" if geometric else "linear"
    have_kneed = _kneed_available()
    k = _kneedle(xs, env, sensitivity) if have_kneed else None
    unit = OFFERED_UNITS.get(steps[0].offered_kind, "")

    def sig(i: int, j: int, sustained: bool = False) -> bool:
        return significant(x, env, y, i, j, tol=flat_tolerance, elasticity=min_elasticity, sustained=sustained)

    if k is not None:
        details["kneedle"] = x[k]
        how = "kneedle"
        start = k
        while k > 0 and not sig(k - 1, k):
            k -= 1
        if k != start:
            reasons.append(
                f"Kneedle knee at {_load(x[start], unit)} moved back to {_load(x[k], unit)}: "
                f"no significant throughput gain from there to it"
            )
    else:
        how = "plateau"
        reasons.append(
            "Kneedle found no knee; plateau rule from the first step"
            if have_kneed
            else "the kneed library is not installed: Kneedle skipped, plateau rule from the first step"
        )
        k = 0
    moved_from = k
    while True:
        # the first later step that gained significantly, its gain held by the median of the
        # steps from it on, and supported by at least as many steps as the flat ones skipped
        nxt = next((j for j in range(k + 1, n) if sig(k, j)), None)
        if nxt is None or not sig(k, nxt, sustained=True) or nxt - k - 1 >= n - nxt:
            break
        k = nxt
    if k == n - 1:
        gain = y[-1] / env[-2] - 1 if env[-2] > 0 else math.inf
        reasons.append(
            f"no knee found (still rising): the top step ({_load(x[-1], unit)}) gained {gain:.0%} "
            "over the best before it"
        )
        return None, how, reasons, details
    if sig(k, n - 1):
        reasons.append(
            f"the top step ({_load(x[-1], unit)}) gained {y[-1] / env[k] - 1:.0%} over the knee after flat steps: "
            "one step is not taken as a trend; extend the ladder to check"
        )
    if k != moved_from and how == "kneedle":
        reasons.append(
            f"Kneedle knee at {_load(x[moved_from], unit)} moved forward to {_load(x[k], unit)}: "
            "throughput still grew after it"
        )
    return k, how, reasons, details


def latency_knee(
    steps: list[StepResult], *, latency_rise: float = LATENCY_RISE, latency_growth: float = LATENCY_GROWTH
) -> tuple[int | None, str, list[str]]:
    """(index of the last step before latency blew up, the latency used, reasons)."""
    metric = "ttft" if all(s.stat("ttft", "p50") is not None for s in steps if s.ok) else "e2e"
    values = [(i, s.stat(metric, "p50")) for i, s in enumerate(steps)]
    pts = [(i, v) for i, v in values if v is not None]
    if len(pts) < 2:
        return None, metric, []
    base = pts[0][1]
    for (i0, v0), (i1, v1) in zip(pts, pts[1:], strict=False):
        load_ratio = steps[i1].offered / steps[i0].offered if steps[i0].offered > 0 else math.inf
        if v1 > (1 + latency_rise) * base and v0 > 0 and v1 / v0 > latency_growth * load_ratio:
            unit = OFFERED_UNITS.get(steps[i1].offered_kind, "")
            return (
                i0,
                metric,
                [
                    f"{metric} p50 at {_load(steps[i1].offered, unit)} is {v1 / base:.1f}x the lowest load's "
                    f"({_ms(v1)} vs {_ms(base)} ms) and grew {v1 / v0:.1f}x for {load_ratio:.2g}x the load: queueing"
                ],
            )
    return None, metric, []


def analyse(
    steps: list[StepResult],
    slos: dict[str, float],
    *,
    sensitivity: float = 1.0,
    flat_tolerance: float = FLAT_TOLERANCE,
    min_elasticity: float = MIN_ELASTICITY,
    latency_rise: float = LATENCY_RISE,
    latency_growth: float = LATENCY_GROWTH,
) -> Verdict:
    """The saturation verdict of a ladder (see the module doc for the rules)."""
    check_slo_names(slos)
    steps = sorted(steps, key=lambda s: s.offered)
    kind = steps[0].offered_kind if steps else ""
    unit = OFFERED_UNITS.get(kind, "")
    verdict = Verdict(saturation=None, max_slo_load=None, max_slo_step=None, offered_kind=kind)
    method = (
        f"kneedle(S={sensitivity:g}) on steady-state tokens/s + plateau rules "
        f"(tolerance {flat_tolerance:.0%}, elasticity {min_elasticity:g})"
    )

    tk, how, reasons, details = throughput_knee(
        steps, sensitivity=sensitivity, flat_tolerance=flat_tolerance, min_elasticity=min_elasticity
    )
    if details.get("axis"):
        method += f", {details['axis']} load axis"
    verdict.reasons += reasons
    lk, metric, lreasons = (
        (None, "ttft", [])
        if len(steps) < 2
        else latency_knee(steps, latency_rise=latency_rise, latency_growth=latency_growth)
    )
    method += (
        f" + latency rule ({metric} p50 > {1 + latency_rise:g}x lowest load and growing"
        f" > {latency_growth:g}x as fast as the load)"
    )
    verdict.method = method
    verdict.candidates = {
        "kneedle": details.get("kneedle"),
        "throughput": steps[tk].offered if tk is not None else None,
        "latency": steps[lk].offered if lk is not None else None,
    }
    chosen, by = None, None
    if tk is not None and (lk is None or tk <= lk):
        chosen, by = tk, ("flat" if how == "flat" else "throughput")
        if lk is not None and lk == tk:
            by = "throughput+latency"
    elif lk is not None:
        chosen, by = lk, "latency"
        verdict.reasons += lreasons
        if tk is not None:
            verdict.reasons.append(
                f"latency blew up before throughput levelled off (throughput knee at {_load(steps[tk].offered, unit)})"
            )
    if chosen is not None:
        verdict.saturation = point(steps[chosen])
        verdict.knee_by = by
        if by != "latency":
            verdict.reasons += lreasons
        bad = steps[chosen].flags
        if bad:
            verdict.reasons.append(f"the saturation step is flagged: {', '.join(bad)}")
    suspect = [s.step for s in steps if "client_saturated" in s.flags]
    if suspect:
        verdict.reasons.append(f"client saturated in step(s) {', '.join(map(str, suspect))}: their figures are suspect")

    _slo_limit(verdict, steps, slos, unit)
    return verdict


def _slo_limit(verdict: Verdict, steps: list[StepResult], slos: dict[str, float], unit: str) -> None:
    """Part of analyse: the highest load that met every SLO (max_slo_load, max_slo_step), and why."""
    if not slos:
        verdict.reasons.append("no SLO given: no SLO-limited load")
        return
    met = [(s, broken_slos(s, slos)) for s in steps]
    ok_steps = [s for s, broken in met if not broken]
    if not ok_steps:
        first, broken = met[0] if met else (None, [])
        if first is not None:
            verdict.reasons.append(
                f"no step met every SLO; the lowest ({_load(first.offered, unit)}) broke: {', '.join(broken)}"
            )
        return
    top = ok_steps[-1]
    verdict.max_slo_load, verdict.max_slo_step = top.offered, top.step
    below = [(s, b) for s, b in met if b and s.offered < top.offered]
    if below:
        s, b = below[0]
        verdict.reasons.append(
            f"step {s.step} ({_load(s.offered, unit)}) broke an SLO ({', '.join(b)}) "
            "although a higher load met them all: noisy?"
        )
    if top is steps[-1]:
        verdict.reasons.append("the top of the ladder still met every SLO: the SLO limit lies higher")
    else:
        nxt = next(((s, b) for s, b in met if s.offered > top.offered and b), None)
        if nxt is not None:
            verdict.reasons.append(f"{_load(nxt[0].offered, unit)} broke: {', '.join(nxt[1])}")


def early_stop(
    steps: list[StepResult],
    slos: dict[str, float],
    *,
    max_error_rate: float | None = 0.05,
    flat_steps: int = 2,
    flat_tolerance: float = FLAT_TOLERANCE,
) -> str | None:
    """Why the ladder should stop after its last step, or None to go on.

    In order: the last step got no successful response; its error rate exceeded max_error_rate
    (None: never); it broke an SLO (empty slos: never); throughput has been flat for flat_steps
    steps: each of the last flat_steps steps gained less than flat_tolerance over the best
    throughput before it (0: never).
    """
    if not steps:
        return None
    last = steps[-1]
    unit = OFFERED_UNITS.get(last.offered_kind, "")
    where = f"step {last.step} ({_load(last.offered, unit)})"
    if not last.ok:
        first = next((f"{kind}: {text}" for kind, texts in last.errors.items() for text in texts), None)
        if not last.failed:  # none failed: in flight the whole step, cancelled at its end, or none sent
            return f"{where}: no request finished ({_unfinished(last)})"
        return f"{where}: no request succeeded ({last.failed} failed{'; ' + first if first else ''})"
    if max_error_rate is not None and last.error_rate > max_error_rate:
        return f"{where}: error rate {last.error_rate:.1%} above {max_error_rate:.1%}"
    if slos:
        broken = broken_slos(last, slos)
        if broken:
            return f"{where} broke an SLO: {', '.join(broken)}"
    if flat_steps > 0 and len(steps) > flat_steps:
        y = [_throughput(s) for s in steps]
        flat = all(y[i] < (1 + flat_tolerance) * max(y[:i]) for i in range(len(y) - flat_steps, len(y)))
        if flat and max(y) > 0:
            return (
                f"throughput flat for {flat_steps} steps: {', '.join(f'{v:,.0f}' for v in y[-flat_steps - 1 :])} tok/s "
                f"(less than {flat_tolerance:.0%} gain)"
            )
    return None


def _unfinished(step: StepResult) -> str:
    """What became of a step's requests when none ended ok or failed: the step's window saw none
    end, whether they were sent in it and still in flight, cancelled at its end, or sent before it."""
    if step.cancelled:
        return f"{step.sent:,} sent, {step.cancelled:,} cancelled at the step's end, none answered"
    if step.sent:
        return f"{step.sent:,} sent, still in flight at the step's end"
    return "none sent in the step; any in flight were sent before it"


def _server_cells(server: Sequence[Mapping[str, Any]] | None, n: int) -> tuple[list[str], list[list[str]]]:
    """The server's prefix-cache and speculative-decoding columns, for the steps that have them:
    (headers, cells per step). `server`: each step's window of the server's /metrics
    (analysis.server_metrics ServerSeries.window, in step order)."""
    wins = [(server[i] if server and i < len(server) and server[i] else {}) for i in range(n)]
    head: list[str] = []
    cols: list[list[str]] = [[] for _ in range(n)]
    if any("prefix_cache_hit_ratio" in w for w in wins):
        head.append("cache hit %")
        for c, w in zip(cols, wins, strict=True):
            v = w.get("prefix_cache_hit_ratio")
            c.append("-" if v is None else f"{v * 100:.1f}")
    if any("spec_acceptance_rate" in w or "spec_mean_accepted_length" in w for w in wins):
        head.append("spec acc %/len")
        for c, w in zip(cols, wins, strict=True):
            rate, length = w.get("spec_acceptance_rate"), w.get("spec_mean_accepted_length")
            c.append(
                "-"
                if rate is None and length is None
                else f"{'-' if rate is None else f'{rate * 100:.0f}'}/{'-' if length is None else f'{length:.2f}'}"
            )
    return head, cols


def _tps_rel(r: StepResult) -> float | None:
    """The relative half width of the step's output tokens/s 95% interval (its `intervals`:
    batch means over time blocks, metrics/blocks.py), None when it has none."""
    rates: Mapping[str, Any] = r.intervals["rates"] if r.intervals else {}
    rel = (rates.get("output_tokens_per_s") or {}).get("rel")
    return float(rel) if rel is not None else None


def _pct(rel: float | None) -> str:
    return f"±{rel * 100:.1f}%" if rel is not None else "-"


def format_steps(
    results: list[StepResult],
    verdict: Verdict | None = None,
    server: Sequence[Mapping[str, Any]] | None = None,
    knee: bool = True,
) -> str:
    """The per-step table (aligned columns) and the saturation verdict below it.

    Without a verdict, it is computed with `saturation.analyse` and the steps' own SLOs; `knee`
    False: the table alone (a burst goes up and down by design: no knee).
    A "tok/s ±" column gives each step's output tokens/s 95% interval as ± a percentage of it ("-":
    none) when any step has one.
    `server`: each step's window of the server's /metrics (same order as results); beside ITL,
    the prefix-cache hit rate ("cache hit %") and the speculative-decoding acceptance rate and
    mean accepted length ("spec acc %/len") of the steps where the server gave them; with a graded
    set (--graded), each step's accuracy ("acc %": percent right, then right/graded).
    """
    if not results:
        return "no load step completed"
    kind = results[0].offered_kind
    extra_head, extra = _server_cells(server, len(results))
    if any(r.accuracy for r in results):  # --graded: accuracy per step beside latency
        extra_head.append("acc %")
        for cells, r in zip(extra, results, strict=True):
            acc: Mapping[str, Any] = r.accuracy or {}
            a = acc.get("accuracy")
            cells.append("-" if a is None else f"{a * 100:.0f} ({acc['correct']}/{acc['graded']})")
    rels = [_tps_rel(r) for r in results]
    pm = any(x is not None for x in rels)  # a "tok/s ±" column when any step has an interval
    head = [
        "step",
        f"offered ({OFFERED_UNITS.get(kind, kind)})",
        "req/s",
        "tok/s",
        *(["tok/s ±"] if pm else []),
        "TTFT p50/p99 ms",
        "ITL p50/p99 ms",
        *extra_head,
        "TPOT p50 ms",
        "E2E p99 ms",
        "err%",
        "goodput req/s",
        "flags",
    ]
    rows = []
    for i, r in enumerate(results):
        flags = list(r.flags)
        if r.slo_broken:
            flags.append("slo")
        rows.append(
            [
                str(r.step),
                _num(r.offered, 4),
                _num(r.requests_per_s),
                _num(r.output_tokens_per_s),
                *([_pct(rels[i])] if pm else []),
                f"{_ms(r.stat('ttft', 'p50'))}/{_ms(r.stat('ttft', 'p99'))}",
                f"{_ms(r.stat('itl', 'p50'))}/{_ms(r.stat('itl', 'p99'))}",
                *extra[i],
                _ms(r.stat("tpot", "p50")),
                _ms(r.stat("e2e", "p99")),
                f"{r.error_rate * 100:.1f}",
                _num(r.goodput_requests_per_s),
                ",".join(flags) or "-",
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)):
            out.append(c.ljust(w) if i in (len(cells) - 1,) else c.rjust(w))
        return "  ".join(out).rstrip()

    lines = [line(head), line(["-" * w for w in widths])]
    lines += [line(row) for row in rows]
    if not knee:
        return "\n".join(lines).rstrip()
    if verdict is None:
        verdict = analyse(results, results[0].slos)
    lines.append("")
    lines.append(verdict.format())
    return "\n".join(lines)
