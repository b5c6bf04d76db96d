"""The results JSON: everything a run measured plus what is needed to reproduce it."""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from ..metrics.aggregate import Aggregate, figures

SCHEMA = "llm-locust/results"
SCHEMA_VERSION = 1


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment_info() -> dict[str, Any]:
    return {
        "llm_locust": _version("llm-locust"),
        "locust": _version("locust"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
    }


def build_results(
    total: Aggregate,
    steps: dict[int, Aggregate],
    run: dict[str, Any],
    workers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "created": time.time(),
        "environment": environment_info(),
        "run": run,
        "summary": figures(total),
        "steps": [{"step": s, **figures(agg)} for s, agg in sorted(steps.items())],
        "series": [[s, *v] for s, v in sorted(total.series.items())],
        "workers": workers or [],
    }


def write_results(path: str | Path, results: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
