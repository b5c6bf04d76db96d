"""The end of a run as a value (report/outcome.py): gates, exit codes, interruption and the cut
step, without starting a process."""

from __future__ import annotations

import json

import pytest
from test_metrics import make_record

from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.records import Outcome, WorkFacts
from llm_locust.report import outcome
from llm_locust.report.outcome import Ended, Interruption
from llm_locust.settings import derive


def settings(*args):
    return derive.resolve(None, derive.cli_values(derive.run_parser().parse_known_args(list(args))[0]))


def aggregate(ok=10, failed=0, cancelled=0, slos=None, ttft=0.2):
    agg = Aggregate()
    agg.add_sent(ok + failed + cancelled)
    for i in range(ok):
        agg.add(make_record(t0=100.0 + i, ttft=ttft), slos=slos)
    for i in range(failed):
        agg.add(make_record(t0=200.0 + i, outcome=Outcome.HTTP_ERROR), slos=slos)
    for i in range(cancelled):
        agg.add(make_record(t0=300.0 + i, outcome=Outcome.CANCELLED), slos=slos)
    return agg


def ended(agg, s=None, **kw):
    return Ended(settings=s or settings(), total=agg, steps={}, started_at=1000.0, ended_at=1100.0, **kw)


def test_a_healthy_run_passes_its_gates_and_exits_0():
    out = outcome.build(ended(aggregate(ok=10)))
    assert out.exit_code == 0 and out.reasons == []
    assert [g["name"] for g in out.results["gates"]] == ["answered", "error_rate"]
    assert all(g["passed"] for g in out.results["gates"])
    assert out.text().splitlines()[-2].startswith("pass: error rate 0.0%")
    assert out.text().splitlines()[-1].startswith("next: --slo ttft=500ms")  # neither an SLO nor a ladder
    assert "next:" not in outcome.build(ended(aggregate(ok=10), settings("--slo", "ttft=1s"))).text()
    assert all(len(line) <= 80 for line in out.text(80).splitlines())
    json.dumps(out.results)  # a document


def test_no_request_answered_fails_even_with_no_error_counted():
    """A slow-loris server: every request in flight at the stop (cancelled), none failed, error
    rate 0%: the old code exited 0; the run answered nothing and says so."""
    out = outcome.build(ended(aggregate(ok=0, cancelled=4)))
    assert out.exit_code == 1
    assert out.reasons == [
        "no request was answered: 4 sent, 0 failed, 4 cancelled at the stop (in flight), 0 cancelled by the client "
        "(--cancel), 0 lost"
    ]
    assert "FAIL: no request was answered" in out.text()


def test_the_error_rate_gate_names_the_figures():
    out = outcome.build(ended(aggregate(ok=8, failed=2), settings("--max-error-rate", "0.1")))
    assert out.exit_code == 1
    assert out.reasons == ["error rate 20.0% (2 of 10 answered) is above --max-error-rate 10.0%"]


def test_slo_attainment_under_the_threshold_exits_1_and_is_in_the_summary():
    s = settings("--slo", "ttft=100ms")
    slos = s.request_slos
    agg = aggregate(ok=4, slos=slos, ttft=0.05)  # met
    for i in range(6):
        agg.add_sent()
        agg.add(make_record(t0=400.0 + i, ttft=0.5), slos=slos)  # missed
    out = outcome.build(ended(agg, s))
    gate = next(g for g in out.results["gates"] if g["name"] == "slo_attainment")
    assert not gate["passed"] and out.exit_code == 1
    assert gate["line"].startswith("SLO attainment 40.0% (4 of 10 answered met every --slo: ttft 100 ms) is under")
    assert "FAIL: SLO attainment 40.0%" in out.text()
    met = outcome.build(ended(aggregate(ok=10, slos=slos, ttft=0.05), s))
    assert met.exit_code == 0 and any(g["name"] == "slo_attainment" and g["passed"] for g in met.results["gates"])


def test_an_interrupted_run_keeps_its_figures_and_is_not_judged():
    """Even with every gate failing, an interrupted run exits 130 / 143, is marked, and draws no
    verdict."""
    for sig, code in (("SIGINT", 130), ("SIGTERM", 143)):
        i = Interruption(sig, 1050.0, "step 2 of 3 (measurement, level 2)")
        out = outcome.build(ended(aggregate(ok=0, failed=5), settings("--max-error-rate", "0"), interruption=i))
        assert out.exit_code == code
        assert out.results["run"]["interrupted"] == {"signal": sig, "at": 1050.0, "phase": i.phase}
        assert out.results["gates"] == []
        assert f"INTERRUPTED by {sig}" in out.text() and "FAIL" not in out.text()
        assert out.results["summary"]["failed"] == 5  # the figures stay


