"""Sessions: the model's checks, conversations as sessions, the ideal cache reuse, and the runner
(turn order, history growth, subagents joined before the next turn, capped gaps, a failed turn
ending its session) driven with a recording sender in place of a server."""

import json
import time

import gevent
import pytest

from llm_locust.loop.session_runner import SessionRequest, SessionRunner, load_workload, pick_start_turn
from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.settings.model import Settings
from llm_locust.workload.formats.reader import TraceError
from llm_locust.workload.prompts import PromptBuilder
from llm_locust.workload.sessions import IdealCache, SessionBuilder, SessionTrace, Turn
from llm_locust.workload.specs import SpecBuilder


def build(rows):
    """rows: (session, parent, Turn) -> SessionTrace via the builder."""
    b = SessionBuilder("t.jsonl")
    for sid, parent, start, turn in rows:
        b.session(sid, start=start, source=turn.source, parent=parent)
        b.turn(sid, turn)
    return b.finish(path="t.jsonl", format="test", sha256="0")


def T(line, **kw):
    return Turn(source=f"t.jsonl:{line}", **kw)


# ---- the model's checks: file and line ----


def test_missing_child_names_the_line():
    with pytest.raises(TraceError, match=r"t.jsonl:2: a turn spawns subagent session 'ghost'"):
        build([("a", None, 0, T(1, new_tokens=5)), ("a", None, 0, T(2, new_tokens=5, children=("ghost",)))])


def test_missing_parent_names_the_line():
    with pytest.raises(TraceError, match=r"t.jsonl:3: session 'b' names a parent 'nobody'"):
        build([("a", None, 0, T(1, new_tokens=5)), ("b", "nobody", 0, T(3, new_tokens=5))])


def test_a_cycle_of_subagents_is_refused():
    with pytest.raises(TraceError, match=r"a cycle of subagent links: (a -> b -> a|b -> a -> b)"):
        build(
            [
                ("root", None, 0, T(1, new_tokens=5)),
                ("a", "root", 0, T(2, new_tokens=5, children=("b",))),
                ("b", "a", 0, T(3, new_tokens=5, children=("a",))),
            ]
        )


def test_negative_gap_and_time_going_back_are_refused():
    with pytest.raises(TraceError, match=r"t.jsonl:2: negative gap"):
        build([("a", None, 0, T(1, new_tokens=5)), ("a", None, 0, T(2, new_tokens=5, gap=-1.0))])
    with pytest.raises(
        TraceError, match=r"t.jsonl:2: turn of session 'a' at 1 s, before its previous turn \(5 s, t.jsonl:1\)"
    ):
        build([("a", None, 5, T(1, new_tokens=5, at=5.0)), ("a", None, 5, T(2, new_tokens=5, at=1.0))])


def test_a_parent_link_without_a_spawning_turn_joins_after_the_first_turn():
    st = build(
        [("a", None, 0, T(1, new_tokens=5)), ("a", None, 0, T(2, new_tokens=5)), ("k", "a", 0, T(3, new_tokens=5))]
    )
    assert st.sessions["a"].turns[0].children == ("k",) and [s.id for s in st.roots] == ["a"]


def test_shares_partition_the_roots_and_keep_subagents_with_them():
    rows = []
    for i in range(40):
        rows.append((f"r{i}", None, float(i), T(i * 3 + 1, new_tokens=5, children=(f"k{i}",))))
        rows.append((f"k{i}", f"r{i}", float(i), T(i * 3 + 2, new_tokens=5)))
    st = build(rows)
    parts = [st.take_share((i, 3)) for i in range(3)]
    roots = [s.id for p in parts for s in p.roots]
    assert sorted(roots) == sorted(f"r{i}" for i in range(40)) and len(roots) == 40
    for p in parts:
        assert all(f"k{r.id[1:]}" in p.sessions for r in p.roots)
        assert len(p.sessions) == 2 * len(p.roots)


# ---- ideal reuse ----


