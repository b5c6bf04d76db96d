"""Issue 24 item 7: one client-validity rule, judged on what corrupts a figure, stated once.

The docs said "suspect above 5 ms loop-lag p99"; the code judged loop lag over 10 ms in more than
5% of samples, the CPU and a 50 ms send-delay p99. Measured against the simulator's token log
(benchmarks/bench_validity.py, docs/metrics.md "Client validity"): with the kernel's receive time
on every read, a token is timed wrong only when it was read together with a later one, and loop
lag alone misjudges both ways. The rule now counts those reads (token gaps of 0 in paced streams),
the send delay, and the loop lag only where reads were timed as they returned; its text comes
from one function (metrics/aggregate.py validity_rule) that the docs and the report quote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import read_jsonl, run_cli, stream_record

from llm_locust.metrics.aggregate import (
    READ_TOGETHER_SHARE,
    Aggregate,
    client_line,
    figures,
    validity,
    validity_rule,
)
from llm_locust.metrics.records import RequestRecord
from llm_locust.sim.process import SimProcess

ROOT = Path(__file__).resolve().parent.parent


def _paced(i: int, gap: float = 0.02, together: tuple[int, ...] = (), clock: str | None = None) -> RequestRecord:
    """A 40-token stream, one token every `gap` s, the tokens at `together` read with the one before."""
    return stream_record(i, tokens=40, gap=gap, together=together, clock=clock)


def _client(records, late: float = 0.0, samples: int = 100) -> dict:
    """The client figures of these requests, with `samples` loop-lag samples of which a share
    `late` are over 10 ms."""
    agg = Aggregate()
    for r in records:
        agg.add(r)
    n_late = round(samples * late)
    for ms in [1.0] * (samples - n_late) + [25.0] * n_late:
        agg.hist["loop_lag"].record(ms / 1000)
    return figures(agg)["client"]


def _check(client: dict, name: str) -> dict:
    return next(c for c in client["checks"] if c["check"] == name)


def test_tokens_read_together_by_a_late_client_make_it_suspect():
    """2 of every 39 gaps read together (5.1%) while the loop was late in 3% of its samples: the old
    rule (loop lag over 10 ms in more than 5% of the samples) said valid."""
    client = _client((_paced(i, together=(10, 20), clock="kernel") for i in range(50)), late=0.03)
    c = _check(client, "read_together")
    assert c["tripped"] and c["value"] == pytest.approx(2 / 39) and c["samples"] == 50 * 39
    assert not client["valid"] and client["reasons"] == ["tokens read together in 5.1% of 1,950 gaps (limit 1%)"]
    assert client["read_together"] == {
        "gaps": 1950,
        "together": 100,
        "share": pytest.approx(2 / 39),
        "requests": 50,
        "first_together": 0,
        "first_share": 0.0,
        "first_waited": 0,
    }
    few = _client([*(_paced(i) for i in range(150)), _paced(150, together=(5, 6, 7))], late=0.03)  # 3 of 5,889
    assert few["valid"] and _check(few, "read_together")["value"] == pytest.approx(3 / 5889)
    short = _client((_paced(i, together=(10, 20)) for i in range(20)), late=0.03)  # 780 gaps: too few for 1%
    assert short["valid"] and not _check(short, "read_together")["tripped"]


def test_tokens_a_prompt_client_read_together_were_sent_together():
    """The simulator on a busy machine falls behind and writes two tokens at once: 0.43% of its
    gaps were 0, none read late, the loop-lag p99 5 ms. Such gaps are the server's."""
    client = _client((_paced(i, together=(10, 20), clock="kernel") for i in range(50)), late=0.0)
    c = _check(client, "read_together")
    assert client["valid"] and not c["tripped"] and c["value"] == pytest.approx(2 / 39)
    assert c["text"].endswith(
        "while the client kept up (loop late in 0 of its 100 samples, 0.0%): the server sent them together"
    )


def test_one_late_wake_in_a_short_run_does_not_make_a_servers_pairs_the_clients():
    """The CI run of 2026-12-02: a 4 s run against a server writing 3 of every 39 gaps together
    (7.7%), and one of the loop's ~35 samples 12 ms late (2.9%, over the 1% share): judged
    suspect. A 12 ms stall joins only the tokens of those 12 ms; it takes 3 late samples."""
    one = _client((_paced(i, together=(10, 20, 30), clock="kernel") for i in range(84)), late=1 / 35, samples=35)
    c = _check(one, "read_together")
    assert one["valid"] and not c["tripped"] and c["late_samples"] == 1, one
    assert c["text"].endswith("(loop late in 1 of its 35 samples, 2.9%): the server sent them together")
    three = _client((_paced(i, together=(10, 20, 30), clock="kernel") for i in range(84)), late=3 / 35, samples=35)
    assert not three["valid"] and _check(three, "read_together")["late_samples"] == 3


