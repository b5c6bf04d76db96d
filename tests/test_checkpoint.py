"""Results written while a run goes on (--checkpoint-every, transport/checkpoint.py): a run killed
at any time leaves a results file that reads as partial, with every request counted up to its
last checkpoint, and a run that ends replaces it with the whole run's file.

The killed runs are real processes (a master and a worker over Locust's ZMQ, or one local
process) against the simulator, whose token log says when it finished each request: the file's
count is held between the requests the simulator finished before the checkpoint's coverage and
those it finished before the checkpoint was written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest
from support import STREAMING_LOCUSTFILE, Cluster, cli_process, run_ok, start_run
from test_outcome import aggregate, settings

from llm_locust.metrics.records import WARMUP_STEP
from llm_locust.report import outcome
from llm_locust.report import results as results_module
from llm_locust.report.accounting import count_problems
from llm_locust.report.html import render
from llm_locust.report.outcome import Ended
from llm_locust.report.results import ResultsError, read_results, write_results
from llm_locust.sim.process import SimProcess

ROOT = Path(__file__).resolve().parents[1]
# A request the simulator finished this long before the checkpoint's coverage (`counted_until`)
# must be in the file: the worker reads the end of the stream (and a report crosses to the
# master) within it, even on a loaded 2-core machine. None finished after the checkpoint was
# written can be: the client reads an end after the simulator writes it (+ the clocks' reading).
LATE_READ_S = 1.0
CLOCK_S = 0.05


def ended(agg, steps=None, **kw) -> Ended:
    """A run's end (or a checkpoint's, with `checkpoint=`) at wall time 1100."""
    return Ended(settings=settings(), total=agg, steps=steps or {}, started_at=1000.0, ended_at=1100.0, **kw)


def _in_flight(n_sent_more: int):
    """A run's totals with `n_sent_more` requests sent and not finished (in flight)."""
    agg = aggregate(ok=6, failed=1, cancelled=1)
    agg.add_sent(n_sent_more)
    return agg


def test_a_checkpoint_is_marked_partial_and_its_counts_add_up_with_what_is_in_flight():
    agg = _in_flight(3)
    facts = {"every_s": 60.0, "counted_until": 1095.0, "workers_missing": 1}
    out = outcome.build(ended(agg, steps={1: agg, WARMUP_STEP: _in_flight(2)}, checkpoint=facts))
    r = out.results
    assert r["partial"] is True
    assert r["checkpoint"] == {
        "at": 1100.0,
        "at_utc": "1970-01-01T00:18:20+00:00",
        "every_s": 60.0,
        "counted_until": 1095.0,
        "in_flight": 3,
        "workers_missing": 1,
    }
    s = r["summary"]
    assert (s["sent"], s["ok"], s["failed"], s["cancelled"], s["in_flight"]) == (11, 6, 1, 1, 3)
    assert r["steps"][0]["in_flight"] == 3
    assert count_problems(r) == [] and "count_problems" not in r  # in flight is not a counting bug
    assert r["gates"] == []  # a run not ended is not judged
    # the same totals at the end (nothing marks the 3 as in flight): the counts do not add up
    end = outcome.build(ended(agg)).results
    assert end["partial"] is False and "checkpoint" not in end and "in_flight" not in end["summary"]
    assert end["count_problems"] and not next(g for g in end["gates"] if g["name"] == "counts")["passed"]


def test_a_request_sent_while_a_checkpoint_is_built_does_not_break_its_sums(monkeypatch):
    """The run goes on while its checkpoint is built: a request sent after the summary's counts
    were read must not show in their in-flight count (a CI run's checkpoint said sent 0 and
    in_flight 1: the in-flight count was read from the live totals afterwards)."""
    agg = _in_flight(3)
    real = results_module.distributions

    def distributions_then_a_send(total):
        total.add_sent()  # the run's next request, sent while the document is being built
        return real(total)

    monkeypatch.setattr(results_module, "distributions", distributions_then_a_send)
    facts = {"every_s": 60.0, "counted_until": 1095.0, "workers_missing": 0}
    r = outcome.build(ended(agg, steps={1: agg}, checkpoint=facts)).results
    assert agg.sent == 12  # sent during the build
    s = r["summary"]
    assert (s["sent"], s["in_flight"], r["checkpoint"]["in_flight"]) == (11, 3, 3)
    assert count_problems(r) == []


