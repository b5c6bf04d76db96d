"""The results JSON: everything a run measured plus what is needed to reproduce it."""

from __future__ import annotations

import logging
import math
import os
import platform
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import orjson

from llm_locust.metrics.aggregate import Aggregate, figures
from llm_locust.metrics.aggregate import validity as aggregate_validity
from llm_locust.report.accounting import count_problems
from llm_locust.report.figure_checks import check_figures, our_fields
from llm_locust.report.files import write_atomic
from llm_locust.safe.masking import MASK, MIN_LEN, mask_bytes
from llm_locust.schema import Bins, Environment, Figures, ResultsDoc, Run, Step, Worker
from llm_locust.workload.paths import InputError, read_regular

SCHEMA = "llm-locust/results"
SCHEMA_VERSION = 2
MAX_RESULTS_BYTES = 256 << 20  # a day's soak with every series is far less; past it, refused unread
READABLE_VERSIONS = (1, 2)  # what read_results accepts; 1 lacks distributions, validity, provenance
REQUIRED = ("run", "summary", "steps", "series")
DISTRIBUTIONS = ("ttft", "itl", "tpot", "e2e")
BINS_PER_DECADE = 10
MAX_ERROR_RATE = 0.05  # above it a run (or step) is marked "errors" (the ladder's default)

log = logging.getLogger(__name__)


class ResultsError(ValueError):
    """A results file that cannot be used: says which file and why."""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment_info() -> Environment:
    return {
        "llm_locust": _version("llm-locust"),
        "locust": _version("locust"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
    }


def validity(fig: Mapping[str, Any], max_error_rate: float = MAX_ERROR_RATE) -> list[str]:
    """`metrics.aggregate.validity` with the results' default limit."""
    return aggregate_validity(fig, max_error_rate)


def distributions(total: Aggregate) -> dict[str, Bins]:
    """Latency histograms re-binned on a log scale (BINS_PER_DECADE per decade), in seconds:
    {metric: [[low, high, count], ...]}, non-empty bins only."""
    out: dict[str, Bins] = {}
    for name in DISTRIBUTIONS:
        bins: dict[int, int] = {}
        for low_us, n in total.hist[name].buckets_us():
            b = math.floor(math.log10(max(low_us, 1)) * BINS_PER_DECADE)
            bins[b] = bins.get(b, 0) + n
        out[name] = [
            [10 ** (b / BINS_PER_DECADE) / 1e6, 10 ** ((b + 1) / BINS_PER_DECADE) / 1e6, n]
            for b, n in sorted(bins.items())
        ]
    return out


def build_results(
    total: Aggregate,
    steps: dict[int, Aggregate],
    run: Run,
    workers: list[Worker] | None = None,
    max_error_rate: float = MAX_ERROR_RATE,
    goodput: bool = True,
) -> ResultsDoc:
    """goodput=False: the run had no per-request SLO, so its goodput is not a figure (None)."""
    summary = _goodput(figures(total), goodput)
    if mixed_loads(steps):
        summary.pop("intervals", None)
    step_rows: list[Step] = []
    for s, agg in sorted(steps.items()):
        f = _goodput(figures(agg), goodput)
        step_rows.append({"step": s, **f, "flags": validity(f, max_error_rate)})
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "created": time.time(),
        "environment": environment_info(),
        "run": run,
        "summary": summary,
        "validity": {"flags": validity(summary, max_error_rate), "max_error_rate": max_error_rate},
        "distributions": distributions(total),
        "steps": step_rows,
        "series": [[s, *v] for s, v in sorted(total.series.items())],
        "workers": workers or [],
        "partial": False,  # a checkpoint's, written while the run goes on, is true (report.outcome)
    }


def mixed_loads(steps: Mapping[int, object]) -> bool:
    """Whether a run's windows are steps of different loads (a ladder): its whole-run figures mix
    them, so they get no interval (batch means would take the steps' differences for noise); each
    step has its own."""
    return sum(1 for k in steps if k > 0) > 1


def _goodput(fig: Figures, measured: bool) -> Figures:
    if not measured:
        fig["goodput_requests_per_s"] = fig["goodput_tokens_per_s"] = None
        intervals = fig.get("intervals")
        for name in ("goodput_requests_per_s", "goodput_tokens_per_s"):  # no figure, no interval
            if intervals is not None:
                intervals["rates"].pop(name, None)
    return fig


def plain(doc: ResultsDoc) -> dict[str, Any]:
    """The same document as a plain dict (the same object: only its static type differs), for the
    code that writes or passes it on without reading it (runtime.plugin)."""
    return cast(dict[str, Any], doc)


