"""`llm-locust trace anonymize`: text traces -> lengths and prefix hashes, prefix sharing kept."""

from __future__ import annotations

import gzip
import json

import pytest
from support import read_jsonl

from llm_locust.tools import anonymize
from llm_locust.workload.prefix_hash import PrefixHasher, render_messages

SYSTEM = "You are a careful assistant who answers in French. " * 60  # 3060 characters


def write_jsonl(path, objs, raw_lines=()):
    with open(path, "wb") as f:
        for o in objs:
            f.write(json.dumps(o).encode() + b"\n")
        for r in raw_lines:
            f.write(r)
    return path


def run(tmp_path, objs, *args, name="in.jsonl"):
    src = write_jsonl(tmp_path / name, objs)
    dst = tmp_path / "out.jsonl"
    assert anonymize.main([str(src), str(dst), *args]) == 0
    return read_jsonl(dst)


TRACE = [
    {
        "timestamp": 0.0,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Bonjour?"}],
        "input_tokens": 700,
        "output_tokens": 12,
        "conversation_id": "alice@example.com",
        "turn": 1,
        "model": "m",
        "api": "openai-chat",
        "status": 200,
        "secret_note": "do not keep",
    },
    {
        "timestamp": 0.5,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Bonjour?"},
            {"role": "assistant", "content": "Oui."},
            {"role": "user", "content": "Et?"},
        ],
        "output_tokens": 7,
        "conversation_id": "alice@example.com",
    },
    {
        "timestamp": 1.25,
        "prompt": "Once upon a time",
        "input_tokens": 9,
        "input_tokens_estimated": True,
        "output_tokens": 30,
    },
    {
        "timestamp": 2.0,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Salut"}, {"type": "image_url", "image_url": {"url": "x"}}],
            },
        ],
        "output_tokens": 3,
        "conversation_id": "bob",
    },
]