def test_a_checkpoint_file_reads_back_and_its_report_says_partial(tmp_path, capsys):
    path = tmp_path / "r.json"
    agg = _in_flight(2)
    facts = {"every_s": 1.0, "counted_until": 1099.5, "workers_missing": 0}
    write_results(path, outcome.build(ended(agg, steps={1: agg}, checkpoint=facts)).results)
    doc = read_results(path)
    assert doc["partial"] is True and doc["checkpoint"]["in_flight"] == 2
    page = render(doc)
    assert 'id="partial"' in page and "Partial results" in page and "2 were in flight" in page
    html = tmp_path / "r.html"
    p = cli_process("report", str(path), "-o", str(html))
    assert p.returncode == 0, p.stderr
    assert "partial results: a checkpoint written at 1970-01-01 00:18:20 UTC" in p.stdout
    assert "Every request that finished up to 0.5 s before it is counted" in p.stdout
    end = tmp_path / "end.json"
    write_results(end, outcome.build(ended(aggregate(ok=3))).results)
    assert "partial" not in cli_process("report", str(end), "-o", str(tmp_path / "e.html")).stdout
    p = cli_process("compare", str(path), str(end), timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    words = " ".join(p.stdout.split())  # the cells as wrapped to the terminal
    assert "validity run: partial (a checkpoint written while the run went on; its end never came)" in words
    assert words.count("run: partial") == 2  # the checkpoint's validity, in the runs table and the ranking


_WRITER = textwrap.dedent(
    """
    import sys
    from test_checkpoint import aggregate, ended
    from llm_locust.transport.checkpoint import Checkpoints

    agg = aggregate(ok=2000, failed=10)  # a file of some size: a write takes a while
    n = 0

    def gather(facts):
        global n
        n += 1
        agg.add_sent(1)  # one more in flight each time: each checkpoint differs from the last
        return ended(agg, checkpoint=facts)

    cp = Checkpoints(sys.argv[1], 1.0, gather)
    cp.stopped = False
    while True:
        assert cp.write()
        print(n, flush=True)
    """
)


def test_a_process_killed_while_it_writes_checkpoints_leaves_a_whole_file(tmp_path):
    """SIGKILL at random moments of a process that writes checkpoints back to back: the file is
    always a whole, readable checkpoint (write_atomic: a temporary file, then a rename)."""
    import random

    path = tmp_path / "r.json"
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        try:
            assert proc.stdout is not None
            for _line in range(2 + rng.randrange(4)):  # at least two written, the kill falls in a later one
                assert proc.stdout.readline(), "the writer ended"
            time.sleep(rng.uniform(0.0, 0.05))  # where in the next write the kill lands: random on purpose
        finally:
            proc.kill()
            proc.wait(timeout=30)
        doc = read_results(path)
        assert doc["partial"] is True and count_problems(doc) == []
        assert doc["summary"]["in_flight"] >= 2
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ResultsError, match="truncated"):  # what a torn file would read as
        read_results(path)


# ---- real runs, killed ----


def _sim_finished(token_log: Path) -> list[float]:
    """When the simulator finished each ok request (its last token), on the wall clock: its log's
    perf_counter times (CLOCK_MONOTONIC, one clock for every process of this machine) moved by
    this process's reading of the two clocks."""
    offset = time.time() - time.perf_counter()
    ends = []
    for line in token_log.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["outcome"] == "ok" and rec["t_tokens"]:
            ends.append(rec["t_tokens"][-1] + offset)
    return ends


