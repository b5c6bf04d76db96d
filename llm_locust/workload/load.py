"""Trace loaders. Issue-2 scope: our JSONL and the Azure 2023 CSV (the bundled sample's source)."""

from __future__ import annotations

import csv
import gzip
import io
from datetime import datetime
from pathlib import Path

import orjson

from .records import TraceRecord


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


def _open_text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def load_trace(path: str | Path) -> list[TraceRecord]:
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    try:
        with _open_text(path) as f:
            first = f.readline()
            f.seek(0)
            if not first.strip():
                records = []
            elif first.lstrip().startswith("{"):
                records = _jsonl(f, path)
            elif first.upper().startswith("TIMESTAMP,"):
                records = _azure_csv(f, path)
            else:
                raise TraceError(f"{path}:1: unknown trace format (expected JSONL or an Azure CSV header)")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (EOFError, gzip.BadGzipFile, OSError) as e:
        raise TraceError(f"{path}: cannot read: {e}") from None
    if not records:
        raise TraceError(f"{path}: empty trace")
    return records


def _jsonl(f, path: Path) -> list[TraceRecord]:
    out = []
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise TraceError(f"{where}: invalid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected a JSON object")
        try:
            rec = TraceRecord(
                arrival=float(obj.get("timestamp", 0.0)),
                input_tokens=_opt_int(obj.get("input_tokens")),
                output_tokens=_opt_int(obj.get("output_tokens")),
                prompt=obj.get("prompt"),
                messages=obj.get("messages"),
                conversation_id=obj.get("conversation_id"),
                turn=_opt_int(obj.get("turn")),
                source=where,
            )
        except (TypeError, ValueError) as e:
            raise TraceError(f"{where}: {e}") from None
        if rec.prompt is None and rec.messages is None and rec.input_tokens is None:
            raise TraceError(f"{where}: needs one of prompt, messages, input_tokens")
        out.append(rec)
    return out


def _azure_csv(f, path: Path) -> list[TraceRecord]:
    reader = csv.DictReader(f)
    need = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
    missing = need - set(reader.fieldnames or ())
    if missing:
        raise TraceError(f"{path}:1: missing column(s) {', '.join(sorted(missing))}")
    out, t0 = [], None
    for row in reader:
        where = f"{path}:{reader.line_num}"
        try:
            t = _azure_time(row["TIMESTAMP"])
            rec = TraceRecord(
                arrival=0.0,
                input_tokens=int(row["ContextTokens"]),
                output_tokens=int(row["GeneratedTokens"]),
                source=where,
            )
        except (TypeError, ValueError) as e:
            raise TraceError(f"{where}: {e}") from None
        t0 = t if t0 is None else t0
        rec.arrival = (t - t0).total_seconds()
        out.append(rec)
    return out


def _azure_time(text: str) -> datetime:
    # 7 fractional digits (100 ns ticks) do not fit %f: keep microseconds
    head, dot, frac = text.strip().partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}" if dot else head)


def _opt_int(v) -> int | None:
    return None if v is None else int(v)
