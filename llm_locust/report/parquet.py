"""A record log (one JSON line per request, metrics/recordlog.py) as one Parquet file with typed
columns, for DuckDB, polars or pandas: the chunk times as a list column, the server's own facts as
JSON text (their keys vary by server). A log written by several worker processes (LOG.workerN
beside LOG) becomes one table, each row with its `worker`.

A record log is data: every line is checked against its column's type before pyarrow sees it, so
a cut line, a line that is not JSON, a value of the wrong type or out of its column's range, a
part that is a folder or a pipe, or a log without a record is one line naming the file (and line)
and why, never a traceback. The Parquet file is written whole or not at all
(report.files.write_atomic: a new file beside the target, then a rename; never through a link).

pyarrow writes it (the reference Parquet implementation; `pip install 'llm-locust[parquet]'`).
"""

from __future__ import annotations

import glob
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from llm_locust.report.files import special, write_atomic

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
    ("first_wait", "float64"),  # the first token's read: how long its newest data had waited (client validity)
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
BATCH_ROWS = 50_000  # rows turned into Arrow at a time: the Python objects of one batch in memory
_INT_RANGE = {"int32": 2**31, "int64": 2**63}
_WORKER_RE = re.compile(r"\.worker(\d+)$")


def parts(log: str | Path) -> list[tuple[Path, int | None]]:
    """The files of a record log and their worker index: LOG itself and LOG.workerN (whatever
    they are: `rows` refuses one that is not a regular file)."""
    base = Path(log)
    out: list[tuple[Path, int | None]] = [(base, None)] if os.path.lexists(base) else []
    for name in sorted(glob.glob(glob.escape(str(base)) + ".worker*")):
        m = _WORKER_RE.search(name)
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


def _shown(v: Any) -> str:
    text = orjson.dumps(v).decode() if not isinstance(v, float) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar_problem(v: Any, kind: str) -> str | None:
    """Why `v` cannot be a value of a column of this type (None: it can; null always can)."""
    if v is None or kind == "json":
        return None
    if kind == "string":
        return None if isinstance(v, str) else "expected text"
    if kind == "bool_":
        return None if isinstance(v, bool) else "expected true or false"
    if kind == "float64":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return "expected a number"
        return None if math.isfinite(float(v)) else "expected a finite number"
    limit = _INT_RANGE[kind]
    if isinstance(v, bool) or not isinstance(v, int):
        return "expected a whole number"
    return None if -limit <= v < limit else f"out of range for {kind}"


def value_problem(v: Any, kind: str) -> str | None:
    """Why `v` cannot be a value of a column of this type (lists: each item), in words."""
    if not kind.startswith("list<") or v is None:
        return _scalar_problem(v, kind)
    if not isinstance(v, list):
        return "expected a list"
    for i, item in enumerate(v):
        why = _scalar_problem(item, kind[5:-1])
        if why is not None:
            return f"item {i}: {why}"
    return None


def _record(line: bytes, where: str, worker: int | None) -> dict[str, Any]:
    """One line of the log as a row of the table; ValueError naming `where` (file:line) and the field."""
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"{where}: not a record log line ({e})") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
        raise ValueError(f'{where}: not a record log line (a JSON object with an "id" is expected)')
    row: dict[str, Any] = {}
    for name, kind in COLUMNS[:-1]:
        v = rec.get(name)
        why = value_problem(v, kind)
        if why is not None:
            raise ValueError(f"{where}: {name}: {why}, got {_shown(v)}")
        row[name] = orjson.dumps(v).decode() if kind == "json" and v is not None else v
    row["worker"] = worker
    return row


def _open_regular(path: Path) -> Any:
    """The file, opened for reading only when it is a regular file (a pipe would wait forever for
    a writer, a device would never end): OSError with a line naming it otherwise."""
    why = special(path)
    if why is not None:
        raise ValueError(f"{path}: it is {why}, not a record log file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # became something else since the check
        os.close(fd)
        raise ValueError(f"{path}: not a regular file, not a record log file")
    return os.fdopen(fd, "rb")


def records(log: str | Path) -> Iterator[dict[str, Any]]:
    """Every record of the log's files, as the table's rows, checked one by one (ValueError: one
    line naming file, line and field)."""
    for path, worker in parts(log):
        with _open_regular(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield _record(line, f"{path}:{n}", worker)


def rows(log: str | Path) -> list[dict[str, Any]]:
    """Every record of the log's files, as the table's rows (a bad line names file and line)."""
    return list(records(log))


def _table(log: str | Path) -> Any:
    """The whole log as one Arrow table, built BATCH_ROWS rows at a time."""
    import pyarrow as pa

    sch, batches, batch = schema(), [], []
    for row in records(log):
        batch.append(row)
        if len(batch) >= BATCH_ROWS:
            batches.append(pa.RecordBatch.from_pylist(batch, schema=sch))
            batch = []
    if batch:
        batches.append(pa.RecordBatch.from_pylist(batch, schema=sch))
    return pa.Table.from_batches(batches, schema=sch)


def write(log: str | Path, out: str | Path) -> int:
    """The record log as a Parquet file at `out` (written whole beside it, then moved into place:
    report.files.write_atomic); the number of rows. ValueError for a log with no record."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(MISSING) from None
    if not parts(log):
        raise ValueError(f"{log}: no record log there (nor {Path(log).name}.workerN beside it)")
    table = _table(log)
    if table.num_rows == 0:
        raise ValueError(f"{log}: no record in this record log (an empty file, or only empty lines)")
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_atomic(out, sink.getvalue().to_pybytes())
    return table.num_rows
