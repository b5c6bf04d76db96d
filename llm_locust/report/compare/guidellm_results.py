"""GuideLLM's benchmarks JSON (`guidellm run --output kind=json`) as a run beside ours. Definitions
from GuideLLM 0.8.1's source (tests/fixtures/othertools/README.md): TTFT starts once the request's
headers are sent and ends at the first text; `request_latency` (in seconds) ends after `[DONE]`;
`inter_token_latency_ms` is each request's (last - first token) / (N - 1) weighted by N - 1 tokens,
so its mean is our ITL mean but its percentiles are of per-request means; `time_per_output_token_ms`
includes TTFT; token counts come from server usage."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from llm_locust.report.compare.errors import CompareError
from llm_locust.report.compare.foreign import Foreign, closed_loop, dig, error_class, latency, num, ratio

APIS = {"/v1/completions": "openai-completions", "/v1/chat/completions": "openai-chat"}
PCT = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p99.9": "p999"}


def matches(doc: Any) -> bool:
    """A GuideLLM report: `benchmarks` whose first one has `metrics` (and GuideLLM's version or type)."""
    b = dig(doc, "benchmarks", 0)
    return (
        isinstance(b, dict)
        and isinstance(b.get("metrics"), dict)
        and (dig(doc, "metadata", "guidellm_version") is not None or b.get("type_") == "generative_benchmark")
    )


# the distributions compare reads ({mean, median, min, max, count, total_sum, percentiles} per status)
DISTRIBUTIONS = (
    "time_to_first_token_ms",
    "request_latency",
    "inter_token_latency_ms",
    "prompt_token_count",
    "output_token_count",
    "output_tokens_per_second",
    "requests_per_second",
    "request_concurrency",
)
STAT_KEYS = ("mean", "median", "min", "max", "count", "total_sum")


def fields(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The fields read (named as the file names them), for figure_checks.check_figures: none is negative."""
    for i, b in enumerate(doc.get("benchmarks") or []):
        at = f"benchmarks[{i}]"
        if not isinstance(b, dict):
            continue
        yield f"{at}.duration", b.get("duration")
        m = b.get("metrics")
        m = m if isinstance(m, dict) else {}
        totals = m.get("request_totals")
        totals = totals if isinstance(totals, dict) else {}
        yield from ((f"{at}.metrics.request_totals.{k}", v) for k, v in totals.items())
        for name in DISTRIBUTIONS:
            for status in ("successful", "errored", "incomplete", "total"):
                d = dig(m, name, status)
                if isinstance(d, dict):
                    yield from _stats_fields(d, f"{at}.metrics.{name}.{status}")


def _stats_fields(d: dict[str, Any], at: str) -> Iterator[tuple[str, Any]]:
    yield from ((f"{at}.{k}", d.get(k)) for k in STAT_KEYS)
    pct = d.get("percentiles")
    if isinstance(pct, dict):
        yield from ((f"{at}.percentiles.{k}", v) for k, v in pct.items())


def _dist(metrics: dict[str, Any], name: str, status: str = "successful") -> dict[str, Any]:
    """One status of a StatusDistributionSummary ({mean, median, min, max, count, percentiles ...})."""
    d = metrics.get(name)
    d = d.get(status) if isinstance(d, dict) and status in d else d
    return d if isinstance(d, dict) else {}


def _stats(d: dict[str, Any]) -> dict[str, Any]:
    pct = d.get("percentiles") or {}
    out = {s: pct.get(k) for s, k in PCT.items()}
    out.update(mean=d.get("mean"), min=d.get("min"), max=d.get("max"))
    if out["p50"] is None:
        out["p50"] = d.get("median")
    return out


def _errors(b: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, int] = {}
    for r in dig(b, "requests", "errored") or []:
        text = error_class(dig(r, "info", "error") or "error")
        out[text] = out.get(text, 0) + 1
    return {"error": out} if out else {}


def _summary(b: dict[str, Any]) -> dict[str, Any]:
    m = b["metrics"]
    totals = m.get("request_totals") if isinstance(m.get("request_totals"), dict) else {}
    ok, failed, incomplete = (int(num(totals.get(k)) or 0) for k in ("successful", "errored", "incomplete"))
    conc = _dist(m, "request_concurrency", "total") or _dist(m, "request_concurrency")
    lat = {
        "ttft": latency(
            _stats(_dist(m, "time_to_first_token_ms")), 1e-3, _dist(m, "time_to_first_token_ms").get("count")
        ),
        "e2e": latency(_stats(_dist(m, "request_latency")), 1.0, _dist(m, "request_latency").get("count")),
        # the token-weighted mean of per-request (last - first) / (N - 1) is sum(gaps) / sum(N - 1): our ITL mean
        "itl": latency(_stats(_dist(m, "inter_token_latency_ms")), 1e-3, only=("mean",)),
    }
    return {
        "sent": ok + failed + incomplete,
        "ok": ok,
        "failed": failed,
        "cancelled": incomplete,
        "error_rate": ratio(failed, ok + failed),
        "errors": _errors(b),
        "duration_s": num(b.get("duration")),
        "tokens_in": num(_dist(m, "prompt_token_count").get("total_sum")),
        "tokens_out": num(_dist(m, "output_token_count").get("total_sum")),
        # the rate distributions' means are totals over the benchmark window; their percentiles are not
        "output_tokens_per_s": num(_dist(m, "output_tokens_per_second").get("mean")),
        "requests_per_s": num(_dist(m, "requests_per_second").get("mean")),
        "concurrency": num(conc.get("mean")),
        "goodput_requests_per_s": None,
        "goodput_tokens_per_s": None,
        "latency": {k: v for k, v in lat.items() if v},
    }


def _load(b: dict[str, Any]) -> str:
    st = dig(b, "config", "strategy") or {}
    kind = st.get("type_")
    if kind == "concurrent":
        return closed_loop(st.get("streams"))
    if kind == "synchronous":
        return closed_loop(1)
    if kind in ("constant", "poisson") and st.get("rate"):
        return f"rate {st['rate']:g} req/s ({kind} arrivals)"
    if kind == "throughput":
        return f"open loop, all at once (max {st.get('max_concurrency') or '?'} in flight)"
    return f"GuideLLM {kind or '?'}"


def _timing(b: dict[str, Any]) -> str:
    cons = dig(b, "config", "constraints") or {}
    count = dig(cons, "max_requests", "args", "count")
    secs = dig(cons, "max_seconds", "args", "duration")
    return f"{count} requests" if count else (f"{secs} s" if secs else f"{num(b.get('duration')) or 0:.0f} s")


def read(doc: dict[str, Any]) -> Foreign:
    """The run in our terms (foreign.Foreign). A sweep (several benchmarks) is refused: it is a
    ladder, and compare reads one run per file."""
    benches = doc["benchmarks"]
    if len(benches) != 1:
        raise CompareError(
            f"a GuideLLM report with {len(benches)} benchmarks (a sweep); compare reads one run per file: "
            "run GuideLLM with one profile"
        )
    b = benches[0]
    spec = dig(doc, "config", "spec") or {}
    data = dig(spec, "data", 0) or {}
    start = num(b.get("start_time"))
    marks = {
        **{f"itl.{s}": "per-request means, not gaps" for s in PCT},
        "tpot": "its TPOT includes TTFT",
    }
    if b["metrics"].get("request_goodput") is not None:
        marks["goodput"] = "judged against its SLOs"
    return Foreign(
        tool="GuideLLM",
        version=str(dig(doc, "metadata", "guidellm_version") or ""),
        summary=_summary(b),
        not_comparable=marks,
        model=str(dig(spec, "backend", "model") or "unknown"),
        api=APIS.get(str(dig(spec, "backend", "request_format")), str(dig(spec, "backend", "request_format") or "?")),
        load=_load(b),
        timing=_timing(b),
        input_len=num(data.get("prompt_tokens")),
        output_len=num(data.get("output_tokens")),
        forced=True if num(data.get("output_tokens")) else None,  # it sends ignore_eos with output_tokens
        prompts=f"GuideLLM {data.get('kind') or '?'}, seed {dig(spec, 'seed', 'value')}",
        started=datetime.fromtimestamp(start, UTC).isoformat(timespec="seconds") if start else "?",
        seed=dig(spec, "seed", "value") if dig(spec, "seed", "value") is not None else "?",
        server=str(dig(spec, "backend", "target") or ""),
    )
