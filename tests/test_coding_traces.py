"""Coding-agent and computer-use traces as sessions: TraceLab's round trace and multi-round CSV,
H CUA Perf (samples in traces/, made from the formats' published definitions). Each reads its
sample with the trace's own figures (tool waits, recorded cache-read share) checked against what
the replay will do; bad input names file:line; mutated copies load or raise a TraceError naming
the file; the TraceLab sample replayed against the simulator's prefix cache lands within 5 points
of the trace's own cache-read share."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from support import read_records, run_ok
from test_fuzz_traces import CASE, mutate, time_limit

from llm_locust.sim.process import SimProcess
from llm_locust.workload.agentic import detect_sessions, load_sessions
from llm_locust.workload.agentic.hcua import shared_prefix_share
from llm_locust.workload.agentic.tracelab import BLOCK
from llm_locust.workload.formats import detect
from llm_locust.workload.formats.reader import TraceError
from llm_locust.workload.sessions import IdealCache

TRACES = Path(__file__).resolve().parents[1] / "traces"
TRACELAB = TRACES / "tracelab_sample.jsonl"
TRACELAB_CSV = TRACES / "tracelab_sample.csv"
HCUA = TRACES / "h_cua_perf_sample.jsonl"
CLAUDE = TRACES / "claude_code_session_sample.jsonl"
CODEX = TRACES / "codex_session_sample.jsonl"


def _rows(path=TRACELAB):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _recorded_share(rows):
    """The trace's own figure, from its rows: cached (prefix) over all input tokens."""
    return sum(r["prefix_tokens"] for r in rows) / sum(r["input_tokens_total"] for r in rows)


def _ideal_share(trace, later=False):
    """What an unbounded prefix cache serves of the replayed blocks, sessions one after another
    (`later`: of the rounds after each session's first, whose recorded prefix was cached before)."""
    cache, hit, total = IdealCache(), 0, 0
    for s in trace.roots:
        for k, t in enumerate(s.turns):
            h = cache.blocks(t.hash_ids, trace.block_size, t.input_tokens)
            if k or not later:
                hit += h
                total += t.input_tokens
    return hit / total


# -- TraceLab round trace -------------------------------------------------------------------------


