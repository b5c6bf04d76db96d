"""Every read of a server's bytes outside the request path is bounded in size and time and yields:
the start-of-test probe, the preflight and the /metrics scrapers, against a hostile server of its
own process (tests/hostile_server.py: an endless body, endless headers, endless interim replies, a
byte a second, a stall), in this process (each read's duration, the memory it allocated and how
long it kept the event loop) and in a real run (the run ends on time with its memory bounded)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import gevent
import pytest
from support import ROOT

from llm_locust.protocols.base import MAX_BODY_BYTES
from llm_locust.transport import preflight
from llm_locust.transport.probe import probe_server
from llm_locust.transport.scraper import Scraper

HOSTILE = Path(__file__).with_name("hostile_server.py")
MODES = ("endless-body", "endless-headers", "endless-interim", "drip", "stall")
VERSION_PATHS = ("/version", "/get_server_info", "/info", "/props", "/v2")
MIB = 1024 * 1024

pytestmark = pytest.mark.timing  # wall-clock bounds: never beside parallel workers


@contextlib.contextmanager
def hostile_server(mode: str, *paths: str):
    """tests/hostile_server.py in its own process: yields its base URL; killed on exit."""
    proc = subprocess.Popen([sys.executable, str(HOSTILE), mode, *paths], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # printed as soon as it listens (EOF if it died)
        assert line.startswith("listening "), f"hostile server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.kill()
        proc.wait(10)


class Measured:
    """What a call cost this process: seconds, the peak of memory it allocated (tracemalloc) and
    the longest time the event loop could not run another greenlet (a ticker's largest gap)."""

    def __init__(self, fn):
        gaps = [0.0]

        def tick() -> None:
            while True:
                t = time.perf_counter()
                gevent.sleep(0.005)
                gaps[0] = max(gaps[0], time.perf_counter() - t - 0.005)

        ticker = gevent.spawn(tick)
        gevent.sleep(0.01)  # the ticker is waiting in the hub
        tracemalloc.start()
        t0 = time.perf_counter()
        try:
            self.result = fn()
        finally:
            self.seconds = time.perf_counter() - t0
            self.peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            ticker.kill()
        self.loop_gap = gaps[0]

    def __repr__(self) -> str:
        return f"{self.seconds:.2f} s, peak {self.peak / MIB:.1f} MiB, loop gap {self.loop_gap * 1000:.0f} ms"


# ---- the start-of-test probe ----


@pytest.mark.parametrize("mode", MODES)
def test_the_probe_is_bounded_whatever_the_version_endpoints_send(mode):
    """The models answer; every version endpoint is hostile: the first limit met ends the probe.
    Old code: an endless body was read without limit or yield (4.6 GB, loop lag of 18-41 s in a 5 s
    run), a drip for ever."""
    with hostile_server(mode, *VERSION_PATHS) as url:
        m = Measured(lambda: probe_server(url, timeout=1.0))
    facts = m.result
    assert facts["models"] == [{"id": "hostile-model", "owned_by": "test"}], facts
    assert facts["version"] is None
    assert m.seconds < 1.0 + 1.5, m  # one endpoint's timeout and a margin
    assert m.peak < 2.5 * MAX_BODY_BYTES, m  # one reply's body at most, never the stream
    assert m.loop_gap < 0.25, m  # it yields: the run's other greenlets go on
    limit = {"endless-body": "over", "endless-headers": "header block over", "endless-interim": "header block over"}
    assert limit.get(mode, "within") in facts["error"], facts  # the limit it met is noted


# ---- the preflight ----


def test_the_preflight_gives_up_on_a_stalling_server_in_a_few_seconds():
    """Connected, then no answer: exit 3 after REPLY_S (5 s), whatever --connect-timeout (old: 10 s)."""
    with hostile_server("stall") as url:
        m = Measured(lambda: preflight.check(url, "openai-chat", {}, connect_timeout=10.0))
    assert m.result is not None and m.result.code == preflight.EXIT_UNREACHABLE, m.result
    assert "no complete reply within 5s" in m.result.message
    assert preflight.REPLY_S - 0.2 < m.seconds < preflight.REPLY_S + 1.5, m


@pytest.mark.parametrize("mode", ["endless-headers", "endless-interim", "drip"])
def test_the_preflight_reads_a_bounded_reply(mode):
    """A header block past 64 KiB is a broken reply at once (old: 286 MB read in 3 s); a drip is
    given up after REPLY_S; either way one line and exit 3, little memory, the loop free."""
    with hostile_server(mode) as url:
        m = Measured(lambda: preflight.check(url, "openai-chat", {}, connect_timeout=2.0))
    assert m.result is not None and m.result.code == preflight.EXIT_UNREACHABLE, m.result
    if mode == "drip":
        assert "no complete reply within 5s" in m.result.message
        assert m.seconds < preflight.REPLY_S + 1.5, m
    else:
        assert "header block over 65536 bytes" in m.result.message
        assert m.seconds < 1.5, m
    assert m.peak < 4 * MIB and m.loop_gap < 0.25, m


def test_the_preflight_reads_only_the_start_of_an_endless_body():
    with hostile_server("endless-body") as url:
        m = Measured(lambda: preflight.check(url, "openai-chat", {}, connect_timeout=2.0))
    assert m.result is None  # a JSON reply: the server answers; the run judges the rest
    assert m.seconds < 1.5 and m.peak < 4 * MIB and m.loop_gap < 0.25, m


# ---- the model list (read by users when no --model is given, --no-preflight included) ----


@pytest.mark.parametrize("mode", ["endless-headers", "endless-body", "drip"])
def test_the_model_list_is_a_bounded_read(mode):
    """fetch_models read its header block without a limit: endless headers on /v1/models reached
    2.8 GB and a MemoryError with --no-preflight. Now at most the client's head and body limits,
    within min(the total timeout, 60 s), and a warning with no model."""
    from llm_locust.protocols.base import Limits, Timeouts
    from llm_locust.transport.served import fetch_models

    with hostile_server(mode) as url:
        m = Measured(lambda: fetch_models(url, {}, Timeouts(2.0, 5.0, 4.0), Limits(body_bytes=MIB)))
    assert m.result == []
    assert m.seconds < 4.0 + 1.5 and m.peak < 8 * MIB and m.loop_gap < 0.25, m


# ---- the context length (read by `llm-locust run --overlong-share` before Locust starts) ----


@pytest.mark.parametrize("mode", ["endless-body", "endless-headers", "drip", "stall"])
def test_the_context_length_read_is_bounded(mode):
    """cli.context_length read /v1/models with urllib's r.read(): an endless body grew it to 3.3 GB
    in 10 s and it never returned. Now each of its two reads ends within its timeout, over at
    most 1 MiB, and a server that says nothing says no context length."""
    from llm_locust.transport.served import CONTEXT_BODY_BYTES, context_length

    with hostile_server(mode) as url:
        m = Measured(lambda: context_length(url, timeout=1.0))
    assert m.result is None
    assert m.seconds < 2 * 1.0 + 1.0 and m.peak < 2 * CONTEXT_BODY_BYTES + 4 * MIB, m


# ---- the /metrics scrapers ----


@pytest.mark.parametrize("mode", MODES)
def test_a_metrics_read_is_bounded(mode):
    """A read of /metrics that meets a limit fails (counted, the error kept), within its timeout."""
    with hostile_server(mode, "/metrics") as url:
        scraper = Scraper(url + "/metrics", timeout=1.0)
        m = Measured(scraper.scrape_once)
    assert m.result is False and scraper.series.failed == 1, scraper.series.error
    assert m.seconds < 1.0 + 1.0 and m.peak < 2.5 * MAX_BODY_BYTES and m.loop_gap < 0.25, m
    expected = {"endless-body": "over", "endless-headers": "header block over", "endless-interim": "header block"}
    assert expected.get(mode, "within 1s") in scraper.series.error


# ---- in a real run ----


# Runs ARGV and writes the peak RSS (KiB) of it and what it waited for to the file named first: a
# process of its own, because in a process gevent has patched (any earlier test that imported
# Locust) the child is reaped by gevent's watcher and os.wait4 finds no child to measure.
PEAK_RSS = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)"
)


