"""A finished run logged to an MLflow tracking server (`--mlflow URI`), for teams that track
experiments there (docs/mlflow.md).

What is logged comes from the results as written (secrets masked): the effective plan flattened to
parameters (`ladder.steps`, `workload.max_in_flight`, ...), the headline figures as metrics (`ttft_p50_s`,
`output_tokens_per_s`, ...), each ladder step's figures as `step/...` metrics at that MLflow step (the
ladder's step number), tags for the server, model, engine and trace hash, and the results JSON, HTML
report and record log as artifacts.

The run is over and its files are written before this is called: a tracking server that is down,
slow or refusing must not hang the run, change its exit code or lose a file. MLflow's own HTTP
retries (7, with exponential backoff: minutes) are bounded for the call (HTTP_KNOBS, unless the
user set them), and any failure becomes one line returned to the caller. mlflow is imported here,
lazily: it is an optional extra (`pip install 'llm-locust[mlflow]'`).
"""

from __future__ import annotations

import glob
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_locust.report.schema import ResultsDoc

DEFAULT_EXPERIMENT = "llm-locust"
# MLflow's HTTP knobs for this call, unless set in the environment: a dead server costs ~3 s
# (refused: 2 retries, backoff 0 s + ~2 s), a silent one ~35 s (3 tries x 10 s), not minutes.
HTTP_KNOBS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # one line of ours says where the run is
}
MAX_PARAM_VALUE = 6000  # MLflow refuses longer parameter values
CUT = "...(truncated)"
PARAMS_PER_BATCH = 100  # MLflow's log_batch limits
METRICS_PER_BATCH = 1000
# summary / ladder-step figures logged as metrics, under their results names
HEADLINE = (
    "sent",
    "ok",
    "failed",
    "cancelled",
    "error_rate",
    "duration_s",
    "tokens_in",
    "tokens_out",
    "output_tokens_per_s",
    "requests_per_s",
    "goodput_requests_per_s",
    "goodput_tokens_per_s",
    "concurrency",
    "slo_attainment",
)
STEP_FIGURES = ("offered", *(f for f in HEADLINE if f not in ("cancelled", "duration_s", "tokens_in")))
LATENCIES = ("ttft", "itl", "tpot", "e2e")
STATISTICS = ("p50", "p90", "p99", "mean")
STEP_PREFIX = "step/"  # MLflow's UI groups metrics by the part before "/"


@dataclass
class Payload:
    """What one run sends: plain data, built from the results without MLflow (tested alone)."""

    params: dict[str, str]
    metrics: list[tuple[str, float, int, int]]  # (name, value, step, timestamp in ms)
    tags: dict[str, str]
    start_ms: int | None = None
    end_ms: int | None = None
    status: str = "FINISHED"
    artifacts: list[Path] = field(default_factory=list)


def flatten(plan: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """The plan as MLflow parameters: nested keys joined with ".", lists and empty mappings as
    JSON, strings as they are, other scalars as JSON (`true`, `0.5`); values cut to MLflow's limit."""
    out: dict[str, str] = {}
    for key, value in plan.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        out[name] = text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - len(CUT)] + CUT
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def figure_metrics(figures: Mapping[str, Any], names: Sequence[str], prefix: str = "") -> dict[str, float]:
    """The numeric `names` of a summary or step, and its latencies in seconds (`ttft_p50_s`);
    figures that are absent or null (no SLO: no goodput) are left out, not logged as 0."""
    out = {f"{prefix}{n}": v for n in names if (v := _number(figures.get(n))) is not None}
    latency = figures.get("latency") or {}
    for lat in LATENCIES:
        for stat in STATISTICS:
            v = _number((latency.get(lat) or {}).get(stat))
            if v is not None:
                out[f"{prefix}{lat}_{stat}_s"] = v
    return out


def _ms(t: Any) -> int | None:
    return int(t * 1000) if _number(t) is not None else None