def test_ideal_blocks_count_only_a_chain_of_seen_blocks():
    c = IdealCache()
    assert c.blocks((1, 2, 3), 16, 48) == 0  # nothing seen yet
    assert c.blocks((1, 2, 4), 16, 48) == 32  # shares two leading blocks
    assert c.blocks((9, 2, 3), 16, 48) == 0  # block 2 after another first block is another prefix
    assert c.blocks((1, 2, 3, 5), 16, 60) == 48
    assert c.blocks((1, 2, 3, 5), 16, 40) == 40  # at most the prompt


def test_conversations_of_a_trace_become_sessions_in_turn_order(tmp_path):
    p = tmp_path / "c.jsonl"
    rows = [
        {"timestamp": t, "conversation_id": c, "turn": k, "prompt": f"q{k}{c}", "output_tokens": 3}
        for t, c, k in [(0.0, "a", 0), (0.5, "b", 0), (1.0, "a", 1), (2.0, "a", 2)]
    ]
    rows.append({"timestamp": 0.2, "input_tokens": 7, "output_tokens": 2})
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    st = load_workload(str(p))
    assert isinstance(st, SessionTrace)
    assert [s.id for s in st.roots] == ["c:a", "r:1", "c:b"]
    a = st.sessions["c:a"]
    assert [t.text for t in a.turns] == ["q0a", "q1a", "q2a"] and [t.at for t in a.turns] == [0.0, 1.0, 2.0]
    assert [t.source for t in a.turns] == [f"{p}:1", f"{p}:3", f"{p}:4"]


def test_a_trace_without_conversations_stays_a_trace(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"timestamp": 0, "input_tokens": 5, "output_tokens": 2}\n')
    assert not isinstance(load_workload(str(p)), SessionTrace)


# ---- the runner, with a recording sender ----


class Recorder:
    """Stands in for the server: answers each request with a reply of `reply_words` words."""

    def __init__(self, delay=0.01, fail_on=None, reply_words=3):
        self.sent = []
        self.delay = delay
        self.fail_on = fail_on
        self.reply_words = reply_words

    def __call__(self, req: SessionRequest) -> RequestRecord:
        t = time.perf_counter()
        source, t_sched = req.source, req.t_sched
        entry = {
            "spec": req.spec,
            "source": source,
            "session": req.session,
            "ideal": req.ideal,
            "t": t,
            "t_sched": t_sched,
            "keep_text": req.keep_text,
        }
        self.sent.append(entry)
        n = len(self.sent)
        gevent.sleep(self.delay)
        rec = RequestRecord(request_id=str(n), api="openai-chat", t_sched=t_sched, t_sent=t, wall_sent=time.time())
        rec.t_end = entry["t_end"] = time.perf_counter()
        if self.fail_on == source:
            rec.outcome = Outcome.HTTP_ERROR
            return rec
        rec.text = " ".join(f"r{n}" for _ in range(self.reply_words))
        rec.n_in = 100 * n
        rec.n_out = self.reply_words
        return rec


def runner(st, **settings):
    s = Settings(**settings)
    builder = SpecBuilder(s, PromptBuilder(seed=1, chat=True), True)
    return SessionRunner(st, builder, s, nonce="N1")


def test_turns_grow_by_the_reply_and_the_new_tokens_and_carry_the_ideal():
    st = build(
        [
            ("a", None, 0, T(1, new_tokens=20, output_tokens=3)),
            ("a", None, 0, T(2, new_tokens=10, role="tool", output_tokens=3)),
            ("a", None, 0, T(3, text="thanks", output_tokens=3)),
        ]
    )
    send = Recorder()
    assert runner(st).run(st.sessions["a"], send) is True
    msgs = [x["spec"].messages for x in send.sent]
    assert [len(m) for m in msgs] == [1, 3, 5]
    assert msgs[0][0]["content"].startswith("[run N1 session a.1]\n")  # the cache-bust marker, first turn only
    assert msgs[1][:1] == msgs[0] and msgs[1][1] == {"role": "assistant", "content": "r1 r1 r1"}
    assert msgs[1][2]["content"].startswith("Tool result:\n")
    assert msgs[2][:3] == msgs[1] and msgs[2][3]["content"] == "r2 r2 r2" and msgs[2][4]["content"] == "thanks"
    # ideal: nothing before the first turn; then the previous prompt (server's count) and its reply
    assert [x["ideal"] for x in send.sent] == [0, 100 + 3, 200 + 3]
    assert {x["session"] for x in send.sent} == {"a"}


