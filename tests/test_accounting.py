"""Every request sent is accounted for once, in one process and across a cluster:

    sent == ok + failed (by kind) + cancelled + lost

Real Locust masters and workers over real ZMQ on 127.0.0.1, against the built-in simulator. The
ground truth is each worker's own record log (one line per finished request, written by the
worker as the request ends), compared with what the master printed and wrote.
"""

import glob
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import Cluster, read_records, run_cli, run_ok
from test_metrics import make_record

from llm_locust.metrics.aggregate import figures
from llm_locust.metrics.records import Outcome
from llm_locust.report.accounting import count_problems, section_problem
from llm_locust.sim.process import SimProcess

# A worker whose stop keeps its event loop busy for 1.5 s (as a worker with a thousand users in
# flight does while it unwinds them): Locust's master stops receiving 0.5 s after it sends quit.
SLOW_STOP_LOCUSTFILE = """
import time
from locust import events
from locust.runners import WorkerRunner
from llm_locust.locustfiles.closed import StreamingUser  # noqa: F401

@events.test_stop.add_listener
def _busy_while_stopping(environment, **_kw):
    if isinstance(environment.runner, WorkerRunner):
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # the loop blocked: no report can leave before this ends
            pass
"""


def _balanced(s: dict) -> None:
    failed_by_kind = sum(n for k, n in s["outcomes"].items() if k not in ("ok", "cancelled"))
    assert s["sent"] == s["ok"] + failed_by_kind + s["cancelled"] + s["lost"], s


def _every_request_counted_once(r: dict, log: Path) -> None:
    """What the master wrote equals the workers' own logs: every request sent is finished and in
    the figures, nothing lost, each worker's count its log's (the one that left included)."""
    s = r["summary"]
    raw = read_records(log, ".worker*")
    assert s["sent"] == s["finished"] == len(raw), (s["sent"], s["finished"], len(raw), r["workers"])
    assert s["lost"] == 0 and "workers_lost" not in r["validity"]["flags"], r["workers"]
    per_worker = {int(p.rsplit("worker", 1)[1]): sum(1 for _ in open(p)) for p in glob.glob(f"{log}.worker*")}
    assert per_worker == {w["index"]: w["sent"] for w in r["workers"]}
    _balanced(s)


def test_a_busy_workers_last_report_reaches_the_master(tmp_path):
    """M1: the workers' stop takes longer than Locust's 0.5 s; their last report (requests
    finished since the previous report and the ones cancelled at stop) must still be merged."""
    lf = tmp_path / "slow_stop.py"
    lf.write_text(SLOW_STOP_LOCUSTFILE)
    results, log = tmp_path / "r.json", tmp_path / "records.jsonl"
    with SimProcess(slots=16, iter_base=0.003, iter_per_seq=0.0003) as sim:
        run_ok(
            "--host",
            sim.url,
            "--workers",
            "2",
            "-u",
            "12",
            "-r",
            "12",
            "-t",
            "4s",
            "--max-tokens-cap",
            "40",
            "--results",
            str(results),
            "--record-log",
            str(log),
            "--locustfile",
            str(lf),
            timeout=120,
        )
    r = json.loads(results.read_text())
    raw = read_records(log, ".worker*")
    s = r["summary"]
    assert len(raw) > 20
    # every request a worker finished (its own log) is in the master's figures, exactly once
    assert s["sent"] == s["finished"] == len(raw), (s["sent"], s["finished"], len(raw))
    assert s["ok"] == sum(1 for x in raw if x["outcome"] == "ok")
    assert s["cancelled"] == sum(1 for x in raw if x["outcome"] == "cancelled")
    assert s["lost"] == 0 and "workers_lost" not in r["validity"]["flags"]
    _balanced(s)
    assert all(w["final_report"] for w in r["workers"]), r["workers"]


def _cluster(tmp_path, sim, run_time="20s", users=4, extra=()) -> Cluster:
    """A master and 2 workers against `sim`, writing r.json and records.jsonl(.workerN) in tmp_path."""
    return Cluster(
        "--expect-workers",
        "2",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        run_time,
        "--host",
        sim.url,
        "--results",
        str(tmp_path / "r.json"),
        "--record-log",
        str(tmp_path / "records.jsonl"),
        "--max-tokens-cap",
        "24",
        *extra,
        workers=2,
    )


