"""NVIDIA AIPerf's `profile_export_aiperf.json` as a run beside ours. Definitions from AIPerf 0.13's
source (tests/fixtures/othertools/README.md): its `inter_token_latency` is per request
(E2E - TTFT) / (OSL - 1), i.e. our TPOT, and its per-gap figure is `inter_chunk_latency` (our
inter-chunk latency); TTFT and request latency start before the TCP connect; OSL is counted by its
tokenizer; request latency ends at the last text chunk."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llm_locust.report.compare.foreign import CLIENT_TOKENS, CONNECT, Foreign, closed_loop, dig, latency, num, ratio

UNITS = {"ms": 1e-3, "sec": 1.0, "s": 1.0, "us": 1e-6, "ns": 1e-9}
APIS = {"completions": "openai-completions", "chat": "openai-chat"}
STAT_NAMES = {"mean": "avg", "min": "min", "max": "max", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}


# the metric records compare reads ({unit, avg, p50 ...} each): none is negative
RECORDS = (
    "request_count",
    "error_request_count",
    "benchmark_duration",
    "request_throughput",
    "output_token_throughput",
    "effective_concurrency",
    "total_usage_completion_tokens",
    "total_usage_prompt_tokens",
    "total_isl",
    "total_osl",
    "time_to_first_token",
    "inter_token_latency",
    "inter_chunk_latency",
    "request_latency",
)
REQUIRED = ("request_count", "request_throughput")  # records every AIPerf summary has


def _record(v: Any) -> bool:
    return isinstance(v, dict) and "unit" in v


def matches(doc: Any) -> bool:
    """AIPerf's summary: by its required metric records ({unit, avg ...}: REQUIRED), not by a
    version key another file may carry."""
    return isinstance(doc, dict) and all(_record(doc.get(k)) for k in REQUIRED)


def fields(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The fields read (named as the file names them), for figure_checks.check_figures."""
    for tag in RECORDS:
        rec = doc.get(tag)
        if isinstance(rec, dict) and "unit" in rec:
            yield from ((f"{tag}.{k}", v) for k, v in rec.items() if k != "unit")
    for i, e in enumerate(doc.get("error_summary") or []):
        yield f"error_summary[{i}].count", dig(e, "count")


def _metric(doc: dict[str, Any], tag: str) -> dict[str, Any] | None:
    """A latency record in seconds (our STATS), None when absent or of an unknown unit."""
    rec = doc.get(tag)
    if not isinstance(rec, dict) or rec.get("unit") not in UNITS:
        return None
    return latency({ours: rec.get(theirs) for ours, theirs in STAT_NAMES.items()}, UNITS[rec["unit"]], rec.get("count"))


def _avg(doc: dict[str, Any], tag: str) -> float | None:
    return num(dig(doc, tag, "avg"))


def _errors(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, int] = {}
    for e in doc.get("error_summary") or []:
        det = dig(e, "error_details") or {}
        text = f"{det.get('type') or 'error'}: {det.get('message') or ''}"[:120]
        out[text] = out.get(text, 0) + int(num(dig(e, "count")) or 0)
    return {"error": out} if out else {}