def test_first_tokens_read_with_the_second_make_the_client_suspect():
    """TTFT p99 moves once more than 1% of the first tokens were read with the second: at 1,000
    streams 0.96% of the gaps were 0 (under the gaps' limit) and TTFT p99 was 41% late."""
    records = [_paced(i, together=(1,) if i % 40 == 0 else (), clock="kernel") for i in range(400)]  # 2.5%
    client = _client(records, late=0.05)
    c = _check(client, "read_together")
    assert c["value"] < 0.01 and c["first_share"] == pytest.approx(0.025) and c["tripped"]
    assert client["reasons"] == [
        "tokens read together in 0.1% of 15,600 gaps (limit 1%), first tokens with the second in 2.5% of 400 requests"
    ]


def _first_with_second(i: int, wait: float | None) -> RequestRecord:
    r = _paced(i, together=(1,) if i % 40 == 0 else (), clock="kernel")  # 2.5% of first tokens
    r.first_wait = wait if i % 40 == 0 else 0.0
    return r


def test_first_tokens_read_late_are_told_by_how_long_their_reads_data_waited():
    """The study's defect (docs/accuracy.md, sitting 3): at 100 streams 1.5% of first tokens were
    read with the second, 10-30 ms late, while the loop was late in fewer than 3 of its samples,
    and the check said the server had sent them together. A pair in a read whose newest data came
    10 ms before the read returned waited at least that: the client was not reading. Suspect when
    most pairs were so, whatever the loop-lag samples; the same pairs read as they came are the
    server's."""
    late = _client([_first_with_second(i, 0.010) for i in range(400)], late=0.0)
    c = _check(late, "read_together")
    assert c["tripped"] and not late["valid"] and c["first_waited_share"] == pytest.approx(0.025), c
    assert late["read_together"]["first_waited"] == 10
    assert late["reasons"] == [
        "tokens read together in 0.1% of 15,600 gaps (limit 1%), first tokens with the second in 2.5% of 400 "
        "requests (10 of them read over 1 ms after their data came)"
    ]
    for wait in (0.00002, None):  # read 20 us after they came, or not measured (TLS, other systems)
        sent = _client([_first_with_second(i, wait) for i in range(400)], late=0.0)
        c = _check(sent, "read_together")
        assert sent["valid"] and not c["tripped"] and c["text"].endswith("the server sent them together"), c
    # 2 of the 10 pairs read late, the others as they came: not most of them, the server's
    mixed = _client([_first_with_second(i, 0.010 if i % 200 == 0 else 0.0) for i in range(400)], late=0.0)
    assert mixed["valid"] and mixed["read_together"]["first_waited"] == 2, mixed["read_together"]


def test_a_server_that_writes_every_token_at_once_is_not_read_together():
    """Against the simulator in fast mode every gap is 0 and the figures are exact (the server wrote
    them together): a stream faster than 1 ms a token is not paced and not counted."""
    client = _client((_paced(i, gap=0.0) for i in range(100)), late=0.5)
    assert client["read_together"]["gaps"] == 0 and not _check(client, "read_together")["tripped"]


def test_loop_lag_is_judged_only_where_reads_were_not_kernel_stamped():
    def lagging(clock):
        agg = Aggregate()
        for i in range(30):
            agg.add(_paced(i, clock=clock))
        for ms in [1.0] * 80 + [25.0] * 20:  # 20% of the samples over 10 ms
            agg.hist["loop_lag"].record(ms / 1000)
        return figures(agg)["client"]

    kernel = lagging("kernel")  # the old rule: SUSPECT, beside exact figures
    lag = _check(kernel, "loop_lag")
    assert kernel["valid"] and not lag["tripped"] and lag["judged"] is False and "not judged" in lag["text"]
    user = lagging("user")  # TLS: the read's time is late by the lag itself
    assert not user["valid"] and user["reasons"] == ["event-loop lag over 10 ms in 20.0% of 100 samples (limit 5%)"]