def test_tracelab_sample_reads_with_the_traces_own_tool_waits_and_cache_share():
    rows = _rows()
    assert detect_sessions(TRACELAB) == "tracelab"
    trace = load_sessions(TRACELAB)
    assert trace.format == "tracelab" and trace.block_size == BLOCK
    by_sid: dict[str, list[dict]] = {}
    for r in rows:
        by_sid.setdefault(r["session_id"], []).append(r)
    assert {s.id for s in trace.roots} == set(by_sid) and trace.turns == len(rows)
    for s in trace.roots:
        mine = sorted(by_sid[s.id], key=lambda r: r["round_index"])
        assert s.model == mine[0]["model"]
        assert [t.input_tokens for t in s.turns] == [r["input_tokens_total"] for r in mine]
        assert [t.output_tokens for t in s.turns] == [r["output_tokens"] for r in mine]
        # the gap before a round: the tool time after the one before it, from the trace's tools
        waits = [sum(tl["tool_wall_latency_ms"] or 0 for tl in r["tools"]) / 1000 for r in mine]
        assert [t.gap for t in s.turns] == pytest.approx([0.0] + waits[:-1])
        assert [t.role for t in s.turns] == [
            "tool" if r["first_input_event_type"] == "tool_result" else "user" for r in mine
        ]
        assert all(len(t.hash_ids) == t.input_tokens // BLOCK for t in s.turns)
    starts = sorted(s.start for s in trace.roots)
    assert starts[0] == 0.0 and starts[-1] > 0  # the trace's own session arrivals, from its first
    # the blocks reuse what the trace says the provider's cache served, to the block
    recorded = _recorded_share(rows)
    assert 0.85 < recorded < 0.95
    assert abs(_ideal_share(trace) - recorded) < 0.05
    per_round = [len(t.hash_ids) for s in trace.roots for t in s.turns]
    assert sum(per_round) > 0


def _round(sid, k, total, prefix, provider="claude", model="m1", tools=(), first="tool_result", ts=None):
    row = {
        "provider": provider,
        "session_id": sid,
        "round_index": k,
        "model": model,
        "input_tokens_total": total,
        "prefix_tokens": prefix,
        "newly_append_tokens": total - prefix,
        "output_tokens": 10,
        "first_input_event_type": first,
        "tools": [{"tool_name": "Bash", "tool_wall_latency_ms": ms} for ms in tools],
    }
    if ts is not None:
        row["timing_events"] = [{"event_type": first, "timestamp": ts}]
    return json.dumps(row) + "\n"


def test_tracelab_blocks_follow_the_recorded_prefix(tmp_path):
    """Compaction (a smaller prefix than the previous prompt) misses; a first round's recorded
    prefix is shared by sessions of one provider and model, not across models; rounds in
    round_index order whatever the file order; null tool latencies count nothing."""
    p = tmp_path / "t.jsonl"
    p.write_text(
        _round("a", 1, 640, 512, tools=(None,), ts="2026-06-01T00:00:05Z")
        + _round("a", 0, 512, 256, tools=(1500, 500), first="user_message", ts="2026-06-01T00:00:01Z")
        + _round("a", 2, 700, 128)
        + _round("b", 0, 512, 256, ts="2026-06-01T00:00:03Z")
        + _round("c", 0, 512, 256, model="m2")
    )
    trace = load_sessions(p)
    a, b, c = (trace.sessions[x] for x in "abc")
    h0, h1, h2 = (t.hash_ids for t in a.turns)
    assert [t.input_tokens for t in a.turns] == [512, 640, 700]
    assert h1[:8] == h0[:8] and set(h1[8:]).isdisjoint(h0)  # 512 of 640 cached: 8 blocks kept
    assert h2[:2] == h1[:2] and set(h2[2:]).isdisjoint(h1)  # compaction: 128 tokens cached
    assert b.turns[0].hash_ids[:4] == h0[:4] and b.turns[0].hash_ids[4:] != h0[4:]
    assert set(c.turns[0].hash_ids).isdisjoint(h0)
    assert [t.gap for t in a.turns] == [0.0, 2.0, 0.0] and a.turns[0].role == "user"
    assert (a.start, b.start, c.start) == (0.0, 2.0, 0.0)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (_round("a", 0, 10, 20), "exceeds 'input_tokens_total'"),
        ('{"round_index": 0, "input_tokens_total": 5, "prefix_tokens": 1}\n', "missing 'session_id'"),
        (_round("a", 0, 10, 2, ts="yesterday"), "not an ISO-8601 time"),
        (_round("a", 0, 10, 2).replace('"tools": []', '"tools": [7]'), "'tools' must be a list of objects"),
        (_round("a", 0, 10, 2).replace('"prefix_tokens": 2', '"prefix_tokens": -2'), "must not be negative"),
        (_round("a", 0, 2**31 - 1, 2), "beyond any model's context"),
    ],
)
def test_tracelab_bad_rows_name_file_and_line(tmp_path, text, words):
    p = tmp_path / "bad.jsonl"
    p.write_text(_round("a", 0, 10, 2) + text)
    with pytest.raises(TraceError) as e:
        load_sessions(p, "tracelab")
    assert str(e.value).startswith(f"{p}:2:") and words in str(e.value), e.value


# -- TraceLab multi-round CSV ---------------------------------------------------------------------


