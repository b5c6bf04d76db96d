"""The hostile matrix (issue 35): every command of the CLI against the bad day, in one table.

A door is a command a user can type (`llm-locust COMMAND`, and `run --grid` / `run --repeat`,
which run children of their own). A hazard is a class of bad day:

- ``signals``: SIGINT, a second SIGINT, SIGTERM, SIGKILL of a child;
- ``remote``: a slow, hanging or refusing service the command calls (target, metrics, MLflow);
- ``files``: FIFOs, devices, folders, symbolic links and existing files as inputs and outputs;
- ``escapes``: terminal escape sequences in the strings a server or a file supplies;
- ``numbers``: negative, absurd, non-finite and missing numbers in what a command reads.

`MATRIX` says, for each door and hazard, how it is held: cases run here (`CASES`, by name), tests
elsewhere in the suite (``tests/FILE.py::test_name``), or ``n/a: why``. `test_every_command_is_in_the_matrix`
reads the CLI's usage text and fails on a command the matrix does not list, and on a cell that
names a case or test that does not exist, so a command added later cannot skip the bad day.

What a refusal must look like, whatever the door (`refused`): exit status 2, within the case's
deadline (no hang on a FIFO or a device), one line or a few naming what was wrong, no traceback,
no ESC byte on stdout or stderr, and the files it was pointed at unchanged.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import ROOT, cli_argv, cli_process

ESC = "\x1b"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"  # title, clear, link
DEADLINE_S = 30.0  # every case here ends well within it; a hang is a failure, not a wait
HAZARDS = ("signals", "remote", "files", "escapes", "numbers")


@dataclass(frozen=True)
class Outcome:
    rc: int
    out: str
    err: str


def cli(*args: str, cwd: Path, timeout: float = DEADLINE_S) -> Outcome:
    """`llm-locust ARGS`, its status and output (a hang past `timeout` fails the test)."""
    p = cli_process(*args, cwd=cwd, timeout=timeout)
    return Outcome(p.returncode, p.stdout, p.stderr)


def clean(o: Outcome) -> None:
    """No traceback and no ESC byte in what the command printed."""
    assert "Traceback" not in o.err, o.err[-3000:]
    assert ESC not in o.out and ESC not in o.err, (o.out[-1500:], o.err[-1500:])


def refused(o: Outcome, *words: str) -> None:
    """A clear refusal: exit 2, a few lines naming what was wrong, nothing raw."""
    clean(o)
    assert o.rc == 2, f"exit {o.rc}\n{o.out[-1500:]}\n{o.err[-1500:]}"
    lines = [x for x in o.err.splitlines() if x.strip()]
    if any(": error: " in x for x in lines) and lines[0].startswith("usage: "):  # argparse's own refusal
        lines = [x for x in lines if not x.startswith((" ", "usage: "))]
    assert 1 <= len(lines) <= 4, o.err
    for w in words:
        assert w in o.err, (w, o.err)


# ---- what the doors read: one real run's results and record log, made once ----


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A real run's results and record log (the simulator, 3 s), a trace, and a victim file
    that no command may write."""
    d = tmp_path_factory.mktemp("matrix")
    p = cli("run", "-u", "2", "-t", "3s", "--results", "r.json", "--record-log", "log.jsonl", cwd=d, timeout=120)
    assert p.rc == 0, p.err[-3000:]
    (d / "victim.txt").write_text("keep me\n")
    (d / "trace.jsonl").write_text('{"timestamp": 0, "input_tokens": 5, "output_tokens": 3}\n')
    return {
        "dir": d,
        "results": d / "r.json",
        "log": d / "log.jsonl",
        "victim": d / "victim.txt",
        "trace": d / "trace.jsonl",
    }


def fifo(d: Path, name: str) -> Path:
    path = d / name
    if not path.exists():
        os.mkfifo(path)
    return path


def link(d: Path, name: str, to: Path) -> Path:
    path = d / name
    if not path.is_symlink():
        path.symlink_to(to)
    return path


def folder(d: Path, name: str) -> Path:
    path = d / name
    path.mkdir(exist_ok=True)
    return path


def victim_kept(m: dict[str, Path]) -> None:
    assert m["victim"].read_text() == "keep me\n", "a command wrote through a link onto another file"


