"""What every trace reader shares: the error type, the streamed file source, the reading context,
the format descriptor and small parsing helpers.

A reader is a generator of *blocks*: column-wise batches of rows,
``(lines, times, inputs, outputs, extras)`` where ``lines`` is a ``range`` or a sequence of line
numbers, ``times`` seconds (floats), ``inputs``/``outputs`` token counts (int or None) and
``extras`` one sequence per optional column the format declares (`Format.columns`), in that order.
Row-wise readers yield tuples ``(line, time, input, output, *extras)`` and wrap them with
`blocks_from_rows`; the big token-only CSV readers build blocks directly with C-level maps.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import math
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

CHUNK = 1 << 20  # bytes read (and decompressed) at a time
HEAD = 1 << 16  # bytes looked at to detect the format
HEAD_MAX = 64 << 20  # ... more if the first line is longer, up to this
_NONBLANK = re.compile(rb"[^ \t\r\n]")

# Optional columns a format may carry, beyond (line, time, input_tokens, output_tokens).
OPTIONAL_COLUMNS = ("prompt", "messages", "conversation_id", "turn", "hash_ids", "images", "model")

Block = tuple  # (lines, times, inputs, outputs, extras)


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and the line."""


@dataclass(frozen=True)
class Format:
    """One trace format: how to recognise it and how to read it."""

    name: str
    read: Callable[[Source, Context], Iterator[Block]]
    columns: tuple[str, ...] = ()  # optional columns its blocks carry, in this order
    origin: str = "zero"  # "zero": times are already from the trace start; "first": rebased to the earliest row
    block_size: int | None = None  # tokens per hash_ids block
    required: tuple[str, ...] = ()  # header columns / JSON keys (for messages about renamed columns)
    summary: str = ""


@dataclass
class Context:
    """Per-load state a reader consults and fills."""

    name: str  # the path as the user gave it: every message starts with it
    model: str | None = None  # keep only rows of this model (formats with a model column)
    keep_failed: bool = False  # BurstGPT: keep rows with Response tokens == 0
    skipped: dict[str, int] = field(default_factory=dict)
    block_size: int | None = None  # set by readers whose files carry their own block size
    models_seen: set[str] = field(default_factory=set)

    def error(self, line: int | None, msg: str) -> TraceError:
        return TraceError(f"{self.name}:{line}: {msg}" if line is not None else f"{self.name}: {msg}")

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def wants_model(self, model: Any) -> bool:
        """Model filter (case-insensitive); rows without a model never match a filter."""
        if self.model is None:
            return True
        if isinstance(model, str):
            self.models_seen.add(model)
            return model.casefold() == self.model.casefold()
        return False


class _HashingReader:
    """File wrapper that hashes the bytes as they are read (what gzip reads, for .gz files)."""

    mode = "rb"

    def __init__(self, f, h) -> None:
        self._f = f
        self._h = h
        self.name = getattr(f, "name", "")

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        self._h.update(b)
        return b

    def seek(self, n: int, /) -> int:
        """Hashing needs every byte once, in order; GzipFile seeks only to rewind, which Source never does."""
        raise io.UnsupportedOperation("seek")

    def close(self) -> None:
        self._f.close()