def test_an_interruption_before_any_request_writes_nothing_and_says_so():
    before = ended(Aggregate(), interruption=Interruption("SIGTERM", 1.0, "during the preflight"))
    before.started_at = None  # no test started
    out = outcome.build(before)
    assert not out.measured and out.exit_code == 143
    assert out.reasons == ["interrupted by SIGTERM before any request"]
    started = outcome.build(ended(Aggregate(), interruption=Interruption("SIGINT", 1.0, "ramp-up")))
    assert started.measured and started.exit_code == 130  # after the start: written, even empty
    assert started.results["summary"]["sent"] == 0 and started.results["run"]["interrupted"]["phase"] == "ramp-up"


def test_a_fail_fast_stop_exits_3_before_the_gates():
    out = outcome.build(ended(aggregate(ok=0, failed=20), stopped_early="the first 20 requests all failed"))
    assert out.exit_code == 3 and out.reasons == ["stopped early: the first 20 requests all failed"]
    assert "STOPPED EARLY: the first 20 requests all failed" in out.text()


def test_an_sla_search_whose_lowest_load_broke_fails_its_gate():
    ladder = {"steps": [], "table": "", "sla": {"reached": "lowest_breaks", "reason": "rate 1 broke ttft"}}
    out = outcome.build(ended(aggregate(ok=10), ladder=ladder))
    assert out.exit_code == 1 and out.reasons == ["the SLA search's lowest load broke its SLOs: rate 1 broke ttft"]


def test_a_cut_step_is_left_out_of_the_efficiency_and_verdict_steps():
    """outcome reads only the steps that count: a cut one stays in the results' ladder, flagged."""
    steps = [
        {"step": 1, "offered": 1, "cut": False, "output_tokens_per_s": 100.0},
        {"step": 2, "offered": 2, "cut": True, "output_tokens_per_s": 10.0},
    ]
    assert outcome._judged(steps) == steps[:1]
    windows = [{"step": 2, "x": 1}, {"step": 1, "x": 0}]
    assert outcome._same_steps(windows, steps[:1]) == [{"step": 1, "x": 0}]


@pytest.mark.parametrize("results", [None, "r.json"])
def test_the_results_carry_the_gates_and_the_run_facts(results):
    s = settings(*(["--results", results] if results else []))
    out = outcome.build(ended(aggregate(ok=3), s, run={"host": "http://h"}, workers_why="one process"))
    r = out.results
    assert r["run"]["host"] == "http://h" and r["run"]["started_at_utc"] == "1970-01-01T00:16:40+00:00"
    assert r["run"]["interrupted"] is None and r["run"]["workers_why"] == "one process"
    assert r["environment"]["server"]["url"] == "http://h"
    assert [g["passed"] for g in r["gates"]] == [True, True]


def test_a_wide_table_is_dealt_into_blocks_within_the_width():
    """Issue 24 item 14: the step table ran to 117-146 columns whatever the terminal. Within 80
    columns it is dealt into blocks of its columns, each repeating the first; every cell is kept;
    a table that fits and prose are left as they are."""
    from llm_locust.report.summary import fit

    table = WIDE  # the step table's columns as analysis.saturation.format_steps writes them
    lines = table.splitlines()
    assert max(len(x) for x in lines) > 80
    out = fit(lines, 80)
    assert max(len(x) for x in out) <= 80, out
    assert sum(1 for x in out if x.startswith("step")) >= 2  # blocks, each naming its rows' step
    for line in lines[2:]:  # every cell of every row is still there
        for cell in line.split():
            assert any(cell in x.split() for x in out), cell
    assert fit(["a  b", "-  -", "1  2", "", "prose " * 20], 80)[:3] == ["a  b", "-  -", "1  2"]


