"""The inference server's own /metrics, read during a test and set beside each load step.

Names drift between servers and releases, so each quantity is looked up in a table of
alternatives (the first present wins); which server it is, is detected from the names.
Pure parsing and windowing here; `transport.scraper.Scraper` is the small gevent loop the master runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, cast

from prometheus_client.parser import text_string_to_metric_families

from llm_locust.analysis.efficiency import GPU_COUNTERS, GPU_TABLE
from llm_locust.schema import (
    CounterWindow,
    Efficiency,
    EfficiencyStep,
    MetricsWindow,
    SeriesSource,
    StepMetricsWindow,
)

log = logging.getLogger(__name__)

# quantity -> alternatives: (metric name, required labels). Gauges unless the name says _total.
TABLE: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "running": (
        ("vllm:num_requests_running", {}),
        ("sglang:num_running_reqs", {}),
        ("tgi_batch_current_size", {}),
        ("trtllm_num_requests_running", {}),
        ("llamacpp:requests_processing", {}),
        ("nv_trt_llm_request_metrics", {"request_type": "active"}),
    ),
    "waiting": (
        ("vllm:num_requests_waiting", {}),
        ("sglang:num_queue_reqs", {}),
        ("tgi_queue_size", {}),
        ("trtllm_num_requests_waiting", {}),
        ("llamacpp:requests_deferred", {}),
        ("nv_trt_llm_request_metrics", {"request_type": "waiting"}),
    ),
    "kv_cache_usage": (
        ("vllm:kv_cache_usage_perc", {}),
        ("vllm:gpu_cache_usage_perc", {}),
        ("sglang:token_usage", {}),
        ("trtllm_kv_cache_utilization", {}),
        ("nv_trt_llm_kv_cache_block_metrics", {"kv_cache_block_type": "fraction"}),
    ),
    "generation_tokens_total": (
        ("vllm:generation_tokens_total", {}),
        ("sglang:generation_tokens_total", {}),
        ("trtllm_generation_tokens_total", {}),
        ("llamacpp:tokens_predicted_total", {}),
    ),
    "preemptions_total": (("vllm:num_preemptions_total", {}), ("sglang:num_retracted_reqs", {})),
    # prefix cache: vLLM counts queried and hit prompt tokens; llama-server counts the prompt
    # tokens it reused and (in prompt_tokens_total) those it processed; SGLang and trtllm-serve
    # give a hit-rate gauge
    "prefix_cache_hits_total": (("vllm:prefix_cache_hits_total", {}), ("llamacpp:prompt_tokens_cached_total", {})),
    "prefix_cache_queries_total": (("vllm:prefix_cache_queries_total", {}),),
    "prefix_cache_misses_total": (("llamacpp:prompt_tokens_total", {}),),
    "prefix_cache_hit_rate": (("sglang:cache_hit_rate", {}), ("trtllm_kv_cache_hit_rate", {})),
    "ttft_seconds_sum": (
        ("vllm:time_to_first_token_seconds_sum", {}),
        ("sglang:time_to_first_token_seconds_sum", {}),
        ("trtllm_time_to_first_token_seconds_sum", {}),
    ),
    "ttft_seconds_count": (
        ("vllm:time_to_first_token_seconds_count", {}),
        ("sglang:time_to_first_token_seconds_count", {}),
        ("trtllm_time_to_first_token_seconds_count", {}),
    ),
    # the server process's resident memory (prometheus_client's process collector: vLLM, SGLang's
    # API server), for the soak verdict's memory growth
    "server_memory_bytes": (("process_resident_memory_bytes", {}),),
    # from llm-locust's GPU sidecar (its base-unit names), summed over GPUs except utilisation
    "gpu_memory_used_bytes": (("llm_locust_gpu_memory_used_bytes", {}),),
    "gpu_memory_total_bytes": (("llm_locust_gpu_memory_total_bytes", {}),),
    "gpu_utilization": (("llm_locust_gpu_utilization_ratio", {}),),
}
TABLE.update(GPU_TABLE)  # GPU power and energy (analysis/efficiency.py: J/token)
# Quantities a server exports only while the feature is on (so a plain server's scrape lacks
# them): speculative decoding. vLLM's counters (llama-server uses the same names): drafts (verify
# steps), draft tokens proposed, draft tokens accepted; SGLang's gauges.
FEATURE_TABLE: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "spec_decode_drafts_total": (
        ("vllm:spec_decode_num_drafts_total", {}),
        ("llamacpp:spec_decode_num_drafts_total", {}),
    ),
    "spec_decode_draft_tokens_total": (
        ("vllm:spec_decode_num_draft_tokens_total", {}),
        ("llamacpp:spec_decode_num_draft_tokens_total", {}),
    ),
    "spec_decode_accepted_tokens_total": (
        ("vllm:spec_decode_num_accepted_tokens_total", {}),
        ("llamacpp:spec_decode_num_accepted_tokens_total", {}),
    ),
    "spec_accept_rate": (("sglang:spec_accept_rate", {}),),
    "spec_accept_length": (("sglang:spec_accept_length", {}),),
}


def quantities() -> dict[str, tuple[tuple[str, dict[str, str]], ...]]:
    """Every quantity read: TABLE's, then FEATURE_TABLE's."""
    return {**TABLE, **FEATURE_TABLE}


MEANS = ("gpu_utilization",)  # averaged over label sets (GPUs), not summed
COUNTERS = (
    "generation_tokens_total",
    "preemptions_total",
    "prefix_cache_hits_total",
    "prefix_cache_queries_total",
    "prefix_cache_misses_total",
    "spec_decode_drafts_total",
    "spec_decode_draft_tokens_total",
    "spec_decode_accepted_tokens_total",
    "ttft_seconds_sum",
    "ttft_seconds_count",
    *GPU_COUNTERS,
)
# what the window derives (see ServerSeries.window), beside each quantity of TABLE
DERIVED = ("server_ttft_mean_s", "prefix_cache_hit_ratio", "spec_acceptance_rate", "spec_mean_accepted_length")
SERVERS = (
    ("llm_locust_sim_", "llm-locust-sim"),  # the built-in simulator: vLLM's names, and its own info series
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("tgi_", "tgi"),
    ("trtllm_", "trtllm"),
    ("nv_trt_llm", "triton-trtllm"),
    ("llamacpp:", "llama.cpp"),
)


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of an exposition by name: {name: [(labels, value), ...]}."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


# the metric names a server speaks, where they are another server's (the simulator's are vLLM's)
DIALECTS = {"llm-locust-sim": "vllm"}


def detect(names) -> str | None:
    """Which server exported these metric names: the first of SERVERS whose prefix one has (the
    simulator before vLLM, whose names it exports too), or the GPU sidecar; None when none."""
    if any(n.startswith("llm_locust_gpu_") for n in names):
        return "llm-locust-gpu-sidecar"
    for prefix, server in SERVERS:
        if any(n.startswith(prefix) for n in names):
            return server
    return None


def read(text: str) -> tuple[str | None, dict[str, float]]:
    """(server kind, {quantity: value}) from one /metrics body; values summed over label sets."""
    return _figures(samples(text))


def info_series(by_name: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, list[dict[str, str]]]:
    """Label sets of the static series: `*_info` ones (GPU name, driver, server config) and
    dcgm-exporter's, which carry the GPU model on every series."""
    out = {n: [lab for lab, _v in rows] for n, rows in by_name.items() if n.endswith("_info")}
    for n, rows in by_name.items():
        if n.startswith("DCGM_FI_") and rows and "modelName" in rows[0][0]:
            out[n] = [lab for lab, _v in rows]
            break
    return out


