"""The results document's types: one schema for the writer (report.results build_results,
report.outcome) and every reader (the HTML report, compare, the verdicts, llm-d, MLflow, the
grid), so that a renamed or misspelt figure fails the type check (mypy), not a report weeks later.

TypedDicts, not classes: the document stays the plain JSON dict it always was. A key marked
NotRequired may be absent (a part a run had no data for, or a file of an older version); a part
typed `dict[str, ...]` is open on purpose (keyed by a metric, a kind or an endpoint; or a part
whose own module owns its shape). docs/results.md documents the fields; docs/results.schema.json
is the JSON Schema generated from these types (`python -m llm_locust.report.schema` writes it).

Core layer: imports nothing of the package and no event loop.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NotRequired

# pydantic (the JSON Schema) reads TypedDicts from typing_extensions only before Python 3.12
from typing_extensions import TypedDict

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "results.schema.json"

# ---- latencies ----

# "p99.9" is no identifier: the functional form holds it, the class below adds the rest
_P999 = TypedDict("_P999", {"p99.9": NotRequired[float]})


class LatencyStats(_P999):
    """One latency's summary, in seconds: `count` always; the rest only when count > 0."""

    count: int
    mean: NotRequired[float]
    min: NotRequired[float]
    max: NotRequired[float]
    p50: NotRequired[float]
    p90: NotRequired[float]
    p95: NotRequired[float]
    p99: NotRequired[float]


# {metric: stats}: ttft, ttft_content, ttft_tool, ttft_queue, schedule_lag, itl, inter_chunk,
# tpot, e2e, e2e_queue (metrics.aggregate LATENCIES); open, keyed by the metric's name
Latency = dict[str, LatencyStats]


# ---- the client's validity ----


class ClientCheck(TypedDict):
    """One client-validity check: its measured value against its threshold (docs/metrics.md)."""

    check: str  # read_together, send_delay, loop_lag
    tripped: bool
    value: float | None
    threshold: float
    samples: int
    text: str
    judged: NotRequired[bool]  # loop_lag: False when every read was kernel-stamped
    first_share: NotRequired[float]  # read_together's
    late_share: NotRequired[float]
    late_samples: NotRequired[int]


class ReadTogether(TypedDict):
    """Token gaps of paced streams read together (two token events stamped with one read's time)."""

    gaps: int
    together: int
    share: float | None
    requests: int
    first_together: int
    first_share: float


class ClientFigures(TypedDict):
    """`summary.client`: the load generator's own health over the measurement, and its verdict."""

    loop_lag: LatencyStats
    cpu_max_percent: float
    cpu_samples: int
    cpu_high_samples: int
    read_together: ReadTogether
    checks: list[ClientCheck]
    reasons: list[str]
    valid: bool


# ---- the parts of a window's figures ----


class Connections(TypedDict):
    """Connections opened for a request, and kept-alive ones reused."""

    new: int
    reused: int


class Phases(TypedDict):
    """`summary.phases`: each request phase's summary and the connections (docs/metrics.md)."""

    connect: LatencyStats
    send: LatencyStats
    wait: LatencyStats
    first_token: LatencyStats
    receive: LatencyStats
    connect_new: LatencyStats
    connections: Connections


class CacheCounts(TypedDict):
    """Prompt-cache counts of a window or a group (docs/metrics.md, "Prompt cache")."""

    requests_reported: int
    cached_tokens: int
    prompt_tokens: int
    hit_ratio: float | None
    ideal_requests: int
    ideal_cached_tokens: int
    ideal_prompt_tokens: int
    ideal_hit_ratio: float | None
    both_requests: int
    achieved_vs_ideal: float | None
    hit_requests: int
    miss_requests: int


class CacheFigures(CacheCounts):
    """`summary.cache`: the counts, the hit threshold and TTFT of the hits and of the misses."""

    hit_threshold: float
    ttft_hit: LatencyStats
    ttft_miss: LatencyStats


class KindFigures(TypedDict):
    """`summary.kinds[api]`: a request kind that yields items, not tokens (embeddings, rerank...)."""

    ok: int
    failed: int
    items: int
    tokens_in: int
    requests_per_s: float
    items_per_s: float
    input_tokens_per_s: float
    latency: LatencyStats


