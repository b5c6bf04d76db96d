"""A finished run logged to an MLflow tracking server (`--mlflow URI`), for teams that track
experiments there (docs/mlflow.md).

What is logged comes from the results as written (secrets masked): the effective plan flattened to
parameters (`ladder.steps`, `workload.max_in_flight`, ...), the headline figures as metrics (`ttft_p50_s`,
`output_tokens_per_s`, ...), each ladder step's figures as `step/...` metrics at that MLflow step (the
ladder's step number), tags for the server, model, engine and trace hash, and the results JSON, HTML
report and record log as artifacts.

The run is over and its files are written before this is called: a tracking server that is down,
slow or refusing must not hang the run, change its exit code or lose a file. The upload runs in a
child process (`python -m llm_locust.report.mlflow_log JOB`) under one deadline over the whole
exchange (`--mlflow-timeout`, 30 s): a server that drips a byte every few seconds defeats any
per-read timeout, never a deadline the parent keeps; past it, or on a signal to the run, the child
is killed and the run goes on to its end. MLflow's own HTTP retries (7, with exponential backoff:
minutes) are bounded too (HTTP_KNOBS, unless the user set them), and any failure becomes one line
returned to the caller. mlflow is imported in the child only: it is an optional extra
(`pip install 'llm-locust[mlflow]'`) and its import takes seconds.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from llm_locust.report.html import render
from llm_locust.report.results import results_json
from llm_locust.safe.masking import SECRETS, mask, mask_bytes, protect_url, redact_url
from llm_locust.schema import Figures, LadderStep, ResultsDoc

DEFAULT_EXPERIMENT = "llm-locust"
RESULTS_NAME, REPORT_NAME = "results.json", "report.html"  # the artifacts' names when sent from memory
DEADLINE_S = 30.0  # --mlflow-timeout's default: the whole upload, from the child's start to its end
# MLflow's HTTP knobs for this call, unless set in the environment: a dead server costs ~3 s
# (refused: 2 retries, backoff 0 s + ~2 s), a silent one ~35 s (3 tries x 10 s), not minutes.
HTTP_KNOBS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # one line of ours says where the run is
}
POLL_S = 0.2  # how often the parent looks at the clock and at the run's signals while the child uploads
MAX_PARAM_VALUE = 6000  # MLflow refuses longer parameter values
CUT = "...(truncated)"
PARAMS_PER_BATCH = 100  # MLflow's log_batch limits
METRICS_PER_BATCH = 1000
# summary / ladder-step figures logged as metrics, under their results names; typed: `_figure`
# reads each by the schema's `Figures` (a ladder step's own: `LadderStep`), so that a renamed
# figure fails mypy here
Logged = Literal[
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
]
Name = Logged | Literal["offered", "slo_attainment"]
HEADLINE: tuple[Name, ...] = (*get_args(Logged), "slo_attainment")
STEP_FIGURES: tuple[Name, ...] = (
    "offered",
    *(f for f in HEADLINE if f not in ("cancelled", "duration_s", "tokens_in")),
)
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


def _figure(figures: Mapping[str, Any], name: Name) -> Any:
    """figures.get(name), by the schema's names: a ladder step's own through `LadderStep`, the
    others through `Figures`."""
    if name == "offered" or name == "slo_attainment":
        step = cast(LadderStep, figures)
        return step[name] if name in step else None
    fig = cast(Figures, figures)
    return fig[name] if name in fig else None


def figure_metrics(figures: Mapping[str, Any], names: Sequence[Name], prefix: str = "") -> dict[str, float]:
    """The numeric `names` of a summary or step, and its latencies in seconds (`ttft_p50_s`);
    figures that are absent or null (no SLO: no goodput) are left out, not logged as 0."""
    out = {f"{prefix}{n}": v for n in names if (v := _number(_figure(figures, n))) is not None}
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
    params = {k: redact_url(v) if k == "mlflow.uri" else mask(v) for k, v in flatten(results.get("plan") or {}).items()}
    return Payload(
        params=params,
        metrics=run_metrics(results),
        tags={k: mask(v) for k, v in run_tags(results).items()},
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


def send(uri: str, experiment: str, run_name: str, p: Payload) -> tuple[str, str]:
    """One MLflow run: created, filled, ended; returns its experiment's id and its id. Raises on
    any failure. Runs in the child process (upload_child), where a deadline can end it."""
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
    client.set_terminated(run_id, status=p.status, end_time=p.end_ms)
    return exp_id, run_id


def _unwritten(settings) -> tuple[bool, bool]:
    """Whether the results JSON and the HTML report go from memory (`results.json`,
    `report.html`): the run was not asked to write them."""
    return (
        not (settings.results and Path(settings.results).is_file()),
        not (settings.report and Path(settings.report).is_file()),
    )


def _why(e: BaseException | str) -> str:
    """The cause in a few words: a socket error's own text (`Connection refused`, `Read timed
    out`) when MLflow's message wraps one, else the message's first 200 characters."""
    text = re.sub(r"\s+", " ", str(e)).strip()
    cause = re.search(r"\[Errno -?\d+\] ([^'\")(]+)|(Read timed out)|(Connection aborted)", text)
    if cause:
        return next(g for g in cause.groups() if g).strip().rstrip(".")
    return text[:200] if isinstance(e, str) else f"{type(e).__name__}: {text[:200]}"


def _failure(uri: str, why: BaseException | str, kept: Sequence[Path], verb: str = "failed") -> str:
    files = ", ".join(str(f) for f in kept) or "none were asked for"
    return (
        f"MLflow logging to {redact_url(uri)} {verb} ({redact_url(_why(why))}); "
        f"the run's figures and files stand as they are (files: {files})"
    )


@dataclass
class Upload:
    """How one upload in the child ended: its ids, or why not (`abandoned`: the parent ended it)."""

    experiment_id: str = ""
    run_id: str = ""
    error: str = ""
    abandoned: str = ""


def _child_env() -> dict[str, str]:
    """The child's environment: HTTP_KNOBS unless the user set them, and the package importable
    from wherever the run was started."""
    env = {**HTTP_KNOBS, **os.environ}
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def _wait(proc: subprocess.Popen, deadline_s: float, stop: Callable[[], bool]) -> str:
    """Wait for the child; "" when it ended by itself, else why it was killed: its deadline
    passed, or `stop()` said the run was told to end (a signal). Polls: the wait yields to the
    run's event loop (gevent's subprocess), where the signal handlers run."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            proc.wait(timeout=max(0.0, min(POLL_S, end - time.monotonic())))
            return ""
        except subprocess.TimeoutExpired:
            pass
        late = time.monotonic() >= end
        why = "a signal to the run" if stop() else f"unfinished after --mlflow-timeout {deadline_s:g}s" if late else ""
        if why:
            proc.kill()
            proc.wait()
            return why


def upload(job: dict[str, Any], doc_bytes: bytes, stop: Callable[[], bool] = lambda: False) -> Upload:
    """`job` (see upload_child) sent by a child process that is killed past `job["deadline_s"]` or
    when `stop()` turns true. It travels in a private temporary folder with the results as written
    (`doc_bytes`): the URI may carry credentials, never put on a command line."""
    with tempfile.TemporaryDirectory(prefix="llm-locust-mlflow-") as tmp:
        folder = Path(tmp)
        (folder / RESULTS_NAME).write_bytes(doc_bytes)
        (folder / "job.json").write_text(json.dumps(job))
        with open(folder / "child.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "llm_locust.report.mlflow_log", str(folder)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=_child_env(),
            )
            abandoned = _wait(proc, job["deadline_s"], stop)
        done = folder / "done.json"
        if not abandoned and done.is_file():
            return Upload(**json.loads(done.read_text()))
        if abandoned or stop():  # a Ctrl-C reaches the child too: it may have ended first
            return Upload(abandoned=abandoned or "a signal to the run")
        lines = (folder / "child.log").read_text(errors="replace").strip().splitlines()
        return Upload(error=lines[-1] if lines else f"the uploading process ended with status {proc.returncode}")


def _child_payload(folder: Path, job: dict[str, Any]) -> Payload:
    """The job's payload, with the files the run did not write made in `folder`: the results as
    written, and the report drawn from them (in the child: drawing takes seconds, within the deadline)."""
    spec = job["payload"]
    artifacts = [Path(a) for a in spec["artifacts"]]
    if job["send_results"]:
        artifacts.append(folder / RESULTS_NAME)
    if job["draw_report"]:
        for secret in job["secrets"]:
            SECRETS.add(secret)
        page = folder / REPORT_NAME
        page.write_bytes(mask_bytes(render(json.loads((folder / RESULTS_NAME).read_bytes())).encode()))
        artifacts.append(page)
    return Payload(**{**spec, "metrics": [tuple(m) for m in spec["metrics"]], "artifacts": artifacts})


def upload_child(folder: Path) -> int:
    """The child: FOLDER/job.json (uri, experiment, run_name, payload, send_results, draw_report,
    secrets, deadline_s) sent; how it went written to FOLDER/done.json."""
    for name in ("mlflow", "urllib3"):  # MLflow's and urllib3's retry chatter: the parent says one line
        logging.getLogger(name).setLevel(logging.ERROR)
    job = json.loads((folder / "job.json").read_text())
    signal.alarm(math.ceil(job["deadline_s"]) + 2)  # ends itself should its parent die (SIGKILL) first
    try:
        p = _child_payload(folder, job)
        exp_id, run_id = send(job["uri"], job["experiment"], job["run_name"], p)
        done = Upload(experiment_id=exp_id, run_id=run_id)
    except Exception as e:  # noqa: BLE001 - MLflow raises its own and requests' errors
        done = Upload(error=f"{type(e).__name__}: {e}")
    (folder / "done.json").write_text(json.dumps(asdict(done)))
    return 0


def log_run(
    settings, results: dict[str, Any], secrets: tuple[str, ...] = (), stop: Callable[[], bool] = lambda: False
) -> str | None:
    """Log the finished run to `settings.mlflow`, within `settings.mlflow_timeout` seconds over the
    whole upload (ended at once when `stop()` turns true: the run got a signal). Returns None when
    logged, else the one line to show (nothing raised: the run's exit code and files are the run's,
    not MLflow's)."""
    uri = settings.mlflow
    protect_url(uri)  # the settings registered it already; a caller that built its own did not
    files = run_files(settings)
    try:
        doc_bytes = results_json(results, secrets)
        p = payload(json.loads(doc_bytes), files)  # as the results file says it, secrets masked
    except Exception as e:  # noqa: BLE001 - a figure we could not map must not fail the run
        return _failure(uri, e, files)
    if not _installed("mlflow"):
        return (
            f"MLflow logging to {redact_url(uri)} skipped: the mlflow client is not installed "
            "(pip install 'llm-locust[mlflow]'); the run's files stand as they are"
        )
    experiment = settings.mlflow_experiment or DEFAULT_EXPERIMENT
    send_results, draw_report = _unwritten(settings)
    job = {
        "uri": uri,
        "experiment": experiment,
        "run_name": settings.mlflow_run_name or settings.name,
        "payload": {**asdict(p), "artifacts": [str(a) for a in p.artifacts]},
        "send_results": send_results,
        "draw_report": draw_report,
        "secrets": [*SECRETS.all(), *secrets],
        "deadline_s": getattr(settings, "mlflow_timeout", DEADLINE_S),
    }
    try:
        done = upload(job, doc_bytes, stop)
    except OSError as e:  # the child could not be started (no memory, no temporary folder)
        return _failure(uri, e, files)
    if done.abandoned:
        return _failure(uri, done.abandoned, files, verb="abandoned")
    if done.error:
        return _failure(uri, done.error, files)
    where = redact_url(uri.rstrip("/"))
    page = (
        f": {where}/#/experiments/{done.experiment_id}/runs/{done.run_id}"
        if where.startswith(("http://", "https://"))
        else ""
    )
    print(f"logged to MLflow at {where}, experiment {experiment!r}, run {done.run_id}{page}", flush=True)
    return None


def _installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (mlflow's import takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(upload_child(Path(sys.argv[1])))