def test_the_counts_merge_across_workers():
    a, b, one = Aggregate(), Aggregate(), Aggregate()
    for i in range(60):
        rec = _paced(i, together=(3,) if i % 3 == 0 else (), clock="kernel")
        (a if i % 2 else b).add(rec)
        one.add(rec)
    master = Aggregate()
    for w in (a, b):
        master.merge_wire(w.to_wire())
    counts = ("paced_gaps", "gaps_together", "paced_requests", "first_together", "kernel_clock")
    assert [getattr(master.client, n) for n in counts] == [getattr(one.client, n) for n in counts]
    assert [getattr(master.client, n) for n in counts] == [60 * 39, 20, 60, 0, 60]
    assert figures(master)["client"] == figures(one)["client"]


def test_the_rule_is_stated_once_and_quoted_by_the_docs_and_the_report():
    rule = validity_rule()
    for threshold in (
        "more than 1% of the token gaps",
        "1% of the first tokens",
        "p99 above 50 ms",
        "over 10 ms in more than 5%",
    ):
        assert threshold in rule
    docs = (ROOT / "docs" / "metrics.md").read_text()
    assert rule in " ".join(docs.split()), "docs/metrics.md must quote validity_rule() word for word"
    report = (ROOT / "docs" / "report.md").read_text()
    assert "5 ms" not in report.split("client_saturated", 1)[1].split("\n", 1)[0]
    from llm_locust.report.html import FLAG_TEXT

    assert rule in FLAG_TEXT["client_saturated"]


def test_the_summary_line_names_each_check_with_its_limit():
    client = _client(_paced(i, clock="kernel") for i in range(30))
    assert client_line(client) == (
        "client: valid: tokens read together in 0.0% of 1,170 gaps (limit 1%); send delay against the schedule "
        "p99 0.0 ms (limit 50 ms); loop lag p99 1.0 ms, CPU max 0%"
    )
    bad = _client((_paced(i, together=(10, 20), clock="kernel") for i in range(50)), late=0.1)
    assert client_line(bad).startswith(
        "client: SUSPECT (figures may be distorted): tokens read together in 5.1% of 1,950 gaps (limit 1%); loop lag"
    )


# --- a real run: the client's own count through the whole path ----------------------------

PACED_SERVER = r"""
import random, socket, sys, threading, time
pairs = sys.argv[1] == "pairs"
tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 40
first_within = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0  # the first token up to this late
text = b'{"id":"c","object":"text_completion","model":"m",'
event = b"data: " + text + b'"choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n'
usage = b'"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":40,"total_tokens":44}}'
end = b"data: " + text + usage + b"\n\ndata: [DONE]\n\n"
ok = b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
def chunk(b): return b"%x\r\n" % len(b) + b + b"\r\n"
def serve(c):
    with c:
        data = b""
        while b"\r\n\r\n" not in data:
            more = c.recv(65536)
            if not more: return
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        n = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"): n = int(line.split(b":")[1])
        while len(body) < n: body += c.recv(65536)
        if head.startswith(b"GET /v1/models"):
            js = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
            c.sendall(ok + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(js) + js)
            return
        if not head.startswith(b"POST"):
            c.sendall(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            return
        c.sendall(ok + b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        if first_within:
            time.sleep(random.uniform(0.0, first_within))
        k = 0
        while k < tokens:
            if pairs and k in (9, 19, 29):  # tokens 10, 20, 30 written with the one before them
                c.sendall(chunk(event) + chunk(event)); k += 2
            else:
                c.sendall(chunk(event)); k += 1
            time.sleep(0.004)
        c.sendall(chunk(end) + b"0\r\n\r\n")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


STALLING_LOCUSTFILE = """
import time

import gevent

from llm_locust.users import StreamingUser  # noqa: F401


def _stall():
    while True:
        gevent.sleep(0.05)
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:  # the loop blocked for 30 ms (time.sleep is gevent's: it yields)
            pass