def test_only_a_turn_with_a_turn_after_it_keeps_its_reply_text():
    # the reply's text is kept (a copy a token; SGLang: every cumulative event parsed whole) only
    # where the next turn sends it back: not on a session's last turn, not in block mode
    st = build(
        [
            ("p", None, 0, T(1, text="plan", output_tokens=3, children=("k",))),
            ("p", None, 0, T(2, text="merge", output_tokens=3)),
            ("k", "p", 0, T(3, text="sub")),
        ]
    )
    b = SessionBuilder("t.jsonl")
    b.session("b", start=0, source="t.jsonl:4")
    for line, ids in ((4, [1, 2]), (5, [1, 2, 3])):
        b.turn("b", T(line, input_tokens=16 * len(ids), output_tokens=2, hash_ids=ids))
    blocks = b.finish(path="t.jsonl", format="test", sha256="0", block_size=16)
    send = Recorder()
    assert runner(st).run(st.sessions["p"], send) is True and runner(blocks).run(blocks.sessions["b"], send) is True
    assert {x["source"]: x["keep_text"] for x in send.sent} == {
        "t.jsonl:1": True,
        "t.jsonl:2": False,
        "t.jsonl:3": False,
        "t.jsonl:4": False,
        "t.jsonl:5": False,
    }


def test_no_marker_without_cache_bust():
    st = build([("a", None, 0, T(1, text="hello", output_tokens=3))])
    send = Recorder()
    runner(st, cache_bust=False).run(st.sessions["a"], send)
    assert send.sent[0]["spec"].messages[0]["content"] == "hello"


def test_subagents_run_in_parallel_and_the_parent_waits_for_them():
    st = build(
        [
            ("p", None, 0, T(1, text="plan", output_tokens=3, children=("k1", "k2"))),
            ("p", None, 0, T(2, text="merge", output_tokens=3)),
            ("k1", "p", 0, T(3, text="sub one a")),
            ("k1", "p", 0, T(4, text="sub one b")),
            ("k2", "p", 0, T(5, text="sub two")),
        ]
    )
    send = Recorder(delay=0.05)
    assert runner(st).run(st.sessions["p"], send) is True
    by = {x["source"].rsplit(":", 1)[1]: x for x in send.sent}
    assert set(by) == {"1", "2", "3", "4", "5"}
    assert by["3"]["t"] >= by["1"]["t_end"] and by["5"]["t"] >= by["1"]["t_end"]  # after the spawning reply
    assert abs(by["3"]["t"] - by["5"]["t"]) < 0.04  # both subagents at once, not one after the other
    assert by["4"]["t"] >= by["3"]["t_end"]
    assert by["2"]["t"] >= max(by["4"]["t_end"], by["5"]["t_end"])  # joined before the parent's next turn
    # a subagent has its own conversation (and its own id for routing)
    assert by["3"]["session"] == "k1" and len(by["4"]["spec"].messages) == 3


def test_gaps_are_capped_by_max_idle():
    st = build([("a", None, 0, T(1, text="x", output_tokens=3)), ("a", None, 0, T(2, text="y", gap=30.0))])
    send = Recorder(delay=0.0)
    runner(st, max_idle=0.2).run(st.sessions["a"], send)
    wait = send.sent[1]["t"] - send.sent[0]["t_end"]
    assert 0.19 <= wait < 1.0


def test_a_failed_turn_ends_the_session_and_spawns_nothing():
    st = build(
        [("p", None, 0, T(1, text="a", children=("k",))), ("p", None, 0, T(2, text="b")), ("k", "p", 0, T(3, text="c"))]
    )
    send = Recorder(fail_on="t.jsonl:1")
    r = runner(st)
    assert r.run(st.sessions["p"], send) is False
    assert [x["source"] for x in send.sent] == ["t.jsonl:1"]
    assert (r.sessions_done, r.sessions_broken) == (0, 1)