def edited(m: dict[str, Path], name: str, edit: Callable[[dict], None]) -> Path:
    """A copy of the run's results with `edit` applied (a hostile or absurd file)."""
    doc = json.loads(m["results"].read_text())
    edit(doc)
    path = m["dir"] / name
    path.write_text(json.dumps(doc))
    return path


# ---- the cases run here: door -> hazard -> name -> the check ----

Case = Callable[[dict[str, Path]], None]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        assert name not in CASES, name
        CASES[name] = fn
        return fn

    return register


# files: FIFOs, devices and folders as inputs; links and inputs as outputs


@case("run: a plan that is a FIFO")
def _run_plan_fifo(m):
    refused(cli("run", str(fifo(m["dir"], "plan.yaml")), cwd=m["dir"]))


@case("run: a trace that is a FIFO, a device, a folder")
def _run_trace_special(m):
    for path in (fifo(m["dir"], "t.jsonl"), Path("/dev/zero"), folder(m["dir"], "tdir")):
        refused(cli("run", "--trace", str(path), "-t", "2s", cwd=m["dir"]), str(path))


@case("run --grid/--repeat: results through a link, before any child runs")
def _run_children_results_link(m):
    out = link(m["dir"], "grid-link.json", m["victim"])
    for extra in (["--grid", "isl=16:osl=8", "--ladder", "concurrency:1..2"], ["--repeat", "2"]):
        refused(cli("run", *extra, "-t", "2s", "--results", str(out), cwd=m["dir"]), "symbolic link")
        victim_kept(m)


@case("report: an input that is a FIFO, a device, a folder")
def _report_inputs(m):
    for path in (fifo(m["dir"], "in.json"), Path("/dev/zero"), folder(m["dir"], "rdir")):
        refused(cli("report", str(path), "-o", str(m["dir"] / "x.html"), cwd=m["dir"]))


@case("report: an output that is a link or the input itself")
def _report_outputs(m):
    refused(cli("report", str(m["results"]), "-o", str(link(m["dir"], "l.html", m["victim"])), cwd=m["dir"]))
    victim_kept(m)
    before = m["results"].read_bytes()
    refused(cli("report", str(m["results"]), "-o", str(m["results"]), cwd=m["dir"]))
    assert m["results"].read_bytes() == before


@case("compare: inputs and weights that are FIFOs, devices, folders")
def _compare_inputs(m):
    for path in (fifo(m["dir"], "c.json"), Path("/dev/zero"), folder(m["dir"], "cdir")):
        refused(cli("compare", str(m["results"]), str(path), cwd=m["dir"]))
    refused(cli("compare", str(m["results"]), "--weights", str(fifo(m["dir"], "w.yaml")), cwd=m["dir"]))


@case("compare: an output or JUnit file that is a link or an input")
def _compare_outputs(m):
    for flag in ("-o", "--junit"):
        out = link(m["dir"], f"c{flag.strip('-')}.txt", m["victim"])
        refused(cli("compare", str(m["results"]), str(m["results"]), flag, str(out), cwd=m["dir"]))
        victim_kept(m)
    before = m["results"].read_bytes()
    refused(cli("compare", str(m["results"]), str(m["results"]), "-o", str(m["results"]), cwd=m["dir"]))
    assert m["results"].read_bytes() == before


@case("export: an input that is a FIFO, a device, a folder")
def _export_inputs(m):
    for fmt in ("llmd", "parquet"):
        for path in (fifo(m["dir"], f"e-{fmt}"), Path("/dev/zero"), folder(m["dir"], f"edir-{fmt}")):
            refused(cli("export", fmt, str(path), "-o", str(m["dir"] / f"o-{fmt}"), cwd=m["dir"]))


@case("export parquet: an output that is a link")
def _export_parquet_link(m):
    out = link(m["dir"], "p.parquet", m["victim"])
    refused(cli("export", "parquet", str(m["log"]), "-o", str(out), cwd=m["dir"]))
    victim_kept(m)


@case("trace anonymize: an input that is a FIFO, a device, a folder")
def _anonymize_inputs(m):
    for path in (fifo(m["dir"], "a.jsonl"), Path("/dev/zero"), folder(m["dir"], "adir")):
        refused(cli("trace", "anonymize", str(path), str(m["dir"] / "a-out.jsonl"), cwd=m["dir"]))