def test_text_dropped_prefixes_kept(tmp_path, capsys):
    out = run(tmp_path, TRACE)
    err = capsys.readouterr().err
    assert "4 lines" in err and "dropped keys: secret_note" in err
    text = (tmp_path / "out.jsonl").read_text()
    for s in ("careful", "Bonjour", "Once upon", "Salut", "alice", "bob", "do not keep"):
        assert s not in text
    assert all("messages" not in o and "prompt" not in o for o in out)
    # 2048-character blocks: the system prompt fills block 0; the first two requests share it and more
    h = PrefixHasher()
    expect = [
        h.hash_ids(render_messages(TRACE[0]["messages"]))[0],
        h.hash_ids(render_messages(TRACE[1]["messages"]))[0],
    ]
    assert [o["hash_ids"] for o in out[:2]] == expect == [[0, 1], [0, 2]]
    assert out[2]["hash_ids"] == [3] and out[3]["hash_ids"] == [0, 4]
    assert all(o["block_size"] == 512 for o in out)
    # counts: a reported one kept, else an estimate, flagged
    assert out[0]["input_tokens"] == 700 and "input_tokens_estimated" not in out[0]
    n1 = -(-len(render_messages(TRACE[1]["messages"])) // 4)
    assert out[1]["input_tokens"] == n1 and out[1]["input_tokens_estimated"] is True
    assert out[2]["input_tokens"] == 9 and out[2]["input_tokens_estimated"] is True  # an existing estimate stays
    assert [o["output_tokens"] for o in out] == [12, 7, 30, 3]
    assert [o["timestamp"] for o in out] == [0.0, 0.5, 1.25, 2.0]
    # conversations: pseudonyms, turns kept or counted
    assert [(o.get("conversation_id"), o.get("turn")) for o in out] == [
        ("conv-1", 1),
        ("conv-1", 2),
        (None, None),
        ("conv-2", 1),
    ]
    assert out[0]["model"] == "m" and out[0]["status"] == 200 and out[0]["api"] == "openai-chat"
    assert list(out[0]) == [
        "timestamp",
        "input_tokens",
        "output_tokens",
        "conversation_id",
        "turn",
        "model",
        "api",
        "status",
        "hash_ids",
        "block_size",
    ]


def test_recount_and_block_size(tmp_path):
    out = run(tmp_path, TRACE, "--recount", "--block-size", "64")  # 256-character blocks
    assert out[0]["input_tokens"] == -(-len(render_messages(TRACE[0]["messages"])) // 4)
    assert out[0]["input_tokens_estimated"] is True
    assert len(out[0]["hash_ids"]) == -(-len(render_messages(TRACE[0]["messages"])) // 256)
    assert out[0]["block_size"] == 64


def test_textless_lines_and_gzip(tmp_path):
    objs = [
        {"timestamp": 0, "input_tokens": 5, "output_tokens": 1},
        {"timestamp": 1, "prompt": "abc", "output_tokens": 2},
        {
            "timestamp": 2,
            "input_tokens": 0,
            "output_tokens": 0,
            "hash_ids": [],
            "status": 502,
            "error": "cannot connect",
        },
    ]
    src = tmp_path / "in.jsonl.gz"
    with gzip.open(src, "wb") as f:
        f.write(b"".join(json.dumps(o).encode() + b"\n" for o in objs) + b"\n")
    dst = tmp_path / "out.jsonl.gz"
    assert anonymize.main([str(src), str(dst)]) == 0
    out = read_jsonl(dst)
    assert out[0] == {"timestamp": 0, "input_tokens": 5, "output_tokens": 1}
    assert out[1]["hash_ids"] == [0] and out[1]["input_tokens"] == 1
    assert out[2]["status"] == 502 and out[2]["error"] == "cannot connect"


def test_token_id_prompts(tmp_path):
    out = run(
        tmp_path,
        [
            {"timestamp": 0, "prompt": list(range(1000)), "output_tokens": 1},
            {"timestamp": 1, "prompt": list(range(600)) + [7], "output_tokens": 1},
        ],
    )
    assert out[0]["input_tokens"] == 1000 and "input_tokens_estimated" not in out[0]
    assert out[0]["hash_ids"] == [0, 1] and out[1]["hash_ids"] == [0, 2]


def test_output_loads_as_a_trace(tmp_path):
    from llm_locust.workload import load_trace

    run(tmp_path, TRACE)
    recs = load_trace(tmp_path / "out.jsonl")
    assert [r.input_tokens for r in recs][:1] == [700] and recs[0].prompt is None and recs[0].messages is None


@pytest.mark.parametrize(
    "content, where, msg",
    [
        (b'{"timestamp": 0, "prompt": "a"}\n{"timestamp": 1, "prompt": \n', ":2:", "invalid JSON"),
        (b'{"timestamp": 0, "prompt": "a"}\n\n[1, 2]\n', ":3:", "expected a JSON object"),
        (b'{"timestamp": -1, "prompt": "a"}\n', ":1:", "'timestamp' must be a number >= 0"),
        (b'{"timestamp": "soon", "prompt": "a"}\n', ":1:", "'timestamp' must be a number"),
        (b'{"prompt": "a", "output_tokens": 1.5}\n', ":1:", "'output_tokens' must be an integer"),
        (b'{"messages": "hello"}\n', ":1:", "'messages' must be a list of objects"),
        (b'{"prompt": {"x": 1}}\n', ":1:", "'prompt' must be a string or a list"),
        (b'{"prompt": [1, "a", null]}\n', ":1:", "no usable prompt"),
        (b'{"api": "tgi", "prompt": "a"}\n', ":1:", "'api' must be"),
        (b'{"timestamp": 0}\n', ":1:", "needs prompt, messages or input_tokens"),
        (b'{"input_tokens": 4, "hash_ids": [1, 2]}\n', ":1:", "another numbering"),
        (b'{"prompt": "a"}\n{"prompt": "\xff\xfe"}\n', ":2:", "not UTF-8"),
        (b"\n\n", "", "empty trace"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, capsys, content, where, msg):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(content)
    dst = tmp_path / "out.jsonl"
    assert anonymize.main([str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert f"{src}{where}" in err and msg in err, err
    assert not dst.exists() and list(tmp_path.iterdir()) == [src]  # no partial output, no temp file


def test_truncated_gzip_and_missing_file(tmp_path, capsys):
    data = gzip.compress(b"".join(b'{"timestamp": %d, "prompt": "p %d"}\n' % (i, i) for i in range(2000)))
    src = tmp_path / "cut.jsonl.gz"
    src.write_bytes(data[: len(data) // 2])
    assert anonymize.main([str(src), str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{src}:" in err and "gzip" in err
    assert anonymize.main([str(tmp_path / "nope.jsonl"), str(tmp_path / "o.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert anonymize.main([str(src), str(tmp_path / "o.jsonl"), "--tokenizer", str(tmp_path / "none.json")]) == 2
    assert "no such tokenizer" in capsys.readouterr().err


def test_tokenizer_blocks_and_counts(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "user": 1, ":": 2, "a": 3, "b": 4, "c": 5, "system": 6}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    objs = [
        {"timestamp": 0, "messages": [{"role": "user", "content": "a b c a b c"}], "output_tokens": 1},
        {
            "timestamp": 1,
            "messages": [{"role": "user", "content": "a b c a b a"}],
            "output_tokens": 1,
            "input_tokens": 99,
        },
        {
            "timestamp": 2,
            "messages": [{"role": "user", "content": "a b c a b a"}],
            "output_tokens": 1,
            "input_tokens": 3,
            "input_tokens_estimated": True,
        },
    ]
    out = run(tmp_path, objs, "--tokenizer", str(tmp_path), "--block-size", "4")  # a directory works too
    # "user : a b c a b c" = 8 tokens = 2 blocks of 4
    assert out[0]["input_tokens"] == 8 and "input_tokens_estimated" not in out[0]
    assert out[0]["hash_ids"] == [0, 1] and out[1]["hash_ids"] == [0, 2]
    assert out[1]["input_tokens"] == 99  # the server's count is kept (without --recount)
    assert out[2]["input_tokens"] == 8 and "input_tokens_estimated" not in out[2]  # an estimate is replaced
