"""The llm-d Benchmark Report (version 0.2.1) from an llm-locust results file.

llm-d-benchmark's harness-independent report (llm_locust/data/llmd/, the vendored JSON Schema) is
one document per load point: a ladder gives one per step (`scenario.load.standardized.stage`, its
`concurrency` or `rate_qps`), sharing `run.eid`; a closed loop or a replay gives one (stage 0, the
schema's default for a single-stage run). A step's stage is its step number, 1 to N, the number the
summary, the results and the HTML report give it: the schema asks only an integer >= 0 ("workload
stage number"), and one number per step in every output spares a reader the off-by-one (issue 35:
stages 0-4 beside steps 1-5). Each carries
the load (tool, sequence lengths, parallelism), the request counts, latency and throughput as
statistics objects with their units (seconds here: the field's units are self-describing), and the
server and GPUs as a generic stack component. `run.uid` and `run.eid` are derived from the results
(uuid5), so the same results file always gives the same reports.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any, Literal, cast

from llm_locust import __version__
from llm_locust.schema import Figures, ResultsDoc

VERSION = "0.2.1"
NAMESPACE = uuid.UUID("6c6c6d2d-6c6f-6375-7374-2d6c6c6d2d64")  # llm-locust's own uuid5 namespace
LATENCIES = (  # report field -> (our latency key, unit)
    ("time_to_first_token", "ttft", "s"),
    ("time_per_output_token", "tpot", "s/token"),
    ("inter_token_latency", "itl", "s/token"),
    ("request_latency", "e2e", "s"),
)
PERCENTILES = (("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"), ("p99.9", "p99p9"))


def statistics(summary: Mapping[str, Any] | None, units: str) -> dict[str, Any] | None:
    """One of our latency summaries (seconds) as the report's Statistics object; None when empty."""
    if not summary or not summary.get("count") or summary.get("mean") is None:
        return None
    out: dict[str, Any] = {"units": units, "mean": summary["mean"]}
    for ours, theirs in (("min", "min"), *PERCENTILES, ("max", "max")):
        if summary.get(ours) is not None:
            out[theirs] = summary[ours]
    return out


def _mean(value: float | None, units: str) -> dict[str, Any] | None:
    return None if value is None else {"units": units, "mean": value}


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat()


def _duration(seconds: float) -> str:
    return f"PT{max(0.0, seconds):.3f}S"


# the summary's (or a step's) figures this file reads, by their results names: read through
# `_get`, typed by the schema's `Figures`, so that a renamed figure fails mypy here
Figure = Literal[
    "ok",
    "sent",
    "failed",
    "cancelled",
    "lost",
    "tokens_in",
    "tokens_out",
    "latency",
    "output_tokens_per_s",
    "requests_per_s",
    "duration_s",
]


def _get(fig: Mapping[str, Any], key: Figure) -> Any:
    """fig.get(key), by a name of `Figures` (None: absent, as in a step without figures)."""
    f = cast(Figures, fig)
    return f[key] if key in f else None


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _requests(fig: Mapping[str, Any]) -> dict[str, Any]:
    ok = _get(fig, "ok") or 0
    tokens_in, tokens_out = _get(fig, "tokens_in") or 0, _get(fig, "tokens_out") or 0
    return _drop_none(
        {
            "total": int(_get(fig, "sent") or 0),
            "failures": int(_get(fig, "failed") or 0),
            "incomplete": int((_get(fig, "cancelled") or 0) + (_get(fig, "lost") or 0)),
            "input_length": _mean(tokens_in / ok, "count") if ok else None,
            "output_length": _mean(tokens_out / ok, "count") if ok else None,
        }
    )


