"""Open-loop trace replay: exactly once across real worker processes, on schedule, conversations
in order with their history, and the in-flight cap."""

import json
import statistics
from pathlib import Path

import pytest
from support import read_records, run_ok, shared_file

from llm_locust.sim.process import SimProcess
from llm_locust.workload import load_trace

ROOT = Path(__file__).resolve().parents[1]
REPLAY = str(ROOT / "locustfiles" / "replay.py")  # the same as `run --replay`


def replay(tmp, host, trace, *args, workers=0, timeout=240):
    results, log = tmp / "results.json", tmp / "records.jsonl"
    cmd = [
        "-f",
        REPLAY,
        "--host",
        host,
        "-u",
        str(max(workers, 1)),
        "-r",
        "10",
        "-t",
        "5m",
        "--trace",
        str(trace),
        "--results",
        str(results),
        "--record-log",
        str(log),
        *args,
    ]
    if workers:
        cmd += ["--workers", str(workers)]
    run_ok(*cmd, timeout=timeout)
    return json.loads(results.read_text()), read_records(log)


@pytest.fixture(scope="module")
def fast_sim():
    with SimProcess(slots=256, iter_base=0.002, iter_per_seq=0.00002, iter_per_prefill_token=0) as sim:
        yield sim


@pytest.mark.timing  # the median schedule lag within 5 ms
def test_two_workers_replay_the_trace_exactly_once_on_schedule(tmp_path, fast_sim):
    azure_conv = shared_file("traces/azure2023_conv.csv")
    window, speed = 120.0, 10.0
    results, rows = replay(
        tmp_path,
        fast_sim.url,
        azure_conv,
        "--duration",
        str(window),
        "--speed",
        str(speed),
        "--max-tokens-cap",
        "8",
        workers=2,
    )
    trace = load_trace(azure_conv)
    expected = {trace[i].source for i in range(len(trace)) if trace.arrivals[i] < window}
    sent = [r["source"] for r in rows]
    assert len(sent) == len(set(sent)), "a record was sent twice"
    assert set(sent) == expected
    assert len({r["id"].split("-")[0] for r in rows}) == 2  # two worker processes shared the work
    assert all(r["outcome"] == "ok" for r in rows), {r["outcome"] for r in rows}
    # on schedule: t_sched follows the trace exactly, and sends were on time
    by_source = {r["source"]: r for r in rows}
    first = min(trace.arrivals[i] for i in range(len(trace)) if trace[i].source in expected)
    t0s = [
        r["t_sent"] + r["sched"] - (trace.arrivals[i] - first) / speed
        for i in range(len(trace))
        for r in [by_source.get(trace[i].source)]
        if r
    ]
    # one agreed start: every record's implied t0 is the same to well under a millisecond
    assert max(t0s) - min(t0s) < 0.0005
    lags = sorted(-r["sched"] for r in rows)
    assert lags[0] >= 0
    assert statistics.median(lags) < 0.005, f"median schedule lag {statistics.median(lags) * 1000:.2f} ms"
    print(
        f"\nschedule lag p50 {statistics.median(lags) * 1000:.2f} ms, "
        f"p99 {lags[int(len(lags) * 0.99)] * 1000:.2f} ms over {len(lags)} requests"
    )
    assert results["run"]["server"]["replay_sent"] == len(expected)


def test_offset_speed_and_loops(tmp_path, fast_sim):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": t, "input_tokens": 5, "output_tokens": 2}) + "\n" for t in (0, 1, 2, 3, 4, 5))
    )
    _, rows = replay(
        tmp_path, fast_sim.url, trace, "--start-offset", "1", "--duration", "3", "--speed", "4", "--loops", "2"
    )
    rows.sort(key=lambda r: r["t_sent"] + r["sched"])
    sched = [r["t_sent"] + r["sched"] for r in rows]
    assert [r["source"].rsplit(":", 1)[1] for r in rows] == ["2", "3", "4"] * 2  # records at t=1,2,3
    gaps = [b - a for a, b in zip(sched, sched[1:], strict=False)]
    assert gaps == pytest.approx([0.25, 0.25, 0.25, 0.25, 0.25], abs=1e-6)  # 1 s of trace at 4x; a pass lasts 3 s


def test_conversations_go_in_order_and_carry_their_history(tmp_path, fast_sim):
    lines = []
    for conv in ("a", "b"):
        for turn in range(3):
            lines.append(
                {
                    "timestamp": 0.0,
                    "conversation_id": conv,
                    "turn": turn,
                    "messages": [{"role": "user", "content": f"question {turn} of {conv} please"}],
                    "output_tokens": 4,
                }
            )
    trace = tmp_path / "conv.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    _, rows = replay(tmp_path, fast_sim.url, trace, "--api", "openai-chat")
    assert len(rows) == 6 and all(r["outcome"] == "ok" for r in rows)
    for conv_lines in ((1, 2, 3), (4, 5, 6)):
        turns = [next(r for r in rows if r["source"].endswith(f":{n}")) for n in conv_lines]
        for prev, nxt in zip(turns, turns[1:], strict=False):
            assert nxt["t_sent"] >= prev["t_sent"] + prev["end"]  # after the previous reply ended
            # the history (previous question, 5 words, and its 4-word reply) travels with the next turn
            assert nxt["n_in"] == prev["n_in"] + 4 + 5


def test_in_flight_cap_holds_requests_back_and_counts_them(tmp_path):
    trace = tmp_path / "burst.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": 0, "input_tokens": 3, "output_tokens": 5}) + "\n" for _ in range(12))
    )
    with SimProcess(slots=64, iter_base=0.02, iter_per_seq=0) as sim:
        results, rows = replay(tmp_path, sim.url, trace, "--max-in-flight", "4", "--api", "openai-completions")
    assert len(rows) == 12 and results["run"]["server"]["replay_held_back"] == 8
    events = sorted([(r["t_sent"], 1) for r in rows] + [(r["t_sent"] + r["end"], -1) for r in rows])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak == 4