def _summary(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    ok = _avg(doc, "request_count") or 0.0
    failed = _avg(doc, "error_request_count") or 0.0
    duration = _avg(doc, "benchmark_duration")
    usage_out = _avg(doc, "total_usage_completion_tokens")
    caveats = {"ttft": CONNECT, "e2e": f"{CONNECT}; ends at the last text chunk (ours: the stream's end marker)"}
    caveats["tpot"] = CLIENT_TOKENS
    tps: float | None
    if usage_out is not None and duration:
        tps = usage_out / duration  # our definition: server usage tokens over the run's span
        own = _avg(doc, "output_token_throughput")
        caveats["output_tokens_per_s"] = (
            "server usage tokens / its benchmark_duration (its own output_token_throughput, "
            f"{own:.4g} tok/s, counts with its tokenizer)"
            if own is not None
            else "server usage tokens / its benchmark_duration"
        )
    else:
        tps = _avg(doc, "output_token_throughput")
        caveats["output_tokens_per_s"] = caveats["tokens_out"] = CLIENT_TOKENS
    lat = {
        name: rec
        for name, rec in (
            ("ttft", _metric(doc, "time_to_first_token")),
            ("tpot", _metric(doc, "inter_token_latency")),
            ("inter_chunk", _metric(doc, "inter_chunk_latency")),
            ("e2e", _metric(doc, "request_latency")),
        )
        if rec
    }
    summary = {
        "sent": int(ok + failed),
        "ok": int(ok),
        "failed": int(failed),
        "cancelled": 0,
        "error_rate": ratio(failed, ok + failed),
        "errors": _errors(doc),
        "duration_s": duration,
        "tokens_in": _avg(doc, "total_usage_prompt_tokens") or _avg(doc, "total_isl"),
        "tokens_out": usage_out if usage_out is not None else _avg(doc, "total_osl"),
        "output_tokens_per_s": tps,
        "requests_per_s": _avg(doc, "request_throughput"),
        "concurrency": _avg(doc, "effective_concurrency"),
        "goodput_requests_per_s": None,
        "goodput_tokens_per_s": None,
        "latency": lat,
    }
    return summary, caveats


def _load(cfg: dict[str, Any], cli: str) -> tuple[str, str]:
    """(load, timing) from the profiling phase of input_config, else the recorded command line."""
    phases = [p for p in cfg.get("phases") or [] if isinstance(p, dict)]
    ph = next((p for p in phases if p.get("kind") == "profiling"), phases[0] if phases else {})
    timing = (
        f"{ph['requests']} requests" if ph.get("requests") else (f"{ph['duration']} s" if ph.get("duration") else "?")
    )
    if ph.get("type") == "concurrency" and ph.get("concurrency"):
        return closed_loop(ph["concurrency"]), timing
    if ph.get("rate"):
        return f"rate {ph['rate']} req/s", timing
    words = cli.split()
    if "--concurrency" in words[:-1]:
        return closed_loop(words[words.index("--concurrency") + 1].strip("'")), timing
    return "?", timing


def read(doc: dict[str, Any]) -> Foreign:
    """The run in our terms (foreign.Foreign)."""
    summary, caveats = _summary(doc)
    cfg: dict[str, Any] = doc["input_config"] if isinstance(doc.get("input_config"), dict) else {}
    endpoint = cfg.get("endpoint") or {}
    ds = dig(cfg, "datasets", 0) or {}
    marks = {"itl": "its ITL is a per-request TPOT (row TPOT)"}
    if endpoint.get("streaming") is False:
        for f in ("ttft", "itl", "tpot", "inter_chunk"):
            marks[f] = "not streamed: no token times"
    if "goodput" in doc or "good_request_count" in doc:
        marks["goodput"] = "judged against its --goodput SLOs"
    extra = endpoint.get("extra") or {}
    load, timing = _load(cfg, str(dig(doc, "run_info", "cli_command") or ""))
    return Foreign(
        tool="AIPerf",
        version=str(doc.get("aiperf_version") or ""),
        summary=summary,
        not_comparable=marks,
        caveats=caveats,
        model=str(dig(cfg, "models", "items", 0, "name") or "unknown"),
        api=APIS.get(str(endpoint.get("type")), str(endpoint.get("type") or "?")),
        load=load,
        timing=timing,
        input_len=num(dig(ds, "prompts", "isl", "mean")),
        output_len=num(dig(ds, "prompts", "osl", "mean")),
        forced=bool(extra.get("ignore_eos") or extra.get("min_tokens")) if endpoint else None,
        prompts=f"AIPerf {ds.get('type') or '?'} prompts, seed {ds.get('random_seed', '?')}",
        started=str(doc.get("start_time") or "?"),
        seed=dig(doc, "run_info", "random_seed") if dig(doc, "run_info", "random_seed") is not None else "?",
        server=str(dig(endpoint, "urls", 0) or ""),
    )
