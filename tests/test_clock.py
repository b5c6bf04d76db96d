"""One clock across hosts (loop/clock.py): the NTP-style estimate on synthetic round trips, and
a real master with 2 real workers, one of whose wall clock reads 200 ms ahead (the test-only hook
LLM_LOCUST_TEST_CLOCK_SHIFT), replaying a trace: on schedule to a few milliseconds and its
per-second series as one clock would have placed them; with the alignment off
(LLM_LOCUST_TEST_CLOCK_ALIGN=0) the same checks fail.

The shifted worker runs in a network namespace of its own (as on another host: `ip netns`, a veth
pair this test makes, private addresses on it; the master and the simulator listen on the host's
end). The true clock is perf_counter: the kernel's monotonic clock, one for every process of the
machine and untouched by the hook."""

import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from support import Cluster, free_port, missing, need_binary, read_jsonl

from llm_locust.loop import clock
from llm_locust.loop.clock import ClockSync, RoundTrip, estimate
from llm_locust.settings import derive
from llm_locust.sim.process import SimProcess

ROOT = Path(__file__).resolve().parents[1]
REPLAY = str(ROOT / "locustfiles" / "replay.py")
SHIFT = 0.2  # s the shifted worker's wall clock reads ahead
SCHEDULE_TOLERANCE = 0.003  # s: "within a few milliseconds of the trace"


def trip(theta: float, up: float, down: float, t1: float = 100.0, hold: float = 0.0) -> RoundTrip:
    """A round trip to a master whose clock is `theta` ahead, `up` s to it and `down` s back."""
    t2 = t1 + up + theta
    return RoundTrip(t1, t2, t2 + hold, t1 + up + hold + down)


def test_one_round_trip_gives_its_midpoint_within_half_its_delay():
    """Symmetric delays: exact; the uncertainty is half the time on the wire (the hold is not)."""
    est = estimate([trip(0.2, 0.001, 0.001, hold=0.05)])
    assert est is not None
    assert est.offset_s == pytest.approx(0.2, abs=1e-9)
    assert est.uncertainty_s == pytest.approx(0.001, abs=1e-9)
    assert est.rtt_s == pytest.approx(0.002, abs=1e-9)


def test_the_fastest_round_trips_decide_and_their_overlap_narrows_it():
    """Slow round trips (a busy loop: 40 ms one way) are left out; two fast ones with their delay
    on opposite sides bound the offset more tightly than either alone."""
    theta = -0.0375
    slow = [trip(theta, 0.040, 0.001, t1=100 + k) for k in range(6)]
    fast = [trip(theta, 0.0004, 0.0001, t1=110.0), trip(theta, 0.0001, 0.0004, t1=111.0)]
    est = estimate(slow + fast, fastest=2)
    assert est is not None
    assert abs(est.offset_s - theta) <= est.uncertainty_s + 1e-12
    assert est.uncertainty_s == pytest.approx(0.0001, abs=1e-9)  # the overlap: 0.2 ms wide
    assert est.samples == 8


def test_round_trips_that_do_not_overlap_fall_back_to_the_fastest():
    """The clocks moved apart between round trips (drift, a step): the fastest alone decides."""
    est = estimate([trip(0.010, 0.0002, 0.0002), trip(0.030, 0.0005, 0.0005)])
    assert est is not None
    assert est.offset_s == pytest.approx(0.010, abs=1e-9)
    assert est.uncertainty_s == pytest.approx(0.0002, abs=1e-9)


def test_no_usable_round_trip_gives_no_estimate():
    assert estimate([]) is None
    assert estimate([RoundTrip(10.0, 5.0, 5.0, 9.0)]) is None  # negative delay: a clock stepped


def test_a_round_trip_is_flagged_above_the_bound():
    wide = estimate([trip(0.0, 0.006, 0.006)])
    narrow = estimate([trip(0.0, 0.0004, 0.0004)])
    assert wide is not None and narrow is not None
    assert wide.as_dict(aligned=True)["flagged"] and wide.uncertainty_s > clock.BOUND_S
    assert not narrow.as_dict(aligned=True)["flagged"]


