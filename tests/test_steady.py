"""The steady window (analysis/steady.py, metrics/flow.py): found from the requests in flight, not
assumed; its ramp checked against the simulator's own log of when each request arrived and ended,
its figures without the ramp's requests; a run that never reaches its users says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from support import ROOT, read_records, run_ok
from test_metrics import make_record

from llm_locust.analysis.steady import MIN_SECONDS, TOLERANCE, closed_window, open_window, steady
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.flow import Flow
from llm_locust.metrics.records import Outcome
from llm_locust.report.accounting import count_problems
from llm_locust.report.html import render
from llm_locust.report.results import read_results
from llm_locust.schema import Steady, SteadyRates
from llm_locust.sim.process import SimProcess

# ---- the window finder on synthetic series ----


def _spans(in_flight: list[float], start: int = 1000) -> list[tuple[int, int, float, int, int]]:
    return [(start + i, 1, v, 1, 0) for i, v in enumerate(in_flight)]


def test_closed_window_is_the_seconds_at_the_target_between_ramp_and_drain():
    series = [0.5, 2.5, 4.5, 6.6, 7.9, 8.0, 7.8, 8.1, 7.7, 4.0, 0.2]
    assert closed_window(_spans(series), 8) == (1004.0, 1009.0)


def test_closed_window_takes_the_longest_run_and_a_missing_second_breaks_it():
    spans = _spans([8.0, 8.0, 3.0, 8.0, 8.0, 8.0, 8.0])
    assert closed_window(spans, 8) == (1003.0, 1007.0)
    # a second no request touched (nothing in flight) is not at the target
    gap = [(1000, 1, 8.0, 1, 0), (1001, 1, 8.0, 1, 0), (1003, 1, 8.0, 1, 0)]
    assert closed_window(gap, 8) == (1000.0, 1002.0)


def test_closed_window_none_when_never_at_the_target():
    assert closed_window(_spans([1.0, 3.0, 5.0, 7.0, 7.5]), 8) is None  # 7.5 is 6.25% under 8


def test_a_folded_row_is_read_as_its_mean():
    spans = [(0, 60, 60 * 8.0, 500, 0), (60, 1, 8.0, 9, 0), (61, 1, 2.0, 1, 0)]
    assert closed_window(spans, 8) == (0.0, 61.0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=12, allow_nan=False), min_size=1, max_size=40), st.integers(1, 10))
def test_closed_window_is_the_longest_run_within_tolerance(values, target):
    got = closed_window(_spans(values), target)
    ok = [abs(v - target) <= TOLERANCE * target for v in values]
    runs, i = [], 0
    while i < len(ok):  # brute force: every maximal run of seconds at the target
        if ok[i]:
            j = i
            while j + 1 < len(ok) and ok[j + 1]:
                j += 1
            runs.append((i, j + 1))
            i = j + 1
        else:
            i += 1
    if not runs:
        assert got is None
        return
    best = max(runs, key=lambda r: (r[1] - r[0], -r[0]))
    assert got == (1000.0 + best[0], 1000.0 + best[1])


def test_open_window_is_the_sends_on_schedule_trimmed_to_the_sends():
    # (start, width, busy, sent, late): late sends in the first two seconds, none sent in the last two
    spans = [(0, 1, 1.0, 10, 5), (1, 1, 1.0, 10, 1), (2, 1, 1.0, 10, 0), (3, 1, 1.0, 20, 1), (5, 1, 1.0, 10, 0)]
    spans += [(6, 1, 1.0, 0, 0), (7, 1, 0.5, 0, 0)]
    # second 1: 1 late of 10 is over 5%; second 3: 1 of 20 is within; second 4 (absent) sent nothing
    assert open_window(spans) == (2.0, 6.0)
    assert open_window([(0, 1, 1.0, 10, 10)]) is None


def test_flow_counts_time_in_flight_per_second_and_merges_exactly():
    a, b, one = Flow(), Flow(), Flow()
    reqs = [(100.25, 102.75, False), (100.5, 100.75, True), (101.0, 101.0, False), (103.9, 104.1, False)]
    for i, r in enumerate(reqs):
        (a if i % 2 else b).add(*r)
        one.add(*r)
    a.merge_wire(b.to_wire())
    assert sorted(a.rows.items()) == sorted(one.rows.items())
    got = {s: (round(busy, 6), sent, late) for s, _, busy, sent, late in one.spans()}
    assert got == {100: (1.0, 2, 1), 101: (1.0, 1, 0), 102: (0.75, 0, 0), 103: (0.1, 1, 0), 104: (0.1, 0, 0)}


def test_a_steady_section_whose_parts_miss_a_request_is_a_count_problem():
    summary = {"sent": 10, "finished": 10, "ok": 10, "failed": 0, "cancelled": 0, "lost": 0}
    steady = {"found": True, "ramp": {"requests": 3}, "window": {"requests": 6}, "drain": {"requests": 1}}
    assert count_problems({"summary": summary, "steady": steady}) == []
    steady["drain"] = {"requests": 0}
    assert count_problems({"summary": summary, "steady": steady}) == [
        "steady: ramp 3 + window 6 + drain 0 != finished 10"
    ]


def _ramped_closed_loop() -> Aggregate:
    """4 users started 1 s apart, each sending back to back requests of 0.5 s until t = 10."""
    agg = Aggregate()
    for user in range(4):
        t = float(user)
        while t < 10.0 - 1e-9:
            agg.add(make_record(t0=t, ttft=0.2, gaps=(0.1, 0.1, 0.099), ntoks=(1, 1, 1, 1)))
            t += 0.5
    return agg


def test_steady_of_a_ramped_closed_loop_leaves_the_ramp_out():
    agg = _ramped_closed_loop()
    doc = steady(agg.flow, agg.sent_blocks, agg.first_sent, agg.last_end, "closed", 4)
    assert doc["found"] and doc["headline"] == "whole run" and doc["target"] == 4
    w = doc["window"]
    assert (w["start"] - 1_700_000_000, w["end"] - 1_700_000_000) == (3.0, 10.0)
    assert doc["ramp"] == {"seconds": 3.0, "requests": 6 + 4 + 2}  # users 0, 1, 2 before the 4th started
    assert w["requests"] == doc["figures"]["ok"] == 4 * 14 and doc["drain"] == {"seconds": 0.0, "requests": 0}
    f = doc["figures"]
    assert f["latency"]["e2e"]["p50"] == pytest.approx(0.5, rel=1e-3)
    assert f["rates"]["requests_per_s"] == pytest.approx(56 / 7)
    assert f["intervals"]["rates"]["requests_per_s"]["low"] is not None
    assert f["intervals"]["blocks"] * f["intervals"]["block_s"] == pytest.approx(7.0)  # over the window's 7 s
    # the section as the schema types it: its rates are every rate of metrics.blocks RATES
    TypeAdapter(Steady).validate_python(doc, strict=True)
    assert set(f["rates"]) == set(SteadyRates.__annotations__)
    # judged against 3 users, only second 2 (3 in flight) is steady: shorter than MIN_SECONDS
    three = steady(agg.flow, agg.sent_blocks, agg.first_sent, agg.last_end, "closed", 3)
    assert not three["found"] and "lasted 1.0 s, under 2 s" in three["reason"]


def test_the_window_ends_before_the_first_send_the_stop_cut():
    """4 users sending back to back requests of 0.5 s from t = 0.25 until a stop at t = 10 that
    cuts the requests sent at 9.75. In flight stays at 4 until the stop, so the window ran to
    t = 10, and those cut requests, counted nowhere, were sent in it: its figures read low by
    however many the stop happened to cut (30 8-s simulator runs: its output tokens/s spread by
    3.2%). It now ends where the second that sent the first cut request begins, t = 9."""
    agg = Aggregate()
    for _user in range(4):
        t = 0.25
        while t < 9.7:
            agg.add(make_record(t0=t, ttft=0.2, gaps=(0.1, 0.1, 0.099), ntoks=(1, 1, 1, 1)))
            t += 0.5
        agg.add(make_record(t0=9.75, ttft=0.2, gaps=(0.049,), ntoks=(1, 1), outcome=Outcome.CANCELLED))
    doc = steady(agg.flow, agg.sent_blocks, agg.first_sent, agg.last_end, "closed", 4)
    base = 1_700_000_000
    assert doc["found"] and (doc["window"]["start"] - base, doc["window"]["end"] - base) == (1.0, 9.0)
    assert doc["window"]["requests"] == doc["figures"]["ok"] == 4 * 16  # sent at 1.25 .. 8.75
    assert doc["drain"] == {"seconds": pytest.approx(1.0), "requests": 4 * 2}  # sent at 9.25 (ok) and 9.75 (cut)
    assert doc["figures"]["rates"]["requests_per_s"] == pytest.approx(64 / 8)
    assert doc["figures"]["intervals"]["rates"]["requests_per_s"]["low"] is not None


@pytest.mark.parametrize(
    ("mode", "think", "why"),
    [("ladder", 0.0, "not assessed for a ladder"), ("closed", 1.0, "not assessed with think time")],
)
def test_steady_is_not_assessed_where_the_rule_does_not_apply(mode, think, why):
    agg = _ramped_closed_loop()
    doc = steady(agg.flow, agg.sent_blocks, agg.first_sent, agg.last_end, mode, 4, think)
    assert not doc["found"] and doc["reason"].startswith(why) and doc["window"] is None


# ---- against the simulator ----


def _sim_ramp(token_log: Path, users: int) -> tuple[float, float]:
    """From the simulator's log: (its first arrival, how long until the requests it held first
    reached the target (TOLERANCE under the users)), on its clock (perf_counter)."""
    events = []
    for line in token_log.read_text().splitlines():
        d = json.loads(line)
        end = d["t_tokens"][-1] if d["t_tokens"] else d["t_recv"]
        events += [(d["t_recv"], 1), (end, -1)]
    events.sort()
    n, first = 0, events[0][0]
    for t, k in events:
        n += k
        if n >= (1 - TOLERANCE) * users:
            return first, t - first
    raise AssertionError("the simulator never held the users' requests at once")


def _run(tmp_path: Path, users: int, rate: str, run_time: str, *extra: str) -> tuple[dict, list[dict], Path, str]:
    log = tmp_path / "tokens.jsonl"
    with SimProcess(slots=32, iter_base=0.006, iter_per_seq=0.0003, token_log=str(log)) as sim:
        p = run_ok(
            "--host",
            sim.url,
            "-u",
            str(users),
            "-r",
            rate,
            "-t",
            run_time,
            "--max-tokens-cap",
            "40",
            "--results",
            str(tmp_path / "r.json"),
            "--record-log",
            str(tmp_path / "records.jsonl"),
            *extra,
            timeout=120,
        )
    r = json.loads((tmp_path / "r.json").read_text())
    return r, read_records(tmp_path / "records.jsonl"), log, p.stdout


def _check_window(r: dict, recs: list[dict], log: Path, users: int) -> dict:
    """The ramp against the simulator's log, and the window's counts against the record log."""
    s = r["steady"]
    assert s["found"] and s["headline"] == "whole run", s["reason"]
    w, ramp, drain = s["window"], s["ramp"], s["drain"]
    first_sent = min(x["wall_sent"] for x in recs)
    assert abs(w["start"] - ramp["seconds"] - first_sent) < 1e-6
    # the ramp as the server saw it: from its first arrival until it first held the users'
    # requests. The window starts on a whole wall second whose mean in flight is within 5%: the
    # second in which the last user started counts when that user missed at most 0.05 * users of
    # it (0.4 s for 8 users), else the next one does. So the reported ramp lies within
    # [-0.05 * users, +1] s of the server's, plus the server's own view (a request is in flight
    # there from its arrival to its last token, and a user's next request arrives a few ms after
    # its last ended): tolerance [-0.05 * users - 0.2 s, +1.1 s]
    _, sim_ramp = _sim_ramp(log, users)
    assert -TOLERANCE * users - 0.2 <= ramp["seconds"] - sim_ramp <= 1.1, (ramp, sim_ramp)
    # every request counted once in ramp, window or drain: by its send time, whatever its outcome
    start, end = w["start"], w["end"]
    in_ramp = [x for x in recs if x["wall_sent"] < start]
    in_window = [x for x in recs if start <= x["wall_sent"] < end]
    assert ramp["requests"] == len(in_ramp) and w["requests"] == len(in_window), (ramp, w)
    assert ramp["requests"] + w["requests"] + drain["requests"] == len(recs) == r["summary"]["finished"]
    # none of the window's requests was cut by the stop: they would count nowhere (before_cut)
    assert not [x for x in in_window if x["outcome"] == "cancelled"], w
    # the window's figures are those of the ok requests sent in it: the ramp's are not in them
    ok_in = [x for x in in_window if x["outcome"] == "ok"]
    ok_ramp = sum(1 for x in in_ramp if x["outcome"] == "ok")
    assert s["figures"]["ok"] == len(ok_in) <= r["summary"]["ok"] - ok_ramp
    assert ok_ramp or ramp["seconds"] <= 0.05  # a ramp of more than 50 ms holds some of the users' first requests
    ttft = sorted(x["first"] for x in ok_in)
    p50 = s["figures"]["latency"]["ttft"]["p50"]
    assert abs(p50 - ttft[max(int(0.5 * len(ttft) + 0.5), 1) - 1]) <= 0.001 * p50 + 1e-6  # the HDR bucket's
    assert s["figures"]["intervals"] is not None
    # the in-flight series is the run's: at the target over the window
    inside = [v for sec, v in s["in_flight"] if start <= sec < end]
    assert inside and all(abs(v - users) <= TOLERANCE * users for v in inside)
    return s


@pytest.mark.timing  # the client keeps its users' requests in flight within 5%
def test_all_users_at_once_ramp_matches_the_simulators_log_and_is_left_out(tmp_path):
    """All users started at once (-r well above -u): the ramp is under a second and holds every
    user's first request (lock-step), which the window's figures leave out."""
    users = 8
    r, recs, log, out = _run(tmp_path, users, "100", "8s")
    s = _check_window(r, recs, log, users)
    assert s["ramp"]["seconds"] <= 1.1
    if s["ramp"]["seconds"] > 0.05:  # a run that started within 50 ms of a whole second has no ramp to see
        firsts = sorted(x["wall_sent"] for x in recs)[:users]
        assert all(t < s["window"]["start"] for t in firsts)
    out = " ".join(out.split())  # the summary is wrapped to the terminal's width
    page = render(read_results(tmp_path / "r.json"))  # the report: the window beside the whole run
    assert "id='steady'" in page and f"steady window ({s['figures']['ok']} ok)" in page
    assert "steady: " in out and f"ramp {s['ramp']['seconds']:.1f} s ({s['ramp']['requests']} requests)" in out


@pytest.mark.timing  # the client keeps its users' requests in flight within 5%
def test_a_slow_spawn_ramp_matches_the_simulators_log(tmp_path):
    """Users started 2 a second: the ramp is the seconds the spawning took, as the server saw it."""
    users = 8
    r, recs, log, _ = _run(tmp_path, users, "2", "10s")
    s = _check_window(r, recs, log, users)
    assert s["ramp"]["seconds"] >= 2.5  # Locust starts 2 users a second: the last of 8 after 3 s


def test_a_run_that_never_reaches_its_users_says_it_has_no_steady_window(tmp_path):
    r, recs, _, out = _run(tmp_path, 20, "2", "4s")  # 20 users at 2/s: 8 started when it ends
    s = r["steady"]
    assert not s["found"] and s["window"] is None and s["figures"] is None
    assert "never came within 5% of 20 users" in s["reason"]
    assert max(v for _, v in s["in_flight"]) < 19
    assert "steady: no steady window" in " ".join(out.split())
    assert "never came within 5% of 20 users" in render(read_results(tmp_path / "r.json"))
    assert MIN_SECONDS > 0 and len(recs) == r["summary"]["finished"]


@pytest.mark.timing  # the client keeps its users' requests in flight within 5%
def test_the_master_finds_the_window_from_its_workers_merged_series(tmp_path):
    """Two worker processes, each with half the users: neither one's series is at the target;
    the master's merge is, and its window's counts are those of both workers' record logs."""
    users = 8
    r, recs, log, _ = _run(tmp_path, users, "100", "8s", "--workers", "2")
    assert len(r["workers"]) == 2 and len({x["id"] for x in recs}) == len(recs)
    _check_window(r, recs, log, users)