_HEAD = ["step", "offered (users)", "req/s", "tok/s", "TTFT p50/p99 ms", "ITL p50/p99 ms", "cache hit %"]
_HEAD += ["TPOT p50 ms", "E2E p99 ms", "err%", "goodput req/s", "flags"]
_ROWS = [
    ["1", "1", "15.1", "122", "13.3/89.2", "5.37/8.07", "21.7", "5.45", "127", "0.0", "15.1", "-"],
    ["2", "2", "22", "176", "31.8/112", "6.28/32.3", "43.7", "6.02", "154", "0.0", "22", "knee,slo"],
]
_W = [max(len(r[i]) for r in [_HEAD, *_ROWS]) for i in range(len(_HEAD))]
WIDE = "\n".join(  # aligned as analysis.saturation.format_steps aligns the step table
    "  ".join(
        c.ljust(w) if i == len(_W) - 1 else c.rjust(w) for i, (c, w) in enumerate(zip(r, _W, strict=True))
    ).rstrip()
    for r in [_HEAD, ["-" * w for w in _W], *_ROWS]
)


def test_a_test_that_ran_and_sent_nothing_fails_and_says_why():
    """Issue 24 item 3's class: a master that no worker joined before its -t ran out measured
    nothing and exited 0, silently (the README's cluster lines run under load did this)."""
    master = ended(Aggregate(), run={"runner": "MasterRunner"}, workers=[])
    out = outcome.build(master)
    assert not out.measured and out.exit_code == 1
    assert out.reasons == [
        "the test ran 100 s and sent no request: no worker joined the master (start them with --worker; "
        "--expect-workers N waits for them)"
    ]
    warm = Aggregate()
    warm.add_sent(3)
    all_warm = ended(Aggregate())
    all_warm.steps = {outcome.WARMUP_STEP: warm}
    out = outcome.build(all_warm)
    assert out.exit_code == 1 and "every request (3) was warm-up" in out.reasons[0]
    never = ended(Aggregate())
    never.started_at = None  # the web UI, never started: nothing to judge
    assert outcome.build(never).exit_code == 0


# ---- rules the slow tier checked by starting a whole run ----
# Each was a `llm-locust run` (most against the simulator) whose assertions read only what build()
# decides from the figures; the module each came from keeps one run for the wiring (the run
# reaches build(), its exit code and results reach the shell and the file).


def _gate(out, name):
    return next(g for g in out.results["gates"] if g["name"] == name)


def test_an_error_rate_within_the_limit_passes_and_above_it_fails():
    """Half the requests failed (was test_cli's two runs on a simulator answering 50% HTTP 500):
    within --max-error-rate 0.9 the run passes, at the limit too; above --max-error-rate 0.1 it
    fails that gate, exits 1 and says why."""
    for limit in ("0.9", "0.5"):
        out = outcome.build(ended(aggregate(ok=5, failed=5), settings("--max-error-rate", limit)))
        assert out.exit_code == 0 and out.reasons == [], (limit, out.reasons)
        assert _gate(out, "error_rate")["passed"], limit
    out = outcome.build(ended(aggregate(ok=5, failed=5), settings("--max-error-rate", "0.1")))
    assert out.exit_code == 1 and not _gate(out, "error_rate")["passed"]
    assert out.reasons == ["error rate 50.0% (5 of 10 answered) is above --max-error-rate 10.0%"]
    assert "FAIL: error rate 50.0% (5 of 10 answered) is above --max-error-rate 10.0%" in out.text()


def test_the_slo_attainment_threshold_is_an_option():
    """--slo-attainment 0 (was test_gates' run on the simulator against ttft=1ms): a run whose every
    request missed its SLO passes that gate and exits 0; the same figures under the default 95%
    fail it. The option's way from the command line to build() (runtime/plugin.py gather) is
    test_gates' run, which gives --slo-attainment."""
    lenient = settings("--slo", "ttft=1ms", "--slo-attainment", "0")
    strict = settings("--slo", "ttft=1ms")
    assert (lenient.slo_attainment, strict.slo_attainment) == (0, outcome.SLO_ATTAINMENT)

    def run(s):  # every request's TTFT is 200 ms: none meets 1 ms
        agg = aggregate(ok=6, slos=s.request_slos, ttft=0.2)
        return outcome.build(ended(agg, s, slo_attainment=s.slo_attainment))

    out = run(lenient)
    assert out.exit_code == 0 and out.reasons == [] and _gate(out, "slo_attainment")["passed"]
    line = "pass: SLO attainment 0.0% (0 of 6 answered met every --slo: ttft 1 ms) meets --slo-attainment 0%"
    assert line in out.text()
    out = run(strict)
    assert out.exit_code == 1 and not _gate(out, "slo_attainment")["passed"]
    assert out.reasons == [
        "SLO attainment 0.0% (0 of 6 answered met every --slo: ttft 1 ms) is under --slo-attainment 95%"
    ]