class Source:
    """A trace file read once, in chunks: transparently gunzipped (by magic bytes), SHA-256 of the
    file's bytes computed on the way, decoded as UTF-8 with the line of any bad byte reported."""

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self.sha = hashlib.sha256()
        try:
            f = open(path, "rb")
        except OSError as e:
            raise TraceError(f"{name}: cannot open: {e.strerror or e}") from None
        magic = f.read(2)
        f.seek(0)
        self._raw = _HashingReader(f, self.sha)
        self.compressed = magic == b"\x1f\x8b"
        self._stream = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.compressed else self._raw
        self._queued: list[bytes] = []  # chunks read ahead (format detection)
        self._rest = b""  # bytes of an incomplete last line
        self.line = 0  # lines handed out so far
        self._started = False
        self._eof = False
        # line endings: None until the first one is seen; "cr" for old-Mac files (CR only), whose
        # CRs are then read as LFs (a CR is never part of a UTF-8 multi-byte character)
        self._eol: str | None = None

    # -- bytes ---------------------------------------------------------------------------------
    def _read(self) -> bytes:
        if self._queued:
            return self._queued.pop(0)
        if self._eof:
            return b""
        return self._read_stream()

    def _read_stream(self) -> bytes:
        try:
            b = self._stream.read(CHUNK)
        except EOFError:
            n = self.line + self._rest.count(b"\n") + sum(q.count(b"\n") for q in self._queued)
            raise TraceError(
                f"{self.name}:{n + 1}: truncated gzip file: the compressed data ends after line {n}"
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError, ValueError, struct.error) as e:
            n = self.line + self._rest.count(b"\n") + sum(q.count(b"\n") for q in self._queued)
            raise TraceError(f"{self.name}:{n + 1}: corrupt gzip data after line {n}: {e}") from None
        if not b:
            self._eof = True
            return b
        if self._eol is None:
            self._eol = _line_endings(b)
        if self._eol == "cr":
            b = b.replace(b"\r", b"\n")
        return b

    def head(self, n: int = HEAD) -> str:
        """At least the first ~n bytes and the whole first non-blank line, as text, for format
        detection. Reads ahead; nothing is lost. A bad byte in the first line(s) is reported."""
        if self._started:
            raise RuntimeError("head() after reading started")
        got = b"".join(self._queued)
        while not self._eof and len(got) < HEAD_MAX:
            m = _NONBLANK.search(got)
            if len(got) >= n and m is not None and got.find(b"\n", m.start()) >= 0:
                break
            b = self._read_stream()
            if b:
                self._queued.append(b)
                got += b
        if got.startswith(b"\x28\xb5\x2f\xfd"):  # zstd's magic (H CUA Perf ships h_cua.jsonl.zst)
            raise TraceError(f"{self.name}:1: a zstd-compressed file: decompress it first (zstd -d)")
        cut = got.rfind(b"\n") + 1
        whole = got[:cut] if cut and not self._eof else got
        try:
            text = whole.decode("utf-8")
        except UnicodeDecodeError as e:
            line = whole.count(b"\n", 0, e.start) + 1
            if line == whole.count(b"\n") + 1 and not self._eof:  # a character cut at the end
                text = whole[: e.start].decode("utf-8")
            else:
                col = e.start - (whole.rfind(b"\n", 0, e.start) + 1) + 1
                raise TraceError(
                    f"{self.name}:{line}: not UTF-8 text (byte 0x{whole[e.start]:02x} at column {col}: {e.reason})"
                ) from None
        return text.lstrip("\ufeff")

    def finish(self) -> None:
        """Read what is left (so the hash covers the whole file) and close."""
        try:
            while self._raw.read(CHUNK):
                pass
        finally:
            self._raw.close()

    def close(self) -> None:
        self._raw.close()

    # -- text ----------------------------------------------------------------------------------
    def _decode(self, part: bytes) -> str:
        try:
            text = part.decode("utf-8")
        except UnicodeDecodeError as e:
            line = self.line + part.count(b"\n", 0, e.start) + 1
            col = e.start - (part.rfind(b"\n", 0, e.start) + 1) + 1
            raise TraceError(
                f"{self.name}:{line}: not UTF-8 text (byte 0x{part[e.start]:02x} at column {col}: {e.reason})"
            ) from None
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        return text

    def text_chunks(self) -> Iterator[tuple[int, str]]:
        """(number of the chunk's first line, text of whole lines), in order, until EOF."""
        while True:
            data = self._read()
            if data:
                buf = self._rest + data if self._rest else data
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    self._rest = buf
                    continue
                part, self._rest = buf[:cut], buf[cut:]
                nlines = part.count(b"\n")
            else:
                if not self._rest:
                    return
                part, self._rest = self._rest, b""
                nlines = part.count(b"\n") + 1
            text = self._decode(part)
            first = self.line + 1
            self.line += nlines
            yield first, text

    def line_blocks(self) -> Iterator[tuple[int, list[str]]]:
        """(number of the first line, lines without their newline); blank lines kept as ''."""
        for first, text in self.text_chunks():
            lines = text.split("\n")
            if text.endswith("\n"):
                lines.pop()
            yield first, lines

    def csv_blocks(self, ctx: Context) -> tuple[list[str], int, Iterator[tuple[int, list[str]]]]:
        """(header column names, header line number, line blocks after the header)."""
        it = self.line_blocks()
        for first, lines in it:
            for j, ln in enumerate(lines):
                if ln.strip():
                    header = csv_header(ln, ctx, first + j)
                    rest = lines[j + 1 :]

                    def after(rest=rest, start=first + j + 1):
                        if rest:
                            yield start, rest
                        yield from it

                    return header, first + j, after()
        raise TraceError(f"{self.name}: empty trace file")


