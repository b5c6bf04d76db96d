"""Property tests: every trace loader, fed mutated copies of real trace files, either loads a sane
trace or raises `TraceError` naming the file (and the line); never another exception, never a hang.

The seeds are the slices in tests/fixtures/traces/ and, where present, the heads of the public
traces in ../shared/traces/. A mutation is a short list of edits (bytes flipped, inserted or cut,
a number or JSON value swapped for a hostile one: 2^63, -1, NaN, 1e309, a 5000-digit integer,
wrong JSON types...; line endings turned into CR, CRLF or blank lines; lines duplicated; the file
truncated, gzipped, or gzipped and cut). Each example loads the file with its format forced and
with detection. `load_trace` turns an exception a reader did not foresee into a TraceError with a
fixed wording (`load.UNEXPECTED`); finding that wording here is a failure too: a case to fix.

Bounded and derandomized so the file runs in well under 40 s on 2 cores; benchmarks/fuzz_traces.py
runs the same properties longer, with counts per loader.
"""

from __future__ import annotations

import atexit
import gzip
import math
import re
import shutil
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import shared_file

from llm_locust.workload import TraceError, load_trace
from llm_locust.workload.load import UNEXPECTED

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "traces"
HEAD_LINES = 25  # lines taken from the head of a big public trace

# format -> seed files (fixtures always; shared ones when the directory is there)
SEEDS: dict[str, list[str]] = {
    "jsonl": ["ours.jsonl"],
    "azure2023": ["azure2023_conv_head20.csv", "azure2023_code_head50.csv", "shared:azure2023_conv.csv"],
    "azure2024": ["azure2024_conv_excerpt.csv"],
    "azure2025": ["azure2025_excerpt.csv"],
    "burstgpt": ["burstgpt_v1_head.csv", "burstgpt_v2_head.csv"],
    "mooncake": [
        "mooncake_conversation_head30.jsonl",
        "shared:mooncake_arxiv_head.jsonl",
        "shared:mooncake_synthetic.jsonl",
    ],
    "bailian": ["bailian.jsonl"],
    "aiperf-mooncake": ["aiperf_mooncake.jsonl"],
    "aiperf-multi-turn": ["aiperf_multi_turn.jsonl"],
    "sharegpt": ["sharegpt_one_record.json", "shared:sharegpt_one_record.json"],
    "vllm": ["vllm_custom.jsonl"],
    "guidellm": ["guidellm.csv", "guidellm.jsonl"],
    "splitwise": ["splitwise.csv"],
}

# values swapped in for a number, a string or a literal of the seed
HOSTILE = [
    b"18446744073709551616",
    b"9223372036854775808",
    b"9223372036854775807",
    b"2147483648",
    b"-1",
    b"-0",
    b"-0.0",
    b"0",
    b"1e309",
    b"-1e309",
    b"1e-320",
    b"0.5",
    b"1.0",
    b"1e15",
    b"1e300",
    b"NaN",
    b"nan",
    b"inf",
    b"-inf",
    b"Infinity",
    b"-Infinity",
    b"9" * 5000,
    b"1_0",
    b" 7 ",
    b'""',
    b'"x"',
    b'"12"',
    b'"-5"',
    b'"\xc2\xb2"',
    b'"\xff"',
    b"[]",
    b"{}",
    b"null",
    b"true",
    b"false",
    b"[-1]",
    b"[9223372036854775808]",
    b"[1.5]",
    b'["a"]',
    b"[[1]]",
    b"[" * 3000,
    b"{" * 50,
    b'{"role": 1}',
    b'[{"role": "user"}]',
    b'[{"from": "human", "value": 5}]',
    b"\x00",
    b"\xef\xbb\xbf",
    b",",
    b'"',
    b"\r",
    b"\n",
    b"\t",
    b"2023-13-45 25:61:61",
    b"2024-05-12T00:00:00Z",
    b"x" * 140000,
]
# ... and for a number only (the edit most likely to reach the range checks)
NUMERIC = [
    b"18446744073709551616",
    b"9223372036854775808",
    b"9223372036854775807",
    b"2147483648",
    b"-1",
    b"-0.5",
    b"1e309",
    b"1e300",
    b"0.5",
    b"NaN",
    b"9" * 5000,
]
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_TOKEN = re.compile(rb'-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|"[^"\n]*"|true|false|null|\[|\{')

_pos = st.integers(0, 1 << 20)
EDIT = st.one_of(
    st.tuples(st.just("set"), _pos, st.integers(0, 255)),
    st.tuples(st.just("insert"), _pos, st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("delete"), _pos, st.integers(1, 80)),
    st.tuples(st.just("value"), _pos, st.sampled_from(HOSTILE)),
    st.tuples(st.just("number"), _pos, st.sampled_from(NUMERIC)),
    st.tuples(st.just("number"), _pos, st.sampled_from(NUMERIC)),  # twice as likely: the richest edit
    st.tuples(st.just("eol"), st.sampled_from([b"\r", b"\r\n", b"\n\n", b"\r\r\n", b" \n"])),
    st.tuples(st.just("dupline"), _pos, st.integers(1, 3)),
    st.tuples(st.just("cutline"), _pos),
    st.tuples(st.just("truncate"), _pos),
)
CASE = st.tuples(
    st.integers(0, 1 << 16),  # which seed
    st.lists(EDIT, min_size=1, max_size=4),
    st.sampled_from(["plain", "plain", "plain", "gzip", "gzip-cut"]),
    _pos,  # where a gzip-cut cuts
)