gevent.spawn(_stall)
"""


def _run_paced(tmp_path, server_args: list[str], locustfile_text: str | None, *args: str):
    """A run of `llm-locust run ARGS` against PACED_SERVER (started with `server_args`), with the
    locustfile `locustfile_text` when given: (the CLI's completed process, the results' client)."""
    srv = subprocess.Popen([sys.executable, "-c", PACED_SERVER, *server_args], stdout=subprocess.PIPE, text=True)
    locust = ()
    if locustfile_text is not None:
        locustfile = tmp_path / "locustfile.py"
        locustfile.write_text(locustfile_text)
        locust = ("-f", str(locustfile))
    results = tmp_path / "r.json"
    try:
        port = int(srv.stdout.readline())
        common = ("--host", f"http://127.0.0.1:{port}", "--api", "openai-completions", "--model", "m")
        p = run_cli(*locust, *common, *args, "--server-metrics", "off", "--results", str(results), timeout=120)
    finally:
        srv.kill()
        srv.wait(10)
    return p, json.loads(results.read_text())["summary"]["client"]


@pytest.mark.timing  # whether this client kept up: never beside the slow tier's parallel shards
@pytest.mark.parametrize(
    "server, stall, valid",
    [
        ("pairs", False, True),  # 3 of 39 gaps 0 (7.7%), sent together; the client kept up: valid
        ("apart", True, False),  # every token 4 ms apart, the client's loop blocked 30 ms in 80: suspect
        ("apart", False, True),
    ],
)
def test_a_run_tells_tokens_it_read_late_from_tokens_sent_together(tmp_path, server, stall, valid):
    """A server pacing 40 tokens 4 ms apart ("pairs": tokens 10, 20 and 30 written with the one
    before them), and a client whose event loop is blocked 30 ms in every 80 (a locustfile that
    stalls it) or not: only the late client's tokens read together make its figures suspect."""
    p, client = _run_paced(
        tmp_path, [server], STALLING_LOCUSTFILE if stall else None, "-u", "4", "-t", "4s", "--max-tokens", "40"
    )
    together, check = client["read_together"], _check(client, "read_together")
    # the run's summary prints the rule's verdict and the checks against their limits
    line = " ".join(p.stdout[p.stdout.index("client: ") :].split("\n")[0:3])
    assert line.startswith("client: valid: tokens read together in" if valid else "client: SUSPECT"), p.stdout[-1500:]
    assert together["gaps"] >= 1000, (p.stdout[-2000:], p.stderr[-2000:])
    assert client["valid"] is valid, client
    if server == "pairs":
        # at least the server's 3 of 39; above it by what an OS that takes the CPU away joins
        # besides (0.0928 in one CI run, 1.5 points over: the "apart" case's 0.75% and more)
        assert 3 / 39 - 0.005 <= together["share"] <= 3 / 39 + 0.03, client
        assert "the server sent them together" in check["text"], check
    elif stall:
        assert together["share"] > 0.05 and check["tripped"] and check["late_share"] > 0.01, client
        assert client["reasons"][0].startswith("tokens read together in "), client
    else:
        # near 0, not at it: an OS that takes the CPU from the client for over 4 ms (between its lag
        # samples, ~100 ms apart) joins two tokens: 27 of 3,588 gaps (0.75%) in one CI run, 1.5% in
        # another (the verdict still valid, the loop never late). Over the rule's share, the check
        # must say why it did not trip: the client kept up, so the server (here the OS) joined them
        assert together["share"] <= READ_TOGETHER_SHARE + 0.02, client
        if together["share"] > READ_TOGETHER_SHARE:
            assert "while the client kept up" in check["text"] and not check["tripped"], check


SHORT_STALLS_LOCUSTFILE = """
import time

import gevent

from llm_locust.users import StreamingUser  # noqa: F401


def _stall():
    while True:
        gevent.sleep(0.010)
        end = time.perf_counter() + 0.006
        while time.perf_counter() < end:  # the loop blocked 6 ms: under the loop-lag limit (10 ms)
            pass


gevent.spawn(_stall)
"""


@pytest.mark.timing  # whether this client kept up: never beside the slow tier's parallel shards
def test_first_tokens_a_client_read_late_between_its_lag_samples_make_it_suspect(tmp_path):
    """The study's defect at 100 streams (docs/accuracy.md, sitting 3): first tokens read with the
    second while the loop-lag samples saw nothing late. Here the client's loop is blocked 6 ms in
    every 16, under the lag limit, against a server pacing 8 tokens 4 ms apart, its first 0-20 ms
    after the head: a first token that comes in the first half of a stall waits for the second.
    Before, the check said the server had sent them together and judged the client valid; how long
    the first reads' newest data had waited in the socket (its kernel receive time against the
    read's) now proves them read late."""
    # the first token 0-20 ms after the head: a closed loop's sends follow the stalls (a user sends
    # as the loop comes back), and a first token written at once came before the next stall
    # (0.8% of first tokens with the second in one CI run)
    _, client = _run_paced(
        tmp_path, ["apart", "8", "0.02"], SHORT_STALLS_LOCUSTFILE, "-u", "8", "-t", "4s", "--max-tokens", "8"
    )
    together, check = client["read_together"], _check(client, "read_together")
    assert together["requests"] >= 200 and together["first_share"] > 2 * READ_TOGETHER_SHARE, together
    assert check["late_samples"] < 3, check  # the loop-lag samples saw no stall over 10 ms
    # a stall that ends within 1 ms of the second token's arrival leaves no trace: most, not all
    assert 2 * together["first_waited"] > together["first_together"], together
    assert check["tripped"] and client["valid"] is False, check
    assert "read over 1 ms after their data came" in check["text"], check