_LITERALS = (b"true", b"false", b"null")


def _cut_short(data: bytes, pos: int) -> bool:
    """Whether JSON that orjson stopped reading at `pos` was cut short rather than spoiled: it
    stopped at the end, or on a last token that is the start of a number or a literal (orjson
    stops on `1.` one byte before the end, and on `nu` at its first byte)."""
    tail = data.rstrip()[pos:]
    return not tail.strip(b"0123456789+-.eE") or any(lit.startswith(tail) for lit in _LITERALS)


def read_results(path: str | Path) -> ResultsDoc:
    """Read and check a results file; ResultsError (naming the file) when it cannot be used."""
    path = Path(path)
    try:  # never a pipe (read forever), a device (until memory runs out) or a file of absurd size
        data = read_regular(path, MAX_RESULTS_BYTES, "an llm-locust results file")
    except InputError as e:
        raise ResultsError(str(e)) from None
    if not data.strip():
        raise ResultsError(f"{path}: empty file, not an llm-locust results file")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        msg = str(e)
        raise ResultsError(f"{path}: {'truncated' if _cut_short(data, e.pos) else 'not valid'} JSON ({msg})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError(f"{path}: not an llm-locust results file (schema {found!r}, expected {SCHEMA!r})")
    version = doc.get("version")
    if version not in READABLE_VERSIONS:
        by = (doc.get("environment") or {}).get("llm_locust")
        hint = "a newer llm-locust wrote it: upgrade" if isinstance(version, int) and version > SCHEMA_VERSION else ""
        raise ResultsError(
            f"{path}: results schema version {version!r} (written by llm-locust {by or 'unknown'});"
            f" this llm-locust reads versions {', '.join(map(str, READABLE_VERSIONS))}{'; ' + hint if hint else ''}"
        )
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ResultsError(f"{path}: incomplete results file, missing {', '.join(missing)}")
    if isinstance(doc["summary"], dict):
        doc["summary"].setdefault("lost", 0)  # before lost was counted: none was reported
        doc["summary"].setdefault("workers_lost", 0)
    try:  # the marks a file written before they were kept is read with, derived from its figures
        doc.setdefault("validity", {"flags": validity(doc["summary"]), "max_error_rate": MAX_ERROR_RATE})
        for row in doc["steps"]:
            row.setdefault("flags", validity(row))
    except (KeyError, TypeError, AttributeError) as e:
        raise ResultsError(f"{path}: incomplete results file: its figures lack {e}") from None
    try:  # no negative, non-finite or non-numeric count, latency or rate reaches a reader
        check_figures(str(path), our_fields(doc), numbers_only=True, error=ResultsError)
        if not isinstance(doc["summary"].get("sent"), int):
            raise ResultsError(f"{path}: summary.sent is {doc['summary'].get('sent')!r}: not a count of requests")
    except AttributeError:
        raise ResultsError(f"{path}: incomplete results file: its summary is not an object") from None
    doc["_path"] = str(path)
    # the JSON load boundary: the checks above hold what every reader needs (the schema, a known
    # version, the required parts); past here the document is read through its types
    return cast(ResultsDoc, doc)


def results_json(results: Mapping[str, Any], secrets: tuple[str, ...] = (), indent: bool = True) -> bytes:
    """The results as JSON, as a reader of the file gets them: the process's secrets (the API key,
    the credentials of a URL setting: safe.masking) and any of `secrets` that found their way
    into the figures (an error text quoting a header) masked."""
    data = orjson.dumps(results, option=(orjson.OPT_INDENT_2 if indent else 0) | orjson.OPT_NON_STR_KEYS)
    for secret in secrets:
        if secret and len(secret) >= MIN_LEN:
            data = data.replace(orjson.dumps(secret)[1:-1], MASK.encode())
    return mask_bytes(data)


def write_results(path: str | Path, results: Mapping[str, Any], secrets: tuple[str, ...] = ()) -> None:
    """Write atomically (a reader never sees half a file), secrets masked. OSError, with the path
    and why, when it cannot be written (a full disk, a path that is a device or a symbolic link):
    an earlier file at `path` is then left as it was. Counts that do not add up (a bug of the
    counting: report.accounting) are logged, and carried in the file as `count_problems`."""
    problems = count_problems(results)
    if problems:
        log.error("results %s: counts do not add up: %s", path, "; ".join(problems))
        if "count_problems" not in results:
            results = {**results, "count_problems": problems}
    write_atomic(path, results_json(results, secrets))