def seed_bytes(fmt: str) -> list[bytes]:
    out = []
    for name in SEEDS[fmt]:
        if name.startswith("shared:"):
            p = shared_file(f"traces/{name[7:]}")
            with open(p, "rb") as f:
                data = b"".join(f.readline() for _ in range(HEAD_LINES)) if p.stat().st_size > 20000 else f.read()
        else:
            data = (FIX / name).read_bytes()
        out.append(data)
    return out


def mutate(data: bytes, edits, wrap: str, cut: int) -> bytes:
    for e in edits:
        kind = e[0]
        n = len(data)
        if kind == "set" and n:
            i = e[1] % n
            data = data[:i] + bytes([e[2]]) + data[i + 1 :]
        elif kind == "insert":
            i = e[1] % (n + 1)
            data = data[:i] + e[2] + data[i:]
        elif kind == "delete" and n:
            i = e[1] % n
            data = data[:i] + data[i + e[2] :]
        elif kind in ("value", "number"):
            spans = [m.span() for m in (_TOKEN if kind == "value" else _NUMBER).finditer(data)]
            if spans:
                a, b = spans[e[1] % len(spans)]
                data = data[:a] + e[2] + data[b:]
        elif kind == "eol":
            data = data.replace(b"\r\n", b"\n").replace(b"\n", e[1])
        elif kind in ("dupline", "cutline"):
            lines = data.split(b"\n")
            i = e[1] % len(lines)
            if kind == "dupline":
                lines[i : i + 1] = [lines[i]] * (e[2] + 1)
            else:
                del lines[i]
            data = b"\n".join(lines)
        elif kind == "truncate":
            data = data[: e[1] % (n + 1)]
    if wrap != "plain":
        data = gzip.compress(data, mtime=0)
        if wrap == "gzip-cut":
            data = data[: cut % (len(data) + 1)]
    return data


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """A load that runs this long is a hang (files here are a few KB: they load in milliseconds)."""

    def on_alarm(signum, frame):
        raise Hang(f"load did not finish in {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_load(path: Path, fmt: str | None, limit: float = 10.0) -> str:
    """'ok' or 'error'; raises AssertionError (or the unexpected exception) on a finding."""
    try:
        with time_limit(limit):
            trace = load_trace(path, fmt)
            records = list(trace)
    except TraceError as e:
        msg = str(e)
        assert msg.startswith(f"{path}:"), f"TraceError does not name the file: {msg}"
        assert UNEXPECTED not in msg, f"a reader missed a case (caught by load_trace's safety net): {msg}"
        return "error"
    assert len(records) == len(trace) > 0
    prev = 0.0
    for r in records:
        assert math.isfinite(r.arrival) and r.arrival >= prev, r
        prev = r.arrival
        for v in (r.input_tokens, r.output_tokens, r.images, r.turn):
            assert v is None or 0 <= v <= 2**31 - 1, r
        assert r.hash_ids is None or all(0 <= h <= 2**63 - 1 for h in r.hash_ids), r
        assert r.source.startswith(f"{path}:"), r
    return "ok"


def run_case(fmt: str, seeds: list[bytes], case, workdir: Path) -> tuple[str, str]:
    which, edits, wrap, cut = case
    data = mutate(seeds[which % len(seeds)], edits, wrap, cut)
    path = workdir / ("trace.gz" if wrap != "plain" else "trace")
    path.write_bytes(data)
    return check_load(path, fmt), check_load(path, None)


_WORKDIR = Path(tempfile.mkdtemp(prefix="fuzz-traces-"))
atexit.register(shutil.rmtree, _WORKDIR, True)


@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_mutated_real_traces_load_or_raise_trace_error(fmt):
    seeds = seed_bytes(fmt)
    workdir = _WORKDIR / fmt
    workdir.mkdir(exist_ok=True)
    # the unmutated seeds load
    for i, data in enumerate(seeds):
        p = workdir / f"seed{i}"
        p.write_bytes(data)
        assert check_load(p, fmt) == "ok"

    @settings(  # derandomized by the suite's profile (conftest.py)
        max_examples=120,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(CASE)
    def prop(case):
        run_case(fmt, seeds, case, workdir)

    prop()


@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_random_bytes_raise_trace_error(fmt):
    workdir = _WORKDIR / f"bytes-{fmt}"
    workdir.mkdir(exist_ok=True)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.binary(max_size=300))
    def prop(data):
        p = workdir / "garbage"
        p.write_bytes(data)
        check_load(p, fmt)
        check_load(p, None)

    prop()