def test_a_worker_applies_the_offset_its_round_trips_give(monkeypatch):
    """ClockSync: ping, the master's answer (clock.answer, on a clock 0.25 s ahead), pong; the
    offset is applied to master_time, unless alignment is off (then only reported)."""
    real = time.time
    for aligned in (True, False):
        sync = ClockSync(aligned=aligned)
        assert sync.offset == 0.0 and sync.figures() is None
        for _ in range(3):
            ping = sync.ping()
            monkeypatch.setattr(time, "time", lambda: real() + 0.25)
            pong = clock.answer(ping)
            monkeypatch.setattr(time, "time", real)
            assert sync.pong(pong)
        assert not sync.pong(pong)  # an answer twice: not a round trip
        figures = sync.figures()
        assert figures is not None and figures["samples"] == 3 and figures["aligned"] is aligned
        assert abs(figures["offset_s"] - 0.25) <= figures["uncertainty_s"] + 1e-6
        assert sync.offset == (pytest.approx(0.25, abs=0.01) if aligned else 0.0)
        assert sync.master_time() - real() == pytest.approx(0.25 if aligned else 0.0, abs=0.01)


def test_the_test_hook_shifts_the_wall_clock_only(monkeypatch, caplog):
    """LLM_LOCUST_TEST_CLOCK_SHIFT: time.time reads ahead, perf_counter does not; not a number: one
    line, no shift."""
    monkeypatch.setattr(time, "time", time.time)  # restored after the test
    monkeypatch.setenv(clock.SHIFT_ENV, "soon")
    assert clock.apply_test_shift() == 0.0
    assert "is not a number of seconds" in caplog.text
    monkeypatch.setenv(clock.SHIFT_ENV, "1.5")
    assert clock.apply_test_shift() == 1.5
    wall, perf = time.time() - time.perf_counter(), clock._real_time() - time.perf_counter()
    assert wall - perf == pytest.approx(1.5, abs=0.01)


def test_the_master_keeps_each_workers_clock_and_says_once_when_it_is_too_uncertain(caplog):
    """MasterHub._note_clock (the master, at each report): the worker's clock (results
    workers[i].clock, and the summary's line for a flagged one); one warning when its uncertainty
    passes the bound, not one per report."""
    from locust.env import Environment

    from llm_locust.runtime.hub import MasterHub, WorkerState

    h, w = MasterHub(Environment()), WorkerState("w-a", 1)
    wide = estimate([trip(0.03, 0.006, 0.006)])
    assert wide is not None
    for _ in range(3):
        h._note_clock(w, wide.as_dict(aligned=True))
    assert w.clock["flagged"] and w.clock["offset_s"] == 0.03
    assert caplog.text.count("its clock is known to the master's within 6.0 ms only (bound 5.0 ms)") == 1
    from llm_locust.report.outcome import worker_lines

    lines = worker_lines([{"index": 1, "clock": w.clock}], None)
    assert lines == ["worker 1's clock is known to the master's within 6.0 ms only (bound 5 ms): its share of a "
                     "replay may be sent off schedule by as much"]  # fmt: skip


def test_the_sample_plan_replays_over_two_workers():
    """plans/replay-workers.yaml: a replay by two worker processes (each aligned to the master)."""
    s = derive.resolve(derive.load_plan(ROOT / "plans" / "replay-workers.yaml"))
    assert (s.replay, s.workers, s.speed, s.duration) == (True, 2, 2.0, 30.0)
    assert Path(s.trace_path).is_file()


# ---- a real master and two real workers, one of them 200 ms ahead -----------------------------


def _trace(path: Path) -> list[float]:
    """180 records over 7.2 s (a prime-ish step: they fall anywhere within their seconds)."""
    times = [round(k * 0.0401, 4) for k in range(180)]
    path.write_text("".join(json.dumps({"timestamp": t, "input_tokens": 8, "output_tokens": 6}) + "\n" for t in times))
    return times