@pytest.mark.timing  # the sends after the burst keep their schedule within 50 ms
def test_an_open_loop_window_starts_once_the_sends_keep_their_schedule(tmp_path):
    """A replay whose first 16 requests are due at once behind --max-in-flight 2 (sent late,
    held), then 16 due 0.25 s apart that the server keeps up with: the window starts after the
    late ones, and no late send is in it."""
    trace = tmp_path / "t.jsonl"
    due = [0.0] * 16 + [2.5 + 0.25 * i for i in range(16)]
    trace.write_text("".join(json.dumps({"timestamp": t, "input_tokens": 3, "output_tokens": 5}) + "\n" for t in due))
    results, log = tmp_path / "r.json", tmp_path / "records.jsonl"
    with SimProcess(slots=64, iter_base=0.02, iter_per_seq=0) as sim:
        run_ok(
            "-f", str(ROOT / "locustfiles" / "replay.py"), "--host", sim.url, "-u", "1", "-r", "10", "-t", "2m",
            "--trace", str(trace), "--max-in-flight", "2", "--api", "openai-completions",
            "--results", str(results), "--record-log", str(log), timeout=120,
        )  # fmt: skip
    r, recs = json.loads(results.read_text()), read_records(log)
    s = r["steady"]
    assert s["mode"] == "replay" and s["found"], s["reason"]
    late = [x for x in recs if -x["sched"] > 0.050]  # sent over 50 ms after its due time
    assert len(late) >= 8  # the burst behind the cap of 2
    w = s["window"]
    assert all(x["wall_sent"] < w["start"] for x in late), (w, sorted(x["wall_sent"] for x in late)[-3:])
    inside = [x for x in recs if w["start"] <= x["wall_sent"] < w["end"]]
    assert s["ramp"]["requests"] >= len(late) and w["requests"] == len(inside) >= 8
    assert s["ramp"]["requests"] + w["requests"] + s["drain"]["requests"] == len(recs) == 32