@case("trace anonymize: an output that is a link or the input")
def _anonymize_outputs(m):
    refused(cli("trace", "anonymize", str(m["trace"]), str(link(m["dir"], "al.jsonl", m["victim"])), cwd=m["dir"]))
    victim_kept(m)
    before = m["trace"].read_bytes()
    refused(cli("trace", "anonymize", str(m["trace"]), str(m["trace"]), cwd=m["dir"]))
    assert m["trace"].read_bytes() == before


@case("trace synth: an output that is a link; an empirical trace that is a FIFO")
def _synth_files(m):
    refused(cli("trace", "synth", "--requests", "3", "--out", str(link(m["dir"], "sl", m["victim"])), cwd=m["dir"]))
    victim_kept(m)
    out = m["dir"] / "s-out.jsonl"
    empirical = f"empirical:{fifo(m['dir'], 'emp.jsonl')}"
    refused(cli("trace", "synth", "--requests", "3", "--input", empirical, "--out", str(out), cwd=m["dir"]))


@case("trace record: an output that is a link or a FIFO")
def _record_outputs(m):
    for out in (link(m["dir"], "rec-link.jsonl", m["victim"]), fifo(m["dir"], "rec-fifo.jsonl")):
        o = cli(
            "trace",
            "record",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
            "--out",
            str(out),
            cwd=m["dir"],
        )
        refused(o)
    victim_kept(m)


@case("sim: a token log through a link; a graded set that is a FIFO")
def _sim_files(m):
    refused(cli("sim", "--port", "0", "--token-log", str(link(m["dir"], "tok.log", m["victim"])), cwd=m["dir"]))
    victim_kept(m)
    refused(cli("sim", "--port", "0", "--graded-set", str(fifo(m["dir"], "g.jsonl")), cwd=m["dir"]))


# escapes: no ESC reaches the terminal from a file's or a server's text


@case("report and export llmd: ESC in a results file's strings")
def _report_escapes(m):
    def edit(doc):
        doc["run"]["model_id"] = f"m{HOSTILE}"
        doc["run"]["host"] = f"http://h{HOSTILE}"

    path = edited(m, "esc.json", edit)
    o = cli("report", str(path), "-o", str(m["dir"] / "esc.html"), cwd=m["dir"])
    clean(o)
    assert o.rc == 0, o.err
    clean(cli("export", "llmd", str(path), "-o", str(folder(m["dir"], "esc-llmd")), cwd=m["dir"]))


@case("report, compare, export: ESC in a file that is not valid")
def _broken_file_escapes(m):
    bad = m["dir"] / "bad-esc.json"
    bad.write_text(f'{{"summary": "{HOSTILE}"' + HOSTILE)
    refused(cli("report", str(bad), "-o", str(m["dir"] / "b.html"), cwd=m["dir"]))
    refused(cli("compare", str(m["results"]), str(bad), cwd=m["dir"]))
    refused(cli("export", "llmd", str(bad), cwd=m["dir"]))
    log = m["dir"] / "bad-log.jsonl"
    log.write_text(f'{{"e2e": "{HOSTILE}"\n')
    refused(cli("export", "parquet", str(log), "-o", str(m["dir"] / "b.parquet"), cwd=m["dir"]))


@case("trace anonymize, synth, run: ESC in a trace line")
def _trace_escapes(m):
    bad = m["dir"] / "esc-trace.jsonl"
    bad.write_text(f'{{"prompt": 5, "note": "{HOSTILE}"}}\n{HOSTILE}\n')
    refused(cli("trace", "anonymize", str(bad), str(m["dir"] / "esc-anon.jsonl"), cwd=m["dir"]), "esc-trace.jsonl")
    refused(
        cli(
            "trace",
            "synth",
            "--requests",
            "2",
            "--input",
            f"empirical:{bad}",
            "--out",
            str(m["dir"] / "e.jsonl"),
            cwd=m["dir"],
        )
    )
    refused(cli("run", "--trace", str(bad), "-t", "2s", cwd=m["dir"]), "esc-trace.jsonl")


