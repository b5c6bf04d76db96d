"""A loaded trace, stored by column so that big files stay small in memory.

Token-only traces (Azure, Splitwise, BurstGPT without sessions) keep three arrays: arrivals
(``array('d')``, 8 bytes a row) and input/output token counts (``array('i')``, 4 bytes each; -1 for
"not in the trace"), plus the source line numbers, kept as a ``range`` while they follow a regular
step (a CSV file, or a share of one) and as ``array('I')`` otherwise. No Python object exists per
row. Optional columns exist only when the file has values for them: prompts and messages as
lists, conversation ids and model names interned (an ``array('i')`` of indices into a list of
distinct values), turns and image counts as ``array('i')``, prefix-block ids flattened into one
``array('i')`` (``'q'`` once an id needs 64 bits) with offsets. `Trace[i]` builds the `TraceRecord` on demand.
"""

from __future__ import annotations

import operator
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain, compress, count, islice, repeat
from typing import Any

from llm_locust.workload.formats.reader import Context, Format
from llm_locust.workload.trace_record import TraceRecord


class Trace:
    """The records of one trace file (or of one worker's share of it), in arrival order."""

    def __init__(
        self,
        *,
        path: str,
        format: str,
        sha256: str,
        total_rows: int,
        skipped: dict[str, int],
        reordered: int,
        block_size: int | None,
        share: tuple[int, int] | None,
        arrivals: array,
        inputs: array,
        outputs: array,
        lines: Sequence[int],
        store: dict[str, Any],
    ) -> None:
        self.path = path
        self.format = format
        self.sha256 = sha256
        self.total_rows = total_rows  # data rows in the file (ShareGPT: human turns), before any filter
        self.skipped = skipped  # reason -> rows left out (failed, model, ...)
        self.reordered = reordered  # rows whose time was earlier than the row before (then sorted)
        self.block_size = block_size
        self.share = share
        self._t = arrivals
        self._in = inputs
        self._out = outputs
        self._lines = lines
        self._store = store
        self.columns = frozenset(store)  # optional columns this trace has values for

    # -- sequence ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._t)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self._t)))]
        i = operator.index(i)
        n = len(self._t)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("trace index out of range")
        inp = self._in[i]
        out = self._out[i]
        entry = TraceRecord(
            self._t[i],
            None if inp < 0 else inp,
            None if out < 0 else out,
            source=f"{self.path}:{self._lines[i]}",
        )
        s = self._store
        if s:
            if "prompt" in s:
                entry.prompt = s["prompt"][i]
            if "messages" in s:
                entry.messages = s["messages"][i]
            if "conversation_id" in s:
                idx, ids = s["conversation_id"]
                j = idx[i]
                entry.conversation_id = ids[j] if j >= 0 else None
            if "turn" in s:
                v = s["turn"][i]
                entry.turn = v if v >= 0 else None
            if "hash_ids" in s:
                flat, off = s["hash_ids"]
                a, b = off[i], off[i + 1]
                if b > a:
                    entry.hash_ids = tuple(flat[a:b])
                    entry.block_size = self.block_size
            if "images" in s:
                v = s["images"][i]
                entry.images = v if v >= 0 else None
            if "model" in s:
                idx, names = s["model"]
                j = idx[i]
                entry.model = names[j] if j >= 0 else None
        return entry

    def __iter__(self) -> Iterator[TraceRecord]:
        for i in range(len(self._t)):
            yield self[i]

    def __repr__(self) -> str:
        share = f", share={self.share}" if self.share else ""
        return f"<Trace {self.path} format={self.format} rows={len(self)}/{self.total_rows}{share}>"

    # -- columns -------------------------------------------------------------------------------
    @property
    def arrivals(self) -> array:
        """Arrival times, seconds from the trace start, non-decreasing (read-only by convention)."""
        return self._t

    @property
    def input_lengths(self) -> array:
        """Input token counts by index; -1 where the trace has none (prompt/messages only)."""
        return self._in

    @property
    def output_lengths(self) -> array:
        """Output token counts by index; -1 where the trace has none."""
        return self._out

    @property
    def duration(self) -> float:
        return self._t[-1] if self._t else 0.0

    def conversations(self) -> dict[str, list[int]]:
        """Conversation id -> indices of its turns, in order ({} when the trace has none)."""
        if "conversation_id" not in self._store:
            return {}
        idx, ids = self._store["conversation_id"]
        out: dict[str, list[int]] = {}
        for i, j in enumerate(idx):
            if j >= 0:
                lst = out.get(ids[j])
                if lst is None:
                    out[ids[j]] = [i]
                else:
                    lst.append(i)
        return out

    def nbytes(self) -> int:
        """Approximate bytes held by the columns (arrays and lists, not the objects in lists)."""
        total = sum(a.itemsize * len(a) for a in (self._t, self._in, self._out))
        if isinstance(self._lines, array):
            total += self._lines.itemsize * len(self._lines)
        for v in self._store.values():
            for part in v if isinstance(v, tuple) else (v,):
                if isinstance(part, array):
                    total += part.itemsize * len(part)
                elif isinstance(part, list):
                    total += 8 * len(part)
        return total