def _figures(by_name) -> tuple[str | None, dict[str, float]]:
    figures: dict[str, float] = {}
    for quantity, alternatives in quantities().items():
        for name, labels in alternatives:
            rows = by_name.get(name)
            if rows is None and name.endswith("_total"):
                rows = by_name.get(name[: -len("_total")])  # some parsers keep the bare counter name
            if not rows:
                continue
            picked = [v for lab, v in rows if all(lab.get(k) == want for k, want in labels.items())]
            if picked:
                figures[quantity] = sum(picked) / len(picked) if quantity in MEANS else sum(picked)
                break
    return detect(by_name), figures


def _inc(w: dict[str, Any], q: str) -> float | None:
    v = w.get(q)
    return None if v is None else v.get("increase")


def derived(w: dict[str, Any]) -> dict[str, Any]:
    """Ratios of one window's figures (quantity -> {"increase"} / {"mean", "max"}), each present
    only when its inputs are:
      - prefix_cache_hit_ratio: hit tokens / queried tokens over the window (vLLM); hits /
        (hits + processed prompt tokens) (llama-server); else the mean of the hit-rate gauge
        (SGLang, trtllm-serve);
      - spec_acceptance_rate: accepted / draft tokens (vLLM, llama-server), else SGLang's
        spec_accept_rate gauge's mean;
      - spec_mean_accepted_length: tokens per verify step, 1 + accepted / drafts (vLLM,
        llama-server), else SGLang's spec_accept_length gauge's mean;
    and prefix_cache_hit_ratio_source / spec_decode_source: "counters" or "gauge"."""
    out: dict[str, Any] = {}
    hits, queries, misses = (
        _inc(w, q) for q in ("prefix_cache_hits_total", "prefix_cache_queries_total", "prefix_cache_misses_total")
    )
    if hits is not None and queries is None and misses is not None:
        queries = hits + misses  # llama-server: prompt_tokens_total excludes the cached ones
    if hits is not None and queries:
        out["prefix_cache_hit_ratio"] = hits / queries
        out["prefix_cache_hit_ratio_source"] = "counters"
    elif "prefix_cache_hit_rate" in w:
        out["prefix_cache_hit_ratio"] = w["prefix_cache_hit_rate"]["mean"]
        out["prefix_cache_hit_ratio_source"] = "gauge"
    drafts, draft_tokens, accepted = (
        _inc(w, q)
        for q in ("spec_decode_drafts_total", "spec_decode_draft_tokens_total", "spec_decode_accepted_tokens_total")
    )
    if accepted is not None and (draft_tokens or drafts):
        if draft_tokens:
            out["spec_acceptance_rate"] = accepted / draft_tokens
        if drafts:
            out["spec_mean_accepted_length"] = 1 + accepted / drafts
        out["spec_decode_source"] = "counters"
    elif "spec_accept_rate" in w or "spec_accept_length" in w:
        if "spec_accept_rate" in w:
            out["spec_acceptance_rate"] = w["spec_accept_rate"]["mean"]
        if "spec_accept_length" in w:
            out["spec_mean_accepted_length"] = w["spec_accept_length"]["mean"]
        out["spec_decode_source"] = "gauge"
    return out


