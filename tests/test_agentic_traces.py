"""Session trace formats (workload/agentic): fixtures in tests/fixtures/agentic/, exact values, bad
input naming file:line, shares, detection beside the request formats, the agentic generator."""

from __future__ import annotations

import gzip
import shutil
import zlib
from pathlib import Path

import pytest

from llm_locust.workload.agentic import SESSION_FORMATS, detect_sessions, load_sessions
from llm_locust.workload.agentic.mooncake_sessions import chain
from llm_locust.workload.agentic.synth_sessions import AgenticSpec, generate, parse_spec_text, write
from llm_locust.workload.agentic.synth_sessions import main as synth_main
from llm_locust.workload.formats.reader import TraceError

FIX = Path(__file__).parent / "fixtures" / "agentic"
TRACES = Path(__file__).parent / "fixtures" / "traces"


def _turns(s):
    return [
        (t.new_tokens, t.output_tokens, t.gap, t.role, t.hash_ids, t.input_tokens, t.children, t.at) for t in s.turns
    ]


def test_names():
    assert SESSION_FORMATS == (
        "llm-locust-sessions",
        "aiperf-dag",
        "weka",
        "sglang-agentic",
        "mooncake-sessions",
        "mooncake-toolagent",
        "tracelab",
        "tracelab-csv",
        "h-cua-perf",
        "claude-code",
        "codex",
    )


# -- each format ----------------------------------------------------------------------------------


def test_ours():
    p = FIX / "sessions.jsonl"
    assert detect_sessions(p) == "llm-locust-sessions"
    tr = load_sessions(p)
    assert tr.format == "llm-locust-sessions" and tr.block_size == 512 and len(tr.sha256) == 64
    assert [s.id for s in tr.roots] == ["a", "b", "c"] and tr.arrivals == [1.0, 2.5, 3.0] and tr.turns == 7
    a = tr.sessions["a"]
    assert a.model == "m1" and a.parent is None and a.source.endswith("sessions.jsonl:1")
    assert _turns(a) == [
        (1800, 120, 0.0, "user", None, None, (), 1.0),
        (4000, 80, 2.5, "tool", None, None, ("a/1",), 4.0),
        (50, 5, 1.0, "user", None, None, (), None),
    ]
    sub = tr.sessions["a/1"]
    assert sub.parent == "a" and sub.start == 1.0
    assert _turns(sub) == [(900, 60, 0.0, "user", None, None, (), None), (300, 20, 0.5, "tool", None, None, (), None)]
    assert tr.sessions["b"].turns[0].text == "hello"
    c = tr.sessions["c"]
    assert c.block_mode and _turns(c) == [(None, 7, 0.0, "user", (1, 2), 1024, (), None)]
    assert [s.id for s in tr.tree(a)] == ["a", "a/1"]


def test_aiperf_dag():
    p = FIX / "aiperf_dag.jsonl"
    assert detect_sessions(p) == "aiperf-dag"
    tr = load_sessions(p)
    assert [s.id for s in tr.roots] == ["root"] and tr.turns == 5
    root = tr.sessions["root"]
    assert root.model == "m"
    assert _turns(root) == [
        (None, 200, 0.0, "user", None, None, ("sub1", "sub2"), None),
        (None, 40, 1.5, "tool", None, None, (), None),
    ]
    assert root.turns[0].text == "You are an agent.\nFix the bug." and root.turns[1].text == "tests pass"
    assert tr.sessions["sub1"].parent == "root" and tr.sessions["sub2"].parent == "root"
    sub2 = tr.sessions["sub2"].turns[0]
    assert sub2.messages == [{"role": "user", "content": "Read a file."}] and sub2.text is None
    assert sub2.children == ("f1",) and tr.sessions["f1"].parent == "sub2"
    f1 = tr.sessions["f1"].turns[0]
    assert (f1.text, f1.gap, f1.output_tokens) == ("part", 0.25, None)


