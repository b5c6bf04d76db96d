"""What a run writes never replaces what it reads, a device or a link, and a full disk is one clear,
counted error (issue 24: items 19, 20, 25 and 15e).

The functions are tested directly; the end-to-end cases run the real CLI against the simulator.
Assertions marked WIRING need the run's end (llm_locust/runtime/plugin.py) to call them: see each
comment; they fail until that lands.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import ROOT, read_jsonl, run_cli, run_ok

from llm_locust.metrics.recordlog import FAILED, RecordLog, failures
from llm_locust.metrics.records import RequestRecord
from llm_locust.report.files import check_outputs, plan_path, run_files, write_atomic
from llm_locust.report.provenance import trace_changed, trace_facts
from llm_locust.report.results import ResultsError, read_results
from llm_locust.settings.model import Settings

SAMPLE = Settings().trace_path  # the bundled sample trace


def _rec(k: int, chunks: int = 20) -> RequestRecord:
    t0 = 100.0 + k
    return RequestRecord(
        request_id=f"r{k}",
        api="openai-chat",
        t_sched=t0,
        t_sent=t0,
        wall_sent=1e9 + k,
        t_first=t0 + 0.05,
        t_end=t0 + 0.5,
        chunk_times=[t0 + 0.05 + 0.01 * i for i in range(chunks)],
        chunk_tokens=[1] * chunks,
        n_out=chunks,
    )


def _sha(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---- check_outputs: before any load ----


def test_an_output_that_is_an_input_is_refused_naming_both(tmp_path):
    plan = tmp_path / "plan.yaml"
    trace = tmp_path / "trace.jsonl"
    plan.write_text("name: x\n")
    shutil.copy(SAMPLE, trace)
    inputs = {"the plan": str(plan), "--trace": str(trace)}
    with pytest.raises(ValueError) as e:
        check_outputs({"--results": str(plan)}, inputs)
    assert str(e.value).startswith(f"--results {plan}: that is the plan, which this run reads")
    assert "give --results another path" in str(e.value)
    # another spelling, a hard link: the same file
    os.link(trace, tmp_path / "hard.jsonl")
    for spelled in (str(tmp_path / "sub" / ".." / "trace.jsonl"), str(tmp_path / "hard.jsonl")):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(ValueError, match=r"^--record-log .*: that is --trace, which this run reads"):
            check_outputs({"--record-log": spelled}, inputs)
    # plain paths as inputs
    with pytest.raises(ValueError, match="that is an input file"):
        check_outputs({"--report": str(trace)}, [str(trace)])
    assert plan.read_text() == "name: x\n" and _sha(trace) == _sha(SAMPLE)


def test_two_outputs_on_one_path_are_refused(tmp_path):
    r = tmp_path / "r.json"
    with pytest.raises(ValueError, match=r"--report .*r\.json: that is also --results's path"):
        check_outputs({"--results": str(r), "--report": str(tmp_path / "." / "r.json")}, [])
    assert not r.exists()
    check_outputs({"--results": str(r), "--report": str(tmp_path / "r.html"), "--record-log": ""}, [SAMPLE])


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "device"])
def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    target = tmp_path / "target.json"
    target.write_text("{}")
    path = tmp_path / "out"
    if kind == "symlink":
        path.symlink_to(target)
        why = f"a symbolic link (to {target})"
    elif kind == "fifo":
        os.mkfifo(path)
        why = "a named pipe"
    elif kind == "folder":
        path.mkdir()
        why = "a folder"
    else:
        path = Path("/dev/null")
        why = "a character device"
    with pytest.raises(ValueError) as e:
        check_outputs({"--results": str(path)}, [])
    refusal = f"--results {path}: it is {why}, not a regular file; the run would replace it: give a file path"
    assert str(e.value) == refusal
    assert target.read_text() == "{}"


def test_an_output_folder_that_cannot_be_made_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    refusal = r"^--report .*file/sub/r\.html: cannot write .*/file is a file, not a folder$"
    with pytest.raises(ValueError, match=refusal):
        check_outputs({"--report": str(tmp_path / "file" / "sub" / "r.html")}, [])


def test_run_files_come_from_the_settings_declarations(tmp_path):
    trace = tmp_path / "t.jsonl"
    shutil.copy(SAMPLE, trace)
    s = Settings(trace=str(trace), results="r.json", report="r.html", record_log="rec.jsonl", junit="j.xml")
    outputs, inputs = run_files(s, plan="p.yaml")
    assert outputs == {"--results": "r.json", "--report": "r.html", "--record-log": "rec.jsonl", "--junit": "j.xml"}
    assert inputs == {"the plan": "p.yaml", "--trace": str(trace)}
    assert run_files(Settings())[1] == {"--trace": SAMPLE}  # no --trace: the bundled sample is read


def test_plan_path_is_the_first_argument_of_run():
    assert plan_path(["llm-locust", "run", "p.yaml", "-t", "5s"]) == "p.yaml"
    assert plan_path(["llm-locust", "run", "old.json"]) == "old.json"
    assert plan_path(["llm-locust", "run", "--results", "r.json"]) == ""
    assert plan_path(["locust", "-f", "closed.py", "--results", "r.json"]) == ""


# ---- the writers ----


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_write_atomic_never_replaces_a_link_or_a_pipe(tmp_path, kind):
    target = tmp_path / "target.json"
    target.write_text("earlier")
    path = tmp_path / "out.json"
    if kind == "symlink":
        path.symlink_to(target)
    else:
        os.mkfifo(path)
    with pytest.raises(OSError, match=r"out\.json is a (symbolic link|named pipe).*not a regular file"):
        write_atomic(path, "new")
    assert (path.is_symlink() if kind == "symlink" else path.is_fifo()) and target.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "target.json"]  # no temporary left


def test_load_results_refuses_a_pipe_instead_of_reading_it_forever(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer that never ends the stream
    got: list[BaseException] = []

    def load() -> None:
        try:
            read_results(fifo)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            got.append(e)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    try:
        reader.join(timeout=10)
        assert not reader.is_alive(), "read_results is still reading the pipe"  # old code: waits for EOF
    finally:
        os.close(writer)  # ends the stream: a reader still waiting returns
        reader.join(timeout=10)
    assert isinstance(got[0], ResultsError)
    assert str(got[0]) == f"{fifo}: a named pipe, not a regular file: give an llm-locust results file"


def test_record_log_refuses_a_link_and_a_pipe_and_counts_every_record(tmp_path, caplog):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that old code's open() does not wait
    try:
        for path in (link, fifo):
            lg = RecordLog(str(path), buffer_bytes=1)
            with caplog.at_level(logging.ERROR, "llm_locust.metrics.recordlog"):
                caplog.clear()
                for k in range(5):
                    lg.write(_rec(k))
                lg.close()
            assert (lg.written, lg.failed) == (0, 5)
            assert len(caplog.records) == 1 and "not a regular file" in caplog.records[0].getMessage()
            assert f"the record log {path} lost 5 of 5 records" in lg.problem()
        assert target.read_text() == "" and link.is_symlink()
        try:  # nothing went into the pipe: end of file, or (no writer ever opened it, on some kernels) EAGAIN
            assert os.read(reader, 1 << 16) == b""
        except BlockingIOError:
            pass
    finally:
        os.close(reader)


def test_record_log_starts_fresh_then_appends_whole_lines(tmp_path):
    """A process's first record log at a path replaces what was there (an earlier run's: old code
    appended to it, so one log held two runs); a later test of the same process (the web UI's
    Start, again) appends."""
    path = tmp_path / "rec.jsonl"
    path.write_bytes(b'{"earlier": 1}\n')
    for first in (0, 50):
        lg = RecordLog(str(path), buffer_bytes=4096)
        for k in range(first, first + 50):
            lg.write(_rec(k))
        lg.close()
        assert (lg.written, lg.failed, lg.problem()) == (50, 0, None)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["id"] for x in lines] == [f"r{k}" for k in range(100)]


# ---- a full disk ----


@pytest.fixture
def small_fs(tmp_path):
    """mount(size): a fresh tmpfs of that size (root only: a real filesystem that fills up);
    full(dir): fill it to the last byte."""
    mounts: list[Path] = []

    def mount(size: str = "64k") -> Path:
        d = tmp_path / f"fs{len(mounts)}"
        d.mkdir()
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"the full-disk cases need `mount -t tmpfs` (root): {p.stderr.strip()}")
        mounts.append(d)
        return d

    yield mount
    for d in reversed(mounts):
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path) -> None:
    with open(d / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def test_record_log_on_a_full_disk_keeps_whole_lines_and_counts_the_rest(small_fs, caplog):
    d = small_fs("64k")
    lg = RecordLog(str(d / "rec.jsonl"), buffer_bytes=10_000)
    n = 2000
    with caplog.at_level(logging.ERROR, "llm_locust.metrics.recordlog"):
        for k in range(n):
            lg.write(_rec(k))  # old code: OSError out of the request path, from the first full block on
        lg.close()
    assert lg.written + lg.failed == n and 0 < lg.written < n
    assert lg.error == os.strerror(errno.ENOSPC)
    lines = (d / "rec.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and [json.loads(x)["id"] for x in lines[:-1]] == [f"r{k}" for k in range(lg.written)]
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]  # one line, not one per request
    assert lg in FAILED and lg.problem() in failures()
    assert f"lost {lg.failed:,} of {n:,} records (No space left on device)" in lg.problem()


def test_write_atomic_on_a_full_disk_raises_and_keeps_the_earlier_file(small_fs):
    d = small_fs("64k")
    (d / "r.json").write_text("earlier")
    _fill(d)
    with pytest.raises(OSError) as e:
        write_atomic(d / "r.json", "x" * 100_000)
    assert e.value.errno == errno.ENOSPC
    assert (d / "r.json").read_text() == "earlier"
    assert sorted(p.name for p in d.iterdir()) == ["filler", "r.json"]


def _summary_adds_up(results: Path) -> dict:
    s = read_results(results)["summary"]
    assert s["sent"] == s["ok"] + s["failed"] + s["cancelled"] + s["lost"], s
    return s


def test_a_run_whose_record_log_disk_is_full_counts_every_request_and_ends_on_time(tmp_path, small_fs, sims):
    sim = sims(slots=16, fast=True)
    d = small_fs("64k")
    _fill(d)
    results = tmp_path / "r.json"
    t0 = time.monotonic()
    # old code: every request raised out of the record log (uncounted, two tracebacks each) and
    # the run hung at its end until killed (here: the 90 s timeout)
    p = run_cli(
        "--host", sim.url, "-t", "4s", "-u", "16", "--record-log", str(d / "rec.jsonl"), "--results", str(results),
        timeout=90,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert took < 40, f"a 4 s run took {took:.0f} s"
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.count(f"record log {d / 'rec.jsonl'}: cannot write (No space left on device)") == 1
    s = _summary_adds_up(results)
    assert s["ok"] > 50, s
    # WIRING: plugin.py's end of run reads recordlog.failures(): exit 1 and the line
    assert p.returncode == 1, p.stderr[-2000:]
    assert re.search(rf"the record log {re.escape(str(d / 'rec.jsonl'))} lost ([\d,]+) of \1 records", p.stderr)


def test_a_workers_lost_records_reach_the_masters_end_and_exit(tmp_path, small_fs, sims):
    """A cluster's workers write their own record logs: one that loses records says so to the
    master in its reports, and the run ends with exit 1 and the line (before: only in that
    worker's own stderr, and the master exited 0). Here both workers' disk is full."""
    sim = sims(slots=16, fast=True)
    d = small_fs("64k")
    _fill(d)
    log = d / "rec.jsonl"
    results = tmp_path / "r.json"
    p = run_cli(
        "--host", sim.url, "-t", "3s", "-u", "4", "--workers", "2", "--record-log", str(log),
        "--results", str(results), timeout=120,
    )  # fmt: skip
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    s = _summary_adds_up(results)
    assert p.returncode == 1, p.stderr[-2000:]
    said = re.findall(
        rf"worker (\d): the record log {re.escape(str(log))}\.worker\1 lost ([\d,]+) of \2 records", p.stderr
    )
    assert said, p.stderr[-2000:]
    assert sum(int(n.replace(",", "")) for _, n in said) == s["sent"]  # every request: counted lost, none missing


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_the_workers_record_logs_are_checked_before_any_load(tmp_path, sims, kind):
    """LOG.workerN is held to the same output checks as LOG, before any load (old code: the run
    sent its load, the worker lost every record, exit 1). A link's target is never written."""
    log, results = tmp_path / "rec.jsonl", tmp_path / "r.json"
    part = Path(f"{log}.worker1")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    part.mkdir() if kind == "folder" else part.symlink_to(victim)
    why = "a folder" if kind == "folder" else f"a symbolic link (to {victim})"
    p = run_cli(
        "--host", sims(slots=4).url, "-t", "3s", "-u", "4", "--workers", "2", "--record-log", str(log),
        "--results", str(results), timeout=120,
    )  # fmt: skip
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    assert f"llm-locust: --record-log (worker 1) {part}: it is {why}, not a regular file" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "llm-locust summary" not in p.stdout
    assert not results.exists() and not Path(f"{log}.worker0").exists() and victim.read_text() == "keep me\n"


def test_results_that_cannot_be_written_exit_1_with_one_line(tmp_path, small_fs, sims):
    sim = sims(slots=16, fast=True)
    d = small_fs("64k")
    _fill(d)
    p = run_cli("--host", sim.url, "-t", "2s", "-u", "4", "--results", str(d / "r.json"), timeout=90)
    assert "llm-locust summary" in p.stdout  # the figures are printed all the same
    # old code: exit 0 and a traceback. WIRING: the end of run in plugin.py (EndOfRun.write) says it
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert f"could not write the results to {d / 'r.json'}" in p.stderr and "No space left on device" in p.stderr
    assert p.returncode == 1
    assert sorted(x.name for x in d.iterdir()) == ["filler"]  # no half file, no temporary


# ---- outputs over inputs, end to end ----


def _overlap_cases(tmp_path: Path) -> dict[str, tuple[list[str], Path, str]]:
    """name: (arguments, the file that must stay as it was, the start of the refusal)."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: overwrite-me\n")
    trace = tmp_path / "trace.jsonl"
    shutil.copy(SAMPLE, trace)
    r = tmp_path / "r.json"
    r.write_text("{}")
    target = tmp_path / "target.json"
    target.write_text("{}")
    (tmp_path / "link.json").symlink_to(target)
    return {
        "plan": ([str(plan), "--results", str(plan)], plan, f"--results {plan}: that is the plan"),
        "trace": (["--trace", str(trace), "--results", str(trace)], trace, f"--results {trace}: that is --trace"),
        "record log": (["--trace", str(trace), "--record-log", str(trace)], trace, f"--record-log {trace}: that is"),
        "report": (["--results", str(r), "--report", str(r)], r, f"--report {r}: that is also --results"),
        "link": (["--results", str(tmp_path / "link.json")], target, f"--results {tmp_path / 'link.json'}: it is a"),
    }


@pytest.mark.parametrize("case", ["plan", "trace", "record log", "report", "link"])
def test_outputs_over_inputs_are_refused_before_any_load(tmp_path, sims, case):
    sim = sims(slots=4)
    args, kept, refusal = _overlap_cases(tmp_path)[case]
    before = kept.read_bytes()
    p = run_cli(*args, "--host", sim.url, "-t", "2s", "-u", "1", timeout=60)
    assert kept.read_bytes() == before  # old code: overwritten, exit 0
    assert (tmp_path / "link.json").is_symlink()
    # WIRING: plugin.py's _on_init calls check_outputs(*run_files(settings, plan)): exit 2 (before
    # the wiring, "link" gets it from check_writable, with another wording) and this wording
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert f"llm-locust: {refusal}" in p.stderr and "Traceback" not in p.stderr
    assert "llm-locust summary" not in p.stdout


# ---- the trace's facts: taken at the start, checked at the end ----


def test_trace_facts_name_the_detected_format():
    facts = trace_facts(SAMPLE)  # old code: format None unless --trace-format was given
    assert facts["format"] == "jsonl" and facts["sha256"] == _sha(SAMPLE)
    assert trace_facts(SAMPLE, "azure2023")["format"] == "azure2023"  # the given one wins


def test_trace_changed_says_so_only_when_the_bytes_changed(tmp_path):
    trace = tmp_path / "t.jsonl"
    shutil.copy(SAMPLE, trace)
    facts = trace_facts(str(trace))
    assert trace_changed(facts) is None
    os.utime(trace)  # touched, same bytes
    assert trace_changed(facts, str(trace)) is None
    first = trace.read_bytes()
    trace.write_bytes(first.replace(b"1", b"2", 1))  # same size
    line = trace_changed(facts)
    assert line.startswith(f"the trace {trace} changed during the run (sha256 {facts['sha256'][:12]} at the start")
    trace.unlink()
    assert "cannot be read at the end of the run" in trace_changed(facts)
    assert trace_changed(None) is None and trace_changed({"path": "x", "error": "gone"}) is None


def _read_until(stream, text: str, deadline: float) -> tuple[list[str], threading.Thread]:
    """Read `stream` in a thread (so the deadline holds) until a line holds `text`; the thread goes
    on collecting lines into the list until the stream ends."""
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in stream:
            lines.append(line)
            if text in line:
                found.set()
        found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert found.wait(max(0.0, deadline - time.monotonic())), f"no {text!r} in time: {''.join(lines)[-2000:]}"
    assert any(text in line for line in lines), "".join(lines)[-2000:]
    return lines, reader


def test_a_trace_edited_during_the_run_keeps_the_start_hash(tmp_path, sims):
    sim = sims(slots=4)
    trace = tmp_path / "t.jsonl"
    shutil.copy(SAMPLE, trace)
    start_sha = _sha(trace)
    results = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "llm_locust.cli", "run", "--host", sim.url, "--trace", str(trace)]
    cmd += ["-t", "4s", "-u", "2", "--results", str(results)]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            lines, reader = _read_until(proc.stderr, "All users spawned", time.monotonic() + 60)
            with trace.open("ab") as f:  # the trace changes while the run goes on
                f.write(trace.read_bytes().splitlines(keepends=True)[0])
            # the results are not of the trace they name: the run fails (it exited 0)
            assert proc.wait(timeout=60) == 1, "".join(lines)[-2000:]
            reader.join(timeout=10)
        finally:
            proc.kill()
    env_trace = read_results(results)["environment"]["trace"]
    assert env_trace["sha256"] == start_sha != _sha(trace)  # old code: hashed at the end, the edited bytes
    assert env_trace["format"] == "jsonl"
    # WIRING: plugin.py's end of run puts provenance.trace_changed(...) into the facts and says it
    assert env_trace.get("changed", "").startswith(f"the trace {trace} changed during the run")
    assert "changed during the run" in "".join(lines)
    assert env_trace["at_end"]["sha256"] == _sha(trace)  # the hash the requests' file had at the end
    gate = next(g for g in read_results(results)["gates"] if g["name"] == "trace")
    assert not gate["passed"] and gate["line"] == env_trace["changed"]
    assert f"exit 1: {env_trace['changed']}" in "".join(lines)


def test_a_synthetic_workload_goes_into_a_results_folder_not_yet_made(tmp_path, sims):
    """--results runs/new/r.json with --synthetic: the folder is made for the workload as for the
    results (before: exit 2, 'No such file or directory: ...workload.jsonl')."""
    sim = sims(slots=16, fast=True)
    results = tmp_path / "runs" / "new" / "r.json"
    run_ok("--host", sim.url, "--synthetic", "requests=4,input=8,output=4,rate=20", "--replay",
           "--results", str(results), timeout=120)  # fmt: skip
    assert results.exists() and (tmp_path / "runs" / "new" / "r.workload.jsonl").exists()


def test_each_repetition_writes_a_record_log_of_its_own(tmp_path, sims):
    """A run's record log starts fresh, so --repeat N gives each repetition its own, as its
    results: LOG.repK.jsonl beside RESULTS.repK.json, each holding that repetition's requests (one
    shared LOG would keep the last repetition's only; before, it held them all, mixed)."""
    log, results = tmp_path / "log.jsonl", tmp_path / "r.json"
    run_ok(
        "--host", sims(slots=4).url, "--repeat", "2", "-u", "2", "-t", "2s", "--max-tokens", "8",
        "--record-log", str(log), "--results", str(results), timeout=240,
    )  # fmt: skip
    assert not log.exists()
    for k in (1, 2):
        sent = read_results(tmp_path / f"r.rep{k}.json")["summary"]["sent"]
        assert len(read_jsonl(tmp_path / f"log.rep{k}.jsonl")) == sent > 0, k