def run_metrics(results: ResultsDoc) -> list[tuple[str, float, int, int]]:
    """Headline figures at step 0, and each ladder step's as `step/NAME` at MLflow step = the
    ladder's step number (as in the report's table), stamped with the step's end."""
    run = results.get("run") or {}
    end = _ms(run.get("ended_at")) or _ms(results.get("created")) or 0
    rows = [(k, v, 0, end) for k, v in figure_metrics(results.get("summary") or {}, HEADLINE).items()]
    ladder = results.get("ladder")
    verdict = ladder.get("saturation") if ladder else None
    knee = verdict.get("saturation") if verdict else None
    found = _number(knee.get("offered") if knee else None)
    if found is not None:
        rows.append(("saturation_offered", found, 0, end))
    for step in (ladder.get("steps") or []) if ladder else []:
        k = step.get("step")
        if not isinstance(k, int) or isinstance(k, bool):
            continue
        at = _ms(step.get("window_end")) or end
        rows += [(n, v, k, at) for n, v in figure_metrics(step, STEP_FIGURES, STEP_PREFIX).items()]
    return rows


def _redact_uri(text: str) -> str:
    """http://user:secret@host -> http://***@host: a tracking URI may carry basic-auth."""
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", text)


def run_tags(results: ResultsDoc) -> dict[str, str]:
    """Tags to find and group runs by: server, model, engine (and its version), trace hash."""
    env = results.get("environment") or {}
    server = env.get("server") or {}
    run = results.get("run") or {}
    gates = results.get("gates") or []
    values = {
        "llm_locust.server": server.get("url") or run.get("host"),
        "llm_locust.model": server.get("model") or (run.get("server") or {}).get("model"),
        "llm_locust.engine": server.get("kind"),
        "llm_locust.engine_version": server.get("version"),
        "llm_locust.trace_sha256": (env.get("trace") or {}).get("sha256"),
        "llm_locust.mode": (run.get("load") or {}).get("mode"),
        "llm_locust.version": env.get("llm_locust"),
        "llm_locust.flags": ",".join((results.get("validity") or {}).get("flags") or []) or "none",
        "llm_locust.gates": ("passed" if all(g.get("passed") for g in gates) else "failed") if gates else "none",
        "mlflow.note.content": (results.get("plan") or {}).get("description"),  # the run's description in the UI
    }
    return {k: str(v) for k, v in values.items() if v not in (None, "")}


def payload(results: ResultsDoc, files: Sequence[str | Path] = ()) -> Payload:
    """Everything one run sends, from its results (as written) and the files it wrote. Any part may
    be absent (tests/test_mlflow.py sends a plan alone): the document's keys are read with .get."""
    run = results.get("run") or {}
    params = flatten(results.get("plan") or {})
    if "mlflow.uri" in params:
        params["mlflow.uri"] = _redact_uri(params["mlflow.uri"])
    return Payload(
        params=params,
        metrics=run_metrics(results),
        tags=run_tags(results),
        start_ms=_ms(run.get("started_at")),
        end_ms=_ms(run.get("ended_at")),
        status="KILLED" if run.get("interrupted") else "FINISHED",
        artifacts=[Path(f) for f in files if Path(f).is_file()],
    )


def run_files(settings) -> list[Path]:
    """The files the run wrote that go along as artifacts: the results, the report, the record
    log and the workers' parts of it (FILE.workerN)."""
    paths = [settings.results, settings.report]
    if settings.record_log:
        paths += [settings.record_log, *sorted(glob.glob(glob.escape(settings.record_log) + ".worker*"))]
    return [Path(p) for p in paths if p and Path(p).is_file()]