def test_weka():
    p = FIX / "weka.jsonl"
    assert detect_sessions(p) == "weka"
    tr = load_sessions(p)
    assert tr.block_size == 64 and [s.id for s in tr.roots] == ["t2", "t1"]  # start order: 0.0, 0.1
    t1 = tr.sessions["t1"]
    assert t1.model == "claude" and t1.start == 0.1
    kids = ("t1::sa:agent_001:s0", "t1::sa:agent_001:s1")
    assert _turns(t1) == [
        (None, 20, 0.0, "user", (10, 20, 30), 130, kids, None),
        (None, 30, 1.0, "tool", (10, 20, 30, 40), 200, (), None),  # 8.0 - subagent end 7.0
        (None, 4, 2.0, "user", (10, 20, 30, 40, 50), 260, (), None),
    ]  # think_time
    s0, s1 = (tr.sessions[k] for k in kids)
    assert s0.parent == s1.parent == "t1" and (s0.start, s1.start) == (3.1, 3.5)
    assert [(t.output_tokens, t.hash_ids) for t in s0.turns] == [(5, (90,)), (7, (90, 92))]
    assert s0.turns[1].gap == pytest.approx(0.4)  # 4.5 - (3.1 + 1.0)
    assert [(t.output_tokens, t.hash_ids) for t in s1.turns] == [(6, (91,))]


def test_weka_single_pretty_object(tmp_path):
    import orjson

    line = (FIX / "weka.jsonl").read_text().splitlines()[0]
    p = tmp_path / "trace.json"
    p.write_bytes(orjson.dumps(orjson.loads(line), option=orjson.OPT_INDENT_2))
    assert detect_sessions(p) == "weka"
    tr = load_sessions(p)
    assert tr.turns == 6 and tr.sessions["t1"].turns[2].gap == 2.0


def test_sglang():
    p = FIX / "sglang_agentic.json"
    assert detect_sessions(p) == "sglang-agentic"
    tr = load_sessions(p)
    assert [s.id for s in tr.roots] == ["conv-0", "conv-1"] and tr.turns == 4
    c0 = tr.sessions["conv-0"]
    assert [(t.text, t.role, t.input_tokens, t.output_tokens, t.source.rsplit(":", 1)[1]) for t in c0.turns] == [
        ("You are OpenHands.\nFix issue 1", "user", 7382, None, "5"),
        ("ls output", "tool", 7489, None, "7"),
        ("continue", "user", 7600, None, "9"),  # the turn with no messages is skipped
    ]


def test_mooncake_prefix_chaining():
    p = FIX / "mooncake_conversation.jsonl"
    assert detect_sessions(p) is None  # the request format `mooncake` owns these lines
    tr = load_sessions(p, "mooncake-sessions")
    assert tr.block_size == 512 and tr.format == "mooncake-sessions"
    got = {s.id: [(t.at, t.hash_ids, t.input_tokens, t.output_tokens, t.role) for t in s.turns] for s in tr.roots}
    assert got == {
        "s1": [
            (0.0, (0, 1), 1000, 10, "user"),
            (1.5, (0, 1, 2, 3), 1600, 30, "user"),
            (3.0, (0, 1, 2, 3, 8), 2100, 60, "user"),
        ],
        "s2": [(0.5, (0, 5), 900, 20, "user"), (1.5, (0, 5, 6), 1100, 40, "user")],
        "s3": [(2.0, (0, 1, 2, 7), 1300, 50, "user")],  # extends an earlier turn of s1, not its latest: a branch
        "s4": [(3.2, (0, 1, 2, 3, 8), 2100, 60, "user")],  # equal to a latest turn: a retry, new session
        "s5": [(4.0, (0,), 300, 5, "user")],
    }
    assert all(t.gap == 0.0 for s in tr.roots for t in s.turns)
    tool = load_sessions(p, "mooncake_toolagent")
    assert [t.role for t in tool.sessions["s1"].turns] == ["user", "tool", "tool"]


def test_chain_prefers_the_longest_then_the_latest():
    rows = [
        (1, 0.0, 1, 1, [1]),
        (2, 1.0, 1, 1, [1, 2]),
        (3, 2.0, 1, 1, [1]),
        (4, 3.0, 1, 1, [1, 2, 3]),
        (5, 4.0, 1, 1, [1, 9]),
    ]
    # row 3 equals s0's first turn but s0's latest is [1, 2]: new session s1; row 4 extends s0's latest
    # ([1, 2], longer than s1's [1]); row 5 extends only [1]: s1's latest
    assert chain(rows) == [0, 0, 1, 0, 1]


