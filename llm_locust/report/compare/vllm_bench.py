"""`vllm bench serve --save-result`'s result JSON as a run beside ours. Definitions from vLLM 0.32's
`benchmarks/serve.py` and `benchmarks/lib/endpoint_request_func.py` (tests/fixtures/othertools/
README.md): its ITL is every gap between chunks with `choices` (per chunk, not per token, and the
gap to a chunk without text counts: our inter-chunk latency, nearly); TTFT and E2E start before
the TCP connect, E2E ends at the last chunk; output tokens are re-counted by its tokenizer unless
the server sends a usage-only chunk; `failed` requests are counted and their tracebacks kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llm_locust.report.compare.foreign import CLIENT_TOKENS, CONNECT, Foreign, closed_loop, error_class, num, ratio

FIGURES = {"ttft": "ttft", "tpot": "tpot", "inter_chunk": "itl", "e2e": "e2el"}
PCTS = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p99.9": "p99.9"}
APIS = {"openai": "openai-completions", "openai-chat": "openai-chat", "vllm": "openai-completions"}


REQUIRED = ("backend", "completed", "duration", "mean_ttft_ms")  # what every vLLM result has
# its figures compare reads (counts, seconds, throughputs, each *_ms statistic): none is negative
FIELDS = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "num_prompts")
FIELDS_PER_REQUEST = ("latencies", "input_lens")


def matches(doc: Any) -> bool:
    """vLLM's result dict: by its required keys (REQUIRED), the counts and the duration numbers."""
    return (
        isinstance(doc, dict)
        and all(k in doc for k in REQUIRED)
        and all(isinstance(doc[k], (int, float)) and not isinstance(doc[k], bool) for k in ("completed", "duration"))
    )


def fields(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The fields read (named as the file names them), for figure_checks.check_figures."""
    for key, v in doc.items():
        if key in FIELDS or key.endswith(("_ms", "_throughput")):
            yield key, v
    for key in FIELDS_PER_REQUEST:
        values = doc.get(key)
        if isinstance(values, list):
            yield from ((f"{key}[{i}]", v) for i, v in enumerate(values))


def _latency(doc: dict[str, Any], tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ours, theirs in (("mean", "mean"), *PCTS.items()):
        v = num(doc.get(f"{theirs}_{tag}_ms"))
        if v is None and ours == "p50":
            v = num(doc.get(f"median_{tag}_ms"))
        if v is not None:
            out[ours] = v / 1000
    return out


def _errors(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, int] = {}
    for e in doc.get("errors") or []:
        if isinstance(e, str) and e.strip():
            text = error_class(e)
            out[text] = out.get(text, 0) + 1
    return {"error": out} if out else {}


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    ok = int(num(doc.get("completed")) or 0)
    failed = int(num(doc.get("failed")) or 0)
    duration = num(doc.get("duration"))
    lats = [v for v in (num(x) for x in doc.get("latencies") or []) if v is not None]
    return {
        "sent": ok + failed,
        "ok": ok,
        "failed": failed,
        "cancelled": 0,
        "error_rate": ratio(failed, ok + failed),
        "errors": _errors(doc),
        "duration_s": duration,
        "tokens_in": num(doc.get("total_input_tokens")),
        "tokens_out": num(doc.get("total_output_tokens")),
        "output_tokens_per_s": num(doc.get("output_throughput")),
        "requests_per_s": num(doc.get("request_throughput")),
        # Little's law, as ours: the requests' E2E over the span (its max_concurrent_requests is a 1 s bucket maximum)
        "concurrency": sum(lats) / duration if lats and duration else None,
        "goodput_requests_per_s": None,
        "goodput_tokens_per_s": None,
        "latency": {ours: v for ours, tag in FIGURES.items() if (v := _latency(doc, tag))},
    }


def _load(doc: dict[str, Any]) -> str:
    rate, mc = doc.get("request_rate"), doc.get("max_concurrency")
    if rate in ("inf", None) or num(rate) == float("inf"):
        return closed_loop(mc) if mc else "open loop, all at once"
    burst = num(doc.get("burstiness"))
    arrivals = "poisson" if burst == 1.0 else f"gamma, burstiness {burst:g}" if burst else "?"
    return f"rate {rate} req/s ({arrivals} arrivals)" + (f", max {mc} in flight" if mc else "")


def _started(date: Any) -> str:
    s = str(date or "")
    if len(s) == 15 and s[8] == "-":  # 20261203-004209: the end of the run, the client's local clock
        return f"{s[:4]}-{s[4:6]}-{s[6:8]}T{s[9:11]}:{s[11:13]}:{s[13:]} (written, local clock)"
    return s or "?"


def read(doc: dict[str, Any]) -> Foreign:
    """The run in our terms (foreign.Foreign)."""
    marks = {"itl": "per chunk, not per token (row inter-chunk)"}
    if doc.get("request_goodput") is not None:
        marks["goodput"] = "judged against its --goodput SLOs"
    lens = [v for v in (num(x) for x in doc.get("input_lens") or []) if v is not None]
    ok = num(doc.get("completed"))
    return Foreign(
        tool="vLLM bench serve",
        version=str(doc.get("vllm_version") or ""),
        summary=_summary(doc),
        not_comparable=marks,
        caveats={
            "ttft": CONNECT,
            "e2e": f"{CONNECT}; ends at the last chunk (ours: the stream's end marker)",
            "tpot": CLIENT_TOKENS,
            "output_tokens_per_s": CLIENT_TOKENS,
            "tokens_out": CLIENT_TOKENS,
            "inter_chunk": "counts gaps to chunks without text (llama.cpp's empty finish chunk: a ~0 ms gap a request)",
        },
        model=str(doc.get("model_id") or "unknown"),
        api=APIS.get(str(doc.get("backend")), str(doc.get("backend") or "?")),
        load=_load(doc),
        timing=f"{doc['num_prompts']} requests" if doc.get("num_prompts") else "?",
        # the prompts' sampled lengths (input_lens, with --save-detailed), else the total over the requests
        input_len=sum(lens) / len(lens) if lens else ratio(doc.get("total_input_tokens"), ok),
        prompts="vLLM dataset (not recorded)",
        started=_started(doc.get("date")),
        seed="not recorded",
    )