@contextmanager
def _bounded_http() -> Iterator[None]:
    """HTTP_KNOBS in the environment for the call (the user's own values win), and MLflow's and
    urllib3's retry chatter kept out of the run's output; restored after."""
    added = [k for k in HTTP_KNOBS if k not in os.environ]
    os.environ.update({k: HTTP_KNOBS[k] for k in added})
    loggers = [logging.getLogger(n) for n in ("mlflow", "urllib3")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _experiment_id(client, name: str) -> str:
    """The experiment's id, created when new (another run may create it at the same moment)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def send(uri: str, experiment: str, run_name: str, p: Payload, extra: dict[str, bytes]) -> tuple[str, str]:
    """One MLflow run: created, filled, ended; returns its experiment's id and its id. `extra` are artifacts given as
    bytes (name -> content) for what the run did not write as a file. Raises on any failure."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(tracking_uri=uri)
    exp_id = _experiment_id(client, experiment)
    run_id = client.create_run(exp_id, start_time=p.start_ms, tags=p.tags, run_name=run_name or None).info.run_id
    params = [Param(k, v) for k, v in p.params.items()]
    for i in range(0, len(params), PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[i : i + PARAMS_PER_BATCH])
    metrics = [Metric(n, v, ts, step) for n, v, step, ts in p.metrics]
    for i in range(0, len(metrics), METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + METRICS_PER_BATCH])
    for path in p.artifacts:
        client.log_artifact(run_id, str(path))
    if extra:
        with tempfile.TemporaryDirectory(prefix="llm-locust-mlflow-") as tmp:
            for name, content in extra.items():
                (Path(tmp) / name).write_bytes(content)
                client.log_artifact(run_id, str(Path(tmp) / name))
    client.set_terminated(run_id, status=p.status, end_time=p.end_ms)
    return exp_id, run_id


def _unwritten(settings, results: ResultsDoc, doc_bytes: bytes) -> dict[str, bytes]:
    """The results JSON and the HTML report as bytes, for each the run was not asked to write."""
    extra: dict[str, bytes] = {}
    if not (settings.results and Path(settings.results).is_file()):
        extra["results.json"] = doc_bytes
    if not (settings.report and Path(settings.report).is_file()):
        from llm_locust.report.html import render

        extra["report.html"] = render(results).encode()
    return extra


def _why(e: BaseException) -> str:
    """The cause in a few words: a socket error's own text (`Connection refused`, `Read timed
    out`) when MLflow's message wraps one, else the message's first 200 characters."""
    text = re.sub(r"\s+", " ", str(e)).strip()
    cause = re.search(r"\[Errno -?\d+\] ([^'\")(]+)|(Read timed out)|(Connection aborted)", text)
    if cause:
        return next(g for g in cause.groups() if g).strip().rstrip(".")
    return f"{type(e).__name__}: {text[:200]}"


def _failure(uri: str, e: BaseException, kept: Sequence[Path]) -> str:
    why = _why(e)
    files = ", ".join(str(f) for f in kept) or "none were asked for"
    return (
        f"MLflow logging to {_redact_uri(uri)} failed ({_redact_uri(why)}); "
        f"the run's figures and files stand as they are (files: {files})"
    )


def log_run(settings, results: dict[str, Any], secrets: tuple[str, ...] = ()) -> str | None:
    """Log the finished run to `settings.mlflow`. Returns None when logged, else the one line
    to show (nothing raised: the run's exit code and files are the run's, not MLflow's)."""
    from llm_locust.report.results import results_json

    uri = settings.mlflow
    files = run_files(settings)
    try:
        doc_bytes = results_json(results, secrets)
        doc = json.loads(doc_bytes)  # as the results file says it, secrets masked
        p = payload(doc, files)
        extra = _unwritten(settings, doc, doc_bytes)
    except Exception as e:  # noqa: BLE001 - a figure we could not map must not fail the run
        return _failure(uri, e, files)
    try:
        import mlflow  # noqa: F401 - the optional extra
    except ImportError:
        return (
            f"MLflow logging to {_redact_uri(uri)} skipped: the mlflow client is not installed "
            "(pip install 'llm-locust[mlflow]'); the run's files stand as they are"
        )
    experiment = settings.mlflow_experiment or DEFAULT_EXPERIMENT
    run_name = settings.mlflow_run_name or settings.name
    try:
        with _bounded_http():
            exp_id, run_id = send(uri, experiment, run_name, p, extra)
    except Exception as e:  # noqa: BLE001 - MLflow raises its own and requests' errors
        return _failure(uri, e, files)
    where = _redact_uri(uri.rstrip("/"))
    page = f": {where}/#/experiments/{exp_id}/runs/{run_id}" if where.startswith(("http://", "https://")) else ""
    print(f"logged to MLflow at {where}, experiment {experiment!r}, run {run_id}{page}", flush=True)
    return None