def test_gzip_and_request_formats_as_sessions(tmp_path):
    gz = tmp_path / "s.jsonl.gz"
    with open(FIX / "sessions.jsonl", "rb") as f, gzip.open(gz, "wb") as g:
        shutil.copyfileobj(f, g)
    assert detect_sessions(gz) == "llm-locust-sessions" and load_sessions(gz).turns == 7
    # a request-level file: its conversations as sessions (format kept)
    tr = load_sessions(FIX / "mooncake_conversation.jsonl")
    assert tr.format == "mooncake" and len(tr) == 8


# -- detection does not steal request-level files -------------------------------------------------


def test_request_files_are_not_claimed():
    files = sorted(p for p in TRACES.iterdir() if p.is_file())
    assert files
    for p in files:
        try:
            got = detect_sessions(p)
        except TraceError:
            continue
        assert got is None, p


@pytest.mark.parametrize(
    "line",
    [
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}',
        '{"session_id": "a", "input_length": 10, "delay": 5}',  # AIPerf mooncake_trace
        '{"session_id": "a", "turns": [{"text": "hi", "delay": 5}]}',  # AIPerf multi_turn
        '{"timestamp": 0.0, "input_tokens": 3, "output_tokens": 4, "conversation_id": "c"}',  # our request JSONL
        '[{"id": "x", "conversations": [{"from": "human", "value": "hi"}]}]',  # ShareGPT
        '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 1}',  # Bailian
        "TIMESTAMP,ContextTokens,GeneratedTokens",
    ],
)
def test_request_lines_are_not_claimed(tmp_path, line):
    p = tmp_path / "t"
    p.write_text(line + "\n")
    assert detect_sessions(p) is None


# -- bad input: file and line ---------------------------------------------------------------------