class _Netns:
    """A network namespace with a veth pair to this one: HOST_IP here, 10.231.N.2 there (N from
    the pid, so that runs beside each other do not collide). Removed on exit, whatever happened."""

    def __init__(self) -> None:
        n = os.getpid() % 250 + 1
        self.name, self.host_ip, self.ns_ip = f"llt-clock-{os.getpid()}", f"10.231.{n}.1", f"10.231.{n}.2"
        self.veth = f"llth{os.getpid() % 100000}"

    def __enter__(self) -> "_Netns":
        ip = need_binary("ip", "apt-get install -y iproute2")
        steps = [
            [ip, "netns", "add", self.name],
            [ip, "link", "add", self.veth, "type", "veth", "peer", "name", self.veth + "w"],
            [ip, "link", "set", self.veth + "w", "netns", self.name],
            [ip, "addr", "add", f"{self.host_ip}/30", "dev", self.veth],
            [ip, "link", "set", self.veth, "up"],
            [ip, "netns", "exec", self.name, ip, "addr", "add", f"{self.ns_ip}/30", "dev", self.veth + "w"],
            [ip, "netns", "exec", self.name, ip, "link", "set", self.veth + "w", "up"],
            [ip, "netns", "exec", self.name, ip, "link", "set", "lo", "up"],
        ]
        for cmd in steps:
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                self.__exit__()
                missing(f"a network namespace for the shifted worker: {' '.join(cmd)}: {p.stderr.strip()} (root?)")
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)  # its peer goes with it
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]


class _ShiftedCluster(Cluster):
    """support.Cluster whose workers get their own environment (one of them the clock hook) and
    may run in a network namespace (`prefix`), reaching the master at `master_host`."""

    master_host = "127.0.0.1"

    def add_worker(
        self, env: dict | None = None, log: Path | None = None, prefix: list[str] | None = None
    ) -> subprocess.Popen:
        out = open(log, "w") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - the worker writes it
        worker = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "locust", "-f", self.locustfile, "--worker",
             "--master-host", self.master_host, "--master-port", self.master_port],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        self.workers.append(worker)
        return worker


def _run(tmp: Path, host: str, align: bool, ns: _Netns) -> tuple[dict, dict[int, list[dict]], list[float], int]:
    """The replay over two workers, the second SHIFT ahead and in its own network namespace:
    (results, records by worker pid, trace times, the shifted worker's pid)."""
    tmp.mkdir()
    results, records, trace = tmp / "results.json", tmp / "records.jsonl", tmp / "trace.jsonl"
    times = _trace(trace)
    flags = {clock.ALIGN_ENV: "1" if align else "0"}
    master = ("--expect-workers", "2", "-u", "2", "-r", "10", "-t", "2m", "--host", host, "--trace", str(trace))
    master += ("--max-tokens-cap", "6", "--results", str(results), "--record-log", str(records))
    master += ("--master-bind-host", ns.host_ip)  # the host's end of the veth: both workers reach it
    _ShiftedCluster.master_host = ns.host_ip
    with _ShiftedCluster(*master, workers=0, locustfile=REPLAY) as c:
        c.add_worker(flags, tmp / "worker0.log")
        shifted = c.add_worker({**flags, clock.SHIFT_ENV: str(SHIFT)}, tmp / "worker1.log", ns.prefix())
        rc, out = c.finish(timeout=120)
    assert rc == 0, out[-3000:]
    by_pid: dict[int, list[dict]] = defaultdict(list)
    for path in sorted(tmp.glob("records.jsonl.worker*")):
        for r in read_jsonl(path):
            by_pid[int(r["id"].split("-")[0], 16)].append(r)
    assert set(by_pid) == {c.workers[0].pid, shifted.pid}, "both workers sent"
    return json.loads(results.read_text()), by_pid, times, shifted.pid


def _schedule_errors(doc: dict, rows: list[dict], times: list[float], wall_minus_perf: float) -> list[float]:
    """Each record's send time as scheduled (perf_counter: the machine's one true clock) less where
    the trace puts it from the master's t0 (its wall clock, through the unshifted worker's
    wall - perf)."""
    t0 = doc["run"]["server"]["replay_t0"] - wall_minus_perf
    return [r["t_sent"] + r["sched"] - (t0 + times[int(r["source"].rsplit(":", 1)[1]) - 1]) for r in rows]


class _WallOf:
    """The machine's wall clock at a perf_counter time, as the unshifted worker read it at its
    sends nearest that time (it is on the master's clock, offset ~0): a VM's wall clock may be
    stepped during a run (one fresh-clone run saw 21 ms), and a single wall - perf would then put
    every event after the step in the wrong place, whatever the alignment did."""

    def __init__(self, plain_rows: list[dict]) -> None:
        pairs = sorted((r["t_sent"], r["wall_sent"] - r["t_sent"]) for r in plain_rows)
        self.t, self.offset = [t for t, _ in pairs], [o for _, o in pairs]

    def __call__(self, t_perf: float) -> float:
        import bisect

        i = min(max(bisect.bisect_left(self.t, t_perf), 0), len(self.t) - 1)
        if i and abs(self.t[i - 1] - t_perf) < abs(self.t[i] - t_perf):
            i -= 1
        return t_perf + self.offset[i]