def test_a_worker_quitting_under_load_reports_everything_before_it_goes(tmp_path):
    """A worker stopped with SIGTERM mid-run (as Ctrl-C or an orchestrator does): Locust's worker
    tells the master it quits and then stops its users without reporting again, so its last
    report and its requests in flight vanished. It now stops, reports, and only then quits."""
    with (
        SimProcess(slots=16, iter_base=0.003, iter_per_seq=0.0002) as sim,
        _cluster(tmp_path, sim, users=8, run_time="14s") as cluster,
    ):
        cluster.wait_reported(2)
        cluster.workers[0].send_signal(signal.SIGTERM)
        cluster.workers[0].wait(timeout=30)
        rc, out = cluster.finish()
    assert rc in (0, 1), out[-3000:]
    r = json.loads((tmp_path / "r.json").read_text())
    _every_request_counted_once(r, tmp_path / "records.jsonl")
    left = [w for w in r["workers"] if w["left_at"]]
    assert len(left) == 1 and left[0]["final_report"] and not left[0]["lost_at"], r["workers"]
    assert re.search(r"worker \S+ left \d+ s into the run \(its final report is in\)", out), out[-3000:]


def test_a_sigkilled_workers_requests_in_flight_are_counted_lost(tmp_path):
    """M2: a worker SIGKILLed mid-run: what it had in flight at its last report never gets an
    outcome. The figures say so: `lost` in the summary (printed and written), on the worker's row,
    and the `workers_lost` validity flag; sent == ok + failed + cancelled + lost."""
    with (
        SimProcess(slots=16, iter_base=0.004, iter_per_seq=0.0002) as sim,
        # long enough for the master to find it missing (hub.WORKER_LIVENESS s) while the test runs
        _cluster(tmp_path, sim, users=8, run_time="20s") as cluster,
    ):
        cluster.wait_reported(2)
        cluster.workers[0].kill()
        rc, out = cluster.finish()
    assert rc in (0, 1), out[-3000:]
    r = json.loads((tmp_path / "r.json").read_text())
    s = r["summary"]
    lost = [w for w in r["workers"] if w["lost_at"]]
    assert len(lost) == 1, r["workers"]
    assert lost[0]["lost"] > 0 and s["lost"] == lost[0]["lost"]  # 4 users, each with a request in flight
    assert s["workers_lost"] == 1 and "workers_lost" in r["validity"]["flags"]
    assert s["sent"] == s["finished"] + s["lost"]
    _balanced(s)
    assert re.search(rf"lost {s['lost']},", out) and "workers lost: 1" in out, out[-3000:]


def _read_until(proc: subprocess.Popen, needles: set[str], seen: list[str], timeout: float = 60) -> None:
    """Read the master's merged output line by line until every needle has appeared (bounded)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    left = set(needles)
    while left and time.monotonic() < deadline:
        if not sel.select(timeout=deadline - time.monotonic()):
            break
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        left = {n for n in left if n not in line}
    if left:
        raise AssertionError(f"never saw {sorted(left)}:\n{''.join(seen)[-3000:]}")


def test_a_worker_stalled_at_stop_still_gets_its_final_report_in(tmp_path):
    """A worker whose event loop stalls (CPU starved beside the server, as on a 2-core CI machine
    beside vLLM) misses its heartbeats and Locust marks it missing. The master asked only the live
    workers for a final report, so a stall at the end of a run dropped the stalled worker's last
    requests from the figures (a CI run: 10 sent, 11 in the record logs) and counted it lost. It
    is now asked and waited for (bounded) like the others, and not counted lost once it answers.
    The stall here outlasts the master's patience (hub.WORKER_LIVENESS heartbeats)."""
    with (
        SimProcess(slots=16, iter_base=0.02, iter_per_seq=0.0002) as sim,
        # --stop-timeout 8: the master waits up to 18 s for final reports
        _cluster(tmp_path, sim, users=4, run_time="6s", extra=("--stop-timeout", "8")) as cluster,
    ):
        seen: list[str] = []
        cluster.wait_reported(2)
        cluster.workers[1].send_signal(signal.SIGSTOP)  # its requests go on at the server; it reads none
        try:
            _read_until(cluster.master, {"setting state to missing", "--run-time limit reached"}, seen)
            try:  # the stall goes on until the master ends (it gave up on the worker) or 3 s more
                cluster.master.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        finally:
            cluster.workers[1].send_signal(signal.SIGCONT)
        rc, out = cluster.finish()
        out = "".join(seen) + out
    assert rc in (0, 1), out[-3000:]
    r = json.loads((tmp_path / "r.json").read_text())
    _every_request_counted_once(r, tmp_path / "records.jsonl")
    assert all(w["final_report"] for w in r["workers"]), r["workers"]


# ---- every section of every kind of run, checked as it is written (report/accounting.py) ----