# -- helpers -------------------------------------------------------------------------------------


def _line_endings(b: bytes) -> str | None:
    """ "cr" when the first line ending in `b` is a lone CR, "lf" for LF or CRLF, None if none yet."""
    cr, lf = b.find(b"\r"), b.find(b"\n")
    if cr < 0:
        return "lf" if lf >= 0 else None
    if 0 <= lf < cr:
        return "lf"
    if cr + 1 < len(b):
        return "lf" if b[cr + 1] == 0x0A else "cr"
    return None  # a CR at the very end of the piece: decided by the next one


def csv_header(line: str, ctx: Context, lineno: int) -> list[str]:
    return [h.strip() for h in csv_fields(line, ctx, lineno)]


def csv_fields(line: str, ctx: Context, lineno: int) -> list[str]:
    """The fields of one CSV line (quotes allowed); a malformed line is a TraceError."""
    if '"' not in line:
        return line.split(",")
    try:
        return next(csv.reader([line]), [])
    except csv.Error as e:
        raise ctx.error(lineno, f"bad CSV line: {e}: {line[:80]!r}") from None


def blocks_from_rows(rows: Iterable[tuple], n: int = 8192) -> Iterator[Block]:
    """Group row tuples ``(line, time, input, output, *extras)`` into blocks."""
    it = iter(rows)
    while True:
        batch = list(islice(it, n))
        if not batch:
            return
        cols = list(zip(*batch, strict=True))  # every reader yields rows of one arity
        yield cols[0], cols[1], cols[2], cols[3], tuple(cols[4:])


def columns_index(
    header: Sequence[str], required: Sequence[str], optional: Sequence[str], ctx: Context, line: int, fmt: str
) -> dict[str, int]:
    """Column name -> index; a clear error naming the missing and the found columns."""
    pos = {h: i for i, h in enumerate(header)}
    missing = [c for c in required if c not in pos]
    if missing:
        raise ctx.error(
            line,
            f"{fmt} trace: missing column(s) {', '.join(missing)}; found: {', '.join(header) or '(none)'}",
        )
    return {c: pos[c] for c in (*required, *optional) if c in pos}


