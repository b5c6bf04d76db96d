"""Accuracy under load (--graded): the graded set, its graders, the counters, and real runs
against the simulator (right at a set rate) and against llama-server with SmolLM2."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from support import run_cli

from llm_locust.metrics.aggregate import Aggregate, WireError, figures
from llm_locust.metrics.records import Outcome, RequestRecord, WorkFacts
from llm_locust.workload.formats.reader import TraceError
from llm_locust.workload.graded import (
    GRADERS,
    GradedItem,
    GradedSetError,
    builtin_path,
    grade,
    load_graded,
    normalise,
    parse_item,
    reply_choice,
    reply_number,
)

ROOT = Path(__file__).resolve().parent.parent


def item(grader: str, expected, **kw) -> GradedItem:
    return parse_item(json.dumps({"prompt": "q?", "expected": expected, "grader": grader, **kw}), "t:1")


# ---- graders ----


def test_exact_normalises_whitespace_case_and_surrounding_punctuation():
    it = item("exact", "Yes")
    for reply in ("yes", " YES. ", "Yes!", "\n yes \n", '"yes"', "**Yes**"):
        assert grade(it, reply), reply
    for reply in ("yes, it is", "no", "", "y es"):
        assert not grade(it, reply), reply
    assert grade(item("exact", "New  York"), "new york") and normalise("  A \t B. ") == "a b"


def test_regex_searches_and_keeps_case_unless_asked():
    assert grade(item("regex", r"\bparis\b"), "it is paris.")
    assert not grade(item("regex", r"\bparis\b"), "It is Paris.")
    assert grade(item("regex", r"(?i)\bparis\b"), "It is Paris.")
    assert not grade(item("regex", r"(?i)\bparis\b"), "Parisian")


def test_number_takes_the_first_number_or_the_one_after_equals():
    it = item("number", 19)
    for reply in ("19", " 19.", "The answer is 19", "12 + 7 = 19", "12 plus 7 equals 19!", "19.0000001"):
        assert grade(it, reply), reply
    for reply in ("18", "12 + 7", "nineteen", "", "12 + 7 = 20", "x19"):
        assert not grade(it, reply), reply
    assert grade(item("number", "1234"), "1,234 apples") and grade(item("number", -4.5), "-4.5 degrees")
    assert grade(item("number", 3.14, tolerance=0.01), "about 3.141") and not grade(item("number", 3.14), "3.141")
    assert reply_number("no digits") is None and reply_number("H2O") is None


def test_choice_takes_the_first_standalone_letter_or_the_only_option_text():
    opts = ["Paris", "Berlin", "Madrid"]
    it = item("choice", "B", options=opts)
    for reply in ("B", "B. Berlin", "(B)", "The answer is B.", "Berlin", "It is berlin"):
        assert grade(it, reply), reply
    for reply in ("A. Paris", "Both Paris and Berlin", "BERLIN? No: C", "", "Bonn"):
        assert not grade(it, reply), reply
    assert reply_choice("D", tuple(opts)) is None  # only A-C exist here
    assert reply_choice("E") == "E" and grade(item("choice", "b"), "b) yes") is False  # letters are capitals


def test_builtin_set_loads_with_every_grader():
    s = load_graded("builtin")
    assert 25 <= len(s) <= 40 and {i.grader for i in s.items} == set(GRADERS)
    assert len({i.id for i in s.items}) == len(s) and all(i.source.startswith("graded_builtin.jsonl:") for i in s.items)
    assert builtin_path().is_file()


# ---- bad input ----


def test_every_bad_line_is_named_by_file_and_line(tmp_path):
    good = json.dumps({"prompt": "What is 1 + 1?", "expected": 2, "grader": "number"})
    lines = [
        good,
        "# a comment",
        "",
        "{not json",
        json.dumps({"prompt": "x", "expected": 1, "grader": "fuzzy"}),
        json.dumps({"expected": 1, "grader": "number"}),
        json.dumps({"prompt": "x", "messages": [{"role": "user", "content": "x"}], "expected": 1, "grader": "number"}),
        json.dumps({"prompt": "x", "expected": "two", "grader": "number"}),
        json.dumps({"prompt": "x", "expected": "F", "grader": "choice"}),
        json.dumps({"prompt": "x", "expected": "(", "grader": "regex"}),
        json.dumps({"prompt": "x", "expected": 1, "grader": "number", "max_tokens": 0}),
        json.dumps({"prompt": "x", "grader": "exact"}),
        json.dumps({"prompt": "x", "expected": "a", "grader": "exact", "colour": 1}),
        json.dumps({"id": "dup", "prompt": "x", "expected": "a", "grader": "exact"}),
        json.dumps({"id": "dup", "prompt": "y", "expected": "a", "grader": "exact"}),
        json.dumps({"messages": [{"role": "user"}], "expected": "a", "grader": "exact"}),
    ]
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(GradedSetError) as e:
        load_graded(str(path))
    assert isinstance(e.value, TraceError) and isinstance(e.value, ValueError)
    msg = str(e.value).splitlines()
    bad = [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16]
    assert [m.split(": ", 1)[0] for m in msg] == [f"{path}:{n}" for n in bad], msg
    text = str(e.value)
    for word in (
        "not valid JSON",
        "'grader' must be one of",
        "exactly one of 'prompt'",
        "must be a number",
        "option letter",
        "regular expression",
        "max_tokens",
        "'expected' is missing",
        "unknown key 'colour'",
        "already used at line 14",
        "'messages' must be",
    ):
        assert word in text, word
    empty = tmp_path / "empty.jsonl"
    empty.write_text("# nothing\n")
    with pytest.raises(GradedSetError, match="no graded item"):
        load_graded(str(empty))
    with pytest.raises(GradedSetError, match="cannot read"):
        load_graded(str(tmp_path / "missing.jsonl"))


def test_a_bad_set_stops_the_run_before_any_load(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"prompt": "x", "expected": 1, "grader": "number"}\n{"prompt": "x", "grader": "number"}\n')
    p = run_cli("--graded", str(path), "-t", "2s", timeout=60)
    assert p.returncode == 2 and f"{path}:2" in p.stderr and "'expected' is missing" in p.stderr, p.stderr[-2000:]


# ---- counters ----


def _rec(i: int, graded: bool | None, ok: bool = True) -> RequestRecord:
    r = RequestRecord(
        request_id=str(i),
        api="openai-chat",
        t_sched=1.0,
        t_sent=1.0,
        wall_sent=1000.0 + i,
        t_first=1.1,
        t_end=1.2,
        chunk_times=[1.1],
        chunk_tokens=[1],
        n_out=1,
        outcome=Outcome.OK if ok else Outcome.HTTP_ERROR,
    )
    if graded is not None:
        r.work = WorkFacts(graded=graded)
    return r


def test_counters_merge_exactly_and_a_wire_dict_of_another_version_is_refused():
    parts = [Aggregate() for _ in range(3)]
    whole = Aggregate()
    grades = [True, False, None, True, True, None, False, True]
    for i, g in enumerate(grades):
        parts[i % 3].add(_rec(i, g))
        whole.add(_rec(i, g))
    merged = Aggregate()
    for p in parts:
        merged.merge_wire(p.to_wire())
    assert (merged.work.graded, merged.work.correct) == (whole.work.graded, whole.work.correct) == (6, 4)
    assert figures(merged)["accuracy"] == {"graded": 6, "correct": 4, "accuracy": 4 / 6}
    old = parts[0].to_wire()
    old["v"] = 1  # a worker of another version: refused whole, not read wrong
    with pytest.raises(WireError, match="wire version 1"):
        merged.merge_wire(old)
    unknown = parts[0].to_wire()
    unknown["work"]["graded_twice"] = 1  # a part's counts are read by name too
    with pytest.raises(WireError, match="graded_twice"):
        merged.merge_wire(unknown)
    assert (merged.work.graded, merged.work.correct, merged.sent) == (6, 4, 0)
    plain = Aggregate()
    plain.add(_rec(0, None))
    assert "accuracy" not in figures(plain)


def test_format_steps_and_summary_show_accuracy():
    from llm_locust.analysis.saturation import format_steps
    from llm_locust.analysis.steps import StepResult, step_result
    from llm_locust.report.summary import format_summary

    steps = []
    for k, grades in enumerate(([True, True], [True, False, False, False])):
        agg = Aggregate()
        for i, g in enumerate(grades):
            agg.add(_rec(i, g))
        steps.append(
            step_result(
                agg, step=k, offered=k + 1, offered_kind="concurrency", window=(1000.0, 1010.0), warmup=0.0, slos={}
            )
        )
    assert steps[1].accuracy == {"graded": 4, "correct": 1, "accuracy": 0.25}
    assert StepResult.from_dict(steps[1].to_dict()) == steps[1]
    table = format_steps(steps)
    assert "acc %" in table and "100 (2/2)" in table and "25 (1/4)" in table
    assert "accuracy: 25.0% of graded items answered right (1/4" in format_summary(figures(agg))


# ---- runs against the simulator ----


def _closed_run(tmp_path, accuracy: float) -> dict:
    results = tmp_path / f"r{accuracy}.json"
    p = run_cli(
        "--graded",
        "builtin",
        "--graded-share",
        "0.3",
        "--sim-graded-accuracy",
        str(accuracy),
        "--sim-fast",
        "--max-tokens",
        "8",
        "-u",
        "8",
        "-t",
        "4s",
        "--results",
        str(results),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "accuracy:" in p.stdout
    return json.loads(results.read_text())


def test_closed_loop_accuracy_follows_the_simulators_rate(tmp_path):
    for target in (1.0, 0.5):
        r = _closed_run(tmp_path, target)
        s = r["summary"]
        acc = s["accuracy"]
        n = acc["graded"]
        assert n >= 100, acc
        # the share of requests that were graded items: 0.3 within a binomial bound (4 sigma)
        assert abs(n / s["ok"] - 0.3) <= 4 * math.sqrt(0.3 * 0.7 / s["ok"]) + 0.01, (n, s["ok"])
        if target == 1.0:
            assert acc["correct"] == n and acc["accuracy"] == 1.0
        else:
            assert abs(acc["accuracy"] - 0.5) <= 4 * math.sqrt(0.25 / n), acc
        assert r["plan"]["workload"]["graded"] == {"set": "builtin", "share": 0.3, "max_tokens": 32}
        assert r["plan"]["sim"]["graded_accuracy"] == target
        # graded requests count like any other: their latencies are in the figures, no length mismatch
        assert s["length_mismatch"] == 0 and s["latency"]["e2e"]["count"] == s["ok"]


def test_two_workers_merge_the_counts_exactly(tmp_path):
    results, log = tmp_path / "r.json", tmp_path / "log.jsonl"
    p = run_cli(
        "--graded",
        "builtin",
        "--graded-share",
        "0.3",
        "--sim-graded-accuracy",
        "0.5",
        "--sim-fast",
        "--max-tokens",
        "8",
        "-u",
        "8",
        "-t",
        "5s",
        "--workers",
        "2",
        "--results",
        str(results),
        "--record-log",
        str(log),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [json.loads(line) for f in tmp_path.glob("log.jsonl.worker*") for line in f.read_text().splitlines()]
    graded = [r for r in recs if (r["source"] or "").startswith("graded:") and r["outcome"] == "ok"]
    acc = json.loads(results.read_text())["summary"]["accuracy"]
    assert len(list(tmp_path.glob("log.jsonl.worker*"))) == 2 and graded
    assert (acc["graded"], acc["correct"]) == (len(graded), sum(r["work"]["graded"] for r in graded))


def test_replay_mixes_graded_items_too(tmp_path):
    results = tmp_path / "r.json"
    log = tmp_path / "log.jsonl"
    p = run_cli(
        "--graded",
        "builtin",
        "--graded-share",
        "0.5",
        "--sim-graded-accuracy",
        "1",
        "--sim-fast",
        "--synthetic",
        "requests=60,input=16,output=8,rate=40,arrivals=constant",
        "--replay",
        "--results",
        str(results),
        "--record-log",
        str(log),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(results.read_text())["summary"]
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    graded = [r for r in recs if (r["source"] or "").startswith("graded:")]
    assert s["sent"] == 60 and 10 <= len(graded) <= 50
    assert s["accuracy"] == {"graded": len(graded), "correct": len(graded), "accuracy": 1.0}
    assert all(r["work"]["graded"] is True and r["finish_reason"] == "stop" for r in graded)


def test_ladder_shows_accuracy_per_step(tmp_path):
    results = tmp_path / "r.json"
    p = run_cli(
        "--graded",
        "builtin",
        "--graded-share",
        "0.5",
        "--sim-graded-accuracy",
        "0.5",
        "--max-tokens",
        "8",
        "--ladder",
        "concurrency:1,2",
        "--step-duration",
        "3s",
        "--warmup",
        "1s",
        "--results",
        str(results),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "acc %" in p.stdout, p.stdout[-3000:]
    steps = json.loads(results.read_text())["ladder"]["steps"]
    assert len(steps) == 2
    for st in steps:
        a = st["accuracy"]
        assert a["graded"] >= 3 and 0 <= a["correct"] <= a["graded"], a


def test_html_report_plots_accuracy_per_step(tmp_path):
    from llm_locust.report.html import render

    results = tmp_path / "r.json"
    p = run_cli(
        "--graded",
        "builtin",
        "--graded-share",
        "0.5",
        "--max-tokens",
        "8",
        "--sim-fast",
        "--ladder",
        "concurrency:1,2",
        "--step-duration",
        "2s",
        "--warmup",
        "0s",
        "--results",
        str(results),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(results.read_text())
    html = render(doc)
    assert "plot-accuracy" in html and "acc % (right/graded)" in html and "accuracy of graded items" in html


# ---- the real server: SmolLM2 on llama-server ----


@pytest.mark.real_server
def test_smollm2_answers_stay_right_under_load(tmp_path):
    """The built-in set at one request in flight, then at four, against llama-server with SmolLM2
    (4 slots, greedy decoding): the items answered right at 1 are answered right at 4."""
    sys.path.insert(0, str(Path(__file__).parent))
    from realservers import LlamaServer, llama_server_bin, smollm2_gguf

    if llama_server_bin() is None or smollm2_gguf() is None:
        pytest.skip("llama-server or SmolLM2 not provisioned (scripts/real-servers.sh llama)")
    n = len(load_graded("builtin"))
    right = {}
    with LlamaServer(smollm2_gguf(), slots=4, ctx=4096) as srv:
        for cap in (1, 4):
            results, log = tmp_path / f"r{cap}.json", tmp_path / f"log{cap}.jsonl"
            p = run_cli(
                "--host",
                srv.url,
                "--graded",
                "builtin",
                "--graded-share",
                "1",
                "--graded-max-tokens",
                "16",
                "--synthetic",
                f"requests={n},input=8,output=8,rate=100,arrivals=constant",
                "--replay",
                "--max-in-flight",
                str(cap),
                "--results",
                str(results),
                "--record-log",
                str(log),
                timeout=600,
            )
            assert p.returncode == 0, p.stderr[-3000:]
            recs = [json.loads(line) for line in log.read_text().splitlines()]
            assert len(recs) == n and all(r["outcome"] == "ok" for r in recs)
            right[cap] = {r["source"] for r in recs if r["work"]["graded"]}
            acc = json.loads(results.read_text())["summary"]["accuracy"]
            assert acc["graded"] == n and acc["correct"] == len(right[cap])
            print(f"SmolLM2 at {cap} in flight: {acc['correct']}/{n} right")
    assert right[1], "SmolLM2 answered nothing right: the set or the grading is broken"
    assert right[1] <= right[4], f"right at 1, wrong at 4: {sorted(right[1] - right[4])}"