def counter_increase(points: list[tuple[float, float]], start: float, end: float) -> CounterWindow | None:
    """{"increase", "per_s"} of a counter read at `points` ((wall time, value), in time order)
    over [start, end], or None when no two reads span any of it and none lies inside.

    Between two reads the counter is taken to grow at a constant rate, so a window edge between
    them gets its share of the gain. A counter that went back (a restart, or a sum over GPUs that
    lost one) is not mended: the increase is then below what was counted, negative when the fall
    is larger, for the reader to flag (analysis/efficiency.py: energy_counter_reset)."""
    if not points:
        return None
    lo, hi = max(start, points[0][0]), min(end, points[-1][0])
    if hi < lo or (hi == lo and not any(start <= t <= end for t, _v in points)):
        return None
    inc = 0.0
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t1 <= lo or t0 >= hi or t1 <= t0:
            continue
        inc += (v1 - v0) * (min(t1, hi) - max(t0, lo)) / (t1 - t0)
    span = hi - lo
    return {"increase": inc, "per_s": inc / span if span > 0 else None}


@dataclass
class Sample:
    t: float  # wall clock
    figures: dict[str, float]


@dataclass
class ServerSeries:
    url: str
    server: str | None = None
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None  # the last failed read's
    failed: int = 0  # reads that failed (a slow answer mid-run is one; samples go on)
    info: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # from the first scrape

    def window(self, start: float, end: float) -> MetricsWindow:
        """Gauges: mean and max of the reads inside the window; counters: increase and rate over
        exactly [start, end], read at its edges.

        A counter is known only at the reads, a few seconds apart, and the edges of a step's
        window fall between two of them. Taking the increase between the first and the last read
        inside the window (as this did before) lost what the counter gained between the window's
        start and its first read and between its last read and its end: a quarter of a short
        step, all of a step with one read inside (a llama-server ladder showed 0 cached tokens per
        step and 7,962 over the run). So the counter's value at each edge is interpolated between
        the reads around it (linear: the counter's mean rate between two reads), and the reads
        outside the window count as much as the ones inside for that. Before the first read or
        after the last one nothing is known: the window is cut to the reads' span (`t_from`,
        `t_to`: what a client-side count must cover to be compared with an increase)."""
        inside = [s for s in self.samples if start <= s.t <= end]
        # built by quantity name (TABLE, FEATURE_TABLE, DERIVED: each a key of MetricsWindow)
        out: dict[str, Any] = {"samples": len(inside)}
        ordered = sorted(self.samples, key=lambda s: s.t)
        if not ordered:
            return cast(MetricsWindow, out)
        t_from, t_to = max(start, ordered[0].t), min(end, ordered[-1].t)
        if t_to > t_from or inside:
            out["t_from"], out["t_to"] = t_from, t_to
        for q in quantities():
            if q in COUNTERS:
                counter = counter_increase([(s.t, s.figures[q]) for s in ordered if q in s.figures], start, end)
                if counter is not None:
                    out[q] = counter
                continue
            values = [s.figures[q] for s in inside if q in s.figures]
            if values:
                out[q] = {"mean": sum(values) / len(values), "max": max(values)}
        ttft_n = out.get("ttft_seconds_count", {}).get("increase")
        if ttft_n:
            out["server_ttft_mean_s"] = out["ttft_seconds_sum"]["increase"] / ttft_n
        out.update(derived(out))
        return cast(MetricsWindow, out)

    def to_dict(self) -> SeriesSource:
        return {
            "url": self.url,
            "server": self.server,
            "dialect": DIALECTS.get(self.server or "", self.server),
            "error": self.error,
            "failed": self.failed,
            "samples": len(self.samples),
            "info": self.info,
        }