RUNS = {
    # a closed loop with client cancellations and a warm-up of each user's first 2 requests: the
    # warm-up section had no client_cancelled (sent 76 = ok 36 + failed 12, 28 unaccounted)
    "closed-cancel-warmup": ("-u", "4", "-t", "4s", "--workers", "0", "--seed", "3",
                             "--cancel", "0.4:after=3tok", "--warmup-requests", "2"),
    "replay-warmup": ("--synthetic", "requests=40,input=8,output=6,rate=20", "--replay", "--run-warmup", "0.5s",
                      "--cancel", "0.3:after=2tok", "--seed", "3"),
    "ladder": ("--ladder", "concurrency:1,3", "--step-duration", "2s", "--warmup", "0.5s", "--no-early-stop",
               "--cancel", "0.3:after=2tok", "--seed", "3"),
    "two-workers": ("-u", "4", "-t", "4s", "--workers", "2", "--warmup-requests", "1",
                    "--cancel", "0.3:after=3tok", "--seed", "3"),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_every_section_of_a_run_adds_up_as_written(tmp_path, sims, kind):
    """sent == ok + failed by kind + cancelled + client_cancelled + lost in the run, each step, the
    warm-up and each group, checked on write (report.accounting.count_problems): a file whose
    counts do not add up carries `count_problems` and fails its `counts` gate."""
    sim = sims(slots=8, iter_base=0.004)
    results = tmp_path / "r.json"
    p = run_cli("--host", sim.url, *RUNS[kind], "--max-tokens-cap", "24", "--results", str(results), timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    doc = json.loads(results.read_text())
    assert "count_problems" not in doc and count_problems(doc) == [], doc.get("count_problems")
    assert "counts" not in [g["name"] for g in doc["gates"]]
    warm = doc.get("warmup")
    if kind in ("closed-cancel-warmup", "replay-warmup", "two-workers"):
        assert warm is not None and warm["sent"] > 0, warm
        assert section_problem(warm) is None and "client_cancelled" in warm, warm
    if kind == "closed-cancel-warmup":
        assert warm["client_cancelled"] > 0, warm  # the old section left these out
        assert f"cancelled by the client {warm['client_cancelled']}" in p.stdout
    if kind == "ladder":
        assert len(doc["steps"]) >= 2
    assert sum(doc["summary"]["outcomes"].values()) + doc["summary"]["lost"] == doc["summary"]["sent"]


def test_a_section_that_does_not_add_up_is_named():
    """The check itself: each part of the identity, and the failures by kind."""
    good = {"sent": 10, "ok": 5, "failed": 2, "cancelled": 1, "client_cancelled": 1, "lost": 1,
            "outcomes": {"ok": 5, "http_error": 2, "cancelled": 1, "client_cancelled": 1}}  # fmt: skip
    assert section_problem(good) is None
    assert section_problem({**good, "client_cancelled": 0}) == (
        "sent 10 != ok 5 + failed 2 + cancelled 1 + client_cancelled 0 + lost 1"
    )
    assert "failures by kind" in section_problem({**good, "outcomes": {**good["outcomes"], "http_error": 1,
                                                                       "timeout": 2}})  # fmt: skip
    group = {"finished": 3, "ok": 2, "failed": 1, "cancelled": 0, "client_cancelled": 0, "failures": {"timeout": 1}}
    doc = {"summary": {**good, "by_endpoint": {"a": group, "b": {**group, "finished": 4}}},
           "steps": [{"step": 1, **good, "lost": 0}], "warmup": {**good, "sent": 9}}  # fmt: skip
    problems = count_problems(doc)
    assert [x.split(":")[0] for x in problems] == ["summary.by_endpoint[b]", "warmup", "steps[0] (step 1)"], problems


def test_requests_in_flight_after_a_workers_final_report_are_lost_as_it_says():
    """A worker whose requests outlive its drain says "the master counts them lost"; the master
    counted them nowhere (a worker that answered its final report had "nothing lost"), so sent !=
    ok + cancelled + lost. Now they are lost unless a later report brings their outcome before
    the run's end (then they are what it says: cancelled); a report after the end is not merged."""
    from locust.env import Environment

    from llm_locust.metrics.aggregate import Aggregate
    from llm_locust.runtime.hub import REPORT_KEY, MasterHub

    def report(sent: int, ok: int, cancelled: int, in_flight: int) -> dict:
        agg = Aggregate()
        agg.add_sent(sent)
        for i in range(ok):
            agg.add(make_record(t0=100.0 + i))
        for i in range(cancelled):
            agg.add(make_record(t0=200.0 + i, outcome=Outcome.CANCELLED))
        return {REPORT_KEY: {"steps": {"0": agg.to_wire()}, "in_flight": in_flight, "idle": False, "final": 1}}

    def run(late: str) -> dict:
        hub = MasterHub(Environment())
        hub.final_token = 1  # the master asked for final reports
        hub.merge_report("w1", report(sent=10, ok=6, cancelled=1, in_flight=3))  # the final report
        if late == "before the end":
            hub.merge_report("w1", report(sent=0, ok=0, cancelled=3, in_flight=0))
        hub.account_lost()
        if late == "after the end":
            hub.merge_report("w1", report(sent=0, ok=0, cancelled=3, in_flight=0))
        s = figures(hub.total)
        assert section_problem(s) is None and s["workers_lost"] == 0, s
        return {k: s[k] for k in ("sent", "ok", "cancelled", "lost")}

    assert run("never") == {"sent": 10, "ok": 6, "cancelled": 1, "lost": 3}
    assert run("after the end") == {"sent": 10, "ok": 6, "cancelled": 1, "lost": 3}
    assert run("before the end") == {"sent": 10, "ok": 6, "cancelled": 4, "lost": 0}


# ---- a server's own token counts, checked against what was read (protocols.base count_believed) ----

INFLATING_SERVER = r"""
import json, socket, sys, threading
count = int(sys.argv[1])
def event(obj): return b"data: " + json.dumps(obj).encode() + b"\n\n"
def chunk(delta, **more): return event({"id": "c", "object": "chat.completion.chunk", "choices": [delta], **more})
def tok(w): return chunk({"index": 0, "delta": {"content": w}})
end = chunk({"index": 0, "delta": {}, "finish_reason": "stop"},
            usage={"prompt_tokens": 5, "completion_tokens": count, "total_tokens": count + 5})
body = tok("hi") + tok(" there") + end + b"data: [DONE]\n\n"
models = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
def serve(c):
    with c:
        while True:
            data = b""
            while b"\r\n\r\n" not in data:
                more = c.recv(65536)
                if not more: return
                data += more
            head, _, rest = data.partition(b"\r\n\r\n")
            n = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"): n = int(line.split(b":")[1])
            while len(rest) < n: rest += c.recv(65536)
            js, ctype = (models, b"application/json") if head.startswith(b"GET") else (body, b"text/event-stream")
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n\r\n" % len(js) + js)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@pytest.mark.parametrize("count", [999_999_999, 3])
def test_a_server_inflating_its_token_counts_fails_the_run(tmp_path, count):
    """usage.completion_tokens 999999999 on 2-token replies gave "3110420631421.1 output tokens/s",
    exit 0, gates passed. The count read from the stream is used instead, the run is flagged
    (usage_rejected) and its server_counts gate fails; an honest count (3 on 2 chunks) is used."""
    srv = subprocess.Popen([sys.executable, "-c", INFLATING_SERVER, str(count)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline())
        results = tmp_path / "r.json"
        p = run_cli("--host", f"http://127.0.0.1:{port}", "--api", "openai-chat", "--model", "m", "-u", "2",
                    "-t", "2s", "--server-metrics", "off", "--results", str(results), timeout=120)  # fmt: skip
    finally:
        srv.kill()
        srv.wait(10)
    doc = json.loads(results.read_text())
    s = doc["summary"]
    assert s["ok"] > 10, p.stdout[-2000:] + p.stderr[-2000:]
    if count == 3:
        assert p.returncode == 0 and s["n_out_sources"] == {"usage": s["ok"]} and s["tokens_out"] == 3 * s["ok"]
        assert "usage_rejected" not in doc["validity"]["flags"]
        return
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert s["n_out_sources"] == {"usage_rejected": s["ok"]} and s["tokens_out"] == 2 * s["ok"], s
    assert s["output_tokens_per_s"] < 1e6, s["output_tokens_per_s"]
    assert "usage_rejected" in doc["validity"]["flags"]
    gate = next(g for g in doc["gates"] if g["name"] == "server_counts")
    assert not gate["passed"] and gate["line"].startswith(f"the server's output token counts of {s['ok']} of")
    assert "FAIL: the server's output token counts" in p.stdout
    assert "exit 1: the server's output token counts" in p.stderr


def test_a_whole_tool_call_in_one_delta_is_believed_up_to_the_length_asked():
    """Real vLLM with --tool-choice required sends the call whole once parsed: 96 tokens in 2
    deltas. 96 > 8 x 2 + 16, so the first rule failed an honest run (CI, test_real_vllm); the
    length the request asked for bounds what an honest server sends, and a lie past it is caught."""
    from llm_locust.metrics.records import SOURCE_REJECTED, SOURCE_USAGE
    from llm_locust.protocols.base import StreamState, count_believed, resolve_tokens

    assert not count_believed(96, 2) and count_believed(96, 2, asked=96)
    assert not count_believed(999_999_999, 2, asked=96) and not count_believed(200, 2, asked=96)
    state = StreamState()
    state.usage_out = 96
    assert resolve_tokens(state, 2, asked=96)[:2] == (96, SOURCE_USAGE)
    assert resolve_tokens(state, 2)[:2] == (2, SOURCE_REJECTED)  # no length asked: the factor alone