def test_sends_held_at_the_in_flight_cap_are_not_the_clients_lateness(tmp_path):
    """A replay due faster than --max-in-flight 1 lets it send: its sends wait at the cap by
    design (the schedule lag grows, as TTFT incl. queue does), and that is the server's queue, not
    a late client: the send-delay check counts from when the cap let each go (before: the run was
    judged suspect, 'send delay p99' in hundreds of ms). Helper J's report."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 0.02, "input_tokens": 8, "output_tokens": 8}) + "\n"
                             for i in range(60)))  # fmt: skip
    results, log = tmp_path / "r.json", tmp_path / "rec.jsonl"
    with SimProcess(slots=4, iter_base=0.01, iter_per_seq=0.0, iter_per_prefill_token=0.0) as sim:
        p = run_cli(
            "--host", sim.url, "--api", "openai-completions", "--trace", str(trace), "--replay",
            "--max-in-flight", "1", "--results", str(results), "--record-log", str(log), timeout=120,
        )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(results.read_text())["summary"]
    assert s["latency"]["schedule_lag"]["p99"] > 0.5  # held: ~60 x 80 ms of queue against a 1.2 s schedule
    held = [r for r in read_jsonl(log) if r["released"] is not None]
    assert len(held) > 40 and all(r["released"] >= r["sched"] for r in held)
    check = _check(s["client"], "send_delay")
    assert not check["tripped"] and check["value"] < 0.05, check
    assert s["client"]["valid"], s["client"]


def test_no_samples_is_unknown_never_valid():
    """A master whose workers' figures never came (the README's plain-Locust master), or a run of
    a handful of requests: no check had the samples to judge. The old verdict was "valid"."""
    empty = figures(Aggregate())["client"]
    assert empty["verdict"] == "unknown" and empty["valid"]  # nothing tripped, nothing vouched for
    assert client_line(empty).startswith("client: unknown (too few samples for any check to judge): ")
    few = _client(_paced(i, clock="kernel") for i in range(5))  # 195 gaps, 5 sends: under every minimum
    assert few["verdict"] == "unknown" and client_line(few).startswith("client: unknown")
    enough = _client(_paced(i, clock="kernel") for i in range(30))
    assert enough["verdict"] == "valid" and client_line(enough).startswith("client: valid: ")
    bad = _client((_paced(i, together=(10, 20), clock="kernel") for i in range(50)), late=0.1)
    assert bad["verdict"] == "suspect" and not bad["valid"]
    assert "client_saturated" not in validity(figures(Aggregate()), 0.05)


def test_the_readmes_plain_locust_master_says_unknown_on_too_few_samples(tmp_path, sims):
    """The README's plain-Locust master and worker (`locust -f locustfiles/streaming.py --master
    ...`), ramping at 1 user/s (its line had no -r): the test ends before spawning does, so the
    client sampled nothing (the samples are taken after spawning), and a handful of requests is
    under every check's minimum. The summary said "client: valid" on 0 samples; it says
    "unknown", and so does the results' verdict."""
    from support import Cluster

    sim = sims(slots=2, iter_base=0.05)  # ~1.5 s a reply: a handful of requests in 6 s
    results = tmp_path / "r.json"
    with Cluster("--expect-workers", "1", "-u", "20", "-r", "1", "-t", "6s", "--host", sim.url,
                 "--api", "openai-completions", "--max-tokens-cap", "24", "--results", str(results),
                 workers=1) as cluster:  # fmt: skip
        rc, out = cluster.finish()
    assert results.exists(), out[-3000:]  # 20 users at 1/s: spawning never ends within 6 s
    client = json.loads(results.read_text())["summary"]["client"]
    assert client["verdict"] == "unknown" and client["valid"], client
    assert "client: unknown (too few samples for any check to judge)" in " ".join(out.split()), out[-3000:]
    assert rc == 0, out[-3000:]
