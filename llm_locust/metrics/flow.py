"""Requests in flight and sends against their schedule, by the wall-clock second: what the steady
window is found from (analysis/steady.py).

    f = Flow()
    f.add(wall_sent, wall_end, late)   # one finished request (any outcome)
    f.spans()                          # [(start, width, busy_s, sent, late), ...] by start

Per wall second s a row [busy_us, sent, late]: busy_us the microseconds requests spent in flight
within [s, s + 1) summed over requests (so busy_us / 1e6 is the time-averaged number of requests in
flight during that second), sent the requests sent in it, late those of them sent more than
LATE_S after their due time (t_sent - t_sched). A request is counted once it has finished, in
every second it spanned. Integers only: a master's merge of its workers' flows (adding rows) is
exactly the flow one process would have kept.

Bounded as Aggregate.series is (metrics/timeseries.py Timeline): seconds older than
SERIES_FINE_SECONDS (6 h) behind the newest are folded into wider rows, which carry their width
as a 4th item.
"""

from __future__ import annotations

import math
from typing import Any

from llm_locust.metrics.timeseries import SERIES_FINE_SECONDS, Timeline

# a send later than this after its due time (s) did not keep its schedule; the client-validity
# check's limit on the send delay's p99 (metrics/aggregate.py SEND_DELAY_LIMIT) is the same 50 ms
LATE_S = 0.050


def _add_row(table: dict[int, list[int]], key: int, row: list[int]) -> None:
    mine = table.get(key)
    if mine is None:
        table[key] = row[:3]
        return
    for i in range(3):
        mine[i] += row[i]


class Flow:
    __slots__ = ("rows", "timeline")

    def __init__(self, fine: int = SERIES_FINE_SECONDS) -> None:
        self.rows: dict[int, list[int]] = {}
        self.timeline = Timeline(fine)

    def _row(self, second: int) -> list[int]:
        tl = self.timeline
        if tl.note(second):
            tl.fold((self.rows,), _add_row)
        key = tl.key(second)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0, 0, 0]
        return row

    def add(self, wall_sent: float, wall_end: float, late: bool) -> None:
        """One finished request: its send second's counts, and its time in flight in every second
        it spanned (most requests span one to a few)."""
        row = self._row(math.floor(wall_sent))
        row[1] += 1
        if late:
            row[2] += 1
        end = max(wall_end, wall_sent)
        s = math.floor(wall_sent)
        while s < end:
            us = round((min(end, s + 1) - max(wall_sent, s)) * 1e6)
            if us > 0:
                self._row(s)[0] += us
            s += 1

    @property
    def empty(self) -> bool:
        return not self.rows

    def to_wire(self) -> list[list[int]]:
        return [[s, *row] for s, row in self.rows.items()]

    def merge_wire(self, wire: list[list[int]] | None) -> None:
        """Add another flow's to_wire (a folded row goes to the key its first second maps to)."""
        for s, busy, sent, late, *_width in wire or ():
            row = self._row(int(s))
            row[0] += busy
            row[1] += sent
            row[2] += late

    def spans(self) -> list[tuple[int, int, float, int, int]]:
        """(start, width, busy seconds, sent, late) of every row, by start; width 1 for a second,
        the bucket's for a folded row."""
        tl = self.timeline
        folded = tl.folded
        out = []
        for s in sorted(self.rows):
            busy, sent, late = self.rows[s]
            width = 1 if folded is None or s >= folded else min(tl.width, folded - s)
            out.append((s, width, busy / 1e6, sent, late))
        return out

    def to_doc(self) -> list[Any]:
        """[[second, mean in flight], ...] (2 decimals) for the results' `steady.in_flight`."""
        return [[s, round(busy / w, 2)] for s, w, busy, _, _ in self.spans()]