def _disorder_window(t: array) -> tuple[int, int] | None:
    """The smallest [lo, hi) whose sorting sorts `t` (None when sorted), found with C-level scans."""
    n = len(t)
    first = next(compress(count(), map(operator.gt, t, islice(t, 1, None))), None)
    if first is None:
        return None
    rev = reversed(t)
    k = next(compress(count(), map(operator.lt, rev, islice(reversed(t), 1, None))))
    lo, hi = first, n - 1 - k + 1
    lowest, highest = min(islice(t, lo, hi)), max(islice(t, lo, hi))
    # t[:lo] and t[hi:] are sorted: extend the window over what must move (stably: equal times stay)
    return bisect_right(t, lowest, 0, lo), bisect_left(t, highest, hi, n)


def _merge_ranges(a: range, b: range) -> range | None:
    step = b[0] - a[-1]
    if step <= 0 or (len(a) > 1 and a.step != step) or (len(b) > 1 and b.step != step):
        return None
    return range(a[0], b[-1] + step, step)


class TraceBuilder:
    """Collects a reader's blocks into a `Trace`: share selection, origin, order checks."""

    def __init__(self, spec: Format, ctx: Context, share: tuple[int, int] | None) -> None:
        self.spec = spec
        self.ctx = ctx
        self.requested_share = share
        self.share = share if share and share[1] > 1 else None
        self.origin_first = spec.origin == "first"
        self.conv_pos = spec.columns.index("conversation_id") if "conversation_id" in spec.columns else None
        self.t = array("d")
        self.inp = array("i")
        self.out = array("i")
        self.line_parts: list[range | array] = []
        self.seen = 0  # rows received from the reader (the share key of rows without a conversation)
        self.t0: float | None = None
        self.last: float | None = None
        self.reordered = 0
        self.tmin = 0.0
        self.store: dict[str, Any] = {}
        self._interns: dict[str, dict[str, int]] = {}

    def add(self, block) -> None:
        lines, times, ins, outs, extras = block
        n = len(times)
        if not n:
            return
        if self.origin_first:
            if self.t0 is None:
                self.t0 = times[0]
            if self.t0:
                times = list(map(operator.sub, times, repeat(self.t0)))
        # order check over every row of the file (before the share), so all workers agree
        dec = sum(map(operator.gt, times, islice(times, 1, None)))
        if self.last is not None and self.last > times[0]:
            dec += 1
        if dec:
            self.reordered += dec
            self.tmin = min(self.tmin, min(times))
        self.last = times[-1]

        if self.share:
            i, k = self.share
            conv = extras[self.conv_pos] if self.conv_pos is not None else None
            if conv is None or conv.count(None) == n:
                sel = slice((i - self.seen) % k, None, k)
                lines, times, ins, outs = lines[sel], times[sel], ins[sel], outs[sel]
                extras = tuple(e[sel] for e in extras)
            else:
                base = self.seen
                crc = zlib.crc32
                mask = [(crc(c.encode()) if c is not None else base + j) % k == i for j, c in enumerate(conv)]
                lines = list(compress(lines, mask))
                times = list(compress(times, mask))
                ins = list(compress(ins, mask))
                outs = list(compress(outs, mask))
                extras = tuple(list(compress(e, mask)) for e in extras)
        self.seen += n
        if not len(times):
            return

        before = len(self.t)
        for name, values in zip(self.spec.columns, extras, strict=True):  # one extra per declared column
            self._extra(name, values, before)
        self.t.extend(times)
        self.inp.extend(ins if None not in ins else [-1 if v is None else v for v in ins])
        self.out.extend(outs if None not in outs else [-1 if v is None else v for v in outs])
        if isinstance(lines, range):
            parts = self.line_parts
            if parts and isinstance(parts[-1], range):
                merged = _merge_ranges(parts[-1], lines)
                if merged is not None:
                    parts[-1] = merged
                    return
            parts.append(lines)
        else:
            self.line_parts.append(array("I", lines))

    def _extra(self, name: str, values: Sequence, before: int) -> None:
        st = self.store.get(name)
        if st is None:
            if values.count(None) == len(values):
                return  # no values yet: the column does not exist until one shows up
            st = self.store[name] = self._new_column(name, before)
        if name in ("prompt", "messages"):
            st.extend(values)
        elif name in ("turn", "images"):
            st.extend(values if None not in values else [-1 if v is None else v for v in values])
        elif name in ("conversation_id", "model"):
            idx, distinct = st
            seen = self._interns[name]
            get = seen.get
            for v in values:
                if v is None:
                    idx.append(-1)
                    continue
                j = get(v)
                if j is None:
                    j = seen[v] = len(distinct)
                    distinct.append(v)
                idx.append(j)
        else:  # hash_ids: 4-byte ids until one does not fit, then 8-byte
            flat, off = st
            n0 = len(flat)
            try:
                flat.extend(chain.from_iterable(filter(None, values)))
            except OverflowError:
                del flat[n0:]
                flat = array("q", flat)
                flat.extend(chain.from_iterable(filter(None, values)))
                self.store[name] = st = (flat, off)
            lens = map(len, values) if None not in values else (len(v) if v else 0 for v in values)
            off.extend(islice(accumulate(lens, initial=off[-1]), 1, None))

    def _new_column(self, name: str, before: int) -> Any:
        """An empty store column, padded for the `before` rows that had no value (layouts: Trace.store)."""
        if name in ("prompt", "messages"):
            return [None] * before
        if name in ("turn", "images"):
            return array("i", [-1]) * before
        if name in ("conversation_id", "model"):
            self._interns[name] = {}
            return (array("i", [-1]) * before, [])
        if name == "hash_ids":
            return (array("i"), array("q", [0]) * (before + 1))
        raise ValueError(f"unknown trace column {name!r}")  # pragma: no cover - a format declared an unknown one

    def finish(self, *, path: str, sha256: str) -> Trace:
        n = len(self.t)
        parts = self.line_parts
        if len(parts) == 1 and isinstance(parts[0], range):
            lines: Sequence[int] = parts[0]
        elif not parts:
            lines = range(0)
        else:
            lines = array("I", chain.from_iterable(parts))
        t, inp, out, store = self.t, self.inp, self.out, self.store
        if self.reordered and n > 1:
            window = _disorder_window(t)
            if window is not None:
                lo, hi = window
                # stable sort of the rows out of place only: rows with equal times keep file order,
                # and memory grows with the disordered stretch, not with the file
                order = sorted(range(lo, hi), key=t.__getitem__)
                if not isinstance(lines, array):  # a range: made an array to be sorted in place
                    lines = array("I", lines)
                for col in (t, inp, out, lines):
                    col[lo:hi] = array(col.typecode, map(col.__getitem__, order))
                for name, st in store.items():
                    _reorder_column(name, st, order, lo, hi)
        if self.origin_first and self.tmin < 0:
            # the earliest row came later in the file: it is the trace origin
            t = array("d", map(operator.sub, t, repeat(self.tmin)))
        if "conversation_id" in store and "turn" not in store:  # derive: position in the conversation
            store["turn"] = _conversation_turns(store["conversation_id"][0])
        return Trace(
            path=path,
            format=self.spec.name,
            sha256=sha256,
            total_rows=self.seen + sum(self.ctx.skipped.values()),
            skipped=dict(self.ctx.skipped),
            reordered=self.reordered,
            block_size=self.spec.block_size or self.ctx.block_size,
            share=self.requested_share,
            arrivals=t,
            inputs=inp,
            outputs=out,
            lines=lines,
            store=store,
        )


def _reorder_column(name: str, st: Any, order: list[int], lo: int, hi: int) -> None:
    """Put rows lo..hi of one store column in `order` (finish's sort of an out-of-order stretch)."""
    if isinstance(st, list):
        st[lo:hi] = [st[j] for j in order]
    elif isinstance(st, array):
        st[lo:hi] = array(st.typecode, map(st.__getitem__, order))
    elif name == "hash_ids":
        flat, off = st
        seg = array(flat.typecode)
        lens = array("q")
        for j in order:
            seg.extend(flat[off[j] : off[j + 1]])
            lens.append(off[j + 1] - off[j])
        flat[off[lo] : off[hi]] = seg
        off[lo + 1 : hi + 1] = array("q", islice(accumulate(lens, initial=off[lo]), 1, None))
    else:
        idx = st[0]
        idx[lo:hi] = array(idx.typecode, map(idx.__getitem__, order))


def _conversation_turns(idx: array) -> array:
    """Each row's 1-based position in its conversation (-1 outside one), for traces without a turn column."""
    counts: dict[int, int] = {}
    turns = array("i")
    for j in idx:
        if j < 0:
            turns.append(-1)
        else:
            c = counts[j] = counts.get(j, 0) + 1
            turns.append(c)
    return turns
