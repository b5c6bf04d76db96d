"""The results document's types: one schema for the writers (report.results build_results,
report.outcome, and the sections' own: analysis.server_metrics, efficiency, stability, repeats)
and every reader (the HTML report, compare, the verdicts, llm-d, MLflow, the grid), so that a
renamed or misspelt figure fails the type check (mypy), not a report weeks later.

TypedDicts, not classes: the document stays the plain JSON dict it always was. A key marked
NotRequired may be absent (a part a run had no data for, or a file of an older version); a part
typed `dict[str, ...]` is open on purpose (keyed by a metric, a kind, an endpoint or a figure's
name; the server's probe answers; a plan's user-given maps). docs/results.md documents the
fields; docs/results.schema.json is the JSON Schema generated from these types
(`python -m llm_locust.schema` writes it).

Core layer: imports nothing of the package and no event loop.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NotRequired

# pydantic (the JSON Schema) reads TypedDicts from typing_extensions only before Python 3.12
from typing_extensions import TypedDict

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "docs" / "results.schema.json"

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
    first_waited_share: NotRequired[float]  # read_together's: of the requests, first tokens read late
    late_share: NotRequired[float]
    late_samples: NotRequired[int]
    first_samples: NotRequired[int]  # read_together's: the requests its first-token share is of


class ReadTogether(TypedDict):
    """Token gaps of paced streams read together (two token events stamped with one read's time)."""

    gaps: int
    together: int
    share: float | None
    requests: int
    first_together: int
    first_share: float
    first_waited: int  # of first_together: in a read whose newest data had waited over 1 ms (read late)


class ClientFigures(TypedDict):
    """`summary.client`: the load generator's own health over the measurement, and its verdict."""

    loop_lag: LatencyStats
    cpu_max_percent: float
    cpu_samples: int
    cpu_high_samples: int
    read_together: ReadTogether
    checks: list[ClientCheck]
    reasons: list[str]
    valid: bool  # no check tripped
    # "valid" (no check tripped, one had its samples), "suspect" (one tripped), "unknown" (no check
    # had the samples to judge: 0 requests, a master without its workers' figures)
    verdict: NotRequired[str]


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


class ClientCancel(TypedDict):
    """`client_cancel` (--cancel): requests drawn for a cancellation, and what became of them."""

    drawn: int  # given a cancel time
    cancelled: int  # aborted at it: client_cancelled
    ended_first: int  # answered, ok or failed, before it came
    stopped: int  # still in flight at the run's end: cancelled by the stop


class FigureInterval(TypedDict):
    """A figure's 95% confidence interval (metrics.intervals): low/high/rel None, with the reason
    and the samples it needs, when its samples cannot give one (docs/metrics.md)."""

    low: float | None
    high: float | None
    rel: float | None  # half the interval's width over the figure: "± 3.1%" is 0.031
    reason: NotRequired[str]
    needs: NotRequired[int]


class CacheState(TypedDict):
    """`run.cache_state`: the prompt cache's state before the load (analysis.load_facts)."""

    state: str  # warm | reset | fresh | unknown
    why: str


class Intervals(TypedDict):
    """`intervals`: the 95% intervals of a window's headline figures (metrics.blocks)."""

    blocks: int  # k: the time blocks of the batch means
    block_s: float  # the window's seconds per block
    method: dict[str, str]  # {"mean" | "percentile" | "rate" | "itl_percentile": the method, in words}
    latency: dict[str, dict[str, FigureInterval]]  # {"ttft" | "itl" | "tpot" | "e2e": {"mean" | "p50" | ...}}
    # {"output_tokens_per_s" | "requests_per_s" | "goodput_...": ..., "error_rate": a share of the answered}
    rates: dict[str, FigureInterval]


class PrecisionFigure(TypedDict):
    """One --precision target: the relative half-width asked and the interval's (analysis.precision_targets)."""

    target: float  # 0.02: "ttft.p99=2%"
    rel: float | None  # the 95% interval's half-width over the figure when judged; None: it had none
    met: bool
    reason: NotRequired[str]  # why it is not met without a figure: no interval yet, too few time blocks


class PrecisionCheck(TypedDict):
    """The run's or one ladder step's --precision judgement: at the stop, or at the end of its time."""

    step: int | None  # the ladder step; None: the run
    met: bool  # every target met
    stopped: bool  # ended by the targets, before -t or the step's maximum duration
    seconds: float  # measured seconds when judged
    requests: int  # the ok requests the intervals came from (on a master: every worker's, merged)
    blocks: int  # the time blocks of the batch means
    until: float | None  # the judged window's end (unix s): on a master, where every worker's figures were in
    figures: dict[str, PrecisionFigure]  # {"ttft.p99" | "output_tokens_per_s" | ...: ...}


class Precision(TypedDict):
    """`precision`: stop when precise (--precision, docs/load-shapes.md)."""

    targets: dict[str, float]  # {figure: relative half-width}
    met: bool  # every target met, in the run or in every step of a ladder
    checks: list[PrecisionCheck]  # one for a run, one per step of a ladder


# ---- the figures, each named once: the summary, a ladder step, the knee and an efficiency row
# derive from these, so that renaming a figure here renames it in every row that holds it ----


class Throughput(TypedDict):
    """The output token rate: the summary's, each ladder step's, the knee's, each efficiency row's."""

    # the summary's over its whole window; a ladder step's (and the knee's) over the step's steady
    # state, its whole window's being aggregate_output_tokens_per_s
    output_tokens_per_s: float


class Rates(Throughput):
    """The rates of ok requests: the summary's, each ladder step's, the knee's, the steady window's."""

    requests_per_s: float


class HeadlineFigures(Rates):
    """The figures a load is judged by: the summary's, each ladder step's and the knee's."""

    error_rate: float  # failed over answered (metrics.aggregate error_rate)
    concurrency: float


class WindowFigures(HeadlineFigures):
    """A window's counts and latencies with its headline figures: the summary's, each ladder step's."""

    sent: int
    ok: int
    failed: int
    cancelled: int
    errors: dict[str, dict[str, int]]  # {outcome: {error text: count}}
    tokens_out: int
    goodput_requests_per_s: float | None  # None: the run had no per-request SLO
    goodput_tokens_per_s: float | None
    length_checked: int
    length_mismatch: int
    latency: Latency


class StepRow(TypedDict):
    """Which step of a ladder a row is of, and the load it offered: a ladder step's, the knee's,
    an efficiency row's."""

    step: int
    offered: float


class JudgedStep(StepRow):
    """A step as the ladder judged it: a ladder step's and the knee's."""

    offered_kind: str  # concurrency, rate or speed
    flags: list[str]


class Figures(WindowFigures):
    """A window's figures (`metrics.aggregate.figures`): the run's `summary`, each of `steps[]`."""

    finished: int
    client_cancelled: int
    outcomes: dict[str, int]  # by outcome (docs/metrics.md, "Outcomes")
    causes: dict[str, int]  # failures by cause
    duration_s: float
    tokens_in: int
    tokens_out_failed: int
    n_out_sources: dict[str, int]
    n_in_sources: dict[str, int]
    lost: int
    workers_lost: int
    in_flight: NotRequired[int]  # a checkpoint's: sent, no outcome yet when it was written (report.outcome)
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
    client_cancel: NotRequired[ClientCancel]
    intervals: NotRequired[Intervals]  # 95% intervals of the headline figures (docs/metrics.md)


class Step(Figures):
    """One of `steps[]`: a step's figures, its id (k, or -k for step k's warm-up) and its flags."""

    step: int
    flags: list[str]


# ---- the top level's parts ----


class CeilingRow(TypedDict):
    """One of `validity.ceiling`: a sending process's peak token rate against what one process
    holds (metrics/ceiling.py; docs/load-shapes.md, "Worker processes")."""

    process: str  # "local", or "worker N" (its index)
    peak_tokens_per_s: float
    ceiling_tokens_per_s: int
    ceiling_source: str  # "built-in", or "calibrated, PATH" (`llm-locust calibrate --write`)
    cpu_max_percent: float
    over: bool
    why: str | None


class Validity(TypedDict):
    """`validity`: the whole run's flags and the error-rate limit they were judged with."""

    flags: list[str]
    max_error_rate: float
    ceiling: NotRequired[list[CeilingRow]]  # each sending process against its ceiling (flag over_ceiling)


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
    client_cancelled: NotRequired[int]  # by --cancel (absent in files of before it was kept)
    lost: int
    in_flight: NotRequired[int]  # a checkpoint's (report.outcome)
    tokens_out: int
    latency: dict[str, WarmupLatency]  # ttft, e2e


class SteadySpan(TypedDict):
    """`steady.window`: the steady window (wall clock); `requests`: those sent in it (any outcome)."""

    start: float
    end: float
    seconds: float
    requests: int


class SteadyPart(TypedDict):
    """`steady.ramp` / `steady.drain`: its length and the requests sent in it (any outcome)."""

    seconds: float
    requests: int


class SteadyRates(Rates):
    """`steady.figures.rates`: the window's rates, per s (metrics.blocks RATES: every one, always)."""

    goodput_requests_per_s: float  # 0.0 without a per-request SLO
    goodput_tokens_per_s: float


class SteadyFigures(TypedDict):
    """`steady.figures`: the ok requests sent in the steady window (analysis.steady)."""

    ok: int
    latency: dict[str, dict[str, float | None]]  # {"ttft" | "itl" | "tpot" | "e2e": {"mean" | "p50" | ...}}
    rates: SteadyRates
    intervals: Intervals | None


class Steady(TypedDict):
    """`steady`: the steady window found in the run (analysis.steady; docs/metrics.md)."""

    headline: str  # what the summary's headline figures are over: "whole run"
    found: bool
    reason: str | None  # why there is none (or why it was not assessed)
    mode: str  # "closed" | "replay" | "ladder"
    target: int | None  # closed loop: the users
    rule: str | None  # the rule applied, in words
    window: SteadySpan | None
    ramp: SteadyPart | None
    drain: SteadyPart | None
    figures: SteadyFigures | None
    in_flight: list[list[float]]  # [[wall second, mean requests in flight in it], ...]


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


class WorkerClock(TypedDict):
    """A worker's clock against the master's (loop.clock Estimate.as_dict)."""

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


class LadderStep(JudgedStep, WindowFigures):
    """One of `ladder.steps`: a step's results (analysis.steps StepResult.to_dict). Its rates
    (output_tokens_per_s, requests_per_s) are the steady state's."""

    window_start: float
    window_end: float
    warmup: float
    steady_seconds: list[float]  # [start, end] the steady-state rates were read over
    aggregate_output_tokens_per_s: float
    aggregate_requests_per_s: float
    slo_attainment: float | None
    client_valid: bool
    slos: dict[str, float]
    slo_broken: list[str]
    cache: CacheFigures | None
    accuracy: Accuracy | None
    window: float
    slos_met: bool | None
    cut: NotRequired[bool]  # the step an interruption cut
    planned_seconds: NotRequired[float]  # the cut step's planned length (warm-up included)
    ran_seconds: NotRequired[float]  # ... and how long it ran until the interruption
    intervals: NotRequired[Intervals | None]  # the 95% intervals of the step's figures (metrics/blocks.py)


class KneePoint(JudgedStep, HeadlineFigures):
    """`ladder.saturation.saturation`: the step at the knee (analysis.saturation point)."""

    latency: dict[str, float | None]  # {metric_stat: seconds}: ttft_p50, ..., e2e_p99


class KneeDecision(TypedDict):
    """A throughput comparison of two steps (analysis.refine): did the higher load gain significantly?"""

    gain: float  # the higher load's throughput over the lower's, - 1
    threshold: float  # the gain it needed: max(flat tolerance, elasticity x relative load added)
    significant: bool
    within_noise: bool | None  # the 95% interval of the difference holds the threshold; None: no interval
    noise: NotRequired[float]  # that interval's half width, a share of the lower load's throughput


class KneePointRefined(KneeDecision):
    """One of `knee_range.points`: a refine step, below the knee or at it (on the plateau)."""

    step: int
    offered: float
    side: str  # below | at


class KneeRange(TypedDict):
    """`ladder.saturation.knee_range`: the loads the knee lies between (analysis.refine knee_range)."""

    low: float | None  # the highest load known below the knee; None: at or below the first step
    high: float  # the lowest load known at the knee (the saturation point's)
    low_step: int | None
    high_step: int
    width: float
    allowed: float  # the widest bracket whose knee counts as known: 10% of high, 1 user on a concurrency ladder
    known: bool  # width <= allowed
    refinable: bool  # a throughput knee with a step below it: --refine can narrow it
    points: list[KneePointRefined]  # the refine steps, in the order they ran
    gain: float | None  # high's throughput over low's, - 1
    threshold: float | None
    within_noise: KneeDecision | None  # the first decision within noise; None: none was
    by: str  # throughput | latency
    offered_kind: str
    text: NotRequired[str]  # the line the summary prints


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
    knee_range: NotRequired[KneeRange | None]  # the knee's bracket; None: no knee


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
    agents: NotRequired[AgentAttainment]  # --agent-tier: the probe's sessions against the tier


class AgentAttainment(TypedDict):
    """A probe's sessions against the agent tier (analysis/agents.py attainment)."""

    sessions: int  # sessions with a request in the probe's window
    met: int
    share: float
    needed: float  # the tier's share
    ok: bool
    failed_by: dict[str, int]  # ttft, speed, failed, no_ok -> sessions
    session_ttft_p50_s: float | None  # the median over sessions of their median TTFT
    session_speed_p50: float | None  # the median over sessions of their output tokens/s


class AgentsVerdict(TypedDict):
    """`ladder.sla.agents` (--agent-tier): the most agents meeting the tier, per GPU and per MW."""

    agents: float | None  # the search's answer
    per_gpu: NotRequired[float]  # with --gpus
    per_megawatt: NotRequired[float]  # with the GPU sidecar's power, or --gpu-power-w
    power_w: NotRequired[float]  # all GPUs, over the answer's probe (sidecar) or --gpu-power-w x --gpus
    power_from: NotRequired[str | None]  # "gpu sidecar" or "--gpu-power-w"
    tier: dict[str, float]  # ttft_s, speed_tokens_per_s, share
    rule: str
    step: NotRequired[int]  # the answer's probe
    attainment: NotRequired[AgentAttainment | None]


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
    agents: NotRequired[AgentsVerdict]  # --agent-tier


class LadderRefine(TypedDict):
    """`ladder.refine`: the refine steps --refine allowed, ran, and why they ended."""

    most: int  # --refine N
    steps: int  # the refine steps run (after the ladder's own)
    ended: str | None  # knee known, --refine N spent, no time left under -t ..., no knee to refine, ...
    run_time: float | None  # -t in seconds: a refine step starts only if it ends by then


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
    refine: NotRequired[LadderRefine]  # with --refine N (N > 0)


# ---- the server's and the GPU's /metrics, over the run and each step (analysis.server_metrics) ----


class SeriesSource(TypedDict):
    """`server_metrics.source`: the series read (ServerSeries.to_dict)."""

    url: str
    server: str | None  # the server detected from the names (llm-locust-sim, vllm, sglang, ...)
    dialect: str | None  # the metric names it speaks
    error: str | None  # the last failed read's
    failed: int
    samples: int
    info: dict[str, list[dict[str, str]]]  # {info series: [label set, ...]}, as the server has them


class GaugeWindow(TypedDict):
    """A gauge over a window: the mean and the max of the reads inside it."""

    mean: float
    max: float


class CounterWindow(TypedDict):
    """A counter over a window: its increase, and per second (None over no span)."""

    increase: float
    per_s: float | None


class MetricsWindow(TypedDict):
    """A series over a window (ServerSeries.window): each quantity of server_metrics.TABLE and
    FEATURE_TABLE the reads had (gauges: GaugeWindow, counters: CounterWindow) and what derives
    from them; `samples` always, the rest only when read."""

    samples: int  # reads inside the window
    t_from: NotRequired[float]  # the reads' span over the window (what a client count must cover)
    t_to: NotRequired[float]
    running: NotRequired[GaugeWindow]
    waiting: NotRequired[GaugeWindow]
    kv_cache_usage: NotRequired[GaugeWindow]
    generation_tokens_total: NotRequired[CounterWindow]
    preemptions_total: NotRequired[CounterWindow]
    prefix_cache_hits_total: NotRequired[CounterWindow]
    prefix_cache_queries_total: NotRequired[CounterWindow]
    prefix_cache_misses_total: NotRequired[CounterWindow]
    prefix_cache_hit_rate: NotRequired[GaugeWindow]
    ttft_seconds_sum: NotRequired[CounterWindow]
    ttft_seconds_count: NotRequired[CounterWindow]
    server_memory_bytes: NotRequired[GaugeWindow]
    gpu_memory_used_bytes: NotRequired[GaugeWindow]
    gpu_memory_total_bytes: NotRequired[GaugeWindow]
    gpu_utilization: NotRequired[GaugeWindow]
    gpu_power_watts: NotRequired[GaugeWindow]
    gpu_energy_joules_total: NotRequired[CounterWindow]
    gpu_energy_millijoules_total: NotRequired[CounterWindow]
    spec_decode_drafts_total: NotRequired[CounterWindow]
    spec_decode_draft_tokens_total: NotRequired[CounterWindow]
    spec_decode_accepted_tokens_total: NotRequired[CounterWindow]
    spec_accept_rate: NotRequired[GaugeWindow]
    spec_accept_length: NotRequired[GaugeWindow]
    # derived (server_metrics.derived, DERIVED)
    server_ttft_mean_s: NotRequired[float]
    prefix_cache_hit_ratio: NotRequired[float]
    prefix_cache_hit_ratio_source: NotRequired[str]  # counters or gauge
    spec_acceptance_rate: NotRequired[float]
    spec_mean_accepted_length: NotRequired[float]
    spec_decode_source: NotRequired[str]


class StepMetricsWindow(MetricsWindow):
    """One of `server_metrics.steps`: a ladder step's measurement window, its step and level."""

    step: int
    level: float


class MetricsWindows(TypedDict):
    """`server_metrics` / `gpu_metrics`: the series' source, its run window and its step windows."""

    source: SeriesSource
    run: MetricsWindow
    steps: NotRequired[list[StepMetricsWindow]]  # a ladder's


# ---- memory efficiency per ladder step (analysis.server_metrics efficiency) ----


class EfficiencyStep(StepRow, Throughput):
    """One of `efficiency.steps`: a step's GPU memory, KV-cache use and preemptions (each only
    when its series had it)."""

    gpu_memory_used_gib: NotRequired[float]
    output_tokens_per_s_per_gib: NotRequired[float]
    gpu_memory_beyond_baseline_gib: NotRequired[float]
    gpu_utilization_mean: NotRequired[float]
    kv_cache_usage_max: NotRequired[float]
    preemptions: NotRequired[float]
    kv_saturated: bool


class Efficiency(TypedDict):
    """`efficiency`: a ladder's memory efficiency (with the server's or the GPU's metrics)."""

    baseline_gpu_memory_gib: float | None  # GPU memory in use before the load
    steps: list[EfficiencyStep]
    max_load_before_kv_saturation: float | None


# ---- the verdicts (analysis.efficiency verdicts) ----


class GpuCounts(TypedDict):
    """`verdicts.gpus` (analysis.efficiency gpu_counts): prefill_gpus and decode_gpus are both set
    exactly when disaggregated."""

    gpus: int
    prefill_gpus: int | None
    decode_gpus: int | None
    disaggregated: bool


class GpuPrice(TypedDict):
    """`verdicts.price`: the price of a GPU-hour and where it came from."""

    usd_per_gpu_hour: float
    source: str  # gpu_hour_price, or gpu_prices[TYPE]
    gpu_type: str | None


class VerdictRow(TypedDict):
    """One of `verdicts.steps` (and `knee`, `run`): a step's (the run's) per-GPU, energy and cost
    figures (analysis.efficiency step_figures); a figure that cannot be computed is left out."""

    step: int | None  # None: the run's row
    offered: float | None
    output_tokens_per_s: float | None
    window_s: float | None
    input_tokens_per_s: float | None
    total_tokens_per_s: float | None
    tpot_p50_s: float | None
    interactivity: NotRequired[float]  # 1 / TPOT p50
    output_tokens_per_s_per_gpu: NotRequired[float]
    input_tokens_per_s_per_gpu: NotRequired[float]
    total_tokens_per_s_per_gpu: NotRequired[float]
    gpu_hours: NotRequired[float]
    energy_from: NotRequired[str]  # counter or power
    energy_flags: NotRequired[list[str]]
    gpu_power_watts: NotRequired[float]
    energy_joules: NotRequired[float]
    energy_samples: NotRequired[int]
    energy_valid: NotRequired[bool]
    joules_per_output_token: NotRequired[float]
    joules_per_total_token: NotRequired[float]
    usd_per_million_output_tokens: NotRequired[float]
    usd_per_million_total_tokens: NotRequired[float]
    usd: NotRequired[float]
    flags: NotRequired[list[str]]  # a step's (not in the run's row)
    pareto: NotRequired[bool]  # a step's: on the frontier


class Verdicts(TypedDict):
    """`verdicts`: per ladder step, at the knee and over the run (docs/verdicts.md)."""

    gpus: GpuCounts | None  # None: no GPU count given
    price: GpuPrice | None
    interactivity_from: str
    energy_rule: str
    steps: list[VerdictRow]
    frontier: list[int]  # the steps on the Pareto frontier, by throughput per GPU
    knee: VerdictRow | None
    run: VerdictRow | None
    notes: list[str]  # why a figure is left out


# ---- the stability plans' verdicts (analysis.stability) ----


class KvPressureRow(StepRow):
    """One of `stability.kv_pressure.rows`: a step's preemptions, KV-cache use and ITL."""

    preemptions: float | None
    kv_cache_usage_max: float | None
    itl_p50: float | None
    itl_p99: float | None
    itl_max: float | None


class ItlFigures(TypedDict):
    """ITL of a step (seconds): p50, p99, max."""

    p50: float | None
    p99: float | None
    max: float | None


class KvPressure(TypedDict):
    """`stability.kv_pressure`: the load where the server starts preempting (--kv-pressure)."""

    rows: list[KvPressureRow]
    min_load: float | None
    first_step: int | None
    first_load: float | None
    itl_before: ItlFigures | None
    itl_after: ItlFigures | None
    itl_p50_ratio: NotRequired[float]  # the first preempting step's ITL / the step before's
    itl_p99_ratio: NotRequired[float]
    itl_max_ratio: NotRequired[float]
    passed: bool
    reason: str


class OverlongOthers(TypedDict):
    """`stability.overlong.others`: the requests that were not overlong."""

    ok: int
    failed: int
    ttft_p50: float | None
    e2e_p50: float | None


class OverlongBaseline(TypedDict):
    """`stability.overlong.baseline`: the clean run's TTFT and E2E p50."""

    ttft_p50: float | None
    e2e_p50: float | None


class OverlongMix(TypedDict):
    """`stability.overlong`: the overlong mix (--overlong-share)."""

    share: float
    tokens: int
    overlong: int
    served: int
    classified: int
    unclassified: int
    others: OverlongOthers
    tolerance: float
    baseline: OverlongBaseline | None
    ttft_p50_ratio: NotRequired[float]  # with a baseline: the others' / the clean run's
    e2e_p50_ratio: NotRequired[float]
    passed: bool
    reason: str


class SoakRow(TypedDict):
    """One of `stability.soak.rows`: a window's TTFT and ITL p50 and its requests."""

    start: int
    ttft_p50: float | None
    itl_p50: float | None
    ok: int
    failed: int
    error_rate: float


class Drift(TypedDict):
    """`stability.soak.ttft_drift` / `itl_drift`: the p50's slope per hour."""

    slope_s_per_hour: float | None
    relative_per_hour: float | None
    mean_p50: float | None


class MemoryGrowth(TypedDict):
    """One of `stability.soak.memory`: a memory series' growth."""

    bytes_per_hour: float | None
    samples: int


class Soak(TypedDict):
    """`stability.soak`: latency drift, error bursts and memory growth (--soak-window)."""

    window: int  # seconds per window, widened to whole folded buckets
    window_asked: int
    windows: int
    max_drift: float
    max_error_rate: float
    rows: list[SoakRow]
    checks: list[str]  # (written empty)
    ttft_drift: Drift
    itl_drift: Drift
    error_bursts: list[int]  # the windows' starts
    memory: dict[str, MemoryGrowth]  # {series: growth}: server_memory_bytes, gpu_memory_used_bytes
    max_memory_growth: float | None
    passed: bool
    reason: str


class Stability(TypedDict, total=False):
    """`stability`: the verdict of each stability plan that ran (absent: not run)."""

    kv_pressure: KvPressure
    burst: BurstRecovery  # the burst ladder's recovery (ladder.burst)
    overlong: OverlongMix
    soak: Soak


# ---- the repetitions (analysis.repeats) ----


class RepeatFigure(TypedDict):
    """One of `repeats.figures`: a headline figure over the repetitions (analysis.repeats interval)."""

    n: int
    mean: float | None
    sd: float | None  # None under 2 repetitions
    ci95: list[float] | None  # [low, high]
    half_width: float | None
    values: list[float]
    unit: str
    higher_is_better: bool


class Repeats(TypedDict):
    """`repeats`: in the file --repeat N combines."""

    incomplete: dict[str, list[int]]  # {figure: the repetitions (1-based) that lack it}
    count: int
    confidence: float
    method: str
    reset: str
    files: list[str]
    figures: dict[str, RepeatFigure]  # {figure: ...}, analysis.repeats HEADLINE's names
    summary_note: NotRequired[str]  # added by combine
    planned: NotRequired[int]  # the repetitions asked for (more than `count` when the series was interrupted)


# ---- how the run was made (runtime.plugin, report.outcome) ----


class LoadFacts(TypedDict):
    """`run.load_facts`: what the load was (analysis/load_facts.py, docs/metrics.md "What the load was")."""

    mode: str | None  # closed, replay or ladder
    users: int | None
    think_time: float
    in_flight_mean: float  # Little's law over the run: summary.concurrency
    in_flight_p99: float | None  # over the run's seconds, each one's time-averaged count
    sent_per_s: float | None  # over the seconds with a send
    on_schedule: float | None  # share of sends within 50 ms of their due time


class RunLoad(TypedDict):
    """`run.load`: how the load was offered."""

    mode: str  # closed, replay or ladder
    users: int | None
    spawn_rate: float | None
    run_time: float | None
    shape: str | None


class Interrupted(TypedDict):
    """`run.interrupted`: the signal that stopped the run, when, and in which phase."""

    signal: str
    at: float
    phase: str


class EndpointStatus(TypedDict):
    """One of `run.endpoints`: an endpoint's requests and on how many processes it was down."""

    sent: int
    in_flight: int
    down_on: int
    processes: int
    down: bool


class Sessions(TypedDict):
    """`run.sessions`: agentic sessions started, answered in full, ended by a failed turn."""

    started: int
    done: int
    broken: int


class RunSettingsReplay(TypedDict):
    speed: float
    start_offset: float
    duration: float
    loops: int
    max_in_flight: int
    max_prefill: int


class RunSettingsTimeouts(TypedDict):
    connect: float
    no_progress: float
    total: float


class RunSettingsStable(TypedDict):
    window: float
    tolerance: float
    max_extend: float
    windows: int


class RunSettingsLadder(TypedDict):
    spec: str
    warmup: float
    step_duration: float
    step_requests: int
    stable: RunSettingsStable
    arrivals: str
    burstiness: float
    max_error_rate: float
    early_stop: bool


class RunSettings(TypedDict):
    """`run.settings`: the settings the runtime read (settings.model Settings.public)."""

    api: str
    model: str
    api_key_env: str  # the variable's name, never the key
    api_key_set: bool
    trace: str
    trace_format: str
    tokenizer: str
    replay: RunSettingsReplay
    think_time: float
    max_tokens: int
    max_tokens_cap: int
    force_length: bool
    continuous_usage: bool
    timeouts: RunSettingsTimeouts
    slos: dict[str, float]  # {name: limit}, latencies in seconds
    ladder: RunSettingsLadder
    seed: int


class Run(TypedDict):
    """`run`: how the run was made (runtime.plugin _run_facts, completed by report.outcome at the
    end of the run)."""

    host: str | None
    settings: RunSettings
    runner: str  # LocalRunner or MasterRunner
    command: list[str]  # masked
    seed: NotRequired[int]  # version 2
    load: RunLoad
    name: str
    cache_reset: dict[str, Any] | None  # --reset-cache's before the load (runtime.cache_reset)
    cache_state: NotRequired[CacheState]  # the prompt cache before the load (analysis.load_facts)
    load_facts: NotRequired[LoadFacts]  # what the load was: in flight, sends on schedule
    started_at: float | None
    ended_at: float
    server: dict[str, Any]  # open: what the run learnt of the server while running (model, workload)
    started_at_utc: NotRequired[str | None]  # version 2
    endpoints: NotRequired[dict[str, EndpointStatus]]  # {URL: ...}: with --endpoints
    sessions: NotRequired[Sessions]  # agentic sessions'
    workers_why: str | None
    interrupted: Interrupted | None  # None: not stopped by a signal
    stopped_early: str | None  # the fail-fast's reason


# ---- the effective plan (settings.derive.to_plan): each group a TypedDict of its plan keys ----


class PlanTimeouts(TypedDict, total=False):
    """`plan.timeouts`."""

    connect: float | str  # connect_timeout
    no_progress: float | str  # no_progress_timeout
    request: float | str  # request_timeout


class PlanLimits(TypedDict, total=False):
    """`plan.limits`."""

    head_bytes: int  # max_head_bytes
    event_bytes: int  # max_event_bytes
    body_bytes: int  # max_body_bytes


class PlanChecks(TypedDict, total=False):
    """`plan.checks`."""

    preflight: bool
    fail_fast: bool
    fail_fast_after: int


class PlanWorkloadSessions(TypedDict, total=False):
    """`plan.workload.sessions`."""

    max_idle: float | str
    mid_start: bool
    cache_bust: bool


class PlanWorkloadImages(TypedDict, total=False):
    """`plan.workload.images`."""

    count: int  # images
    size: str  # image_size
    format: str  # image_format


class PlanWorkloadAudio(TypedDict, total=False):
    """`plan.workload.audio`."""

    count: int  # audio
    seconds: float | str  # audio_seconds


class PlanWorkloadTools(TypedDict, total=False):
    """`plan.workload.tools`."""

    count: int  # tools
    choice: str  # tool_choice


class PlanWorkloadGraded(TypedDict, total=False):
    """`plan.workload.graded`."""

    set: str  # graded
    share: float  # graded_share
    max_tokens: int  # graded_max_tokens


class PlanWorkload(TypedDict, total=False):
    """`plan.workload`."""

    trace: str
    format: str  # trace_format
    synthetic: dict[str, Any]  # open: workload.synth's spec (asdict), that module's fields
    tokenizer: str
    think_time: float | str
    max_in_flight: int
    max_prefill: int
    cancel: str
    rate: str  # rate_curve (workload.rate_curve)
    prefix_dist: str  # workload.prefix_dist
    sessions: PlanWorkloadSessions
    images: PlanWorkloadImages
    audio: PlanWorkloadAudio
    tools: PlanWorkloadTools
    response_format: str
    mix: dict[str, float]  # {API: share}, the user's
    graded: PlanWorkloadGraded


class PlanLoad(TypedDict, total=False):
    """`plan.load`."""

    users: int
    spawn_rate: float
    run_time: str
    run_warmup: float | str
    warmup_requests: int


class PlanReplay(TypedDict, total=False):
    """`plan.replay`."""

    enabled: bool  # replay
    speed: float
    start_offset: float | str
    duration: float | str
    loops: int


class PlanLadderStable(TypedDict, total=False):
    """`plan.ladder.stable`."""

    window: float | str  # stable_window
    tolerance: float  # stable_tolerance
    max_extend: float | str  # stable_max_extend
    windows: int  # stable_windows


class PlanLadder(TypedDict, total=False):
    """`plan.ladder`."""

    kind: str
    steps: list[float | str]  # the levels; a rate series' "R@T"
    search: str  # an SLA search's spec
    burst: str  # a burst's spec
    warmup: float | str
    duration: float | str  # step_duration
    requests: int  # step_requests
    refine: int  # the most refine steps around the knee
    stable: PlanLadderStable
    arrivals: str
    burstiness: float  # arrivals_burstiness


class PlanEarlyStop(TypedDict, total=False):
    """`plan.early_stop`."""

    enabled: bool  # early_stop
    max_error_rate: float
    flat_steps: int
    flat_tolerance: float
    on_slo: bool  # stop_on_slo


class PlanStabilityOverlong(TypedDict, total=False):
    """`plan.stability.overlong`."""

    share: float  # overlong_share
    tokens: int  # overlong_tokens
    baseline: str  # overlong_baseline
    tolerance: float  # overlong_tolerance


class PlanStabilityKvPressure(TypedDict, total=False):
    """`plan.stability.kv_pressure`."""

    enabled: bool  # kv_pressure
    min_load: float  # kv_min_load


class PlanStabilitySoak(TypedDict, total=False):
    """`plan.stability.soak`."""

    window: float | str  # soak_window
    max_drift: float  # soak_max_drift
    max_error_rate: float  # soak_max_error_rate
    max_memory_growth: float  # soak_max_memory_growth


class PlanStability(TypedDict, total=False):
    """`plan.stability`."""

    overlong: PlanStabilityOverlong
    kv_pressure: PlanStabilityKvPressure
    burst_recovery: float | str
    soak: PlanStabilitySoak


class PlanWeb(TypedDict, total=False):
    """`plan.web`."""

    origins: str  # web_origins


class PlanRepeat(TypedDict, total=False):
    """`plan.repeat`."""

    count: int  # repeat
    reset_hook: str
    reset_cache: str
    prefix_hit: float
    baseline: str
    tolerance: str
    junit: str


class PlanOutputs(TypedDict, total=False):
    """`plan.outputs`."""

    progress_interval: float | str
    checkpoint_every: float | str
    locust_stats: bool


class PlanMlflow(TypedDict, total=False):
    """`plan.mlflow`."""

    uri: str  # mlflow
    experiment: str  # mlflow_experiment
    run_name: str  # mlflow_run_name
    timeout: float  # mlflow_timeout


class PlanObserve(TypedDict, total=False):
    """`plan.observe`."""

    server_metrics: str
    gpu_metrics: str
    interval: float | str  # metrics_interval
    prometheus_port: int
    prometheus_host: str


class PlanCost(TypedDict, total=False):
    """`plan.cost`."""

    gpus: int
    prefill_gpus: int
    decode_gpus: int
    gpu_hour_price: float
    gpu_prices: dict[str, float]  # {GPU type: $ per GPU-hour}, the user's
    gpu_power_w: float  # one GPU's power, for agents per megawatt without a sidecar


class PlanSim(TypedDict, total=False):
    """`plan.sim`."""

    slots: int  # sim_slots
    fast: bool  # sim_fast
    graded_accuracy: float  # sim_graded_accuracy


class Plan(TypedDict, total=False):
    """`plan`: the effective plan (settings.derive.to_plan), every plan key that applies, as
    `llm-locust run RESULTS.json` runs it again. total=False, here and in its groups: to_plan leaves
    out a setting that does not apply (a closed loop's users in a ladder) or is unset (None)."""

    host: str
    api: str
    model: str
    trace_models: bool
    endpoints: str
    route: str
    session_headers: str
    api_key_env: str
    timeouts: PlanTimeouts
    limits: PlanLimits
    checks: PlanChecks
    workload: PlanWorkload
    max_tokens: int
    max_tokens_cap: int
    force_length: bool
    continuous_usage: bool
    seed: int
    load: PlanLoad
    replay: PlanReplay
    ladder: PlanLadder
    early_stop: PlanEarlyStop
    grid: str
    stability: PlanStability
    workers: int | str
    stream_rate: float  # tokens/s a stream is expected to get: --workers auto's plan
    locustfile: str
    web: PlanWeb
    repeat: PlanRepeat
    slos: dict[str, float | str]  # slo: {name: limit}, latency in seconds ("Ns" text when large)
    slo_attainment: float
    agent_tier: str  # ttft=...ms,speed=...,share=...% (analysis/agents.py)
    precision: dict[str, float]  # {figure: relative half-width}
    name: str
    outputs: PlanOutputs
    mlflow: PlanMlflow
    description: str
    results: str
    report: str
    record_log: str
    observe: PlanObserve
    cost: PlanCost
    sim: PlanSim


# A results document's `distributions[metric]`: [[low_s, high_s, count], ...]
Bins = list[list[float]]


class Checkpoint(TypedDict):
    """`checkpoint`: when a partial results file was written while its run went on
    (report.outcome _mark_partial; --checkpoint-every)."""

    at: float  # Unix time it was written (the master's clock)
    at_utc: str
    every_s: float  # --checkpoint-every
    counted_until: float  # every request that finished before this is counted (the workers' oldest last report)
    in_flight: int  # sent, no outcome yet: the summary's in_flight
    workers_missing: int  # workers the master had lost (no heartbeat) when it was written


class ResultsDoc(TypedDict):
    """The results file (SCHEMA "llm-locust/results"): what build_results writes, what the run
    adds at its end, and what read_results returns (`_path`: the file it was read from)."""

    schema: str
    version: int
    created: float
    environment: Environment
    run: Run
    summary: Figures
    validity: Validity
    distributions: NotRequired[dict[str, Bins]]  # version 2
    steps: list[Step]
    series: list[list[float]]
    workers: list[Worker]
    warmup: NotRequired[Warmup | None]
    prefix_hit: NotRequired[PrefixHit | None]
    steady: NotRequired[Steady]
    server_metrics: NotRequired[MetricsWindows]
    server_metrics_by_endpoint: NotRequired[dict[str, MetricsWindows]]
    gpu_metrics: NotRequired[MetricsWindows]
    efficiency: NotRequired[Efficiency]  # a ladder's, with the server's or the GPU's metrics
    verdicts: NotRequired[Verdicts]
    stability: NotRequired[Stability]
    ladder: NotRequired[LadderDoc]
    plan: NotRequired[Plan | None]
    gates: NotRequired[list[Gate]]
    repeats: NotRequired[Repeats]  # in a combined file
    # a section whose counts do not add up (report.accounting): a bug of the counting, one line each
    count_problems: NotRequired[list[str]]
    precision: NotRequired[Precision]  # --precision's targets and whether they were met
    # true in a file written while its run went on (a checkpoint), false at its end; absent in files
    # of before checkpoints
    partial: NotRequired[bool]
    checkpoint: NotRequired[Checkpoint]  # a partial file's: when, and what it covers
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
            print(f"{path} is stale: run python -m llm_locust.schema", file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