def json_object(line: str, ctx: Context, lineno: int) -> dict:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ctx.error(lineno, f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ctx.error(lineno, f"expected a JSON object, found {type(obj).__name__}")
    return obj


def jsonl_objects(src: Source, ctx: Context) -> Iterator[tuple[int, dict]]:
    """(line, object) for every non-blank line of a JSON Lines file."""
    for first, lines in src.line_blocks():
        yield from jsonl_objects_in(lines, first, ctx)


def jsonl_objects_in(lines: list[str], first: int, ctx: Context) -> Iterator[tuple[int, dict]]:
    loads = orjson.loads
    for lineno, line in enumerate(lines, first):
        if not line or line.isspace():
            continue
        try:
            obj = loads(line)
        except orjson.JSONDecodeError as e:
            raise ctx.error(lineno, f"invalid JSON: {e}") from None
        if type(obj) is not dict:
            raise ctx.error(lineno, f"expected a JSON object, found {type(obj).__name__}")
        yield lineno, obj


_INT_MAX = 2**31 - 1
_ID_MAX = 2**63 - 1  # hash ids are stored as signed 64-bit integers
_TIME_MAX = 1e15  # seconds (~31 million years): larger is not a trace time


def _short(v: Any) -> str:
    r = repr(v) if not isinstance(v, int) or v.bit_length() < 1000 else f"<a {v.bit_length()}-bit integer>"
    return r if len(r) <= 60 else r[:57] + "..."


def json_count(obj: dict, key: str, ctx: Context, lineno: int, required: bool = False) -> int | None:
    """A token/image count from a JSON object: a non-negative integer (or an integral float)."""
    v = obj.get(key)
    if type(v) is int and 0 <= v <= _INT_MAX:
        return v
    if v is None:
        if required:
            raise ctx.error(lineno, f"missing {key!r}; found keys: {', '.join(obj) or '(none)'}")
        return None
    return _count_slow(v, key, ctx, lineno)


def _count_slow(v: Any, key: str, ctx: Context, lineno: int) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if type(v) is not int:
        raise ctx.error(lineno, f"{key!r} must be an integer, found {type(v).__name__} {v!r}")
    if v < 0:
        raise ctx.error(lineno, f"{key!r} must not be negative, found {v}")
    if v > _INT_MAX:
        raise ctx.error(lineno, f"{key!r} is too large: {v}")
    return v


def text_count(s: str, key: str, ctx: Context, lineno: int) -> int:
    """A token count from a CSV field."""
    try:
        v = int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            raise ctx.error(lineno, f"{key} is not a number: {s.strip()!r}") from None
        if not f.is_integer():
            raise ctx.error(lineno, f"{key} is not an integer: {s.strip()!r}") from None
        v = int(f)
    if v < 0:
        raise ctx.error(lineno, f"{key} must not be negative, found {v}")
    if v > _INT_MAX:
        raise ctx.error(lineno, f"{key} is too large: {v}")
    return v


def json_seconds(
    obj: dict, key: str, ctx: Context, lineno: int, scale: float = 1.0, default: float | None = None
) -> float:
    """A time from a JSON object, times `scale` (1/1000 for milliseconds); refuses negatives,
    NaN and infinities."""
    v = obj.get(key)
    if v is None:
        if default is not None:
            return default
        raise ctx.error(lineno, f"missing {key!r}; found keys: {', '.join(obj) or '(none)'}")
    if type(v) is bool or not isinstance(v, (int, float)):
        raise ctx.error(lineno, f"{key!r} must be a number, found {type(v).__name__} {_short(v)}")
    if v < 0:
        raise ctx.error(lineno, f"negative {key!r}: {_short(v)}")
    try:
        t = v * scale if scale != 1.0 else float(v)
    except OverflowError:
        t = math.inf
    if not math.isfinite(t) or t > _TIME_MAX:
        raise ctx.error(lineno, f"{key!r} is not a usable time: {_short(v)}")
    return t


def text_seconds(s: str, key: str, ctx: Context, lineno: int) -> float:
    try:
        v = float(s)
    except ValueError:
        raise ctx.error(lineno, f"unparseable {key}: {s.strip()!r}") from None
    if not math.isfinite(v):
        raise ctx.error(lineno, f"unparseable {key}: {s.strip()!r}")
    if v < 0:
        raise ctx.error(lineno, f"negative {key}: {s.strip()}")
    return v


def json_hash_ids(obj: dict, key: str, ctx: Context, lineno: int) -> list[int] | None:
    v = obj.get(key)
    if v is None:
        return None
    if type(v) is not list or not all(type(x) is int for x in v):
        raise ctx.error(lineno, f"{key!r} must be a list of integers")
    if v and (min(v) < 0 or max(v) > _ID_MAX):
        bad = next(x for x in v if x < 0 or x > _ID_MAX)
        raise ctx.error(lineno, f"{key!r}: {_short(bad)} is not a block id (0 to 2^63-1)")
    return v


def json_block_size(obj: dict, ctx: Context, lineno: int) -> int | None:
    """A line's 'block_size' (tokens per hash block): positive, and one value for the whole file
    (kept in ctx.block_size from the first line that gives it)."""
    bs = json_count(obj, "block_size", ctx, lineno)
    if bs is not None:
        if bs == 0:
            raise ctx.error(lineno, "'block_size' must be positive")
        if ctx.block_size is None:
            ctx.block_size = bs
        elif bs != ctx.block_size:
            raise ctx.error(lineno, f"'block_size' {bs} differs from {ctx.block_size} on an earlier line")
    return bs


def json_str(obj: dict, key: str, ctx: Context, lineno: int) -> str | None:
    v = obj.get(key)
    if v is None or type(v) is str:
        return v
    raise ctx.error(lineno, f"{key!r} must be a string, found {type(v).__name__}")


def json_id(obj: dict, key: str, ctx: Context, lineno: int) -> str | None:
    """An identifier: a string, or an integer taken as its decimal text."""
    v = obj.get(key)
    if v is None or type(v) is str:
        return v
    if type(v) is int:
        return str(v)
    raise ctx.error(lineno, f"{key!r} must be a string or an integer, found {type(v).__name__}")


def json_messages(v: Any, key: str, ctx: Context, lineno: int) -> list[dict] | None:
    if v is None:
        return None
    if (
        type(v) is not list
        or not v
        or not all(type(m) is dict and isinstance(m.get("role"), str) and "content" in m for m in v)
    ):
        raise ctx.error(lineno, f"{key!r} must be a non-empty list of {{role, content}} objects")
    return v