def _performance(fig: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """results.request_performance.aggregate from one figures() dict (the run's or a step's)."""
    lat = _get(fig, "latency") or {}
    latency = _drop_none({name: statistics(lat.get(key), units) for name, key, units in LATENCIES})
    rate_in = (_get(fig, "tokens_in") or 0) / seconds if seconds > 0 else None
    out_rate = _get(fig, "output_tokens_per_s")
    throughput = _drop_none(
        {
            "output_token_rate": _mean(out_rate, "tokens/s"),
            "input_token_rate": _mean(rate_in, "tokens/s"),
            "total_token_rate": _mean((rate_in or 0.0) + out_rate, "tokens/s") if out_rate is not None else None,
            "request_rate": _mean(_get(fig, "requests_per_s"), "queries/s"),
        }
    )
    return {"requests": _requests(fig), "latency": latency, "throughput": throughput}


def _stack(results: ResultsDoc) -> list[dict[str, Any]]:
    """The server (and its GPUs, as far as the sidecar named them) as one generic component."""
    env = results.get("environment") or {}
    server = env.get("server") or {}
    gpus = [g.get("model_name") or g.get("name") for g in env.get("gpus") or [] if isinstance(g, dict)]
    standardized = _drop_none(
        {
            "kind": "generic",
            "tool": server.get("kind") or "unknown",
            "tool_version": str(server.get("version") or "unknown"),
            "model": server.get("model"),
            "url": server.get("url"),
            "accelerators": [g for g in gpus if g] or None,
        }
    )
    return [{"metadata": {"label": "server", "cfg_id": "server"}, "standardized": standardized, "native": {}}]


def _load(results: ResultsDoc, stage: int, level: dict[str, Any]) -> dict[str, Any]:
    fig = results.get("summary") or {}
    ok = _get(fig, "ok") or 0
    trace = (results.get("environment") or {}).get("trace") or {}
    mean_in = (_get(fig, "tokens_in") or 0) / ok if ok else 0.0
    mean_out = (_get(fig, "tokens_out") or 0) / ok if ok else 0.0
    workers = len(results.get("workers") or []) or 1
    standardized = _drop_none(
        {
            "tool": "llm-locust",
            "tool_version": __version__,
            "source": "sampled" if trace.get("path") else "random",
            "input_seq_len": {"distribution": "other", "value": mean_in},
            "output_seq_len": {"distribution": "other", "value": mean_out},
            "parallelism": workers,
            "stage": stage,
            **level,
        }
    )
    plan = results.get("plan") or {}
    return {
        "metadata": {"cfg_id": str(plan.get("name") or "llm-locust run")},
        "standardized": standardized,
        "native": {"config": plan},
    }


def _level(kind: str | None, offered: float | None) -> dict[str, Any]:
    """A stage's load in the report's terms: concurrency (users) or rate_qps (requests/s)."""
    if offered is None or offered <= 0:
        return {}
    if kind == "concurrency":
        return {"concurrency": max(1, int(offered))}
    if kind == "rate":
        return {"rate_qps": float(offered)}
    return {}


def _run(results: ResultsDoc, eid: uuid.UUID, stage: int, start: float | None, end: float | None) -> dict:
    run = results.get("run") or {}
    return _drop_none(
        {
            "uid": str(uuid.uuid5(eid, f"stage {stage}")),
            "eid": str(eid),
            "time": _drop_none(
                {"start": _iso(start), "end": _iso(end), "duration": _duration((end or 0) - (start or 0))}
            )
            if start and end
            else None,
            "description": (results.get("plan") or {}).get("description") or run.get("name") or None,
            "keywords": ["llm-locust", str((run.get("load") or {}).get("mode") or "run")],
        }
    )


def reports(results: ResultsDoc) -> list[dict[str, Any]]:
    """The Benchmark Reports of one results file: one per judged ladder step, else one. Any part
    may be absent (a run that measured nothing: tests/test_llmd.py's minimal document), so the
    document's keys, required ones too, are read with .get."""
    run = results.get("run") or {}
    eid = uuid.uuid5(NAMESPACE, f"{run.get('host')}|{run.get('started_at')}|{results.get('created')}")
    stack = _stack(results)
    ladder = results.get("ladder")
    steps = [s for s in (ladder.get("steps") or []) if not s.get("cut")] if ladder else []
    if not steps:
        fig = results.get("summary") or {}
        load = run.get("load") or {}
        users = load.get("users")
        level = {"concurrency": int(users)} if load.get("mode") == "closed" and users else {}
        return [_report(results, eid, stack, 0, level, fig, run.get("started_at"), run.get("ended_at"))]
    by_step = {r.get("step"): r for r in results.get("steps") or []}
    out = []
    for s in steps:
        step_fig: Mapping[str, Any] = by_step.get(s["step"]) or {}
        level = _level(s.get("offered_kind"), s.get("offered"))
        out.append(_report(results, eid, stack, s["step"], level, step_fig, s.get("window_start"), s.get("window_end")))
    return out


def _report(
    results: ResultsDoc,
    eid: uuid.UUID,
    stack: list[dict[str, Any]],
    stage: int,
    level: dict[str, Any],
    fig: Mapping[str, Any],  # a Figures, or {} for a step without figures
    start: float | None,
    end: float | None,
) -> dict[str, Any]:
    seconds = _get(fig, "duration_s") or ((end or 0) - (start or 0))
    return {
        "version": VERSION,
        "run": _run(results, eid, stage, start, end),
        "scenario": {"stack": stack, "load": _load(results, stage, level)},
        "results": {"request_performance": {"aggregate": _performance(fig, seconds)}},
    }