def test_tracelab_csv_sample_reads_as_the_round_trace_it_was_exported_from():
    assert detect_sessions(TRACELAB_CSV) == "tracelab-csv"
    csv_trace, jsonl_trace = load_sessions(TRACELAB_CSV), load_sessions(TRACELAB)
    assert len(csv_trace) == len(jsonl_trace) == 6 and csv_trace.turns == jsonl_trace.turns
    rows = TRACELAB_CSV.read_text().splitlines()[1:]
    recorded = sum(int(r.split(",")[6]) for r in rows) / sum(int(r.split(",")[6]) + int(r.split(",")[1]) for r in rows)
    assert abs(_ideal_share(csv_trace) - recorded) < 0.05
    for cs, js in zip(
        sorted(csv_trace.roots, key=lambda s: s.start), sorted(jsonl_trace.roots, key=lambda s: s.start), strict=True
    ):
        assert [t.input_tokens for t in cs.turns] == [t.input_tokens for t in js.turns]
        assert [t.gap for t in cs.turns] == pytest.approx([t.gap for t in js.turns])
    assert [s.start for s in csv_trace.roots] == [0.0, 2.5, 6.0, 10.5, 16.0, 22.5]  # arrival_time, ms


def test_tracelab_csv_with_session_id_and_without_optional_columns(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("session_id,round_idx,prefix_len,input_len,output_len\nx,1,128,64,5\nx,0,0,128,5\n")
    t = load_sessions(p)
    x = t.sessions["x"]
    assert [u.input_tokens for u in x.turns] == [128, 192] and [u.gap for u in x.turns] == [0.0, 0.0]
    assert x.turns[1].hash_ids[:2] == x.turns[0].hash_ids
    bad = tmp_path / "bad.csv"
    bad.write_text("id,round_idx,prefix_len,input_len,output_len\n0,0,1,x,2\n")
    with pytest.raises(TraceError, match=rf"^{bad}:2: input_len is not a number"):
        load_sessions(bad)
    bad.write_text("id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n0,0,1,2,3\n")
    with pytest.raises(TraceError, match=rf"^{bad}:2: expected 6 fields"):
        load_sessions(bad)
    bad.write_text("id,round_idx,prefix_len,output_len\n0,0,1,2\n")
    with pytest.raises(TraceError, match=rf"^{bad}:1: tracelab-csv trace: missing column\(s\) input_len"):
        load_sessions(bad, "tracelab-csv")


# -- H CUA Perf -----------------------------------------------------------------------------------


def test_h_cua_perf_sample_reads_whole_requests_with_the_agents_think_time():
    rows = _rows(HCUA)
    assert detect_sessions(HCUA) == "h-cua-perf"
    trace = load_sessions(HCUA)
    assert len(trace) == 3 and trace.turns == len(rows)
    for s in trace.roots:
        mine = [r for r in rows if r["session_id"] == s.id]
        assert [t.messages for t in s.turns] == [r["messages"] for r in mine]  # each request whole
        assert [t.gap for t in s.turns] == pytest.approx([r.get("delay", 0) / 1000 for r in mine])
        assert [t.output_tokens for t in s.turns] == [r["output_length"] for r in mine]
        assert [t.role for t in s.turns] == ["user"] + ["tool"] * (len(mine) - 1)
        assert s.start == 0.0 and not s.block_mode
        # one screenshot per request, the latest; earlier ones are the agent's placeholder text
        for r in mine:
            images = [p for m in r["messages"] if isinstance(m["content"], list) for p in m["content"]]
            assert sum(1 for p in images if p.get("type") == "image_url") == 1
        assert 0.5 < shared_prefix_share(s.turns) < 0.9


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"session_id": "t", "messages": "hi", "output_length": 3}', "must be a list of chat messages"),
        ('{"session_id": "t", "messages": [], "output_length": 3}', "non-empty 'messages'"),
        ('{"session_id": "t", "messages": [{"role": "user"}], "output_length": 3, "delay": -5}', "negative 'delay'"),
        ('{"session_id": "t", "messages": [{"role": "user"}], "output_length": 3, "tools": {}}', "'tools' must be"),
        ('{"session_id": "", "messages": [{"role": "user"}], "output_length": 3}', "must not be empty"),
    ],
)
def test_h_cua_perf_bad_records_name_file_and_line(tmp_path, line, words):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"session_id": "t", "messages": [{"role": "user", "content": "x"}], "output_length": 3}\n' + line)
    with pytest.raises(TraceError) as e:
        load_sessions(p, "h-cua-perf")
    assert str(e.value).startswith(f"{p}:2:") and words in str(e.value), e.value