def _bad(tmp_path, text, fmt=None, name="bad.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TraceError) as e:
        load_sessions(p, fmt)
    return str(e.value)


@pytest.mark.parametrize(
    "text, line, words",
    [
        (
            '{"session": "a", "new_tokens": 1}\n{"session": "b", "parent": "zz", "new_tokens": 1}\n',
            2,
            "not in the trace",
        ),
        (
            '{"session": "a", "new_tokens": 1}\n'
            '{"session": "b", "parent": "a", "spawned_by_turn": 3, "new_tokens": 1}\n',
            2,
            "has 1 turn",
        ),
        (
            '{"session": "a", "new_tokens": 1, "children": ["b"]}\n'
            '{"session": "b", "new_tokens": 1, "children": ["a"]}\n'
            '{"session": "r", "new_tokens": 1}\n',
            1,
            "cycle",
        ),
        ('{"session": "a", "new_tokens": 1}\n{"session": "a", "gap": -1, "new_tokens": 1}\n', 2, "negative 'gap'"),
        (
            '{"session": "a", "t": 5, "new_tokens": 1}\n{"session": "a", "t": 3, "new_tokens": 1}\n',
            2,
            "before its previous turn",
        ),
        ('{"session": "a", "new_tokens": "12"}\n', 1, "must be an integer"),
        (
            '{"session": "a", "new_tokens": 1}\n{"session": ["x"], "new_tokens": 1}\n',
            2,
            "must be a string or an integer",
        ),
        ('{"session": "a", "new_tokens": 1, "role": "assistant"}\n', 1, "'role'"),
        ('{"session": "a"}\n', 1, "needs one of"),
        (
            '{"session": "a", "new_tokens": 1}\n'
            '{"session": "a", "hash_ids": [1], "input_tokens": 5, "block_size": 4}\n',
            2,
            "mixes",
        ),
        ('{"session": "a", "new_tokens": 1}\nnot json\n', 2, "invalid JSON"),
        (
            '{"session": "a", "t": 5, "new_tokens": 1, "children": ["b"]}\n{"session": "b", "t": 2, "new_tokens": 1}\n',
            2,
            "before the turn",
        ),
    ],
)
def test_bad_session_jsonl(tmp_path, text, line, words):
    msg = _bad(tmp_path, text)
    assert f"bad.jsonl:{line}:" in msg and words in msg, msg


def test_bad_other_formats(tmp_path):
    msg = _bad(
        tmp_path,
        '{"session_id": "r", "turns": [{"messages": [{"role": "user", "content": "x"}], "spawns": ["nope"]}]}\n',
    )
    assert "bad.jsonl:1:" in msg and "'nope'" in msg
    msg = _bad(
        tmp_path,
        '{"session_id": "r", "turns": [{"messages": [{"role": "user", "content": "x"}]}]}\n'
        '{"session_id": "s", "turns": [{"messages": [{"role": "user", "content": "x"}], "delay": -5}]}\n',
    )
    assert "bad.jsonl:2:" in msg and "negative 'delay'" in msg
    msg = _bad(
        tmp_path,
        '{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}], "spawns": ["b"]}]}\n'
        '{"session_id": "b", "turns": [{"messages": [{"role": "user", "content": "x"}], "spawns": ["a"]}]}\n',
    )
    assert "cycle" in msg and "bad.jsonl:" in msg
    weka = (
        '{"id": "t", "models": [], "block_size": 4, '
        '"requests": [{"t": 0, "type": "n", "model": "m", "in": 1, "out": 1}]}\n'
        '{"id": "u", "models": [], "block_size": 4, '
        '"requests": [{"t": 0, "type": "n", "model": "m", "in": "x", "out": 1}]}\n'
    )
    msg = _bad(tmp_path, weka)
    assert "bad.jsonl:2:" in msg and "'in'" in msg
    msg = _bad(
        tmp_path,
        weka.replace('"u", "models": [], "block_size": 4', '"u", "models": [], "block_size": 8').replace(
            '"in": "x"', '"in": 1'
        ),
    )
    assert "bad.jsonl:2:" in msg and "block size" in msg
    msg = _bad(tmp_path, '{\n "conversations": [\n  [\n   {"messages": "oops"}\n  ]\n ]\n}\n', name="s.json")
    assert "s.json:4:" in msg and "'messages'" in msg
    msg = _bad(
        tmp_path,
        '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
        '{"timestamp": -1, "input_length": 1, "output_length": 1}\n',
        fmt="mooncake-sessions",
    )
    assert "bad.jsonl:2:" in msg and "negative" in msg
    with pytest.raises(TraceError, match="unknown trace format"):
        load_sessions(FIX / "sessions.jsonl", "nope")


# -- shares ---------------------------------------------------------------------------------------


def test_shares_partition_roots_and_keep_subagents(tmp_path):
    p = tmp_path / "ag.jsonl"
    write(generate(AgenticSpec(sessions=60, subagent_p=0.4, max_depth=2, seed=3)), p)
    whole = load_sessions(p)
    assert any(s.parent for s in whole.sessions.values())
    k = 4
    parts = [load_sessions(p, share=(i, k)) for i in range(k)]
    roots = [r.id for part in parts for r in part.roots]
    assert sorted(roots) == sorted(r.id for r in whole.roots) and len(roots) == len(set(roots))
    for i, part in enumerate(parts):
        assert part.share == (i, k)
        assert all(zlib.crc32(r.id.encode()) % k == i for r in part.roots)
        for s in part.sessions.values():  # every subagent travels with its root
            if s.parent:
                assert s.parent in part.sessions
            for t in s.turns:
                assert all(c in part.sessions for c in t.children)
    assert sum(len(part.sessions) for part in parts) == len(whole.sessions)


# -- the generator --------------------------------------------------------------------------------


def test_synth_is_deterministic(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert synth_main(["--agentic", "sessions=30,subagent_p=0.3,seed=7", "--out", str(a)]) == 0
    assert synth_main(["--agentic", "sessions=30,subagent_p=0.3,seed=7", "--out", str(b)]) == 0
    assert synth_main(["--agentic", "sessions=30,subagent_p=0.3,seed=8", "--out", str(c)]) == 0
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    tr = load_sessions(a)
    assert len(tr) == 30 and tr.format == "llm-locust-sessions"
    assert any(t.role == "tool" for s in tr.roots for t in s.turns)
    assert synth_main(["--agentic", "sessions=1", "--out", str(a)]) == 2  # exists, no --force


def test_synth_cli_dispatch(tmp_path):
    from llm_locust.cli import main

    out = tmp_path / "x.jsonl"
    assert main(["trace", "synth", "--agentic", "sessions=5,rate=0", "--out", str(out)]) == 0
    tr = load_sessions(out)
    assert tr.arrivals == [0.0] * 5


@pytest.mark.parametrize("text", ["sessions=0", "bogus=1", "turns=pareto:0:1", "rate=-1", "user_p=2", "gap=weird:1"])
def test_synth_bad_specs(text):
    with pytest.raises(ValueError):
        generate(parse_spec_text(text))