def _series_misplaced(doc: dict, rows: list[dict], wall_of: "_WallOf", margin: float) -> list[str]:
    """The run's per-second series (requests ok by their end's second, tokens by their arrival's)
    against one clock: every event's perf_counter time on the master's wall clock. An event within
    `margin` of a second's edge may count on either side; every second must fall between."""
    bounds: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])  # (second, column) -> [lo, hi]

    def place(t_perf: float, column: int, n: int) -> None:
        wall = wall_of(t_perf)
        sides = {math.floor(wall - margin), math.floor(wall + margin)}
        for s in sides:
            bounds[(s, column)][1] += n
        if len(sides) == 1:
            bounds[(sides.pop(), column)][0] += n

    for r in rows:
        if r["outcome"] == "ok":
            place(r["t_sent"] + r["end"], 2, 1)
            for t, n in zip(r["chunks"], r["chunk_tokens"], strict=True):
                place(r["t_sent"] + t, 1, n)
    got = {(row[0], col): row[col] for row in doc["series"] for col in (1, 2)}
    wrong = []
    for key in sorted(set(bounds) | set(got)):
        lo, hi = bounds.get(key, (0, 0))
        if not lo <= got.get(key, 0) <= hi:
            wrong.append(f"second {key[0]} {'tokens' if key[1] == 1 else 'ok'}: {got.get(key, 0)} not in [{lo}, {hi}]")
    return wrong


def _check(tmp: Path, align: bool) -> tuple[list[str], dict]:
    """Run, and say what is off: the schedule, the per-second series, the clocks reported."""
    with _Netns() as ns, SimProcess(
        host=ns.host_ip, port=free_port(ns.host_ip), slots=256, iter_base=0.002, iter_per_seq=0.00002,
        iter_per_prefill_token=0,
    ) as sim:  # fmt: skip
        doc, by_pid, times, shifted = _run(tmp, sim.url, align, ns)
    rows = [r for pid_rows in by_pid.values() for r in pid_rows]
    plain = next(pid for pid in by_pid if pid != shifted)
    # the machine's wall clock less perf_counter, from the unshifted worker (offset ~0 to the master)
    ref = sorted(r["wall_sent"] - r["t_sent"] for r in by_pid[plain])[len(by_pid[plain]) // 2]
    wall_of = _WallOf(by_pid[plain])
    clocks = {str(w["index"]): w["clock"] for w in doc["workers"]}
    assert all(not c["flagged"] and c["samples"] >= clock.BURST for c in clocks.values()), clocks
    assert any(abs(c["offset_s"] + SHIFT) <= c["uncertainty_s"] + 1e-4 for c in clocks.values()), clocks
    problems = []
    errors = _schedule_errors(doc, rows, times, ref)
    # against the records' common error (the master's t0 read through one wall - perf, which a
    # stepped wall clock moves for every record alike): a worker off the master's clock is not
    middle = sorted(errors)[len(errors) // 2]
    late = max(abs(e - middle) for e in errors)
    if late > SCHEDULE_TOLERANCE:
        problems.append(f"a record scheduled {late * 1000:.1f} ms off the trace")
    margin = max(c["uncertainty_s"] for c in clocks.values()) + 0.001
    problems += _series_misplaced(doc, rows, wall_of, margin)
    print(f"\nalign {align}: schedule off by {late * 1000:.2f} ms at most over {len(rows)} records; {clocks}")
    return problems, clocks


@pytest.mark.timing  # the round trips' uncertainty under the 5 ms bound: a quiet CPU
def test_a_worker_200ms_ahead_keeps_the_schedule_and_the_series(tmp_path):
    """Alignment on: every record scheduled within 3 ms of the trace from the master's t0, and each
    second's tokens and requests where one clock puts them; the shifted worker's measured offset is
    -0.2 s within its uncertainty, under the 5 ms bound. The same run with the alignment off fails
    both checks (so this test can fail)."""
    problems, clocks = _check(tmp_path / "on", align=True)
    assert not problems, problems
    problems, _ = _check(tmp_path / "off", align=False)
    print(f"align off: {len(problems)} problems, e.g. {problems[:3]}")
    assert any("scheduled" in p for p in problems), problems
    assert any("second" in p for p in problems), problems