class MediaFigures(TypedDict):
    """`summary.audio` / `summary.images`: the media the prompts carried."""

    sent: int
    bytes: int
    per_request: float
    bytes_per_s: float


class Accuracy(TypedDict):
    """Accuracy under load (--graded): graded items that ended ok, those answered right, ratio."""

    graded: int
    correct: int
    accuracy: float | None


class StructuredOutput(TypedDict):
    """Structured outputs (--response-format): replies checked, parsed, valid against the schema."""

    checked: int
    parsed: int
    valid: int
    parse_rate: float
    valid_rate: float


class Figures(TypedDict):
    """A window's figures (`metrics.aggregate.figures`): the run's `summary`, each of `steps[]`."""

    sent: int
    finished: int
    ok: int
    failed: int
    cancelled: int
    client_cancelled: int
    outcomes: dict[str, int]  # by outcome (docs/metrics.md, "Outcomes")
    errors: dict[str, dict[str, int]]  # {outcome: {error text: count}}
    causes: dict[str, int]  # failures by cause
    error_rate: float
    duration_s: float
    tokens_in: int
    tokens_out: int
    tokens_out_failed: int
    output_tokens_per_s: float
    requests_per_s: float
    goodput_requests_per_s: float | None  # None: the run had no per-request SLO
    goodput_tokens_per_s: float | None
    concurrency: float
    n_out_sources: dict[str, int]
    n_in_sources: dict[str, int]
    length_checked: int
    length_mismatch: int
    latency: Latency
    lost: int
    workers_lost: int
    client: ClientFigures
    phases: NotRequired[Phases]
    kinds: NotRequired[dict[str, KindFigures]]
    audio: NotRequired[MediaFigures]
    images: NotRequired[MediaFigures]
    cache: NotRequired[CacheFigures]
    # {endpoint URL or model: figures}: finished, ok, failed, ..., latency, cache (open: the
    # live view reads them too, metrics.aggregate GroupFigures)
    by_endpoint: NotRequired[dict[str, dict[str, Any]]]
    by_model: NotRequired[dict[str, dict[str, Any]]]
    accuracy: NotRequired[Accuracy]
    structured_output: NotRequired[StructuredOutput]


class Step(Figures):
    """One of `steps[]`: a step's figures, its id (k, or -k for step k's warm-up) and its flags."""

    step: int
    flags: list[str]


# ---- the top level's parts ----


class Validity(TypedDict):
    """`validity`: the whole run's flags and the error-rate limit they were judged with."""

    flags: list[str]
    max_error_rate: float


class Environment(TypedDict):
    """`environment`: the load generator, and (added at the end of a run) the server, GPUs, trace."""

    llm_locust: str | None
    locust: str | None
    python: str
    platform: str
    hostname: str
    cpu_count: int | None
    server: NotRequired[dict[str, Any]]  # url, kind, model, models, version, ... (open: probes)
    gpus: NotRequired[list[dict[str, Any]]]
    trace: NotRequired[dict[str, Any] | None]


class WarmupLatency(TypedDict):
    """A warm-up latency: count, p50, p99 (None without a sample)."""

    count: int | None
    p50: float | None
    p99: float | None


class Warmup(TypedDict):
    """`warmup`: a closed loop's or a replay's warm-up, apart from the run's figures."""

    rule: str
    sent: int
    ok: int
    failed: int
    cancelled: int
    lost: int
    tokens_out: int
    latency: dict[str, WarmupLatency]  # ttft, e2e


class PrefixHit(TypedDict):
    """`prefix_hit`: --prefix-hit's target against the hit ratio the server's counters report."""

    target: float
    achieved: float | None
    source: str | None
    client: float | None
    tolerance: float
    within: bool | None


class Gate(TypedDict):
    """One of `gates`: a pass/fail rule the run was held to."""

    name: str
    passed: bool
    line: str


class MetricsWindows(TypedDict):
    """`server_metrics` / `gpu_metrics`: the series' source, its run window and its step windows.
    A window is open: {quantity: {mean, max} or {increase, per_s}, "samples": n, ...}."""

    source: dict[str, Any]
    run: dict[str, Any]
    steps: NotRequired[list[dict[str, Any]]]