def _wait_for_checkpoint(path: Path, proc: subprocess.Popen, token_log: Path, timeout: float = 60.0) -> dict:
    """Poll until the file is a checkpoint that must hold at least 10 requests: the simulator
    finished them more than LATE_READ_S before its coverage (a loaded machine's first requests
    may take a second or more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before a checkpoint was written"
        if path.exists():
            doc = read_results(path)  # never torn, even read while it is written
            c = doc.get("checkpoint") or {}
            if doc.get("partial") and sum(t < c["counted_until"] - LATE_READ_S for t in _sim_finished(token_log)) >= 10:
                return doc
        time.sleep(0.1)  # polling a file, bounded by the deadline
    raise AssertionError(f"no checkpoint holding 10 requests within {timeout} s")


def _check_killed(path: Path, token_log: Path) -> dict:
    """The file a SIGKILLed run left: partial, its counts add up, and it holds every request the
    simulator finished before its coverage and none it finished after it was written."""
    doc = read_results(path)
    assert doc["partial"] is True, doc.get("partial")
    c, s = doc["checkpoint"], doc["summary"]
    assert count_problems(doc) == []
    parts = s["ok"] + s["failed"] + s["cancelled"] + s["client_cancelled"] + s["lost"] + s["in_flight"]
    assert s["sent"] == parts and s["in_flight"] == c["in_flight"]
    assert c["counted_until"] <= c["at"] and c["every_s"] == 1.0
    ends = _sim_finished(token_log)
    before_coverage = sum(1 for t in ends if t < c["counted_until"] - LATE_READ_S)
    before_written = sum(1 for t in ends if t < c["at"] + CLOCK_S)
    assert 10 <= before_coverage <= s["ok"] <= before_written, (before_coverage, s["ok"], before_written, c)
    return doc


@pytest.mark.timing  # a request read within LATE_READ_S of its end: the machine's load shifts it
def test_a_master_killed_mid_run_leaves_its_last_checkpoint(tmp_path):
    """A master and a worker over Locust's ZMQ; the master SIGKILLed once a checkpoint holds
    requests. Before checkpoints it left no results file at all."""
    results, token_log = tmp_path / "r.json", tmp_path / "tokens.jsonl"
    with (
        SimProcess(slots=16, iter_base=0.003, iter_per_seq=0.0002, token_log=str(token_log)) as sim,
        Cluster(
            *("--expect-workers", "1", "-u", "4", "-r", "4", "-t", "120s", "--host", sim.url),
            *("--results", str(results), "--checkpoint-every", "1s", "--max-tokens-cap", "16"),
            workers=1,
        ) as cluster,
    ):
        _wait_for_checkpoint(results, cluster.master, token_log)
        cluster.master.send_signal(signal.SIGKILL)
        cluster.master.wait(timeout=30)
        doc = _check_killed(results, token_log)
    assert doc["run"]["runner"] == "MasterRunner"
    [w] = doc["workers"]
    assert w["lost_at"] is None and 0 < w["finished"] == doc["summary"]["finished"]
    assert doc["checkpoint"]["counted_until"] < doc["checkpoint"]["at"]  # the worker's last report
    html = tmp_path / "r.html"
    p = cli_process("report", str(results), "-o", str(html))
    assert p.returncode == 0 and "partial results: a checkpoint written at" in p.stdout, p.stdout + p.stderr
    assert "id='partial'" in html.read_text() or 'id="partial"' in html.read_text()


@pytest.mark.timing  # a request read within LATE_READ_S of its end: the machine's load shifts it
def test_a_local_run_killed_mid_run_leaves_its_last_checkpoint(tmp_path):
    """One process (Locust's local runner) SIGKILLed once a checkpoint holds requests."""
    results, token_log = tmp_path / "r.json", tmp_path / "tokens.jsonl"
    with SimProcess(slots=16, iter_base=0.003, iter_per_seq=0.0002, token_log=str(token_log)) as sim:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "locust", "-f", str(STREAMING_LOCUSTFILE), "--headless", "--only-summary"),
                *("-u", "4", "-r", "4", "-t", "120s", "--host", sim.url, "--results", str(results)),
                *("--checkpoint-every", "1s", "--max-tokens-cap", "16"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_for_checkpoint(results, proc, token_log)
        finally:
            proc.kill()
            proc.wait(timeout=30)
        doc = _check_killed(results, token_log)
    assert doc["run"]["runner"] == "LocalRunner"
    assert doc["checkpoint"]["counted_until"] == doc["checkpoint"]["at"]  # it counts as it goes


def test_a_run_that_ends_replaces_its_checkpoints_with_the_whole_run(tmp_path):
    """Checkpoints every second of a 4 s run: the end's file is not partial, and adds up without
    anything in flight."""
    results = tmp_path / "r.json"
    run_ok(
        *("-u", "2", "-r", "2", "-t", "4s", "--max-tokens-cap", "8", "--results", str(results)),
        *("--checkpoint-every", "1s"),
    )
    doc = read_results(results)
    assert doc["partial"] is False and "checkpoint" not in doc
    assert "in_flight" not in doc["summary"] and count_problems(doc) == []
    assert doc["summary"]["ok"] > 0


def test_a_checkpoint_marks_a_worker_the_master_lost(tmp_path):
    """Two workers; one SIGKILLed once both have reported. The checkpoints written after the master
    calls it missing say so (`workers_missing`, its row's `lost_at`), and what it had in flight at
    its last report stays in `in_flight` (the end would count it lost): the counts still add up."""
    results = tmp_path / "r.json"
    with (
        SimProcess(slots=16, iter_base=0.003, iter_per_seq=0.0002) as sim,
        Cluster(
            *("--expect-workers", "2", "-u", "4", "-r", "4", "-t", "120s", "--host", sim.url),
            *("--results", str(results), "--checkpoint-every", "1s", "--max-tokens-cap", "16"),
            workers=2,
        ) as cluster,
    ):
        cluster.wait_reported(2)
        cluster.workers[0].kill()
        deadline = time.monotonic() + 60  # the master calls it missing after 10 heartbeats (hub.WORKER_LIVENESS)
        doc: dict = {}
        while time.monotonic() < deadline and not (doc.get("checkpoint") or {}).get("workers_missing"):
            assert cluster.master.poll() is None
            doc = read_results(results) if results.exists() else {}
            time.sleep(0.2)  # polling a file, bounded by the deadline
        cluster.master.send_signal(signal.SIGKILL)
        cluster.master.wait(timeout=30)
    doc = read_results(results)
    assert doc["partial"] is True and doc["checkpoint"]["workers_missing"] == 1, doc.get("checkpoint")
    lost = [w for w in doc["workers"] if w["lost_at"]]
    assert len(lost) == 1 and lost[0]["finished"] > 0 and len(doc["workers"]) == 2
    assert count_problems(doc) == []
    assert doc["summary"]["finished"] == sum(w["finished"] for w in doc["workers"])
    assert "1 worker(s) missing" in render(doc)


def test_a_run_killed_before_its_first_interval_leaves_its_own_partial_file(tmp_path):
    """The first checkpoint goes as the test starts: a run killed within its first interval (an
    hour here) leaves a partial file of its own, never an earlier run's file at the path (which
    it used to, read as that run's whole figures)."""
    results = tmp_path / "r.json"
    earlier = outcome.build(ended(aggregate(ok=3))).results
    write_results(results, earlier)
    with SimProcess(slots=4, iter_base=0.003) as sim:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "locust", "-f", str(STREAMING_LOCUSTFILE), "--headless", "--only-summary"),
                *("-u", "1", "-r", "1", "-t", "120s", "--host", sim.url, "--results", str(results)),
                *("--checkpoint-every", "1h", "--max-tokens-cap", "4"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not read_results(results).get("partial"):
                assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint at the test's start"
                time.sleep(0.1)  # polling a file, bounded by the deadline
        finally:
            proc.kill()
            proc.wait(timeout=30)
    doc = read_results(results)
    assert doc["partial"] is True and doc["checkpoint"]["every_s"] == 3600.0
    assert doc["run"]["started_at"] > earlier["run"]["started_at"] and count_problems(doc) == []


def test_a_run_that_measured_nothing_leaves_no_checkpoint_behind(tmp_path):
    """Every request warm-up: the run measures nothing and writes no results file (exit 1), so
    the checkpoints it wrote meanwhile (they held the warm-up) are removed at its end."""
    results = tmp_path / "r.json"
    proc = start_run(
        *("-u", "1", "-r", "1", "-t", "4s", "--run-warmup", "60s", "--max-tokens-cap", "4"),
        *("--results", str(results), "--checkpoint-every", "1s"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not results.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint while the run went on"
        time.sleep(0.1)  # polling a file, bounded by the deadline
    assert read_results(results)["partial"] is True
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "was warm-up: nothing was measured" in err, err[-2000:]
    assert not results.exists()


def test_a_checkpoint_that_fails_is_said_once_and_the_next_one_goes(tmp_path, caplog):
    """A checkpoint never stops the run: a build that raises or a path that cannot be written is
    logged once, and the next checkpoint is written when it can be."""
    from llm_locust.transport.checkpoint import Checkpoints

    path = tmp_path / "r.json"
    broken = [True]

    def gather(facts):
        if broken[0]:
            raise KeyError("a state the build did not expect")
        return ended(_in_flight(1), checkpoint=facts)

    cp = Checkpoints(str(path), 1.0, gather)
    cp.stopped = False
    assert not cp.write() and not cp.write() and not path.exists()
    assert caplog.text.count("could not build the checkpoint") == 1
    broken[0] = False
    assert cp.write() and read_results(path)["checkpoint"]["in_flight"] == 1
    path.unlink()
    path.mkdir()  # a folder where the file goes: refused, said once
    assert not cp.write() and not cp.write()
    assert caplog.text.count("could not write the checkpoint of the results to") == 1
