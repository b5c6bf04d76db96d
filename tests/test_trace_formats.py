"""Trace loaders: every format, detection, forcing, gzip, shares, filters, bad input, real files.

Real public traces are read from ../shared/traces beside the repository (the CI layout); where
that directory is missing locally those tests skip (in CI they fail). Tests that must not depend
on it use the slices in tests/fixtures/traces/.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import zlib
from array import array
from pathlib import Path

import pytest
from support import shared_file

from llm_locust.workload import FORMATS, Trace, TraceError, TraceRecord, load_trace

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "traces"


def shared(name: str) -> Path:
    return shared_file(f"traces/{name}")


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content, encoding="utf-8", newline="")
    return p


def err(path, *args, **kw) -> str:
    with pytest.raises(TraceError) as e:
        load_trace(path, *args, **kw)
    return str(e.value)


def sources(trace: Trace) -> list[str]:
    return [r.source for r in trace]


# -- real files, hand-computed values -----------------------------------------------------------


def test_azure2023_conv_real_file_arrivals_by_hand():
    p = shared("azure2023_conv.csv")
    t = load_trace(p)
    assert t.format == "azure2023" and len(t) == t.total_rows == 19366 and not t.skipped
    # row 2: 2023-11-16 18:15:46.6805900 -> 0; row 3: 18:15:50.9951690 -> 4.314579 s
    assert t[0] == TraceRecord(0.0, 374, 44, source=f"{p}:2")
    assert t[1].arrival == pytest.approx(4.314579, abs=1e-9)
    assert (t[1].input_tokens, t[1].output_tokens) == (396, 109)
    # last row (no trailing newline): 2023-11-16 19:14:08.4025270,197,183 -> 58 min 21.721937 s
    assert t[-1].arrival == pytest.approx(58 * 60 + 21.721937, abs=1e-6) == t.duration
    assert (t[-1].input_tokens, t[-1].output_tokens, t[-1].source) == (197, 183, f"{p}:19367")
    assert t.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    assert t.reordered == 0 and list(t.arrivals) == sorted(t.arrivals)


def test_azure2023_code_real_file():
    p = shared("azure2023_code.csv")
    t = load_trace(p)
    assert len(t) == 8819
    assert t[1].arrival == pytest.approx(0.052, abs=1e-9)  # 18:17:04.0319600 - 18:17:03.9799600
    assert (t[-1].input_tokens, t[-1].output_tokens) == (549, 173)
    assert t.duration == pytest.approx((19 - 18) * 3600 + (14 - 17) * 60 + (19.928016 - 3.97996), abs=1e-6)


def test_mooncake_real_files():
    p = shared("mooncake_conversation.jsonl")
    t = load_trace(p)
    assert t.format == "mooncake" and len(t) == 12031 and t.block_size == 512
    for r in t:
        assert math.ceil(r.input_tokens / 512) == len(r.hash_ids)
        assert r.block_size == 512
    first = p.read_text().split("\n", 1)[0]
    assert first.startswith('{"timestamp": 0, "input_length": 6758')
    assert t[0].hash_ids == tuple(range(14)) and t[0].output_tokens == 500
    # timestamps are ms from the trace start: kept as the origin
    import json

    rows = [json.loads(x) for x in p.read_text().splitlines()]
    assert t.duration == max(r["timestamp"] for r in rows) / 1000
    assert len(load_trace(shared("mooncake_synthetic.jsonl"))) == 3993
    assert len(load_trace(shared("mooncake_arxiv_head.jsonl"))) == 20


def test_burstgpt_real_heads():
    v1 = load_trace(shared("burstgpt_v1_head.csv"))
    assert v1.format == "burstgpt"
    assert list(v1.arrivals) == [0.0, 40.0, 113.0]  # Timestamp 5, 45, 118: rebased to the first row
    assert [r.model for r in v1] == ["ChatGPT", "ChatGPT", "GPT-4"]
    assert v1[0].conversation_id is None and "conversation_id" not in v1.columns
    v2 = load_trace(shared("burstgpt_v2_head.csv"))
    assert list(v2.arrivals) == [0.0, 51.0, 82.0, 144.0]  # 19440110.0 ... 19440254.0
    assert v2[0].conversation_id == "1722ac82-0a46-4bf0-aa08-89794e7a2b3f"
    assert (v2[0].input_tokens, v2[0].output_tokens, v2[0].turn) == (906, 446, 1)
    assert len(v2.conversations()) == 4


def test_sharegpt_real_record():
    p = shared("sharegpt_one_record.json")
    import json

    conv = json.loads(p.read_text())[0]["conversations"]
    t = load_trace(p)
    assert t.format == "sharegpt" and len(t) == 6 == sum(m["from"] == "human" for m in conv)
    assert [r.turn for r in t] == [1, 2, 3, 4, 5, 6]
    assert {r.conversation_id for r in t} == {"QWJhYvA_0"}
    assert all(r.arrival == 0.0 for r in t)
    for k, r in enumerate(t):
        human, gpt = conv[2 * k], conv[2 * k + 1]
        assert r.messages == [{"role": "user", "content": human["value"]}]
        assert r.output_tokens == len(gpt["value"].split())
        assert r.source == f"{p}:2"  # the record's object starts on line 2
    assert t.conversations() == {"QWJhYvA_0": [0, 1, 2, 3, 4, 5]}


# -- every format, detection, forcing ----------------------------------------------------------

DETECTED = [
    ("azure2023_code_head50.csv", "azure2023"),
    ("azure2023_conv_head20.csv", "azure2023"),
    ("azure2024_conv_excerpt.csv", "azure2024"),
    ("azure2025_excerpt.csv", "azure2025"),
    ("burstgpt_v1_head.csv", "burstgpt"),
    ("burstgpt_v2_head.csv", "burstgpt"),
    ("mooncake_conversation_head30.jsonl", "mooncake"),
    ("bailian.jsonl", "bailian"),
    ("aiperf_mooncake.jsonl", "aiperf-mooncake"),
    ("aiperf_multi_turn.jsonl", "aiperf-multi-turn"),
    ("sharegpt_one_record.json", "sharegpt"),
    ("vllm_custom.jsonl", "vllm"),
    ("guidellm.jsonl", "guidellm"),
    ("guidellm.csv", "guidellm"),
    ("splitwise.csv", "splitwise"),
    ("ours.jsonl", "jsonl"),
]


@pytest.mark.parametrize("name, fmt", DETECTED)
def test_detection(name, fmt):
    t = load_trace(FIX / name)
    assert t.format == fmt and len(t) > 0
    assert t.sha256 == hashlib.sha256((FIX / name).read_bytes()).hexdigest()
    assert list(t.arrivals) == sorted(t.arrivals)


def test_every_format_has_a_fixture():
    assert {fmt for _, fmt in DETECTED} == set(FORMATS)


@pytest.mark.parametrize("name, fmt", DETECTED)
def test_forcing_the_detected_format_gives_the_same_trace(name, fmt):
    a, b = load_trace(FIX / name), load_trace(FIX / name, fmt)
    assert list(a) == list(b)


def test_forcing_aliases_and_other_compatible_formats():
    az24 = FIX / "azure2024_conv_excerpt.csv"
    assert load_trace(az24, "azure2023").format == "azure2023"  # same columns: the name is the user's
    assert load_trace(FIX / "ours.jsonl", "ours").format == "jsonl"
    assert load_trace(FIX / "aiperf_mooncake.jsonl", "mooncake_trace").format == "aiperf-mooncake"
    assert load_trace(FIX / "aiperf_multi_turn.jsonl", "multi_turn").format == "aiperf-multi-turn"
    # a vLLM custom file is also valid as our JSONL (prompt + output_tokens)
    assert list(load_trace(FIX / "vllm_custom.jsonl", "jsonl")) == list(load_trace(FIX / "vllm_custom.jsonl"))


def test_forcing_a_wrong_format_names_missing_and_found_columns():
    p = FIX / "azure2023_conv_head20.csv"
    m = err(p, "burstgpt")
    assert m.startswith(f"{p}:1: burstgpt trace: missing column(s) Timestamp, Model, Request tokens, Response tokens")
    assert "found: TIMESTAMP, ContextTokens, GeneratedTokens" in m
    assert err(p, "azure2025").startswith(f"{p}:1: azure2025 trace: missing column(s) NumImages")
    m = err(p, "mooncake")
    assert m.startswith(f"{p}:1: invalid JSON")
    assert "unknown trace format 'nope'" in err(p, "nope") and "azure2024" in err(p, "nope")


def test_azure2024_mixed_forms_and_days():
    t = load_trace(FIX / "azure2024_conv_excerpt.csv")
    # 2024-05-12 00:00:00.001163+00:00 is the origin
    assert t[1].arrival == pytest.approx(0.041683 - 0.001163, abs=1e-9)
    assert t[5].arrival == pytest.approx(6 * 86400 + 86399.759803 - 0.001163, abs=1e-6)


def test_azure2024_whole_second_form(tmp_path):
    p = write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-12 00:00:00+00:00,10,1\n"
        "2024-05-12 00:00:00.001163+00:00,20,2\n2024-05-12 00:00:01+00:00,30,3\n",
    )
    t = load_trace(p)
    assert t.format == "azure2024"
    assert list(t.arrivals) == pytest.approx([0.0, 0.001163, 1.0])


def test_azure2025_images():
    t = load_trace(FIX / "azure2025_excerpt.csv")
    assert [r.images for r in t][:5] == [0, 1, 1, 0, 1] and t[5].images == 16
    assert t[1].arrival == pytest.approx(5.55, abs=1e-9)  # 12:00:05.819Z - 12:00:00.269Z
    assert t.duration == pytest.approx(7 * 86400 - 0.269 - 0.036, abs=1e-6)  # 10-22T11:59:59.964Z


def test_bailian_chains_turns_and_blocks():
    t = load_trace(FIX / "bailian.jsonl")
    assert t.block_size == 16
    assert [r.conversation_id for r in t] == ["159", "201", "159", "159", "305"]
    assert [r.turn for r in t] == [1, 1, 2, 3, 1]
    assert t[0].arrival == 61.114  # seconds from the trace start: kept
    assert t[2].hash_ids == (1089, 1090, 1091, 1092) and t[2].block_size == 16
    assert t[4].hash_ids == (4294967296,)  # a 64-bit id widens the storage
    assert t.conversations() == {"159": [0, 2, 3], "201": [1], "305": [4]}


def test_aiperf_mooncake_trace():
    t = load_trace(FIX / "aiperf_mooncake.jsonl")
    assert list(t.arrivals) == [0.0, 0.25, 1.5, 3.0005]  # ms; s1's delay 1500 ms after its turn at 0
    assert t[1].prompt == "Hello there" and t[1].input_tokens is None
    assert [r.conversation_id for r in t] == ["s1", "s2", "s1", None]
    assert [r.turn for r in t] == [1, 1, 2, None]  # derived: position in the session
    assert t[2].hash_ids == (0, 1, 2) and t.block_size == 512


def test_aiperf_multi_turn():
    t = load_trace(FIX / "aiperf_multi_turn.jsonl")
    assert [(r.conversation_id, r.turn, r.arrival) for r in t] == [
        ("chat-a", 1, 0.0),
        ("chat-b", 1, 0.5),
        ("chat-a", 2, 2.0),
    ]
    assert t[1].prompt == "Describe\nthis image" and t[1].images == 1 and t[1].output_tokens == 64
    assert t.reordered == 1  # chat-b's turn is earlier than chat-a's second: sorted
    assert t.conversations() == {"chat-a": [0, 2], "chat-b": [1]}


def test_vllm_guidellm_splitwise_ours():
    v = load_trace(FIX / "vllm_custom.jsonl")
    assert [(r.prompt, r.output_tokens, r.arrival) for r in v] == [
        ("Write a haiku about GPUs.", 32, 0.0),
        ("Explain KV caches.", None, 0.0),
    ]
    g = load_trace(FIX / "guidellm.jsonl")
    assert [(r.prompt, r.input_tokens, r.output_tokens) for r in g] == [
        ("Tell me a joke.", 5, 20),
        ("Summarise this.", 4, 50),
    ]
    gc = load_trace(FIX / "guidellm.csv")
    assert [(r.prompt, r.input_tokens, r.output_tokens) for r in gc] == [
        ("Tell me a joke.", 5, 20),
        ('Two lines,\nwith a comma and "quotes"', 9, 40),
    ]
    assert sources(gc) == [f"{FIX / 'guidellm.csv'}:2", f"{FIX / 'guidellm.csv'}:3"]
    s = load_trace(FIX / "splitwise.csv")
    assert [(r.arrival, r.input_tokens, r.output_tokens) for r in s] == [
        (0.0, 374, 44),
        (4.314579, 396, 109),
        (4.541877, 879, 55),
    ]
    o = load_trace(FIX / "ours.jsonl")
    assert o[0] == TraceRecord(0.0, 374, 44, source=f"{FIX / 'ours.jsonl'}:1")
    assert (o[1].prompt, o[1].model) == ("Hello, world", "m1")
    assert o[2].messages == [{"role": "user", "content": "Hi"}] and (o[2].conversation_id, o[2].turn) == ("c1", 1)
    assert (o[3].hash_ids, o[3].block_size, o[3].images, o[3].model) == ((1, 2), 512, 2, "m2")
    assert o.block_size == 512 and o.conversations() == {"c1": [2, 4]}
    assert o.columns == {"prompt", "messages", "conversation_id", "turn", "hash_ids", "images", "model"}


def test_token_only_traces_store_no_optional_columns():
    t = load_trace(FIX / "azure2023_conv_head20.csv")
    assert t.columns == frozenset()
    assert isinstance(t.arrivals, array) and t.arrivals.typecode == "d"
    assert t.input_lengths.typecode == "i" and t.output_lengths.typecode == "i"
    assert t.nbytes() == 16 * len(t)  # lines kept as a range: no per-row line storage
    assert load_trace(FIX / "ours.jsonl", share=(0, 1)).share == (0, 1)


# -- the Trace sequence API ------------------------------------------------------------------------


def test_trace_sequence_api():
    t = load_trace(FIX / "azure2023_conv_head20.csv")
    assert len(t) == 20 and t[-1] == t[19] and t[0:2] == [t[0], t[1]]
    with pytest.raises(IndexError):
        t[20]
    recs = list(t)
    assert len(recs) == 20 and all(isinstance(r, TraceRecord) for r in recs)
    assert [r.arrival for r in recs] == list(t.arrivals)
    assert t[7 % len(t)].source.endswith(":9")
    assert t.conversations() == {}
    assert "azure2023" in repr(t)


# -- gzip ---------------------------------------------------------------------------------------


def test_gzip_is_read_transparently(tmp_path):
    src = FIX / "azure2023_code_head50.csv"
    gz = write(tmp_path, "code.csv.gz", gzip.compress(src.read_bytes()))
    a, b = load_trace(src), load_trace(gz)
    assert [(r.arrival, r.input_tokens, r.output_tokens) for r in a] == [
        (r.arrival, r.input_tokens, r.output_tokens) for r in b
    ]
    assert b.sha256 == hashlib.sha256(gz.read_bytes()).hexdigest()  # of the file's bytes as read
    assert b[0].source == f"{gz}:2"
    # detected by content, whatever the name
    nosuffix = write(tmp_path, "code.bin", gzip.compress(src.read_bytes()))
    assert len(load_trace(nosuffix)) == 50


def test_gzip_of_a_real_file_streams(tmp_path):
    src = shared("mooncake_conversation.jsonl")
    gz = write(tmp_path, "m.jsonl.gz", gzip.compress(src.read_bytes()))
    a, b = load_trace(src), load_trace(gz)
    assert len(a) == len(b) == 12031 and a[-1].hash_ids == b[-1].hash_ids


def test_truncated_gzip_names_the_file_and_line(tmp_path):
    body = "".join(f'{{"timestamp": {i}, "input_tokens": 5, "output_tokens": 3}}\n' for i in range(200000))
    data = gzip.compress(body.encode())
    gz = write(tmp_path, "cut.jsonl.gz", data[: len(data) // 2])
    m = err(gz)
    assert m.startswith(f"{gz}:") and "truncated gzip file" in m and "ends after line" in m
    line = int(m.split(":")[1])
    assert 1 < line < 200000


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(b'{"input_tokens": 5}\n' * 1000))
    data[len(data) // 2] ^= 0xFF
    data[len(data) // 2 + 1] ^= 0xFF
    gz = write(tmp_path, "bad.jsonl.gz", bytes(data))
    m = err(gz)
    assert m.startswith(f"{gz}:") and ("gzip" in m or "invalid JSON" in m)


# -- shares -------------------------------------------------------------------------------------


def _union_check(path, k, **kw):
    full = load_trace(path, **kw)
    parts = [load_trace(path, share=(i, k), **kw) for i in range(k)]
    key = lambda r: (r.source, r.arrival, r.conversation_id, r.turn, r.input_tokens)  # noqa: E731
    everything = [key(r) for r in full]
    got = [key(r) for p in parts for r in p]
    assert sorted(got) == sorted(everything)  # complete, nothing twice, same arrival times
    assert len(set(got)) == len(got)
    for p in parts:
        assert list(p.arrivals) == sorted(p.arrivals)
        assert p.total_rows == full.total_rows and p.share == (p.share[0], k)
    return full, parts


@pytest.mark.parametrize("k", [1, 2, 3])
def test_shares_by_row_are_disjoint_and_complete(k):
    full, parts = _union_check(FIX / "azure2023_code_head50.csv", k)
    for i, p in enumerate(parts):
        # key = 0-based row index among the kept rows
        assert [r.source for r in p] == [full[j].source for j in range(len(full)) if j % k == i]


@pytest.mark.parametrize("k", [2, 3])
def test_shares_of_a_real_file(k):
    full, parts = _union_check(shared("azure2023_conv.csv"), k)
    assert sum(len(p) for p in parts) == 19366
    # the share's records keep the trace's origin (first row of the file), not their own
    assert parts[1][0].arrival == full[1].arrival


@pytest.mark.parametrize("k", [1, 2, 3])
def test_shares_keep_conversations_together(tmp_path, k):
    lines = []
    for i in range(300):
        if i % 7 == 0:
            lines.append(f'{{"timestamp": {i * 0.1:.1f}, "input_tokens": {i + 1}}}')
        else:
            lines.append(f'{{"timestamp": {i * 0.1:.1f}, "input_tokens": {i + 1}, "conversation_id": "c{i % 23}"}}')
    p = write(tmp_path, "conv.jsonl", "\n".join(lines) + "\n")
    full, parts = _union_check(p, k)
    owner: dict[str, int] = {}
    for i, part in enumerate(parts):
        for r in part:
            if r.conversation_id is not None:
                assert owner.setdefault(r.conversation_id, i) == i
                assert zlib.crc32(r.conversation_id.encode()) % k == i
    assert len(owner) == 23
    # turns of a conversation are complete and in order within its share
    convs = full.conversations()
    for part in parts:
        for cid, idx in part.conversations().items():
            assert [part[j].source for j in idx] == [full[j].source for j in convs[cid]]


@pytest.mark.parametrize(
    "name",
    [
        "burstgpt_v2_head.csv",
        "bailian.jsonl",
        "aiperf_mooncake.jsonl",
        "aiperf_multi_turn.jsonl",
        "sharegpt_one_record.json",
        "mooncake_conversation_head30.jsonl",
    ],
)
@pytest.mark.parametrize("k", [2, 3])
def test_shares_of_every_conversation_format(name, k):
    full, parts = _union_check(FIX / name, k)
    for cid in full.conversations():
        holders = [i for i, p in enumerate(parts) if cid in p.conversations()]
        assert holders == [zlib.crc32(cid.encode()) % k]


def test_bad_share_is_refused():
    p = FIX / "ours.jsonl"
    assert "share" in err(p, share=(2, 2)) and "share" in err(p, share=(0, 0))


# -- BurstGPT failed rows and model filter --------------------------------------------------------

BURST = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "118,GPT-4,417,276,693,Conversation log\n"
    "120,GPT-4,100,0,100,API log\n"
    "130,ChatGPT,10,5,15,API log\n"
)


def test_burstgpt_failed_rows_skipped_and_counted(tmp_path):
    p = write(tmp_path, "b.csv", BURST)
    t = load_trace(p)
    assert len(t) == 3 and t.skipped == {"failed": 2} and t.total_rows == 5
    assert [r.source.rsplit(":", 1)[1] for r in t] == ["2", "4", "6"]
    k = load_trace(p, keep_failed=True)
    assert len(k) == 5 and k.skipped == {} and k[1].output_tokens == 0


def test_burstgpt_model_filter(tmp_path):
    p = write(tmp_path, "b.csv", BURST)
    g = load_trace(p, model="GPT-4")
    assert [r.model for r in g] == ["GPT-4"] and g.skipped == {"model": 3, "failed": 1}
    assert g[0].arrival == 0.0  # rebased to the first kept row
    assert len(load_trace(p, model="chatgpt")) == 2  # case-insensitive
    m = err(p, model="GPT-5")
    assert f"{p}: no rows of model 'GPT-5'; models in the file: ChatGPT, GPT-4" == m
    m = err(FIX / "azure2023_conv_head20.csv", model="GPT-4")
    assert "azure2023 traces have no model column" in m


def test_all_rows_failed(tmp_path):
    p = write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,5,0\n")
    assert err(p) == f"{p}: no rows left to replay (1 failed skipped)"


# -- order, origin -------------------------------------------------------------------------------


def test_non_monotonic_times_are_sorted_stably_and_counted(tmp_path):
    p = write(
        tmp_path,
        "o.jsonl",
        "".join(f'{{"timestamp": {t}, "input_tokens": {n}}}\n' for t, n in [(0, 1), (2, 2), (1, 3), (2, 4), (3, 5)]),
    )
    t = load_trace(p)
    assert list(t.arrivals) == [0, 1, 2, 2, 3] and [r.input_tokens for r in t] == [1, 3, 2, 4, 5]
    assert t.reordered == 1 and t.skipped == {}
    assert [r.source.rsplit(":", 1)[1] for r in t] == ["1", "3", "2", "4", "5"]


def test_reordering_moves_every_column(tmp_path):
    rows = [
        (0.0, [1, 2], "a"),
        (5.0, [3], "b"),
        (1.0, [1, 2, 4], "a"),
        (5.0, [9, 9, 9], None),
        (2.0, [7], "c"),
        (6.0, [8], "b"),
    ]
    p = write(
        tmp_path,
        "r.jsonl",
        "".join(
            f'{{"timestamp": {t}, "input_tokens": {10 * len(h)}, "hash_ids": {h}, "block_size": 4'
            + (f', "conversation_id": "{c}", "prompt": "p{i}"' if c else "")
            + "}\n"
            for i, (t, h, c) in enumerate(rows)
        ),
    )
    t = load_trace(p)
    assert t.reordered == 2
    assert [(r.arrival, r.hash_ids, r.conversation_id, r.prompt, r.turn) for r in t] == [
        (0.0, (1, 2), "a", "p0", 1),
        (1.0, (1, 2, 4), "a", "p2", 2),
        (2.0, (7,), "c", "p4", 1),
        (5.0, (3,), "b", "p1", 1),
        (5.0, (9, 9, 9), None, None, None),
        (6.0, (8,), "b", "p5", 2),
    ]
    assert [r.source.rsplit(":", 1)[1] for r in t] == ["1", "3", "5", "2", "4", "6"]


def test_only_the_disordered_stretch_is_sorted():
    from llm_locust.workload.trace import _disorder_window

    t = array("d", range(100000))
    assert _disorder_window(t) is None
    t[500], t[503] = t[503], t[500]
    assert _disorder_window(t) == (500, 504)
    t = array("d", [0, 1, 1, 3, 2, 2, 5])
    assert _disorder_window(t) == (3, 6)  # the 1s before and the 5 after stay where they are


def test_earlier_row_later_in_an_azure_file_becomes_the_origin(tmp_path):
    p = write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 10:00:05.0000000,1,1\n2023-11-16 10:00:03.0000000,2,2\n2023-11-16 10:00:07.5000000,3,3\n",
    )
    t = load_trace(p)
    assert list(t.arrivals) == [0.0, 2.0, 4.5] and [r.input_tokens for r in t] == [2, 1, 3]
    assert t.reordered == 1
    # shares agree with the whole trace
    both = sorted((r.arrival, r.input_tokens) for i in range(2) for r in load_trace(p, share=(i, 2)))
    assert both == [(0.0, 2), (2.0, 1), (4.5, 3)]


def test_crlf_bom_and_blank_lines(tmp_path):
    p = write(
        tmp_path,
        "w.csv",
        "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        "2023-11-16 18:15:46.6805900,374,44\r\n\r\n2023-11-16 18:15:50.9951690,396,109\r\n",
    )
    t = load_trace(p)
    assert len(t) == 2 and t[1].arrival == pytest.approx(4.314579) and t[1].source == f"{p}:4"


def test_quoted_csv_rows_take_the_row_by_row_path(tmp_path):
    p = write(
        tmp_path,
        "q.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        '"2023-11-16 18:15:46.6805900",374,44\n2023-11-16 18:15:50.9951690, 396 ,109\n',
    )
    t = load_trace(p)
    assert [(r.arrival, r.input_tokens) for r in t] == [(0.0, 374), (pytest.approx(4.314579), 396)]


def test_big_azure_file_over_several_blocks(tmp_path):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(60000):
        s, us = divmod(i * 10007, 1000000)
        rows.append(f"2024-05-12 {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{us:06d}+00:00,{i},{i % 7}")
    p = write(tmp_path, "big.csv", "\n".join(rows))
    t = load_trace(p)
    assert len(t) == 60000 and t[59999].arrival == pytest.approx(59999 * 0.010007, abs=1e-6)
    assert isinstance(t._lines, range) and t[59999].source == f"{p}:60001"
    h = load_trace(p, share=(1, 3))
    assert len(h) == 20000 and isinstance(h._lines, range)
    assert [r.input_tokens for r in h][:3] == [1, 4, 7]


# -- bad input: file and line in every message ------------------------------------------------------

AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize(
    "name, content, expected",
    [
        (
            "renamed.csv",
            "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46.68,1,1\n",
            ":1: looks like a azure2023 trace but column(s) ContextTokens are missing (renamed?); "
            "found: TIMESTAMP, Context, GeneratedTokens",
        ),
        (
            "burst.csv",
            "Timestamp,Model,Request,Response tokens\n1,ChatGPT,1,1\n",
            ":1: looks like a burstgpt trace but column(s) Request tokens are missing",
        ),
        ("unknown.csv", "a,b,c\n1,2,3\n", ":1: unknown trace format; header columns found: a, b, c"),
        (
            "ts.csv",
            AZ + "2023-11-16 18:15:46.6805900,1,1\n2023-11-16 25:99:00,1,1\n",
            ":3: unparseable TIMESTAMP '2023-11-16 25:99:00'",
        ),
        (
            "mixed.csv",
            AZ + "2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:47+00:00,1,1\n",
            ":3: TIMESTAMP '2023-11-16 18:15:47+00:00' mixes time-zone-aware and naive times",
        ),
        (
            "tok.csv",
            AZ + "2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:47.00,x,1\n",
            ":3: ContextTokens is not a number: 'x'",
        ),
        ("negtok.csv", AZ + "2023-11-16 18:15:46.68,-4,1\n", ":2: ContextTokens must not be negative"),
        ("fields.csv", AZ + "2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:47.00,1\n", ":3: expected 3 fields"),
        (
            "neg.csv",
            "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n"
            "0,2,0,0.0,1,374,44\n1,2,0,-1.5,1,396,109\n",
            ":3: negative arrival_timestamp: -1.5",
        ),
        (
            "nan.csv",
            "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n"
            "0,2,0,nan,1,374,44\n",
            ":2: unparseable arrival_timestamp: 'nan'",
        ),
        (
            "negms.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
            '{"timestamp": -5, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n',
            ":2: negative 'timestamp': -5",
        ),
        (
            "type.jsonl",
            '{"timestamp": 0, "input_length": "12", "output_length": 1, "hash_ids": [1]}\n',
            ":1: 'input_length' must be an integer, found str '12'",
        ),
        (
            "hash.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "a"]}\n',
            ":1: 'hash_ids' must be a list of integers",
        ),
        (
            "miss.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5}\n',
            ":2: missing 'output_length'; found keys: timestamp, input_length",
        ),
        ("json.jsonl", '{"input_tokens": 5}\n{"input_tokens": 5\n', ":2: invalid JSON"),
        ("notobj.jsonl", '{"input_tokens": 5}\n[1, 2]\n', ":2: expected a JSON object, found list"),
        ("ours.jsonl", '{"timestamp": 1, "output_tokens": 5}\n', ":1: needs one of prompt, messages, input_tokens"),
        (
            "ours2.jsonl",
            '{"input_tokens": 5}\n{"timestamp": 1, "output_tokens": 5}\n',
            ":2: needs one of prompt, messages, input_tokens; found keys: timestamp, output_tokens",
        ),
        (
            "ours3.jsonl",
            '{"input_tokens": 5, "timestamp": "soon"}\n',
            ":1: 'timestamp' must be a number, found str 'soon'",
        ),
        ("ours4.jsonl", '{"input_tokens": 5, "hash_ids": [1, 2]}\n', ":1: 'hash_ids' without 'block_size'"),
        ("ours5.jsonl", '{"input_tokens": 5, "timestamp": -0.5}\n', ":1: negative 'timestamp': -0.5"),
        ("ours6.jsonl", '{"messages": "hi"}\n', ":1: 'messages' must be a non-empty list of {role, content} objects"),
        ("keys.jsonl", '{"foo": 1}\n', ":1: unknown JSON trace format; keys found: foo"),
        ("arr.json", '[{"a": 1}]', ":1: a JSON array that is not ShareGPT"),
        (
            "sg.json",
            '[\n {"id": "x", "conversations": [{"from": "human", "value": "hi"}]},\n {"id": "y", "conversations": [\n',
            ":4: invalid JSON: the file ends inside a conversation (truncated file?)",
        ),
        (
            "sg4.json",
            '[\n {"id": "x", "conversations": [{"from": "human", "value": "hi"}]}\n',
            ":3: invalid JSON: the array is not closed",
        ),
        (
            "sg2.json",
            '[\n {"id": "x", "conversations": [{"from": "human", "value": "hi"}]},\n {"id": "y"}\n]\n',
            ":3: missing 'conversations' list; found keys: id",
        ),
        (
            "sg3.json",
            '[\n {"id": "x", "conversations": [{"from": "human", "value": "hi"}]}\n {"id": "y"}\n]\n',
            ":3: expected ',' or ']' between conversations",
        ),
        (
            "bail.jsonl",
            '{"chat_id": "abc", "parent_chat_id": -1, "timestamp": 1.0, "input_length": 1, "output_length": 1}\n',
            ":1: 'chat_id' must be an integer id, found str 'abc'",
        ),
        ("mt.jsonl", '{"session_id": "s", "turns": []}\n', ":1: multi_turn line needs a non-empty 'turns' list"),
        (
            "mt2.jsonl",
            '{"session_id": "s", "turns": [{"text": "a"}]}\n{"session_id": "t", "turns": []}\n',
            ":2: multi_turn line needs a non-empty 'turns' list",
        ),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, name, content, expected):
    p = write(tmp_path, name, content)
    m = err(p)
    assert m.startswith(str(p) + ":"), m
    assert expected in m, m


def test_non_utf8_names_the_line(tmp_path):
    p = write(
        tmp_path,
        "bad.csv",
        (AZ + "2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:47.00,1,1\n").encode()
        + b"2023-11-16 18:15:48.00,\xff1,1\n",
    )
    m = err(p)
    assert m.startswith(f"{p}:4: not UTF-8 text (byte 0xff at column 24")
    gz = write(tmp_path, "bad.csv.gz", gzip.compress(p.read_bytes()))
    assert err(gz).startswith(f"{gz}:4: not UTF-8 text")


def test_non_utf8_in_the_header(tmp_path):
    p = write(tmp_path, "h.csv", b"TIMESTAMP,Context\xffTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,1\n")
    assert err(p) == f"{p}:1: not UTF-8 text (byte 0xff at column 18: invalid start byte)"


def test_first_line_longer_than_the_detection_window(tmp_path):
    p = write(tmp_path, "long.jsonl", '{"prompt": "%s", "output_tokens": 5}\n{"prompt": "x"}\n' % ("word " * 40000))
    t = load_trace(p)
    assert t.format == "vllm" and len(t[0].prompt) == 200000


def test_non_utf8_deep_in_a_big_file(tmp_path):
    good = b'{"input_tokens": 5}\n' * 100000
    p = write(tmp_path, "deep.jsonl", good + b'{"prompt": "caf\xe9"}\n')
    assert err(p).startswith(f"{p}:100001: not UTF-8 text")


@pytest.mark.parametrize("content", ["", "\n\n  \n", "\ufeff"])
def test_empty_file(tmp_path, content):
    p = write(tmp_path, "e.jsonl", content)
    assert err(p) == f"{p}: empty trace file"


def test_header_only_and_missing_file(tmp_path):
    p = write(tmp_path, "h.csv", AZ)
    assert err(p) == f"{p}: empty trace (no data rows)"
    assert err(tmp_path / "nope.csv") == f"{tmp_path / 'nope.csv'}: no such trace file"
    p = write(tmp_path, "sg.json", "[]")
    assert err(p) == f"{p}: empty trace (no data rows)"


def test_trace_error_is_a_value_error():
    assert issubclass(TraceError, ValueError)


# -- the shipped slices in traces/ ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", sorted((REPO / "traces").glob("*.*sv")) + sorted((REPO / "traces").glob("*.json*")), ids=lambda p: p.name
)
def test_shipped_slices_load(path):
    """Each slice loads as what it is: a session trace as sessions (its turns counted), any other as
    single requests."""
    from llm_locust.workload.agentic import detect_sessions, load_sessions

    if detect_sessions(path):
        sessions = load_sessions(path)
        assert 0 < sum(len(s.turns) for s in sessions.sessions.values()) <= 500
        return
    t = load_trace(path)
    assert 0 < len(t) <= 500


def test_bundled_sample_still_loads():
    from importlib import resources

    t = load_trace(str(resources.files("llm_locust") / "data" / "sample_trace.jsonl"))
    assert t.format == "jsonl" and len(t) == 400 and t[1].arrival == 4.314579


# -- issue 12: any input gives a TraceError naming the file and line, never another exception -----

CSV_SAMPLES = {
    "azure2023": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n",
    "azure2025": "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n2024-10-15T12:00:00.269Z,1,10,5\n"
    "2024-10-15T12:00:01.269Z,0,11,6\n",
    "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,10,20,30,x\n"
    "6,GPT-4,11,21,32,x\n",
    "splitwise": "request_id,arrival_timestamp,prompt_size,token_size\n0,0.5,10,20\n1,1.5,11,21\n",
    "guidellm": "prompt,output_tokens_count\nhello,5\nworld,6\n",
}


@pytest.mark.parametrize("fmt", sorted(CSV_SAMPLES))
@pytest.mark.parametrize("eol", ["\r", "\r\n"], ids=["CR", "CRLF"])
def test_cr_and_crlf_line_endings_load_like_lf(tmp_path, fmt, eol):
    """A CR-only CSV raised _csv.Error ("new-line character seen in unquoted field")."""
    text = CSV_SAMPLES[fmt]
    want = load_trace(write(tmp_path, "lf.csv", text))
    got = load_trace(write(tmp_path, "other.csv", text.replace("\n", eol)))
    assert got.format == want.format == fmt
    assert [(r.arrival, r.input_tokens, r.output_tokens, r.source.rsplit(":", 1)[1]) for r in got] == [
        (r.arrival, r.input_tokens, r.output_tokens, r.source.rsplit(":", 1)[1]) for r in want
    ]


def test_cr_only_jsonl_and_gzip_and_errors_name_the_line(tmp_path):
    rows = '{"timestamp": 0, "input_tokens": 1}\r{"timestamp": 1, "input_tokens": 2}\r'
    assert [r.input_tokens for r in load_trace(write(tmp_path, "a.jsonl", rows))] == [1, 2]
    assert len(load_trace(write(tmp_path, "a.gz", gzip.compress(rows.encode())))) == 2
    bad = rows + '{"timestamp": -1, "input_tokens": 2}\r'
    p = write(tmp_path, "b.jsonl", bad)
    assert err(p) == f"{p}:3: negative 'timestamp': -1"
    p = write(tmp_path, "c.csv", CSV_SAMPLES["azure2023"].replace("\n", "\r") + "2023-11-16 18:15:5x,1,2\r")
    assert err(p) == f"{p}:4: unparseable TIMESTAMP '2023-11-16 18:15:5x'"


@pytest.mark.parametrize(
    "fmt,line",
    [
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1, %s]}'),
        ("jsonl", '{"input_tokens": 5, "hash_ids": [%s], "block_size": 16}'),
        (
            "bailian",
            '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5, "output_length": 3, '
            '"hash_ids": [%s]}',
        ),
        ("aiperf-mooncake", '{"input_length": 5, "hash_ids": [%s]}'),
    ],
)
@pytest.mark.parametrize("value", ["9223372036854775808", "18446744073709551615", "-1"])
def test_hash_ids_out_of_range_are_refused(tmp_path, fmt, line, value):
    """2^63 raised OverflowError (building the id column); negative ids were accepted."""
    ok = line % "7"
    p = write(tmp_path, "t.jsonl", ok + "\n" + line % value + "\n")
    assert err(p, fmt) == f"{p}:2: 'hash_ids': {value} is not a block id (0 to 2^63-1)"
    t = load_trace(write(tmp_path, "ok.jsonl", ok + "\n" + line % "9223372036854775807" + "\n"), fmt)
    assert t[1].hash_ids[-1] == 2**63 - 1  # the largest id still fits


@pytest.mark.parametrize(
    "content,where,what",
    [
        # CSV
        ("request_id,arrival_timestamp,prompt_size,token_size\n0,nan,1,2\n", 2, "unparseable arrival_timestamp: 'nan'"),
        ("request_id,arrival_timestamp,prompt_size,token_size\n0,inf,1,2\n", 2, "unparseable arrival_timestamp: 'inf'"),
        ("request_id,arrival_timestamp,prompt_size,token_size\n0,1,1e400,2\n", 2, "prompt_size is not an integer"),
        ("request_id,arrival_timestamp,prompt_size,token_size\n0,1,99999999999999999999,2\n", 2, "too large"),
        ('request_id,arrival_timestamp,prompt_size,token_size\n0,1,"2' + "x" * 140000 + '",2\n', 2, "bad CSV line"),
        ('"TIMESTAMP,ContextTokens\n', 1, "unknown trace format"),
        # JSON
        ('{"timestamp": 1e19, "input_length": 5, "output_length": 3}\n', 1, "not a usable time"),
        ('{"timestamp": 1e300, "input_tokens": 5}\n', 1, "not a usable time"),
        ('{"timestamp": 18446744073709551616, "input_tokens": 5}\n', 1, "not a usable time"),
        (
            '{"chat_id": "--5", "parent_chat_id": -1, "timestamp": 0, "input_length": 1, "output_length": 1}\n',
            1,
            "'chat_id' must be an integer id",
        ),
        (
            '{"chat_id": "\u00b2", "parent_chat_id": -1, "timestamp": 0, "input_length": 1, "output_length": 1}\n',
            1,
            "'chat_id' must be an integer id",
        ),
        ('[{"id": 1, "conversations": ' + "[" * 100000 + "]}]\n", 1, "nested too deeply"),
        ('[{"conversations": [], "id": ' + "9" * 5000 + "}]\n", 1, "invalid JSON"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else str(v),
)
def test_hostile_values_give_trace_errors(tmp_path, content, where, what):
    p = write(tmp_path, "t.txt", content)
    msg = err(p)
    assert msg.startswith(f"{p}:{where}: ") and what in msg, msg


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x01\x02garbage\xff\xfe",
        b"\xff\xfe{\x00}",
        b"\x1f\x8b\x08\x00garbage",
        b"\x1f\x8b",
        b"\r\r\r",
        b"\xef\xbb\xbf",
        b'{"timestamp": 0, "input_tokens": 1}\n\xc3\x28\n',
        b"TIMESTAMP,ContextTokens,GeneratedTokens\r2023-11-16 18:15:46,\xe9,3\r",
    ],
)
@pytest.mark.parametrize("fmt", [None, *FORMATS])
def test_binary_garbage_gives_a_trace_error(tmp_path, data, fmt):
    p = write(tmp_path, "g.bin", data)
    msg = err(p, fmt)
    assert msg.startswith(f"{p}:") and "unexpected content" not in msg, msg