class WorkerClock(TypedDict):
    """A worker's clock against the master's (transport.clock Estimate.as_dict)."""

    offset_s: float  # master minus worker
    uncertainty_s: float
    samples: int  # round trips measured
    rtt_s: float  # the fastest round trip
    aligned: bool  # the offset applied
    bound_s: float
    flagged: bool  # the uncertainty above the bound


class Worker(TypedDict):
    """One of `workers`: a worker process as the master saw it (runtime.plugin)."""

    id: str
    index: int | None
    reports: int
    sent: int
    finished: int
    in_flight_at_last_report: int
    lost: int
    final_report: bool
    lost_at: float | None
    rejoined_at: float | None
    left_at: float | None
    joined_at: float
    clock: WorkerClock | None  # None: no round trip measured (a local run's, an old worker)


# ---- the ladder (runtime.shapes: the controller's report, less its printed table) ----


class StableRule(TypedDict):
    """`ladder.ladder.stable`: the stability rule a step's measurement is extended by."""

    window: float
    tolerance: float
    max_extend: float
    windows: int


class SearchSpec(TypedDict):
    """`ladder.ladder.search`: an SLA search's kind, range and precision."""

    kind: str
    lo: float
    hi: float
    precision: float


# "for" is a keyword: the functional form holds it (settings.ladder Burst.to_dict)
BurstSpec = TypedDict("BurstSpec", {"rate": float, "x": float, "for": float, "before": float | None, "after": float})


class LadderSpec(TypedDict):
    """`ladder.ladder`: the ladder as it ran (settings.ladder Ladder.to_dict)."""

    kind: str  # concurrency, rate or speed
    steps: list[float]  # the levels
    duration: float
    warmup: float
    requests: int
    stable: StableRule | None
    arrivals: NotRequired[str]  # a rate ladder's
    burstiness: NotRequired[float]
    durations: NotRequired[list[float]]  # a rate series'
    spec: NotRequired[str]  # a rate series', a search's, a burst's
    search: NotRequired[SearchSpec]
    burst: NotRequired[BurstSpec]


class LadderWindow(TypedDict):
    """One of `ladder.windows`: a step's wall-clock window (runtime.shapes StepWindow.to_dict)."""

    judged: NotRequired[float]  # an SLA probe's: when it was judged
    cache_reset: NotRequired[dict[str, Any]]  # --reset-cache's reset before it (runtime.cache_reset)
    step: int
    level: float
    started: float
    measured_from: float | None
    ended: float | None
    extended: float


class LadderStep(TypedDict):
    """One of `ladder.steps`: a step's results (analysis.steps StepResult.to_dict)."""

    step: int
    offered: float
    offered_kind: str  # concurrency, rate or speed
    window_start: float
    window_end: float
    warmup: float
    steady_seconds: list[float]  # [start, end] the steady-state rates were read over
    sent: int
    ok: int
    failed: int
    cancelled: int
    error_rate: float
    requests_per_s: float
    output_tokens_per_s: float  # steady state
    aggregate_output_tokens_per_s: float
    aggregate_requests_per_s: float
    latency: Latency
    goodput_requests_per_s: float | None
    goodput_tokens_per_s: float | None
    slo_attainment: float | None
    concurrency: float
    client_valid: bool
    length_checked: int
    length_mismatch: int
    tokens_out: int
    slos: dict[str, float]
    slo_broken: list[str]
    flags: list[str]
    errors: dict[str, dict[str, int]]
    cache: CacheFigures | None
    accuracy: Accuracy | None
    window: float
    slos_met: bool | None
    cut: NotRequired[bool]  # the step an interruption cut


class KneePoint(TypedDict):
    """`ladder.saturation.saturation`: the step at the knee (analysis.saturation point)."""

    step: int
    offered: float
    offered_kind: str
    output_tokens_per_s: float
    requests_per_s: float
    error_rate: float
    concurrency: float
    latency: dict[str, float | None]  # {metric_stat: seconds}: ttft_p50, ..., e2e_p99
    flags: list[str]