# -- Claude Code and Codex session logs -----------------------------------------------------------


def _ts(v):
    from datetime import datetime

    return datetime.fromisoformat(v).timestamp()


def test_a_claude_code_log_reads_its_rounds_usage_and_tool_times():
    """A round per assistant message id, its fullest usage (records repeat it per content block);
    the wait after it: its tool_use records to their tool_result records."""
    recs = _rows(CLAUDE)
    assert detect_sessions(CLAUDE) == "claude-code"
    usage: dict[str, dict] = {}
    emitted, waits = {}, {}
    for r in recs:
        m = r.get("message") or {}
        if r["type"] == "assistant":
            u = m["usage"]
            if m["id"] not in usage or u["output_tokens"] > usage[m["id"]]["output_tokens"]:
                usage[m["id"]] = u
            for b in m["content"]:
                if b["type"] == "tool_use":
                    emitted[b["id"]] = (m["id"], _ts(r["timestamp"]))
        elif r["type"] == "user" and isinstance(m.get("content"), list):
            for b in m["content"]:
                mid, t0 = emitted[b["tool_use_id"]]
                waits[mid] = waits.get(mid, 0.0) + _ts(r["timestamp"]) - t0
    trace = load_sessions(CLAUDE)
    (s,) = trace.roots
    ids = list(usage)
    assert s.id == recs[1]["sessionId"] and s.model == "claude-opus-4-8"
    assert [t.input_tokens for t in s.turns] == [
        usage[i]["input_tokens"] + usage[i]["cache_creation_input_tokens"] + usage[i]["cache_read_input_tokens"]
        for i in ids
    ]
    assert [t.output_tokens for t in s.turns] == [usage[i]["output_tokens"] for i in ids]
    assert [t.gap for t in s.turns] == pytest.approx([0.0] + [waits.get(i, 0.0) for i in ids[:-1]])
    assert [t.role for t in s.turns] == ["user"] + ["tool"] * 4
    later = ids[1:]  # a one-session log: its first round's recorded prefix was cached before it
    recorded = sum(usage[i]["cache_read_input_tokens"] for i in later) / sum(t.input_tokens for t in s.turns[1:])
    assert abs(_ideal_share(trace, later=True) - recorded) < 0.02


def test_a_codex_log_reads_its_token_counts_once_and_its_tool_times():
    recs = _rows(CODEX)
    assert detect_sessions(CODEX) == "codex"
    counts, seen = [], None
    for r in recs:
        p = r["payload"]
        if p.get("type") == "token_count" and p["info"]["total_token_usage"] != seen:
            seen = p["info"]["total_token_usage"]
            counts.append(p["info"]["last_token_usage"])
    assert len(counts) == 5 < sum(1 for r in recs if r["payload"].get("type") == "token_count")
    trace = load_sessions(CODEX)
    (s,) = trace.roots
    assert s.id == recs[0]["payload"]["id"] and s.model == "gpt-5.5-codex"
    assert [t.input_tokens for t in s.turns] == [c["input_tokens"] for c in counts]
    assert [t.output_tokens for t in s.turns] == [c["output_tokens"] for c in counts]
    assert [t.gap for t in s.turns] == pytest.approx([0.0, 2.4, 11.8, 0.3, 4.1])  # the sample's tool latencies
    recorded = sum(c["cached_input_tokens"] for c in counts[1:]) / sum(c["input_tokens"] for c in counts[1:])
    assert abs(_ideal_share(trace, later=True) - recorded) < 0.02