def efficiency(
    steps: list[dict],
    server: list[StepMetricsWindow] | None,
    gpu: list[StepMetricsWindow] | None,
    baseline_bytes: float | None,
) -> Efficiency:
    """Memory efficiency per step (issue: memory beyond the weights and what throughput it buys).

    steps: the ladder's StepResult dicts; server / gpu: the per-step windows of each series (same
    order); baseline_bytes: GPU memory in use before the load (the first sidecar sample)."""
    out_steps: list[EfficiencyStep] = []
    sustained = None
    for i, st in enumerate(steps):
        # built in the order the file keeps (kv_saturated last), then an EfficiencyStep
        row: dict[str, Any] = {
            "step": st["step"],
            "offered": st["offered"],
            "output_tokens_per_s": st["output_tokens_per_s"],
        }
        g: MetricsWindow | None = gpu[i] if gpu and i < len(gpu) else None
        sv: MetricsWindow | None = server[i] if server and i < len(server) else None
        used = g["gpu_memory_used_bytes"]["mean"] if g and "gpu_memory_used_bytes" in g else None
        if used:
            gib = used / 2**30
            row["gpu_memory_used_gib"] = gib
            row["output_tokens_per_s_per_gib"] = st["output_tokens_per_s"] / gib
            if baseline_bytes is not None:
                row["gpu_memory_beyond_baseline_gib"] = (used - baseline_bytes) / 2**30
        if g and "gpu_utilization" in g:
            row["gpu_utilization_mean"] = g["gpu_utilization"]["mean"]
        kv = sv["kv_cache_usage"]["max"] if sv and "kv_cache_usage" in sv else None
        pre = sv["preemptions_total"]["increase"] if sv and "preemptions_total" in sv else None
        if kv is not None:
            row["kv_cache_usage_max"] = kv
        if pre is not None:
            row["preemptions"] = pre
        row["kv_saturated"] = (kv is not None and kv >= 0.99) or bool(pre)
        out_steps.append(cast(EfficiencyStep, row))
    # the highest load sustained before the KV cache filled up or requests were preempted
    for r in out_steps:
        if r["kv_saturated"]:
            break
        if "kv_cache_usage_max" in r or "preemptions" in r:
            sustained = r["offered"]
    return {
        "baseline_gpu_memory_gib": None if baseline_bytes is None else baseline_bytes / 2**30,
        "steps": out_steps,
        "max_load_before_kv_saturation": sustained,
    }


def efficiency_table(eff: Efficiency) -> str:
    """The memory-efficiency figures per step as a text table ("" when no step has any)."""
    cols = (
        ("GPU mem GiB", "gpu_memory_used_gib", 1, "{:.1f}"),
        ("beyond idle GiB", "gpu_memory_beyond_baseline_gib", 1, "{:.1f}"),
        ("tok/s per GiB", "output_tokens_per_s_per_gib", 1, "{:.1f}"),
        ("GPU util %", "gpu_utilization_mean", 1, "{:.0f}"),
        ("KV max %", "kv_cache_usage_max", 100, "{:.1f}"),
        ("preempted", "preemptions", 1, "{:.0f}"),
    )
    present = [c for c in cols if any(c[1] in r for r in eff["steps"])]
    if not present:
        return ""
    head = f"{'step':>4}  {'offered':>8}  {'tok/s':>7}" + "".join(f"  {c[0]:>{max(len(c[0]), 8)}}" for c in present)
    lines = ["memory efficiency", head, "-" * len(head)]
    for r in eff["steps"]:
        line = f"{r['step']:>4}  {r['offered']:>8g}  {r['output_tokens_per_s']:>7.0f}"
        for label, key, scale, fmt in present:
            v = cast("dict[str, float]", r).get(key)  # the columns name the row's optional figures
            line += f"  {('-' if v is None else fmt.format(v * scale)):>{max(len(label), 8)}}"
        lines.append(line + ("  KV saturated" if r["kv_saturated"] else ""))
    if eff.get("baseline_gpu_memory_gib") is not None:
        lines.append(f"idle GPU memory before the load: {eff['baseline_gpu_memory_gib']:.1f} GiB")
    most = eff.get("max_load_before_kv_saturation")
    lines.append(f"highest load before KV-cache saturation or preemption: {'-' if most is None else f'{most:g}'}")
    return "\n".join(lines)