def _server(hit_share: float | None) -> dict:
    """The host's /metrics over the run (started_at 1000, ended_at 1100, a read every 10 s):
    vLLM's prefix-cache counters with `hit_share` of the queried tokens hit; None: no counters."""
    from llm_locust.analysis.server_metrics import Sample, ServerSeries

    samples = []
    for k in range(11):
        q = 1000.0 * k
        counters = (
            {} if hit_share is None else {"prefix_cache_queries_total": q, "prefix_cache_hits_total": hit_share * q}
        )
        samples.append(Sample(1000.0 + 10 * k, {"running": 4.0, **counters}))
    return {"http://h": ServerSeries("http://h", "vllm", samples)}


def test_a_server_that_misses_the_prefix_hit_ratio_fails_the_gate():
    """--prefix-hit 0.5 against a server without a prefix cache (was test_prefix_hit's run on the
    simulator without one): its counters say 0 hits, the prefix_hit gate fails and the run exits 1
    saying so; one whose counters say 45% is within the tolerance and passes; a server with no
    prefix-cache counters fails the gate too (nothing says the ratio was met)."""
    s = settings("--synthetic", "requests=50,input=256,output=8", "--prefix-hit", "0.5")
    out = outcome.build(ended(aggregate(ok=10), s, servers=_server(0.0)))
    hit = out.results["prefix_hit"]
    assert (hit["source"], hit["achieved"], hit["within"]) == ("counters", 0.0, False), hit
    assert out.exit_code == 1 and not _gate(out, "prefix_hit")["passed"]
    assert out.reasons == [
        "prefix hit: target 50%, the server's counters 0.0% after the warm-up (OFF by more than 10% points)"
    ]
    near = outcome.build(ended(aggregate(ok=10), s, servers=_server(0.45)))
    assert near.exit_code == 0 and near.results["prefix_hit"]["within"] is True
    silent = outcome.build(ended(aggregate(ok=10), s, servers=_server(None)))
    assert silent.exit_code == 1 and silent.results["prefix_hit"]["within"] is None
    assert silent.reasons[0].startswith("prefix hit: target 50%; the server's counters said nothing")


def test_no_warm_up_by_default_in_a_closed_loop():
    """Without --run-warmup or --warmup-requests (was test_warmup's 2 s run on the simulator) a
    closed loop has no warm-up: results `warmup` is None and the summary has no warm-up line.
    With --warmup-requests 2 the warm-up step's figures are both."""
    s = settings()
    assert s.mode == "closed" and not s.run_warmup and not s.warmup_requests
    out = outcome.build(ended(aggregate(ok=5), s))
    assert out.results["warmup"] is None and "warm-up:" not in out.text()
    given = ended(aggregate(ok=5), settings("--warmup-requests", "2"))
    given.steps = {outcome.WARMUP_STEP: aggregate(ok=6)}
    out = outcome.build(given)
    assert out.results["warmup"]["sent"] == 6 and out.results["summary"]["sent"] == 5
    assert "warm-up: each user's first 2 requests: sent 6, ok 6, failed 0, cancelled 0" in " ".join(out.text().split())


WALL = 1_700_000_000.0  # test_metrics.make_record's wall clock: wall_sent = WALL + t0


def _soak_run(failed_per_second: int) -> outcome.Outcome:
    """6 s of a closed loop, 5 requests sent each second (`failed_per_second` of them HTTP 500),
    the server's memory read each second; --soak-window 1s, drift not judged (as the simulator's
    run had it)."""
    from llm_locust.analysis.server_metrics import Sample, ServerSeries

    s = settings("--soak-window", "1s", "--soak-max-drift", "1e9")
    agg = Aggregate()
    for sec in range(6):
        for j in range(5):
            agg.add_sent()
            failed = j >= 5 - failed_per_second
            agg.add(make_record(t0=100.0 + sec + j * 0.1, outcome=Outcome.HTTP_ERROR if failed else Outcome.OK))
    memory = [Sample(WALL + 100 + k, {"server_memory_bytes": 2**30 + k * 2**20}) for k in range(7)]
    e = Ended(settings=s, total=agg, steps={}, started_at=WALL + 100, ended_at=WALL + 106.5)
    e.servers = {"http://h": ServerSeries("http://h", "vllm", memory)}
    return outcome.build(e)