class Saturation(TypedDict):
    """`ladder.saturation`: the knee verdict (analysis.saturation Verdict.to_dict)."""

    saturation: KneePoint | None
    max_slo_load: float | None
    max_slo_step: int | None
    reasons: list[str]
    method: str
    knee_by: str | None  # throughput, latency, flat
    candidates: dict[str, float | None]  # offered load per rule
    offered_kind: str
    reason: str


class BurstRecovery(TypedDict):
    """`ladder.burst`: the recovery after a burst (analysis.stability burst_recovery)."""

    base_ttft_p50: float | None
    base_samples: int
    base_window: list[int]
    burst_window: list[float]
    end: float
    window: int
    tolerance: float
    limit: float | None
    recovery_s: float | None
    recovered: bool
    peak_ttft_p50: float | None
    peak_after_s: float | None
    curve: list[list[float]]  # [[seconds after the burst, TTFT p50], ...]
    threshold: NotRequired[float]  # absent without a baseline
    passed: bool
    reason: str


class SlaProbe(TypedDict):
    """One of `ladder.sla.probes_detail`: a probe's step, level and the SLOs it broke."""

    step: int
    level: float
    met: bool
    broken: list[str]


class SlaSearch(TypedDict):
    """`ladder.sla`: what the SLA search found (analysis.sla conclude, with its probes)."""

    kind: str
    answer: float | None
    precision: float
    probes: int
    bracket: list[float | None]  # [highest met, lowest broken]
    range: list[float]
    reached: str  # precision, adjacent, top, lowest_breaks, unfinished
    reason: str
    probes_detail: list[SlaProbe]
    seconds: float


class LadderDoc(TypedDict):
    """`ladder`: the ladder, its step windows, each step's results and the verdicts."""

    ladder: LadderSpec
    windows: list[LadderWindow]
    steps: list[LadderStep]
    saturation: Saturation | None  # None: no step judged, or a burst or rate series
    stop_reason: str | None
    cut_step: int | None
    burst: NotRequired[BurstRecovery | None]  # a burst ladder's (None: its steps did not all run)
    sla: NotRequired[SlaSearch]  # an SLA search's


# A results document's `distributions[metric]`: [[low_s, high_s, count], ...]
Bins = list[list[float]]


class ResultsDoc(TypedDict):
    """The results file (SCHEMA "llm-locust/results"): what build_results writes, what the run
    adds at its end, and what read_results returns (`_path`: the file it was read from)."""

    schema: str
    version: int
    created: float
    environment: Environment
    run: dict[str, Any]  # open: the runtime's facts (docs/results.md, "run")
    summary: Figures
    validity: Validity
    distributions: NotRequired[dict[str, Bins]]  # version 2
    steps: list[Step]
    series: list[list[float]]
    workers: list[Worker]
    warmup: NotRequired[Warmup | None]
    prefix_hit: NotRequired[PrefixHit | None]
    server_metrics: NotRequired[MetricsWindows]
    server_metrics_by_endpoint: NotRequired[dict[str, MetricsWindows]]
    gpu_metrics: NotRequired[MetricsWindows]
    efficiency: NotRequired[dict[str, Any]]  # analysis.efficiency's
    verdicts: NotRequired[dict[str, Any]]  # analysis.efficiency's
    stability: NotRequired[dict[str, Any]]  # analysis.stability's
    ladder: NotRequired[LadderDoc]
    plan: NotRequired[dict[str, Any] | None]  # every plan key (settings)
    gates: NotRequired[list[Gate]]
    repeats: NotRequired[dict[str, Any]]  # analysis.repeats', in a combined file
    _path: NotRequired[str]  # added by read_results, never written


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ResultsDoc, as docs/results.schema.json holds it."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(ResultsDoc).json_schema()
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "llm-locust/results",
        **schema,
    }
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write docs/results.schema.json (or the path given) from the types; --check: exit 1 when
    the file differs from what the types generate."""
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    paths = [a for a in args if a != "--check"]
    path = Path(paths[0]) if paths else SCHEMA_FILE
    text = schema_text()
    if check:
        current = path.read_text() if path.exists() else ""
        if current != text:
            print(f"{path} is stale: run python -m llm_locust.report.schema", file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