def test_killing_a_session_kills_its_subagents():
    st = build(
        [
            ("p", None, 0, T(1, text="a", children=("k",))),
            ("p", None, 0, T(2, text="b")),
            ("k", "p", 0, T(3, text="c")),
            ("k", "p", 0, T(4, text="d", gap=5.0)),
        ]
    )
    send = Recorder(delay=0.01)
    g = gevent.spawn(runner(st, max_idle=0).run, st.sessions["p"], send)
    gevent.sleep(0.2)  # the subagent now waits out its 5 s gap
    g.kill()
    n = len(send.sent)
    gevent.sleep(0.1)
    assert n == 2 and len(send.sent) == 2 and [x["source"][-1] for x in send.sent] == ["1", "3"]


def test_block_mode_sends_the_blocks_and_counts_shared_blocks_as_ideal():
    b = SessionBuilder("m.jsonl")
    for line, (sid, ids) in enumerate([("s1", (1, 2)), ("s1", (1, 2, 3)), ("s2", (1, 9))], 1):
        b.session(sid, start=0, source=f"m.jsonl:{line}")
        b.turn(sid, Turn(input_tokens=16 * len(ids), output_tokens=2, hash_ids=ids, source=f"m.jsonl:{line}"))
    st = b.finish(path="m.jsonl", format="test", sha256="0", block_size=16)
    send = Recorder()
    r = runner(st)
    r.run(st.sessions["s1"], send)
    r.run(st.sessions["s2"], send)
    assert [x["ideal"] for x in send.sent] == [0, 32, 16]
    first = [x["spec"].messages[0]["content"] for x in send.sent]
    assert all(c.startswith("[run N1]\n") for c in first)  # one marker for the run: shared blocks stay shared
    assert first[1].startswith(first[0][:-5])  # the second turn repeats the first's blocks
    assert len(send.sent[1]["spec"].messages) == 1  # nothing appended by the client


def test_mid_start_sends_the_earlier_turns_as_history():
    st = build([("a", None, 0, T(k, new_tokens=8, output_tokens=4)) for k in range(1, 6)])
    import random

    starts = {pick_start_turn(st.sessions["a"], random.Random(i)) for i in range(50)}
    assert starts == {0, 1, 2, 3, 4}
    send = Recorder()
    runner(st).run(st.sessions["a"], send, start_turn=3)
    assert len(send.sent) == 2
    first = send.sent[0]["spec"].messages
    assert len(first) == 7 and [m["role"] for m in first[:6]] == ["user", "assistant"] * 3
    assert first[0]["content"].startswith("[run N1 session a.1]\n")
    assert send.sent[0]["ideal"] == 0  # nothing of it was ever sent


def test_a_session_sent_again_starts_cold():
    st = build([("a", None, 0, T(1, text="hello", output_tokens=3))])
    send = Recorder()
    r = runner(st)
    r.run(st.sessions["a"], send)
    r.run(st.sessions["a"], send)
    m = [x["spec"].messages[0]["content"] for x in send.sent]
    assert m[0] != m[1] and m[0].endswith("hello") and m[1].endswith("hello")


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "agentic"


def test_session_files_load_as_sessions_and_are_never_read_as_requests():
    from llm_locust.workload import load_trace

    seen = set()
    for f in sorted(FIXTURES.glob("*.json*")):
        from llm_locust.workload.agentic import detect_sessions

        fmt = detect_sessions(f)
        if fmt is None:
            continue
        seen.add(fmt)
        assert isinstance(load_workload(str(f)), SessionTrace), f
        with pytest.raises(TraceError, match=r"a session trace \(.+\), not a trace of single requests"):
            load_trace(f)
    assert {"llm-locust-sessions", "weka", "sglang-agentic", "aiperf-dag"} <= seen
    assert Settings(trace_format="weka-trace").trace_format == "weka-trace"  # an alias
    with pytest.raises(Exception, match="unknown trace format 'wekka'.*did you mean 'weka'"):
        Settings(trace_format="wekka")