@pytest.mark.parametrize(
    ("fmt", "text", "words"),
    [
        (
            "codex",
            '{"timestamp": "2026-01-01T00:00:00Z", "type": "event_msg", "payload": {"type": "token_count", '
            '"info": {"total_token_usage": {}, "last_token_usage": {"input_tokens": 5, "cached_input_tokens": 9}}}}',
            "exceeds 'input_tokens'",
        ),
        ("codex", '{"timestamp": "2026-01-01T00:00:00Z", "type": "event_msg", "payload": []}', "'payload' must be"),
        ("codex", '{"timestamp": "noon", "type": "turn_context", "payload": {}}', "not an ISO-8601 time"),
        (
            "claude-code",
            '{"type": "assistant", "sessionId": "s", "message": {"id": "m", "role": "assistant", '
            '"usage": {"input_tokens": -1}}}',
            "must not be negative",
        ),
    ],
)
def test_bad_agent_logs_name_file_and_line(tmp_path, fmt, text, words):
    p = tmp_path / "bad.jsonl"
    first = CODEX if fmt == "codex" else CLAUDE
    p.write_text(first.read_text().splitlines()[0] + "\n" + text + "\n")
    with pytest.raises(TraceError) as e:
        load_sessions(p, fmt)
    assert str(e.value).startswith(f"{p}:2:") and words in str(e.value), e.value


def test_a_zstd_file_is_named_as_such(tmp_path):
    p = tmp_path / "h_cua.jsonl.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(40)))
    with pytest.raises(TraceError, match=rf"^{p}:1: a zstd-compressed file: decompress it first"):
        load_sessions(p)


def test_the_request_formats_refuse_them_as_session_traces():
    for p in SAMPLES.values():
        with pytest.raises(TraceError, match="a session trace"):
            detect(p.read_text()[:4096], str(p))


# -- fuzzed copies --------------------------------------------------------------------------------


def _check(path: Path, fmt: str | None) -> str:
    """'ok' or 'error'; an AssertionError (or the unexpected exception) on a finding."""
    try:
        with time_limit(10.0):
            trace = load_sessions(path, fmt)
    except TraceError as e:
        msg = str(e)
        assert msg.startswith(f"{path}"), f"TraceError does not name the file: {msg}"
        assert "unexpected content near this line" not in msg, f"a reader missed a case (the safety net): {msg}"
        return "error"
    assert len(trace) > 0
    for s in trace.sessions.values():
        assert math.isfinite(s.start) and s.start >= 0
        for t in s.turns:
            assert math.isfinite(t.gap) and t.gap >= 0
            assert t.source.startswith(f"{path}:")
    return "ok"


SAMPLES = {
    "tracelab": TRACELAB,
    "tracelab-csv": TRACELAB_CSV,
    "h-cua-perf": HCUA,
    "claude-code": CLAUDE,
    "codex": CODEX,
}


def seed_data(fmt: str) -> bytes:
    """A sample's first lines: a few sessions' worth."""
    return b"".join(SAMPLES[fmt].read_bytes().splitlines(keepends=True)[:12])


def run_case(fmt: str, data: bytes, case, workdir: Path) -> tuple[str, str]:
    """One mutated copy loaded with its format forced, then detected (benchmarks/fuzz_traces.py too)."""
    _which, edits, wrap, cut = case
    p = workdir / ("trace.gz" if wrap != "plain" else "trace")
    p.write_bytes(mutate(data, edits, wrap, cut))
    return _check(p, fmt), _check(p, None)


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_mutated_samples_load_or_raise_a_trace_error_naming_the_file(tmp_path, fmt):
    data = seed_data(fmt)
    assert _check(SAMPLES[fmt], fmt) == "ok"

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(CASE)
    def prop(case):
        run_case(fmt, data, case, tmp_path)

    prop()


