"""Trace loading: detect the format, stream the file (gzip too), build a compact `Trace`.

    load_trace(path, fmt=None, *, share=None, model=None, keep_failed=False) -> Trace

Formats live in `formats/` (one module each, see `FORMATS`); docs/traces.md describes them, the
column mapping and the rules below.

- Arrival times are seconds from the trace start. Formats whose times are already offsets from a
  trace origin (our JSONL, Mooncake, Bailian, AIPerf, Splitwise) keep them; wall-clock or offset
  formats that need not start at 0 (Azure, BurstGPT) are rebased so the first kept row (after the
  model / failed-row filters, before sharing) is at 0.0.
- Rows out of time order are sorted, stably, by arrival; `Trace.reordered` counts the rows that
  were earlier than the row before them. If such a row is earlier than the first row of a rebased
  format, it becomes the origin. Negative or unparseable times are refused.
- ``share=(i, k)`` keeps worker i's share of k: a record belongs to share ``key % k`` where key is
  ``zlib.crc32(conversation_id)`` for a record in a conversation, else its 0-based index among the
  rows kept before sharing (file order). The k shares are disjoint, cover the trace, and keep each
  conversation whole; every worker parses the whole file (so all agree on the origin and order).
- Every problem raises `TraceError` (a ValueError) naming the file and the line, before anything
  is returned, so before any load is sent.
"""

from __future__ import annotations

from pathlib import Path

from llm_locust.workload.formats import FORMATS, detect, get
from llm_locust.workload.formats.reader import Context, Source, TraceError
from llm_locust.workload.paths import trace_file_problem
from llm_locust.workload.trace import Trace, TraceBuilder

__all__ = ["FORMATS", "Trace", "TraceError", "load_trace"]

UNEXPECTED = "cannot read this trace: unexpected content near this line"


def _check_share(share) -> tuple[int, int] | None:
    if share is None:
        return None
    try:
        i, k = (int(x) for x in share)
    except (TypeError, ValueError):
        raise TraceError(f"share must be (index, count), got {share!r}") from None
    if k < 1 or not 0 <= i < k:
        raise TraceError(f"share index must be in 0..count-1 with count >= 1, got {share!r}")
    return i, k


def load_trace(
    path: str | Path,
    fmt: str | None = None,
    *,
    share: tuple[int, int] | None = None,
    model: str | None = None,
    keep_failed: bool = False,
) -> Trace:
    """Read a trace file (any of `FORMATS`, detected from content unless `fmt` is given; ``.gz``
    read transparently) into a `Trace`, optionally only this worker's `share`."""
    name = str(path)
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{name}: {trace_file_problem(p)}")
    share = _check_share(share)
    spec = get(fmt) if fmt else None
    src = Source(p, name)
    try:
        if spec is None:
            spec = detect(src.head(), name)
        if model is not None and "model" not in spec.columns:
            raise TraceError(
                f"{name}: a model filter ({model!r}) was given, but {spec.name} traces have no model column"
            )
        ctx = Context(name=name, model=model, keep_failed=keep_failed)
        builder = TraceBuilder(spec, ctx, share)
        for block in spec.read(src, ctx):
            builder.add(block)
        src.finish()
    except TraceError:
        raise
    except (
        RecursionError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        OverflowError,
        UnicodeError,
        ArithmeticError,
        LookupError,
        AttributeError,
        OSError,
        EOFError,
    ) as e:
        # a reader missed a case: still a clear error naming the file and where reading stopped,
        # never a traceback (tests/test_fuzz_traces.py looks for this wording: it is a bug to fix)
        raise TraceError(f"{name}:{src.line or 1}: {UNEXPECTED} ({type(e).__name__}: {str(e)[:200]})") from e
    finally:
        src.close()
    if builder.seen == 0:
        if model is not None and ctx.skipped.get("model"):
            seen = ", ".join(sorted(ctx.models_seen)) or "(none)"
            raise TraceError(f"{name}: no rows of model {model!r}; models in the file: {seen}")
        if ctx.skipped:
            what = ", ".join(f"{n} {why}" for why, n in ctx.skipped.items())
            raise TraceError(f"{name}: no rows left to replay ({what} skipped)")
        raise TraceError(f"{name}: empty trace (no data rows)")
    return builder.finish(path=name, sha256=src.sha.hexdigest())