def test_a_soak_whose_windows_have_error_bursts_fails_its_verdict():
    """40% of each second's requests failed (was test_stability's soak run on a simulator
    answering 30% HTTP 500): every one-second window is an error burst and the soak verdict
    fails; without failures it passes. Each window has its TTFT and ITL p50, the server's
    memory is reported beside them."""
    out = _soak_run(2)
    so = out.results["stability"]["soak"]
    assert so["window"] == 1 and so["windows"] >= 4
    assert all(r["ttft_p50"] is not None and r["itl_p50"] is not None for r in so["rows"][:-1])
    assert so["passed"] is False and so["error_bursts"] == [r["start"] for r in so["rows"]], so["error_bursts"]
    mem = so["memory"]["server_memory_bytes"]
    assert mem["samples"] >= 2 and mem["bytes_per_hour"] == pytest.approx(3600 * 2**20)
    assert "soak: FAIL" in out.text()
    clean = _soak_run(0)
    so = clean.results["stability"]["soak"]
    assert so["passed"] is True and so["error_bursts"] == [], so["reason"]
    assert "soak: PASS" in clean.text()


def _overlong_run(baseline_speedup: float) -> outcome.Outcome:
    """8 requests answered and 2 overlong ones refused by the server (classified overlong), judged
    against a clean run whose TTFT and E2E p50 were `baseline_speedup` x faster."""
    from llm_locust.metrics.aggregate import figures

    s = settings("--overlong-share", "0.2", "--overlong-tokens", "4505", "--overlong-tolerance", "0.5")
    agg = aggregate(ok=8)
    for i in range(2):
        rec = make_record(t0=200.0 + i, outcome=Outcome.HTTP_ERROR)
        rec.cause, rec.work = "overlong", WorkFacts(overlong=True)
        agg.add_sent()
        agg.add(rec)
    lat = figures(agg)["latency"]
    clean = {"latency": {k: {"p50": lat[k]["p50"] / baseline_speedup} for k in ("ttft", "e2e")}}
    return outcome.build(ended(agg, s, baseline_summary=clean))


def test_an_overlong_mix_slower_than_its_clean_run_fails():
    """--overlong-baseline: the other requests' TTFT and E2E p50 held to (1 + --overlong-tolerance)
    x the clean run's (was test_stability's third run on the simulator, against a clean run doctored
    three times faster): as fast as the clean run passes, a clean run three times faster fails."""
    same = _overlong_run(1.0)
    ov = same.results["stability"]["overlong"]
    assert ov["passed"] and (ov["overlong"], ov["classified"], ov["others"]["failed"]) == (2, 2, 0), ov
    assert "overlong mix: PASS" in same.text()
    faster = _overlong_run(3.0)
    ov = faster.results["stability"]["overlong"]
    assert not ov["passed"] and "x the clean run's" in ov["reason"], ov["reason"]
    assert ov["ttft_p50_ratio"] == pytest.approx(3.0) and "overlong mix: FAIL" in faster.text()


# ---- figures checked before they are used ----


def _streamed(usage: int | None, chunks: int = 2, cont: list[int] | None = None, ids: list[int] | None = None):
    """A record finished from a stream of `chunks` token-bearing chunks whose server said `usage`
    output tokens (continuous usage deltas `cont`; a gRPC reply's token ids `ids`)."""
    from llm_locust.protocols.base import StreamState
    from llm_locust.transport.bodies import finish_record

    state = StreamState()
    state.usage_out = usage
    if cont is not None:
        state.cont_tokens = list(cont)
    if ids is not None:
        state.cont_tokens, state.read_out = list(ids), sum(ids)
    rec = make_record(gaps=(0.01,) * (chunks - 1), ntoks=(1,) * chunks)
    finish_record(rec, state)
    return rec


def test_a_server_token_count_far_from_the_stream_is_not_used():
    """999999999 tokens on 2 chunks (the old code took it: "3110420631421.1 output tokens/s"), a
    count under an eighth of the chunks, and inflated continuous-usage deltas: the count read is
    used, source usage_rejected, per-chunk counts 1. Honest multi-token chunks (speculative
    decoding's k + 1, a gRPC reply's ids) within the factor are believed."""
    from llm_locust.protocols.base import USAGE_FACTOR, USAGE_SLACK

    for rec in (_streamed(999_999_999), _streamed(1, chunks=200), _streamed(None, cont=[10**6, 10**6])):
        assert (rec.n_out, rec.n_out_source) == (len(rec.chunk_times), "usage_rejected"), rec
        assert rec.chunk_tokens == [1] * len(rec.chunk_times)
    edge = USAGE_FACTOR * 2 + USAGE_SLACK
    assert (_streamed(edge).n_out, _streamed(edge).n_out_source) == (edge, "usage")
    assert _streamed(edge + 1).n_out_source == "usage_rejected"
    assert (_streamed(8, cont=[4, 4]).n_out, _streamed(8, cont=[4, 4]).chunk_tokens) == (8, [4, 4])
    grpc = _streamed(200, chunks=2, ids=[120, 80])  # 100 tokens a message, counted by the client
    assert (grpc.n_out, grpc.n_out_source, grpc.chunk_tokens) == (200, "usage", [120, 80])