def run_measured(args: list[str], timeout: float, cwd: Path) -> tuple[int | None, float, float, str, str]:
    """`llm-locust run ARGS` in a subprocess: (exit code, seconds, peak RSS in MiB of the run and
    the processes it waited for, stdout, stderr). Killed past `timeout` (exit code None)."""
    out, err, peak = cwd / "stdout.txt", cwd / "stderr.txt", cwd / "peak-rss.txt"
    argv = [sys.executable, "-c", PEAK_RSS, str(peak), sys.executable, "-m", "llm_locust.cli", "run", *args]
    t0 = time.monotonic()
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(argv, stdout=o, stderr=e, cwd=ROOT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    seconds = time.monotonic() - t0
    rss = int(peak.read_text()) / 1024 if peak.exists() else float("inf")
    return code, seconds, rss, out.read_text(), err.read_text()


@pytest.mark.parametrize("mode", MODES)
def test_a_run_ends_on_time_whatever_its_probe_and_scrapes_read(tmp_path, mode):
    """A 2 s run against a server whose version endpoints and /metrics are hostile (its API
    answers): it ends on time, its memory bounded, its figures taken (old code: 33-110 s, 4.6 GB,
    "client: valid" with a loop lag of 18-41 s)."""
    results = tmp_path / "r.json"
    with hostile_server(mode, *VERSION_PATHS, "/metrics") as url:
        code, seconds, rss, out, err = run_measured(
            ["--host", url, "-t", "2s", "-u", "2", "--max-tokens", "3", "--results", str(results)], 90, tmp_path
        )
    assert code == 0, (code, seconds, err[-3000:])
    # start-up (~5 s on a busy 2-core machine), 2 s of load, the end's last scrape (2 s at most)
    assert seconds < 25, (seconds, err[-2000:])
    assert rss < 400, rss  # MiB; old code: GBs
    doc = json.loads(results.read_text())
    assert doc["summary"]["ok"] > 0 and doc["summary"]["failed"] == 0, doc["summary"]
    server = doc["environment"]["server"]
    assert server.get("version") is None and server.get("models") == [{"id": "hostile-model", "owned_by": "test"}]
    # the loop was never held for long (old: 18-41 s); on a machine this busy, a few ms are noise
    assert doc["summary"]["client"]["loop_lag"]["max"] < 0.5, doc["summary"]["client"]
    print(f"{mode}: {seconds:.1f} s, peak RSS {rss:.0f} MiB, probe: {server.get('error')}")


# ---- terminal escapes in what a server says ----


def test_a_servers_escapes_reach_the_terminal_as_visible_text(tmp_path):
    """A server whose every text carries escapes (a window title, a screen clear, an OSC 8 link, a
    C1 CSI, a bidi override; tests/hostile_server.py "escapes"): its model id (logged), its streamed
    error event (the summary's failures, the fail-fast line, the exit line) print as visible text;
    no ESC, C1 or bidi character reaches stdout or stderr (old code: the error event's text raw)."""
    results = tmp_path / "r.json"
    with hostile_server("escapes") as url:
        code, _, _, out, err = run_measured(
            ["--host", url, "-t", "2s", "-u", "2", "--max-tokens", "3", "--results", str(results)], 90, tmp_path
        )
    assert code == 3, (code, err[-3000:])  # fail-fast: every request failed
    for name, text in (("stdout", out), ("stderr", err)):
        bad = sorted({hex(ord(c)) for c in text if c in "\x1b\x07\x7f\x9b\u202e"})
        assert not bad, f"{name} holds {bad}:\n{text[-2000:]}"
    assert "stream_error" in out and "boom \\x1b]0;pwned\\x07\\x1b[2J" in out, out[-2000:]  # said, as text
    assert "model from /v1/models: m\\x1b]0;pwned" in err, err[-2000:]
    doc = json.loads(results.read_text())
    assert doc["summary"]["ok"] == 0 and doc["summary"]["failed"] > 0, doc["summary"]


def test_terminal_safe_escapes_controls_bidi_and_keeps_text():
    """What terminal_safe writes: every C0/C1 control, DEL and bidi control as a visible escape; a
    field's newlines and tabs too, a block's kept; letters, emoji and backslashes as they are."""
    import logging

    from llm_locust.safe.terminal import TerminalFilter, terminal_safe

    assert terminal_safe("\x1b]0;t\x07\x1b[2J\x9b1m\u202ex\x7f\r") == "\\x1b]0;t\\x07\\x1b[2J\\x9b1m\\u202ex\\x7f\\r"
    assert terminal_safe("a\nb\tc") == "a\\nb\\tc"
    assert terminal_safe("a\nb\tc\x1b", lines=True) == "a\nb\tc\\x1b"
    assert terminal_safe("Grüße 模型 🦙 C:\\dir") == "Grüße 模型 🦙 C:\\dir"
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "model %s", ("m\x1b]8;;http://e/\x1b\\",), None)
    TerminalFilter().filter(rec)
    assert rec.getMessage() == "model m\\x1b]8;;http://e/\\x1b\\"


def test_the_live_panel_prints_log_lines_terminal_safe():
    """A log line printed above the live panel (loop/progress.py _ConsoleStream, a rich
    console) shows a server's escapes as text (rich passes ESC through as it is)."""
    import io

    from rich.console import Console

    from llm_locust.loop.progress import _ConsoleStream

    buf = io.StringIO()
    stream = _ConsoleStream(Console(file=buf, force_terminal=True, width=200))
    stream.write("model from /v1/models: m\x1b]0;pwned\x07\x1b[2J\u202eevil\n")
    assert "\x1b]0;" not in buf.getvalue() and "\u202e" not in buf.getvalue(), repr(buf.getvalue())
    assert "m\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil" in buf.getvalue()
