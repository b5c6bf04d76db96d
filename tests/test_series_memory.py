"""Issue 24 item 27: the per-second series stay bounded however long the run.

Every Aggregate kept a per-second TTFT/ITL series (20 KB a second at 50 requests/s) and a
per-second token/request series for the whole run: memory grew with the run's length. Seconds
older than a horizon are now folded into minute buckets, themselves widened past a cap
(metrics/timeseries.py Timeline); what the soak verdict, the ladder's step rates and the report
read must still be there.
"""

from __future__ import annotations

import random

import pytest

from llm_locust.analysis.stability import soak
from llm_locust.analysis.steps import steady_counts
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.records import RequestRecord
from llm_locust.metrics.timeseries import LatencySeries

T0 = 1_800_000_000  # a wall-clock second on a minute boundary (T0 % 3600 == 0)


def _record(i: int, sent: float, ttft: float, gaps: list[float]) -> RequestRecord:
    times = [sent + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(
        request_id=str(i),
        api="openai-completions",
        t_sched=sent,
        t_sent=sent,
        wall_sent=sent,  # perf_counter = wall clock here
        t_first=times[0],
        t_end=times[-1],
        chunk_times=times,
        chunk_tokens=[1] * len(times),
        n_out=len(times),
        n_out_source="usage",
    )


def _long_run(hours: float, every: float = 5.0, drift_per_hour: float = 0.0) -> Aggregate:
    """One request every `every` s over `hours` h; TTFT ~100 ms growing by `drift_per_hour`."""
    agg, rng = Aggregate(), random.Random(3)
    n = int(hours * 3600 / every)
    for i in range(n):
        sent = T0 + i * every
        ttft = 0.1 * (1 + drift_per_hour * i * every / 3600) * (1 + 0.05 * rng.random())
        agg.add(_record(i, sent, ttft, [0.02 + 0.01 * rng.random() for _ in range(7)]))
    return agg


def test_a_long_run_holds_a_bounded_number_of_seconds():
    agg = _long_run(30.0, every=30.0)  # 30 h, a request every 30 s: 3,600 requests
    ttft_keys, itl_keys = (len(agg.by_sent.data[m]) for m in ("ttft", "itl"))
    # the old code kept a key and a row for every second with a request: 3,600 of each
    assert ttft_keys < 300 and itl_keys < 300 and len(agg.series) < 1_000, (ttft_keys, itl_keys, len(agg.series))
    tl = agg.by_sent.timeline
    assert ttft_keys <= tl.fine / 30 + 2 + tl.max_coarse, ttft_keys
    assert itl_keys <= tl.fine / 30 + 2 + tl.max_coarse, itl_keys
    assert tl.width >= 240  # 30 h of minutes folded past the cap: 8-minute buckets
    assert len(agg.series) <= agg.series.timeline.fine + 60 + agg.series.timeline.max_coarse  # old: 30 h of seconds
    # nothing is lost by folding: every sample and every token is still counted
    assert agg.by_sent.count("ttft", T0, T0 + 31 * 3600) == 3_600
    assert agg.by_sent.count("itl", T0, T0 + 31 * 3600) == 3_600 * 7
    assert sum(r[0] for r in agg.series.values()) == agg.tokens_out == 3_600 * 8
    assert sum(r[1] for r in agg.series.values()) == 3_600


def test_the_soak_verdict_reads_a_folded_run_on_its_grid():
    drifting = _long_run(6.0, every=10.0, drift_per_hour=0.2)  # TTFT +20%/h over 6 h
    flat = _long_run(6.0, every=10.0)
    end = T0 + 6 * 3600
    d = soak(drifting.by_sent, drifting.series, T0, end, window=60)
    f = soak(flat.by_sent, flat.series, T0, end, window=60)
    assert d["window_asked"] == 60 and d["window"] >= 60 and d["window"] % 60 == 0
    assert d["windows"] >= 6 * 3600 / d["window"] - 2
    rel = d["ttft_drift"]["relative_per_hour"]
    assert 0.08 < rel < 0.2, rel  # +20%/h of the first hour's TTFT: ~+11%/h of the mean
    assert not d["passed"] and "ttft p50 drifts" in d["reason"]
    assert abs(f["ttft_drift"]["relative_per_hour"]) < 0.02 and f["passed"], f["reason"]
    assert all(r["ok"] == d["window"] / 10 for r in d["rows"][:-1])  # each window counts its requests once


def test_a_step_window_reads_folded_rows_by_their_share():
    agg = _long_run(8.0, every=10.0)  # a request every 10 s: 8 tokens each
    tl = agg.series.timeline
    assert tl.folded is not None and tl.folded > T0 + 3600  # the first hours are folded
    tokens, ok, failed, seconds, *_ = steady_counts(agg.series, T0 + 600.5, T0 + 1800.5)  # inside folded rows
    assert seconds == 1200
    assert tokens == pytest.approx(120 * 8, rel=0.01) and ok == pytest.approx(120, rel=0.01) and failed == 0
    recent = steady_counts(agg.series, T0 + 7.5 * 3600, T0 + 7.5 * 3600 + 100)  # still second by second
    assert recent[0] == 80 and recent[1] == 10


def test_merged_workers_fold_like_one_process():
    """The master merges its workers' deltas second by second; folded alike, the windows on the
    folded grid read the same counts as one process that saw every request."""
    one, master = Aggregate(), Aggregate()
    rng = random.Random(5)
    deltas = [Aggregate(), Aggregate()]
    for i in range(1800):  # 2.5 h, two workers, reports every 30 requests
        rec = _record(i, T0 + i * 5, 0.1 + 0.1 * rng.random(), [0.02, 0.03])
        one.add(rec)
        deltas[i % 2].add(rec)
        if i % 30 == 29:
            for k, d in enumerate(deltas):
                master.merge_wire(d.to_wire())
                deltas[k] = Aggregate()
    for d in deltas:
        master.merge_wire(d.to_wire())
    w = one.by_sent.timeline.width
    for start in range(T0, T0 + 9000, 600):
        for m in ("ttft", "itl"):
            assert master.by_sent.counts(m, start, start + 600) == one.by_sent.counts(m, start, start + 600), (m, start)
    assert master.series == one.series and w == master.by_sent.timeline.width


def test_a_timeline_folds_only_past_its_horizon():
    from llm_locust.metrics.timeseries import Timeline

    tl = Timeline(fine=100, width=10, max_coarse=3)
    assert tl.key(5) == 5 and not tl.note(1000) and tl.folded is None
    assert tl.note(1000 + 100 + 60)  # 60 s past the horizon: fold
    table = {s: 1 for s in range(1000, 1161)}
    tl.fold([table], lambda t, k, v: t.__setitem__(k, t.get(k, 0) + v))
    assert tl.folded == 1060 and sum(table.values()) == 161
    assert tl.width == 20 and sorted(k for k in table if k < 1060) == [1000, 1020, 1040]  # 6 buckets of 10 > 3
    assert tl.key(1003) == 1000 and tl.key(1059) == 1040 and tl.key(1060) == 1060


def test_late_samples_of_a_folded_second_land_in_its_bucket():
    s = LatencySeries(fine=100)
    for k in range(400):
        s.record("ttft", T0 + k, 0.1)
    assert s.timeline.folded is not None
    s.record("ttft", T0 + 5, 0.2)  # a request sent long ago, finished now
    assert s.count("ttft", T0, T0 + 60) == 61
    assert s.percentile("ttft", 100, T0, T0 + 60) == pytest.approx(0.2, rel=0.005)


def test_the_report_spreads_a_folded_row_over_its_seconds():
    """The results' series keeps a folded row as [first second, tokens, ok, failed, width]: the
    report's per-second plot spreads it evenly over its seconds (up to the next row), not as one
    second holding a minute's tokens."""
    from llm_locust.report.html import _per_second

    rows = [[T0, 600, 60, 0, 60], [T0 + 60, 10, 1, 0]]
    by_sec = _per_second(rows)
    assert sorted(by_sec) == list(range(T0, T0 + 61))
    assert all(by_sec[s][1:] == (10.0, 1.0, 0.0) for s in range(T0, T0 + 60))
    assert by_sec[T0 + 60][1:] == (10, 1, 0)
    cut = _per_second([[T0, 600, 60, 0, 60], [T0 + 30, 5, 0, 1]])  # the next row starts inside: spread to it
    assert sorted(cut) == list(range(T0, T0 + 31)) and cut[T0][1] == 20.0