def test_a_run_whose_server_counts_were_rejected_is_flagged_and_fails():
    agg = Aggregate()
    agg.add_sent(12)
    for _ in range(10):
        agg.add(_streamed(10, chunks=4))
    for _ in range(2):
        agg.add(_streamed(999_999_999, chunks=4))
    out = outcome.build(ended(agg))
    s = out.results["summary"]
    assert s["tokens_out"] == 10 * 10 + 2 * 4 and s["n_out_sources"] == {"usage": 10, "usage_rejected": 2}
    assert "usage_rejected" in out.results["validity"]["flags"]
    gate = _gate(out, "server_counts")
    assert not gate["passed"] and out.exit_code == 1 and gate["line"] in out.reasons
    assert gate["line"].startswith("the server's output token counts of 2 of 12 answered requests were far from")
    assert "FAIL: the server's output token counts of 2 of 12" in out.text()
    assert all(len(line) <= 80 for line in out.text(80).splitlines())


def test_a_trace_changed_during_the_run_fails_it():
    """The trace rewritten during a run (40 requests sent of 400 planned): flagged, but exit 0
    with the start's hash. The results are not of the trace they name: the trace gate fails."""
    line = "the trace t.jsonl changed during the run (sha256 aaa at the start, bbb now, 10 -> 20 bytes): ..."
    out = outcome.build(ended(aggregate(ok=10), trace={"path": "t.jsonl", "sha256": "aaa", "changed": line}))
    gate = _gate(out, "trace")
    assert out.exit_code == 1 and not gate["passed"] and gate["line"] == line and out.reasons == [line]
    assert f"FAIL: {line[:40]}" in out.text()
    assert outcome.build(ended(aggregate(ok=10), trace={"path": "t.jsonl", "sha256": "aaa"})).exit_code == 0


def test_counts_that_do_not_add_up_are_carried_and_fail_the_run():
    """A bug of the counting (here 3 sent requests with no outcome and not lost): the results say
    which section, and the counts gate fails; an interrupted run carries it, unjudged."""
    agg = aggregate(ok=10)
    agg.add_sent(3)
    out = outcome.build(ended(agg))
    assert out.results["count_problems"] == [
        "summary: sent 13 != ok 10 + failed 0 + cancelled 0 + client_cancelled 0 + lost 0"
    ]
    assert out.exit_code == 1 and not _gate(out, "counts")["passed"]
    cut = outcome.build(ended(agg, interruption=Interruption("SIGINT", 1050.0, "running")))
    assert cut.results["count_problems"] and cut.results["gates"] == [] and cut.exit_code == 130
    assert "count_problems" not in outcome.build(ended(aggregate(ok=10))).results


def test_the_warm_up_section_counts_its_client_cancellations():
    """--cancel with a warm-up: the section had no client_cancelled, so sent 76 = ok 36 +
    failed 12 left 28 unaccounted."""
    from llm_locust.metrics.records import WARMUP_STEP
    from llm_locust.report.accounting import section_problem

    warm = Aggregate()
    warm.add_sent(6)
    for i in range(3):
        warm.add(make_record(t0=10.0 + i))
    for i in range(3):
        warm.add(make_record(t0=20.0 + i, outcome=Outcome.CLIENT_CANCELLED))
    s = settings("--warmup-requests", "2")
    out = outcome.build(Ended(s, aggregate(ok=10), {WARMUP_STEP: warm}, 1000.0, 1100.0))
    w = out.results["warmup"]
    assert (w["sent"], w["ok"], w["client_cancelled"]) == (6, 3, 3) and section_problem(w) is None
    assert "sent 6, ok 3, failed 0, cancelled 0, cancelled by the client 3" in out.text()
    assert out.exit_code == 0