# -- replays --------------------------------------------------------------------------------------


@pytest.mark.timing
def test_the_tracelab_sample_replayed_on_the_simulator_reads_its_own_cache_share_and_tool_waits(tmp_path):
    """Every session once (open loop, 20x, no cap on gaps), against the simulator's prefix cache:
    the server's hit ratio within 5 points of the trace's own recorded share, as is the run's ideal;
    between a reply and the session's next request, the trace's tool time (at 20x)."""
    results, log = tmp_path / "r.json", tmp_path / "records.jsonl"
    with SimProcess(slots=16, prefix_cache=True, fast=True) as sim:
        p = run_ok(
            "--host", sim.url, "--trace", TRACELAB, "--replay", "--speed", "20", "--max-idle", "0",
            "-t", "60s", "--results", results, "--record-log", log, timeout=180,
        )  # fmt: skip
    assert "sessions: 6 started, 6 answered in full" in p.stdout, p.stdout[-2000:]
    cache = json.loads(results.read_text())["summary"]["cache"]
    recorded = _recorded_share(_rows())
    assert cache["requests_reported"] == 57
    assert abs(cache["hit_ratio"] - recorded) < 0.05, (cache["hit_ratio"], recorded)
    assert abs(cache["ideal_hit_ratio"] - recorded) < 0.05, (cache["ideal_hit_ratio"], recorded)
    assert cache["achieved_vs_ideal"] > 0.95, cache
    ok = [r for r in read_records(log) if r["outcome"] == "ok"]
    assert len(ok) == 57 and len({r["session"] for r in ok}) == 6
    # the tool waits: the trace's own, from its rows' tools, against the replay's idle time
    trace, sent = load_sessions(TRACELAB), {r["source"]: r for r in ok}
    for s in trace.roots:
        for prev, turn in zip(s.turns, s.turns[1:], strict=False):
            a, b = sent[prev.source], sent[turn.source]
            idle = b["t_sent"] - (a["t_sent"] + a["end"])
            assert turn.gap / 20 - 0.005 <= idle <= turn.gap / 20 + 0.1, (turn.source, turn.gap, idle)


def test_the_h_cua_perf_sample_replayed_sends_each_recorded_request_whole(tmp_path):
    """The recorded messages go out as they are (not after the earlier turns again), so a request is
    about as long as the recording says and the ideal is the part the previous request shares."""
    results, log = tmp_path / "r.json", tmp_path / "records.jsonl"
    with SimProcess(slots=16, prefix_cache=True, fast=True) as sim:
        run_ok(
            "--host", sim.url, "--trace", HCUA, "--replay", "--speed", "10", "--max-idle", "0.2",
            "-t", "60s", "--results", results, "--record-log", log, "--api", "openai-chat", timeout=180,
        )  # fmt: skip
    cache = json.loads(results.read_text())["summary"]["cache"]
    assert cache["requests_reported"] == 15
    trace = load_sessions(HCUA)
    own = sum(shared_prefix_share(s.turns) * len(s.turns) for s in trace.roots) / trace.turns
    assert cache["ideal_hit_ratio"] <= 1.0 and abs(cache["ideal_hit_ratio"] - own) < 0.1, (cache, own)
    assert cache["hit_ratio"] > 0.4, cache  # later requests find the earlier ones' prefix
    rows = sorted((r for r in read_records(log) if r["outcome"] == "ok"), key=lambda r: r["t_sent"])
    by_session: dict[str, list[int]] = {}
    for r in rows:
        by_session.setdefault(r["session"], []).append(r["n_in"])
    for sid, n_in in by_session.items():  # a request grows by a step, never doubles by re-sent history
        assert all(b < 1.5 * a for a, b in zip(n_in, n_in[1:], strict=False)), (sid, n_in)
