"""A record log (one JSON line per request, metrics/recordlog.py) as one Parquet file with typed
columns, for DuckDB, polars or pandas: the chunk times as a list column, the server's own facts as
JSON text (their keys vary by server). A log written by several worker processes (LOG.workerN
beside LOG) becomes one table, each row with its `worker`.

pyarrow writes it (the reference Parquet implementation; `pip install 'llm-locust[parquet]'`).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any

import orjson

# The record log's fields, in its order, with their Parquet types (docs/recording.md).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "string"),
    ("api", "string"),
    ("step", "int32"),
    ("source", "string"),
    ("outcome", "string"),
    ("status", "int32"),
    ("error", "string"),
    ("cause", "string"),
    ("wall_sent", "float64"),
    ("t_sent", "float64"),
    ("sched", "float64"),
    ("released", "float64"),  # a held send let go (--max-in-flight, --max-prefill)
    ("written", "float64"),  # request phases: the bytes written
    ("connect", "float64"),
    ("new_connection", "bool_"),
    ("headers", "float64"),
    ("first", "float64"),
    ("first_content", "float64"),
    ("first_tool", "float64"),
    ("end", "float64"),
    ("chunks", "list<float64>"),
    ("chunk_tokens", "list<int32>"),
    ("n_out", "int64"),
    ("n_out_source", "string"),
    ("n_in", "int64"),
    ("n_in_source", "string"),
    ("requested_out", "int64"),
    ("finish_reason", "string"),
    ("n_cached", "int64"),
    ("ideal_cached", "int64"),
    ("endpoint", "string"),
    ("model", "string"),
    ("session", "string"),
    ("server", "json"),  # the server's facts about the request (llama.cpp timings ...), as JSON text
    ("work", "json"),  # the workload's facts (images, overlong, graded ...), as JSON text
    ("worker", "int32"),  # the worker process that sent it (None: a single process)
)
MISSING = "pyarrow is needed to write Parquet: pip install 'llm-locust[parquet]'"


def parts(log: str | Path) -> list[tuple[Path, int | None]]:
    """The files of a record log and their worker index: LOG itself and LOG.workerN."""
    base = Path(log)
    out: list[tuple[Path, int | None]] = [(base, None)] if base.is_file() else []
    for name in sorted(glob.glob(glob.escape(str(base)) + ".worker*")):
        m = re.search(r"\.worker(\d+)$", name)
        if m:
            out.append((Path(name), int(m.group(1))))
    return out


def _arrow_type(pa: Any, kind: str) -> Any:
    if kind.startswith("list<"):
        return pa.list_(_arrow_type(pa, kind[5:-1]))
    return pa.string() if kind in ("string", "json") else getattr(pa, kind)()


def schema() -> Any:
    import pyarrow as pa

    return pa.schema([(name, _arrow_type(pa, kind)) for name, kind in COLUMNS])


def rows(log: str | Path) -> list[dict[str, Any]]:
    """Every record of the log's files, as the table's rows (a malformed line names file and line)."""
    out = []
    for path, worker in parts(log):
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a record log line ({e})") from None
                for name in ("server", "work"):
                    value = rec.get(name)
                    rec[name] = None if value is None else orjson.dumps(value).decode()
                rec["worker"] = worker
                out.append({name: rec.get(name) for name, _ in COLUMNS})
    return out


def write(log: str | Path, out: str | Path) -> int:
    """The record log as a Parquet file at `out` (written beside, then moved into place); the
    number of rows."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(MISSING) from None
    if not parts(log):
        raise ValueError(f"{log}: no record log there (nor {Path(log).name}.workerN beside it)")
    table = pa.Table.from_pylist(rows(log), schema=schema())
    target = Path(out)
    tmp = target.with_name(target.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(target)
    return table.num_rows