@case("trace record: ESC in a request's path and headers")
def _record_escapes(m):
    out = m["dir"] / "rec-esc.jsonl"
    if out.exists():
        out.unlink()
    proc = subprocess.Popen(
        cli_argv("trace", "record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--out", str(out)),
        cwd=m["dir"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = re.search(r"http://[\d.]+:\d+", first)
        assert url, first
        host, port = url.group(0)[7:].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"POST /v1/completions{HOSTILE} HTTP/1.1\r\nHost: x\r\nX-A: {HOSTILE}\r\n".encode())
            s.sendall(b"Content-Length: 2\r\n\r\n{}")
            s.settimeout(10)
            s.recv(65536)
    finally:
        proc.send_signal(signal.SIGTERM)
        out_s, err_s = proc.communicate(timeout=DEADLINE_S)
    clean(Outcome(proc.returncode, out_s, err_s))


@case("sim: ESC in a request's model and path")
def _sim_escapes(m):
    proc = subprocess.Popen(
        cli_argv("sim", "--port", "0", "--fast"),
        cwd=m["dir"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = re.search(r"http://[\d.]+:\d+", proc.stdout.readline())
        assert url
        host, port = url.group(0)[7:].split(":")
        body = json.dumps({"model": HOSTILE, "prompt": "x", "max_tokens": 2, "stream": True}).encode()
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            s.sendall(b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            s.settimeout(10)
            while s.recv(65536):
                pass
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"GET /{HOSTILE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            s.settimeout(10)
            while s.recv(65536):
                pass
    finally:
        proc.send_signal(signal.SIGTERM)
        out_s, err_s = proc.communicate(timeout=DEADLINE_S)
    clean(Outcome(proc.returncode, out_s, err_s))


# numbers: negative, absurd, non-finite, missing


@case("report and export llmd: negative, non-finite and missing counts")
def _results_numbers(m):
    def negative(doc):
        doc["summary"]["ok"] = -5

    def nan(doc):
        doc["summary"]["sent"] = float("nan")

    def missing(doc):
        del doc["summary"]["sent"]

    for name, edit in (("neg", negative), ("nan", nan), ("missing", missing)):
        path = edited(m, f"num-{name}.json", edit)
        refused(cli("report", str(path), "-o", str(m["dir"] / f"{name}.html"), cwd=m["dir"]), path.name)
        refused(cli("export", "llmd", str(path), "-o", str(folder(m["dir"], f"{name}-llmd")), cwd=m["dir"]), path.name)


@case("run: a plan and a trace with absurd numbers")
def _run_numbers(m):
    plan = m["dir"] / "neg-plan.yaml"
    plan.write_text("load:\n  users: -5\n")
    refused(cli("run", str(plan), cwd=m["dir"]), "neg-plan.yaml")
    trace = m["dir"] / "neg-trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_tokens": -5, "output_tokens": 3}\n')
    refused(cli("run", "--trace", str(trace), "-t", "2s", cwd=m["dir"]), "neg-trace.jsonl")


@case("trace anonymize and synth: negative and non-finite numbers")
def _trace_tool_numbers(m):
    bad = m["dir"] / "num-trace.jsonl"
    bad.write_text('{"prompt": "hello", "output_tokens": -3}\n')
    refused(cli("trace", "anonymize", str(bad), str(m["dir"] / "num-anon.jsonl"), cwd=m["dir"]), "num-trace.jsonl")
    out = str(m["dir"] / "num-synth.jsonl")
    for args in (["--requests", "-5"], ["--rate", "nan"], ["--input", "normal:-5:1"], ["--output", "uniform:9:1"]):
        refused(cli("trace", "synth", *args, "--out", out, cwd=m["dir"]))


@case("sim, trace record, gpu-sidecar: negative and non-finite options")
def _server_numbers(m):
    for args in (["--slots", "-1"], ["--iter-base", "nan"], ["--kv-tokens", "-5"]):
        refused(cli("sim", "--port", "0", *args, cwd=m["dir"]))
    rec = ["trace", "record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9"]
    for args in (["--max-event-bytes", "-1"], ["--connect-timeout", "nan"], ["--block-size", "0"]):
        refused(cli(*rec, "--out", str(m["dir"] / "n.jsonl"), *args, cwd=m["dir"]))
    for args in (["--interval", "-1"], ["--interval", "nan"], ["--fake", "-2"]):
        refused(cli("gpu-sidecar", "--port", "0", *args, cwd=m["dir"]))


# signals: the long-lived commands end on SIGINT and SIGTERM, at once and cleanly


def _serve_then_signal(m, argv: list[str], sig: int, ready: str) -> Outcome:
    proc = subprocess.Popen(cli_argv(*argv), cwd=m["dir"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert ready in first, first
    proc.send_signal(sig)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert time.monotonic() - t0 < 5.0, "it took more than 5 s to end on a signal"
    return Outcome(proc.returncode, first + out, err)


@case("sim, trace record, gpu-sidecar: SIGINT and SIGTERM end them at once")
def _servers_end_on_signals(m):
    rec = ["trace", "record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9"]
    for sig in (signal.SIGINT, signal.SIGTERM):
        for argv, ready in (
            (["sim", "--port", "0", "--fast"], "listening on"),
            ([*rec, "--out", str(m["dir"] / f"sig{int(sig)}.jsonl"), "--force"], "listening on"),
            (["gpu-sidecar", "--port", "0", "--fake", "1"], "http://"),
        ):
            o = _serve_then_signal(m, argv, sig, ready)
            clean(o)


@case("trace record: a hanging upstream holds neither the proxy's end nor its other requests")
def _record_hanging_upstream(m):
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(8)  # accepts into the backlog, never answers
    out = m["dir"] / "hang.jsonl"
    proc = subprocess.Popen(
        cli_argv(
            "trace",
            "record",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            f"http://127.0.0.1:{hang.getsockname()[1]}",
            "--out",
            str(out),
            "--force",
        ),
        cwd=m["dir"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = re.search(r"http://[\d.]+:\d+", proc.stdout.readline())
        assert url
        host, port = url.group(0)[7:].split(":")
        client = socket.create_connection((host, int(port)), timeout=10)
        body = b'{"prompt": "x", "max_tokens": 2}'
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        out_s, err_s = proc.communicate(timeout=DEADLINE_S)
        assert time.monotonic() - t0 < 5.0
        client.close()
    finally:
        hang.close()
        if proc.poll() is None:
            proc.kill()
    clean(Outcome(proc.returncode, out_s, err_s))


# ---- the matrix ----

MATRIX: dict[str, dict[str, list[str]]] = {
    "run": {
        "signals": [
            "tests/test_interruption.py::test_a_signal_mid_step_cuts_the_step_out_of_the_verdict",
            "tests/test_interruption.py::test_a_second_signal_while_stopping_is_said_and_ignored",
            "tests/test_interruption.py::test_a_run_killed_outright_leaves_no_simulator_behind",
            "tests/test_cluster.py::test_a_worker_killed_mid_run_is_reported_lost_and_its_figures_are_kept",
        ],
        "remote": [
            "tests/test_read_deadlines.py::test_every_http_request_ends_within_its_timeouts",
            "tests/test_hostile_servers.py::test_a_run_ends_on_time_whatever_its_probe_and_scrapes_read",
            "tests/test_server_metrics.py::test_a_server_without_metrics_is_one_warning_and_the_test_goes_on",
            "tests/test_mlflow.py::test_a_dripping_tracking_server_is_abandoned_at_the_deadline",
            "tests/test_mlflow.py::test_a_tracking_server_that_is_down_costs_seconds_not_the_run",
            "tests/test_mlflow.py::test_a_signal_during_the_upload_ends_it_at_once",
        ],
        "files": [
            "run: a plan that is a FIFO",
            "run: a trace that is a FIFO, a device, a folder",
            "tests/test_outputs.py::test_outputs_over_inputs_are_refused_before_any_load",
            "tests/test_outputs.py::test_an_output_that_is_not_a_regular_file_is_refused",
        ],
        "escapes": ["trace anonymize, synth, run: ESC in a trace line"],
        "numbers": [
            "run: a plan and a trace with absurd numbers",
            "tests/test_fuzz_traces.py::test_mutated_real_traces_load_or_raise_trace_error",
        ],
    },
    "run --grid": {
        "signals": ["tests/test_grid.py::test_a_signal_stops_the_grid_and_marks_its_results"],
        "remote": ["n/a: each cell is a `run`, whose remote services are the run's (the row above)"],
        "files": ["run --grid/--repeat: results through a link, before any child runs"],
        "escapes": ["n/a: the grid prints its cells' figures and paths, no server or file text"],
        "numbers": ["n/a: the grid reads only its cells' results, checked as `report` checks a file"],
    },
    "run --repeat": {
        "signals": [
            "tests/test_repeat.py::test_a_signal_stops_the_series_and_combines_what_finished",
            "tests/test_repeat.py::test_a_killed_series_takes_its_repetition_with_it",
        ],
        "remote": ["n/a: each repetition is a `run`; the reset hook is the user's own command"],
        "files": ["run --grid/--repeat: results through a link, before any child runs"],
        "escapes": ["n/a: the combined lines print figures and paths, no server or file text"],
        "numbers": ["n/a: the repetitions' results are read as `report` reads a file"],
    },
    "suite": {
        "signals": [
            "tests/test_stress_suite.py::test_a_signal_stops_the_suite_and_writes_what_finished",
            "tests/test_stress_suite.py::test_a_child_past_its_time_limit_is_stopped_and_said",
        ],
        "remote": [
            "n/a: each case is a `run` against --host, whose remote services are the run's (the `run` row); "
            "the long-context case's /v1/models read is the run's own, bounded (transport.served.context_length)"
        ],
        "files": [
            "tests/test_stress_suite.py::test_an_output_folder_that_is_a_link_or_a_file_is_refused",
            "tests/test_stress_suite.py::test_bad_usage_is_refused_before_any_case_runs",
        ],
        "escapes": [
            "n/a: the suite prints its cases' verdicts, figures and paths through the CLI's terminal-safe "
            "streams; each case's server text is printed by its `run` (the `run` row)"
        ],
        "numbers": ["tests/test_stress_suite.py::test_bad_usage_is_refused_before_any_case_runs"],
    },
    "calibrate": {
        "signals": ["tests/test_calibrate.py::test_a_signal_stops_the_search_and_nothing_is_written"],
        "remote": ["n/a: it calls no service: its own simulator on 127.0.0.1, started and stopped by it"],
        "files": ["tests/test_calibrate.py::test_a_config_file_that_is_not_a_regular_file_is_refused_before_any_load"],
        "escapes": ["n/a: it prints its own figures and the config path; the steps' output goes to a temporary file"],
        "numbers": ["tests/test_calibrate.py::test_bad_usage_is_refused_before_anything_runs"],
    },
    "sim": {
        "signals": ["sim, trace record, gpu-sidecar: SIGINT and SIGTERM end them at once"],
        "remote": ["tests/test_sim_server.py::test_garbage_does_not_crash_the_server"],
        "files": ["sim: a token log through a link; a graded set that is a FIFO"],
        "escapes": ["sim: ESC in a request's model and path"],
        "numbers": [
            "sim, trace record, gpu-sidecar: negative and non-finite options",
            "tests/test_sim_server.py::test_bad_options_fail_to_start",
        ],
    },
    "trace record": {
        "signals": [
            "sim, trace record, gpu-sidecar: SIGINT and SIGTERM end them at once",
            "tests/test_record_proxy.py::test_stop_records_in_flight_and_summary",
        ],
        "remote": [
            "trace record: a hanging upstream holds neither the proxy's end nor its other requests",
            "tests/test_record_proxy.py::test_upstream_down_gives_502_and_a_trace_line",
            "tests/test_record_proxy.py::test_reply_head_over_64k_is_a_502",
        ],
        "files": ["trace record: an output that is a link or a FIFO"],
        "escapes": ["trace record: ESC in a request's path and headers"],
        "numbers": ["sim, trace record, gpu-sidecar: negative and non-finite options"],
    },
    "trace anonymize": {
        "signals": ["n/a: a bounded file in, one atomic file out; no child, no remote call"],
        "remote": ["n/a: reads and writes local files only"],
        "files": [
            "trace anonymize: an input that is a FIFO, a device, a folder",
            "trace anonymize: an output that is a link or the input",
        ],
        "escapes": ["trace anonymize, synth, run: ESC in a trace line"],
        "numbers": [
            "trace anonymize and synth: negative and non-finite numbers",
            "tests/test_anonymize.py::test_bad_input_names_file_and_line",
        ],
    },
    "trace synth": {
        "signals": ["n/a: writes a bounded workload to one file; no child, no remote call"],
        "remote": ["n/a: reads and writes local files only"],
        "files": [
            "trace synth: an output that is a link; an empirical trace that is a FIFO",
            "tests/test_synth.py::test_existing_out_is_refused_without_force",
        ],
        "escapes": ["trace anonymize, synth, run: ESC in a trace line"],
        "numbers": [
            "trace anonymize and synth: negative and non-finite numbers",
            "tests/test_synth.py::test_bad_distributions_are_refused",
        ],
    },
    "gpu-sidecar": {
        "signals": ["sim, trace record, gpu-sidecar: SIGINT and SIGTERM end them at once"],
        "remote": ["n/a: it reads the local NVML library and calls no service"],
        "files": ["n/a: it reads and writes no file"],
        "escapes": ["n/a: it prints only its own address; NVML's strings go to /metrics, escaped by prometheus_client"],
        "numbers": [
            "sim, trace record, gpu-sidecar: negative and non-finite options",
            "tests/test_gpu_sidecar.py::test_gpu_lost_mid_run_health_0_others_go_on",
        ],
    },
    "report": {
        "signals": ["n/a: a bounded file in, one atomic file out; no child, no remote call"],
        "remote": ["n/a: reads and writes local files only"],
        "files": [
            "report: an input that is a FIFO, a device, a folder",
            "report: an output that is a link or the input itself",
        ],
        "escapes": [
            "report and export llmd: ESC in a results file's strings",
            "report, compare, export: ESC in a file that is not valid",
        ],
        "numbers": ["report and export llmd: negative, non-finite and missing counts"],
    },
    "compare": {
        "signals": ["n/a: bounded files in, one atomic file or stdout out; no child, no remote call"],
        "remote": ["n/a: reads and writes local files only"],
        "files": [
            "compare: inputs and weights that are FIFOs, devices, folders",
            "compare: an output or JUnit file that is a link or an input",
        ],
        "escapes": ["report, compare, export: ESC in a file that is not valid"],
        "numbers": [
            "tests/test_compare_tools.py::test_a_negative_figure_is_refused_naming_the_file_and_the_field",
            "tests/test_compare_tools.py::test_a_non_finite_figure_is_refused",
        ],
    },
    "export": {
        "signals": ["n/a: a bounded file in, atomic files out; no child, no remote call"],
        "remote": ["n/a: reads and writes local files only"],
        "files": ["export: an input that is a FIFO, a device, a folder", "export parquet: an output that is a link"],
        "escapes": [
            "report and export llmd: ESC in a results file's strings",
            "report, compare, export: ESC in a file that is not valid",
        ],
        "numbers": ["report and export llmd: negative, non-finite and missing counts"],
    },
}


def usage_commands() -> list[str]:
    """The commands `llm-locust --help` lists (`trace`'s subcommands each on their own)."""
    p = subprocess.run(cli_argv("--help"), capture_output=True, text=True, timeout=60, cwd=ROOT)
    found = re.findall(r"^  ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?\b", p.stdout, re.M)
    assert found, p.stdout
    return [f"{a} {b}" if a == "trace" else a for a, b in found]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_command_is_in_the_matrix():
    """A command the CLI lists but the matrix does not fails here; so does a cell left empty, or
    one naming a case or a test that does not exist."""
    commands = usage_commands()
    for c in commands:
        assert c in MATRIX, f"`llm-locust {c}` is not in the hostile matrix: add its row"
    for door, row in MATRIX.items():
        assert door.split(" --")[0] in commands, f"the matrix's {door!r} is no command of the CLI any more"
        assert set(row) == set(HAZARDS), (door, set(row) ^ set(HAZARDS))
        for hazard, cells in row.items():
            assert cells, f"{door} x {hazard}: nothing holds it (a case, a test, or 'n/a: why')"
            for cell in cells:
                if cell.startswith("n/a: "):
                    continue
                if cell.startswith("tests/"):
                    file, _, name = cell.partition("::")
                    assert name in _test_names(ROOT / file), f"{door} x {hazard}: no test {cell}"
                else:
                    assert cell in CASES, f"{door} x {hazard}: no case {cell!r}"
    listed = {c for row in MATRIX.values() for cells in row.values() for c in cells}
    assert set(CASES) <= listed, f"cases no cell lists: {set(CASES) - listed}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_case(name, made):
    CASES[name](made)
