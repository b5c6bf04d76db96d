"""`llm-locust compare`: real short ladder runs against the simulator, then hand-edited copies."""

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llm_locust.report import compare as cmp
from llm_locust.report.compare.format import _ms

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "plans" / "seed-concurrency-ladder.yaml"
SLOTS = (4, 16)  # a "slow" and a "fast" server: 16 batch slots keep rising at 16 users, 4 saturate at 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs of the seed ladder, shortened (3 steps x 4 s, 32-token replies): ~15 s each.

    Prompts of 32 tokens, not the plan's 512: closed-loop users finish together and resend
    together, so each TTFT holds the prefill of every user's prompt. With 512 tokens the 16-slot
    server's TTFT grew 1.9-7.0x from 4 to 16 users in eight runs, across the latency rule's 6x
    (1.5 x the load), and its knee came out at 4 users in some; with 32 tokens it grows ~1.7x."""
    d = tmp_path_factory.mktemp("compare")
    out = {}
    for slots in SLOTS:
        path = d / f"slots{slots}.json"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llm_locust.cli",
                "run",
                str(PLAN),
                "--ladder",
                "concurrency:1,4,16",
                "--step-duration",
                "4",
                "--warmup",
                "1",
                "--max-tokens",
                "32",
                "--sim-slots",
                str(slots),
                "--synthetic",
                "requests=1000,input=32,output=128,seed=1",
                "--results",
                str(path),
                "--report",  # each run its own (the plan names one; a plan may not replace a file)
                str(path.with_suffix(".html")),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=d,
        )
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        out[slots] = path
    return out


def _doc(path):
    return json.loads(Path(path).read_text())


def _edited(src, dst, edit):
    doc = _doc(src)
    edit(doc)
    Path(dst).write_text(json.dumps(doc))
    return str(dst)


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    """The tables whole on one line each, as these tests read them (the width: test_compare_tools)."""
    monkeypatch.setenv("COLUMNS", "400")


def _main(capsys, *argv):
    rc = cmp.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _weights(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _md_table(markdown, title):
    """The rows of the Markdown table under `## title...`, cells unescaped."""
    lines = markdown.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("## " + title))
    rows = []
    for ln in lines[start + 1 :]:
        if ln.startswith("## "):
            break
        if ln.startswith("|"):
            cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
            rows.append([html.unescape(c.replace("\\|", "|").replace("\\*", "*")) for c in cells])
    header, sep, *body = rows
    assert all(set(c) <= set("-:") for c in sep)
    return header, body


# ---- the real runs ----


def test_more_slots_wins_throughput_and_the_weighted_total(runs, tmp_path, capsys):
    slow, fast = _doc(runs[4]), _doc(runs[16])
    t_slow, t_fast = slow["summary"]["output_tokens_per_s"], fast["summary"]["output_tokens_per_s"]
    assert t_fast > t_slow * 1.1, (t_slow, t_fast)
    w = _weights(
        tmp_path,
        "criteria:\n  - metric: output_tokens_per_s\n    weight: 3\n  - metric: saturation_load\n    weight: 1\n",
    )
    c = cmp.compare([str(runs[4]), str(runs[16])], ["slow", "fast"], str(w))
    assert c.comparable, [i.text() for i in c.issues]
    m = c.matrix
    # the figures are the files' own, and the score follows the documented formula
    assert m.cells[0][0].value == pytest.approx(t_slow) and m.cells[0][1].value == pytest.approx(t_fast)
    assert m.cells[0][1].score == 1.0 and m.cells[0][0].score == pytest.approx(t_slow / t_fast)
    # 4 slots: knee at 4 users; 16 slots: still rising at 16 users (a lower bound)
    assert m.cells[1][0].value == 4 and m.cells[1][1].value == 16 and m.cells[1][1].bound == ">="
    assert m.totals[0] == pytest.approx((3 * t_slow / t_fast + 1 * 4 / 16) / 4)
    assert m.totals[1] == pytest.approx(1.0)
    assert m.ranks == [2, 1]
    rc, out, err = _main(capsys, runs[4], runs[16], "--weights", w, "--label", "slow", "--label", "fast")
    assert rc == 0, err
    assert "best weighted total: fast" in out
    ranking = out[out.index("\nRanking") :]
    assert ranking.index("fast") < ranking.index("slow")


def test_pass_lines_follow_thresholds_between_the_runs(runs, tmp_path, capsys):
    slow, fast = _doc(runs[4]), _doc(runs[16])
    tps = sorted([slow["summary"]["output_tokens_per_s"], fast["summary"]["output_tokens_per_s"]])
    ttft = sorted([slow["summary"]["latency"]["ttft"]["p99"], fast["summary"]["latency"]["ttft"]["p99"]])
    assert tps[0] < tps[1] and ttft[0] < ttft[1]
    tps_line = (tps[0] + tps[1]) / 2
    ttft_line_ms = (ttft[0] + ttft[1]) / 2 * 1000
    w = _weights(
        tmp_path,
        f"""
criteria:
  - metric: ttft_p99
    weight: 2
    pass: "<= {ttft_line_ms:.3f}ms"
  - metric: output_tokens_per_s
    weight: 2
    pass: ">= {tps_line:.3f}"
  - metric: error_rate
    pass: "<= 1%"
""",
    )
    c = cmp.compare([str(runs[4]), str(runs[16])], [], str(w))
    m = c.matrix
    slow_fast_ttft = [slow["summary"]["latency"]["ttft"]["p99"], fast["summary"]["latency"]["ttft"]["p99"]]
    assert [cell.passed for cell in m.cells[0]] == [v <= ttft_line_ms / 1000 for v in slow_fast_ttft]
    assert [cell.passed for cell in m.cells[1]] == [
        slow["summary"]["output_tokens_per_s"] >= tps_line,
        fast["summary"]["output_tokens_per_s"] >= tps_line,
    ]
    assert [cell.passed for cell in m.cells[2]] == [True, True]  # the simulator makes no errors
    # the slow server fails the throughput line; it is ranked, and marked
    assert m.cells[1][0].passed is False and m.cells[1][1].passed is True
    assert any(f.startswith("output_tokens_per_s") for f in m.fails[0])
    rc, out, _ = _main(capsys, runs[4], runs[16], "--weights", w)
    assert rc == 0
    assert "fails: " in out and "needs >= " in out


def test_markdown_table_parses_into_rows_and_columns(runs, tmp_path, capsys):
    out_md = tmp_path / "cmp.md"
    w = _weights(
        tmp_path,
        "criteria:\n  - metric: ttft_p99\n    weight: 3\n    pass: '<= 1ms'\n"
        "  - metric: at_knee.output_tokens_per_s\n    weight: 2\n",
    )
    rc, out, err = _main(capsys, runs[4], runs[16], "--weights", w, "-o", out_md)  # .md: Markdown
    assert rc == 0 and out == "" and "wrote" in err
    text = out_md.read_text()
    header, rows = _md_table(text, "Decision matrix")
    assert header == ["criterion", "better", "weight", "pass line", "slots4", "slots16"]
    assert [r[0] for r in rows] == ["ttft_p99", "at_knee.output_tokens_per_s", "weighted total", "rank"]
    assert all(len(r) == 6 for r in rows)
    assert rows[0][1:4] == ["lower", "3", "<= 1 ms"]
    assert rows[0][4].endswith("FAIL") and rows[0][5].endswith("FAIL")  # nobody makes 1 ms
    c = cmp.compare([str(runs[4]), str(runs[16])], [], str(w))
    assert rows[2][4:] == [f"{t:.3f}" for t in c.matrix.totals]
    assert rows[3][4:] == [str(k) for k in c.matrix.ranks]
    # at the knee: the 4-slot run's knee step (the simulator's knee: 4 users)
    sat = _doc(runs[4])["ladder"]["saturation"]["saturation"]
    assert sat["offered"] == 4
    knee = next(s for s in _doc(runs[4])["ladder"]["steps"] if s["step"] == sat["step"])
    assert c.matrix.cells[1][0].value == pytest.approx(knee["output_tokens_per_s"])
    header, rows = _md_table(text, "Runs")
    assert header == ["", "slots4", "slots16"]
    fields = {r[0]: r[1:] for r in rows}
    assert fields["load"] == ["ladder concurrency:1,4,16"] * 2
    sha = _doc(runs[4])["environment"]["trace"]["sha256"][:12]
    assert all(v.startswith(sha) for v in fields["trace sha256"])
    header, rows = _md_table(text, "Ranking")
    assert header == ["rank", "run", "total", "pass lines", "validity"] and len(rows) == 2


def test_html_is_self_contained_and_escapes_labels(runs, tmp_path, capsys):
    out_html = tmp_path / "cmp.html"
    evil = "<script>alert(1)</script>"
    rc, _, err = _main(capsys, runs[4], runs[16], "--label", evil, "--format", "html", "-o", out_html)
    assert rc == 0, err
    page = out_html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert html.escape(evil) in page
    for ref in ("http://", "https://", "src=", "href=", "url(", "@import", "<link", "<iframe", "<img"):
        assert ref not in page.lower(), ref
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_text_output_shows_runs_side_by_side(runs, capsys):
    rc, out, _ = _main(capsys, runs[4], runs[16])
    assert rc == 0
    for row in (
        "server",
        "model",
        "GPU",
        "trace sha256",
        "load",
        "TTFT p50",
        "TTFT p99",
        "ITL p99",
        "TPOT p50",
        "E2E p99",
        "output tokens/s",
        "requests/s",
        "goodput",
        "error rate",
        "saturation point",
        "max SLO load",
    ):
        assert f"\n{row} " in out, row
    assert "4 users (step 2" in out  # the 4-slot server's knee
    assert ">= 16 users (still rising)" in out
    assert "comparable: no difference" in out and "Decision matrix (default criteria)" in out


def test_two_simulators_of_different_slot_counts_are_different_servers(runs, tmp_path, capsys):
    """Issue 24 item 15h: the simulator names itself (not "vllm") and exports its settings, so a
    comparison of a 4-slot and a 16-slot simulator says the servers differ, and in what."""
    for slots, path in runs.items():
        doc = _doc(path)
        assert doc["environment"]["server"]["kind"] == "llm-locust-sim"
        src = doc["server_metrics"]["source"]
        assert src["server"] == "llm-locust-sim" and src["dialect"] == "vllm"  # vLLM's metric names
        assert src["info"]["llm_locust_sim_info"][0]["slots"] == str(slots)
    rc, out, _ = _main(capsys, runs[4], runs[16])
    assert rc == 0
    assert "the servers differ: slots4: llm-locust-sim (slots 4); slots16: llm-locust-sim (slots 16)" in out, out[:1500]
    server_row = next(line for line in out.splitlines() if line.startswith("server "))
    assert server_row.split()[1:] == ["llm-locust-sim", "(slots", "4)", "llm-locust-sim", "(slots", "16)"]
    same = _edited(runs[4], tmp_path / "again.json", lambda d: None)
    rc, out, _ = _main(capsys, runs[4], same)
    assert rc == 0 and "the same server in every run: llm-locust-sim\n" in out


# ---- comparability ----


def test_different_trace_warns_and_strict_refuses(runs, tmp_path, capsys):
    other = _edited(runs[16], tmp_path / "other.json", lambda d: d["environment"]["trace"].update(sha256="0" * 64))
    rc, out, _ = _main(capsys, runs[4], other)
    assert rc == 0
    assert "NOT comparable" in out and "different trace (sha256)" in out and "000000000000" in out
    dst = tmp_path / "strict.txt"
    rc, out, err = _main(capsys, runs[4], other, "--strict", "-o", dst)
    assert rc == 2 and out == ""
    assert "not comparable" in err and "trace" in err
    assert not dst.exists()
    rc, _, err = _main(capsys, runs[4], runs[16], "--strict")  # the same plan and trace: fine
    assert rc == 0, err


@pytest.mark.parametrize(
    "edit, phrase",
    [
        (lambda d: d["plan"]["ladder"].update(steps=[1, 4, 8]), "different load plan"),
        (lambda d: d["run"]["settings"].update(max_tokens=64), "different max_tokens"),
        (lambda d: d["run"]["settings"].update(force_length=False), "different force_length"),
        (lambda d: d["run"]["settings"].update(api="openai-completions"), "different api"),
        (lambda d: d["environment"]["server"].update(model="other-model"), "different model"),
    ],
)
def test_each_difference_is_named(runs, tmp_path, edit, phrase):
    other = _edited(runs[16], tmp_path / "edited.json", edit)
    c = cmp.compare([str(runs[4]), other])
    assert not c.comparable
    assert [i.what for i in c.issues if i.blocking] == [phrase]


def test_validity_flags_are_marked(runs, tmp_path):
    def flag(d):
        d["validity"]["flags"] = ["client_saturated"]
        knee_step = d["ladder"]["saturation"]["saturation"]["step"]
        for s in d["ladder"]["steps"]:
            if s["step"] == knee_step:
                s["flags"] = ["errors"]

    flagged = _edited(runs[4], tmp_path / "flagged.json", flag)
    w = _weights(tmp_path, "criteria:\n  - metric: ttft_p99\n  - metric: output_tokens_per_s\n    at: knee\n")
    c = cmp.compare([flagged, str(runs[16])], ["flagged", "fast"], str(w))
    marks = c.matrix.marks[0]
    assert "run: client_saturated" in marks
    knee = _doc(runs[4])["ladder"]["saturation"]["saturation"]
    assert any(
        m.startswith(f"step {knee['step']} (4 users): errors") and "at_knee.output_tokens_per_s" in m for m in marks
    )
    assert c.matrix.cells[1][0].flags == ["errors"]
    text = cmp.render_text(c)
    ranking = text[text.index("\nRanking") :]
    assert "run: client_saturated" in ranking and "errors" in ranking


# ---- bad input: one message, exit 2, nothing written ----


def test_unknown_metric_names_it_and_lists_the_known_ones(runs, tmp_path, capsys):
    w = _weights(tmp_path, "criteria:\n  - metric: ttft_p99\n  - metric: tokens_per_second\n    weight: 2\n")
    dst = tmp_path / "out.txt"
    rc, out, err = _main(capsys, runs[4], runs[16], "--weights", w, "-o", dst)
    assert rc == 2 and out == ""
    assert "tokens_per_second" in err and str(w) in err and "criteria[1]" in err and "w.yaml:3:" in err
    for known in (
        "ttft_p99",
        "itl_p50",
        "output_tokens_per_s",
        "goodput_tokens_per_s",
        "error_rate",
        "saturation_load",
        "max_slo_load",
    ):
        assert known in err
    assert not dst.exists()


@pytest.mark.parametrize(
    "criterion, words",
    [
        ("  - metric: ttft_p99\n    pass: 'about 500ms'\n", ["criteria[0].pass", "about 500ms", "OPERATOR"]),
        ("  - metric: output_tokens_per_s\n    pass: '>= fast'\n", ["criteria[0].pass", ">= fast"]),
        ("  - metric: ttft_p99\n    weight: 0\n", ["criteria[0].weight", "positive"]),
        ("  - metric: ttft_p99\n    weight: -2\n", ["criteria[0].weight", "positive"]),
        ("  - metric: ttft_p99\n    weight: heavy\n", ["criteria[0].weight", "positive"]),
        ("  - metric: saturation_load\n    at: knee\n", ["criteria[0].at"]),
        ("  - metric: ttft_p99\n    at: elbow\n", ["criteria[0].at", "elbow"]),
        ("  - metric: ttft_p99\n    wieght: 2\n", ["criteria[0].wieght", "did you mean 'weight'"]),
    ],
)
def test_bad_weights_exit_2_and_write_nothing(runs, tmp_path, capsys, criterion, words):
    w = _weights(tmp_path, "criteria:\n" + criterion)
    dst = tmp_path / "out.md"
    dst.write_text("previous report")
    rc, out, err = _main(capsys, runs[4], runs[16], "--weights", w, "-o", dst)
    assert rc == 2 and out == ""
    assert err.count("\n") >= 1 and "error" in err and str(w) in err
    for word in words:
        assert word in err, (word, err)
    assert dst.read_text() == "previous report"


def test_other_version_and_truncated_files(runs, tmp_path, capsys):
    v99 = _edited(runs[16], tmp_path / "v99.json", lambda d: d.update(version=99))
    rc, out, err = _main(capsys, runs[4], v99)
    assert rc == 2 and out == "" and "v99.json" in err and "version 99" in err
    cut = tmp_path / "cut.json"
    cut.write_text(Path(runs[16]).read_text()[:3000])
    rc, out, err = _main(capsys, runs[4], cut)
    assert rc == 2 and out == "" and "cut.json" in err and "truncated" in err
    rc, _, err = _main(capsys, runs[4], tmp_path / "missing.json")
    assert rc == 2 and "missing.json" in err


def test_example_weights_file_loads_and_scores(runs, capsys):
    crits = cmp.load_weights(ROOT / "plans" / "weights-example.yaml")
    assert [c.name for c in crits][:3] == ["ttft_p99", "tpot_p50", "output_tokens_per_s"]
    rc, out, err = _main(capsys, runs[4], runs[16], "--weights", ROOT / "plans" / "weights-example.yaml")
    assert rc == 0, err
    assert "at_knee.itl_p99" in out


def test_every_latency_metric_reads_its_figure(runs, tmp_path, capsys):
    """Each latency metric, p99.9 included, at the run's summary and at the knee."""
    names = [n for n, m in cmp.METRICS.items() if m.unit == "s"]
    crit = "".join(f"  - metric: {n}\n  - metric: at_knee.{n}\n" for n in names)
    w = _weights(tmp_path, "criteria:\n" + crit)
    rc, out, err = _main(capsys, runs[4], runs[16], "--weights", w, "--format", "markdown")
    assert rc == 0, err
    doc = _doc(runs[4])
    for n in names:
        metric, stat = n.rsplit("_", 1)
        want = doc["summary"]["latency"][metric][stat]
        row = next(line for line in out.splitlines() if line.startswith(f"| {n} "))
        assert row.split("|")[5].strip().startswith(f"{_ms(want)} · "), (n, want, row)  # run 1's cell


# ---- pure parts ----


def test_normalise_formula():
    assert cmp.normalise([100.0, 50.0, None], True) == [1.0, 0.5, 0.0]
    assert cmp.normalise([0.2, 0.4], False) == [1.0, 0.5]
    assert cmp.normalise([0.0, 0.01], False) == [1.0, 0.0]  # no errors beats any
    assert cmp.normalise([0.0, 0.0], True) == [1.0, 1.0]
    assert cmp.normalise([None, None], True) == [0.0, 0.0]


def test_metric_names_and_pass_lines():
    assert cmp.resolve_metric("ttft")[0].name == "ttft_p99"  # as in the SLO vocabulary
    assert cmp.resolve_metric("e2e_p999")[0].name == "e2e_p99.9"
    m, scope = cmp.resolve_metric("at_knee.output_tokens_per_s")
    assert (m.name, scope, m.higher_is_better) == ("output_tokens_per_s", "knee", True)
    with pytest.raises(ValueError, match="did you mean 'ttft_p90'"):
        cmp.resolve_metric("ttft_p9")
    lat = cmp.METRICS["ttft_p99"]
    assert cmp.parse_pass(lat, "<= 500ms") == cmp.PassLine("<=", 0.5, "<= 500ms")
    assert cmp.parse_pass(lat, 0.2).op == "<="  # a bare value: the metric's direction
    assert cmp.parse_pass(cmp.METRICS["error_rate"], "< 1%").threshold == pytest.approx(0.01)
    assert cmp.parse_pass(cmp.METRICS["output_tokens_per_s"], "800") == cmp.PassLine(">=", 800.0, "800")
    for bad in ("<= fast", "=", "!= 3", "<= -1", True):
        with pytest.raises(ValueError, match="bad pass line"):
            cmp.parse_pass(lat, bad)


def test_labels_must_match_the_files():
    with pytest.raises(cmp.CompareError, match="3 --label"):
        cmp._unique_labels(["a.json", "b.json"], ["x", "y", "z"])
    assert cmp._unique_labels(["x/r.json", "y/r.json"], []) == ["x/r", "y/r"]
    assert os.path.basename(cmp._unique_labels(["a.json", "a.json"], [])[1]).endswith("#2")


# ---- CI gates ----


def test_gates_fail_on_a_missed_pass_line_and_write_junit(runs, tmp_path, capsys):
    import xml.etree.ElementTree as ET

    w = _weights(
        tmp_path,
        "criteria:\n  - metric: output_tokens_per_s\n    pass: '>= 1'\n  - metric: ttft_p99\n    pass: '<= 1ms'\n",
    )
    a, b = runs[SLOTS[0]], runs[SLOTS[1]]
    rc, _out, err = _main(capsys, a, b, "--weights", w)
    assert rc == 0  # no gate asked for: the matrix is written, the exit is 0
    junit = tmp_path / "gates.xml"
    rc, _out, err = _main(capsys, a, b, "--weights", w, "--fail-on", "pass-lines", "--junit", junit)
    assert rc == 1
    assert err.count("FAIL") == 2 and "ttft_p99" in err and "needs <= 1 ms" in err
    root = ET.parse(junit).getroot()
    assert root.get("tests") == "4" and root.get("failures") == "2"
    cases = {(s.get("name"), c.get("name")): c.find("failure") is not None for s in root for c in s}
    assert all(failed for (_, name), failed in cases.items() if "ttft_p99" in name)
    assert not any(failed for (_, name), failed in cases.items() if "output_tokens_per_s" in name)


def test_regression_gate_against_a_baseline(runs, tmp_path, capsys):
    w = _weights(tmp_path, "criteria:\n  - metric: output_tokens_per_s\n")
    few, many = runs[SLOTS[0]], runs[SLOTS[1]]  # fewer slots: less throughput
    rc, _out, err = _main(capsys, many, few, "--weights", w, "--fail-on", "regression")
    assert rc == 1 and "against the baseline's" in err and "allowed -5.0%" in err
    assert _main(capsys, few, many, "--weights", w, "--fail-on", "regression")[0] == 0
    same = _edited(
        many,
        tmp_path / "same.json",
        lambda d: d["summary"].update(output_tokens_per_s=d["summary"]["output_tokens_per_s"] * 0.97),
    )
    assert _main(capsys, many, same, "--weights", w, "--fail-on", "regression", "--tolerance", "5%")[0] == 0
    assert _main(capsys, many, same, "--weights", w, "--fail-on", "regression", "--tolerance", "1%")[0] == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--fail-on", "speed"], "--fail-on: unknown gate 'speed'; one of pass-lines, regression"),
        (["--fail-on", "regression", "--tolerance", "lots"], "--tolerance: expected a fraction or a percentage"),
    ],
)
def test_bad_gate_options_are_refused(runs, capsys, argv, message):
    rc, _out, err = _main(capsys, runs[SLOTS[0]], runs[SLOTS[1]], *argv)
    assert rc == 2 and message in err


# ---- verdicts: per-GPU figures, the Pareto frontiers and their dominance (docs/verdicts.md) ----


def _costed(src, dst, gpus, price=2.0, boost_first=False):
    def edit(d):
        d.setdefault("plan", {})["cost"] = {"gpus": gpus, "gpu_hour_price": price}
        d.pop("verdicts", None)
        if boost_first:  # the first step 10x as interactive as any: ahead at the low-throughput end
            best = max(1 / s["latency"]["tpot"]["p50"] for s in d["ladder"]["steps"] if s["latency"]["tpot"].get("p50"))
            d["ladder"]["steps"][0]["latency"]["tpot"]["p50"] = 1 / (10 * best)

    return _edited(src, dst, edit)


def test_frontier_dominance_in_every_format(runs, tmp_path, capsys):
    a = _costed(runs[4], tmp_path / "one_gpu.json", 1)
    b = _costed(runs[4], tmp_path / "two_gpus.json", 2)  # the same steps over twice the GPUs: half the tok/s/GPU
    rc, out, err = _main(capsys, a, b)
    assert rc == 0, err
    assert "Frontier dominance" in out and "one_gpu dominates two_gpus" in out
    assert out.rstrip().splitlines()[-1].count("Pareto frontier: one_gpu dominates two_gpus") == 1
    rc, md, err = _main(capsys, a, b, "--format", "markdown")
    header, body = _md_table(md, "Frontier dominance")
    assert header == ["runs", "verdict"] and body[0][0] == "one_gpu vs two_gpus" and "one_gpu dominates" in body[0][1]
    rc, page, err = _main(capsys, a, b, "--format", "html")
    assert "one_gpu dominates two_gpus" in html.unescape(page)
    c = cmp.compare([a, b])
    svg = next(t.svg for t in cmp.sections(c) if t.title == "Frontier dominance")
    assert svg.startswith("<svg") and 'id="frontiers-run0-frontier"' in svg and 'id="frontiers-run1-frontier"' in svg


def test_crossing_frontiers(runs, tmp_path, capsys):
    a = _costed(runs[4], tmp_path / "a.json", 1)
    b = _costed(runs[4], tmp_path / "b.json", 2, boost_first=True)
    rc, out, err = _main(capsys, a, b)
    assert rc == 0, err
    assert "crossing: neither dominates" in out and "b ahead at" in out and "a ahead at" in out
    assert "Pareto frontier: a and b cross" in out.rstrip().splitlines()[-1]


def test_html_draws_the_frontiers(runs, tmp_path, capsys):
    a = _costed(runs[4], tmp_path / "a.json", 1)
    b = _costed(runs[16], tmp_path / "b.json", 1)
    rc, page, err = _main(capsys, a, b, "--format", "html")
    assert rc == 0 and 'id="frontiers-run0-frontier"' in page and 'id="frontiers-run1-frontier"' in page


def test_verdict_metrics_are_criteria(runs, tmp_path, capsys):
    for name, better in (
        ("output_tokens_per_s_per_gpu", True),
        ("interactivity", True),
        ("joules_per_output_token", False),
        ("usd_per_million_output_tokens", False),
    ):
        assert cmp.resolve_metric(name)[0].higher_is_better is better
    a = _costed(runs[4], tmp_path / "a.json", 2, price=3.6)
    b = _costed(runs[16], tmp_path / "b.json", 4, price=3.6)
    w = _weights(
        tmp_path,
        "criteria:\n  - metric: output_tokens_per_s_per_gpu\n"
        "  - metric: at_knee.usd_per_million_output_tokens\n    pass: '<= 1000000'\n"
        "  - metric: joules_per_output_token\n",
    )
    rc, md, err = _main(capsys, a, b, "--weights", w, "--format", "markdown")
    assert rc == 0, err
    _header, body = _md_table(md, "Decision matrix")
    rows = {r[0]: r for r in body}
    doc = _doc(a)
    per_gpu = doc["summary"]["output_tokens_per_s"] / 2
    assert rows["output_tokens_per_s_per_gpu"][4].startswith(f"{cmp.format._num(per_gpu)} tok/s/GPU · ")
    knee = cmp.load_runs([a])[0].knee()[0]
    usd = 2 * 3.6 / 3600 / knee["output_tokens_per_s"] * 1e6
    assert rows["at_knee.usd_per_million_output_tokens"][4].startswith(f"{cmp.format._num(usd)} $/Mtok · ")
    assert "n/a (no GPU sidecar windows" in rows["joules_per_output_token"][4]  # no sidecar in these runs


# ---- noise: one run each, by the 95% intervals (docs/compare.md "Noise") ----


def _sim_run(url, seconds, path, *more):
    """`llm-locust run` of 8 users for `seconds` against `url` (the noise tests' seeded workload),
    its results to `path`, in path's folder; it must exit 0."""
    argv = ["run", "--host", url, "-u", "8", "-t", seconds, "--results", path, *more]
    argv += ["--synthetic", "requests=1000,input=32,output=64,seed=1"]
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(path).parent,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return p


@pytest.fixture(scope="module")
def noise_runs(tmp_path_factory):
    """Three closed-loop runs of 8 users for 12 s: `a` and `b` against one simulator with the same
    settings, `slow` against one whose iteration takes 10 ms, not 5 (each token ~1.6x slower).
    12 s, not 8: `slow`'s batches are at least twice its mean E2E (~0.8 s), so 8 s gave exactly
    the 5 blocks an interval needs, and one slow start (CI) left 4: "too few samples"."""
    from llm_locust.sim.process import SimProcess

    d = tmp_path_factory.mktemp("noise")
    out = {}
    with SimProcess(slots=8) as same, SimProcess(slots=8, iter_base=0.010) as slow:
        for name, sim in (("a", same), ("b", same), ("slow", slow)):
            path = d / f"{name}.json"
            p = _sim_run(sim.url, "12s", path)
            assert "precision (95% intervals" in p.stdout and " ± " in p.stdout  # the summary says them
            out[name] = path
    return out


def test_one_run_each_results_carry_the_intervals(noise_runs):
    s = _doc(noise_runs["a"])["summary"]
    iv = s["intervals"]
    assert 5 <= iv["blocks"] <= 20
    tok = iv["rates"]["output_tokens_per_s"]
    assert tok["low"] < s["output_tokens_per_s"] < tok["high"]
    p99 = iv["latency"]["ttft"]["p99"]  # about 100 requests: too few for a p99
    assert s["latency"]["ttft"]["count"] < 368
    assert p99["low"] is None and p99["needs"] >= 368 and p99["reason"].startswith("insufficient (needs ")


def test_identical_runs_differ_within_noise_and_pass_the_regression_gate(noise_runs, capsys):
    a, b = noise_runs["a"], noise_runs["b"]
    rc, out, err = _main(capsys, a, b, "--fail-on", "regression")
    assert rc == 0, err
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith(("ttft_p99", "e2e_p99"))}
    for name in ("ttft_p99", "e2e_p99"):  # ~100 requests each: a p99 that cannot be judged
        assert "(too few samples)" in rows[name] and "too few samples to judge" in rows[name]


@pytest.mark.timing  # its figures move with the CPU the runs get: alone, not beside the slow shards
def test_a_slower_server_is_significant_and_fails_the_gate(noise_runs, capsys):
    a, slow = noise_runs["a"], noise_runs["slow"]
    rc, out, err = _main(capsys, a, slow, "--fail-on", "regression")
    assert rc == 1
    tpot = next(ln for ln in out.splitlines() if ln.startswith("tpot_p50"))
    assert tpot.rstrip().endswith("· significant")
    assert "tpot_p50" in err and "worse, significant: 95% interval of the difference" in err
    assert "best weighted total: a" in out


def test_one_run_with_a_baseline_is_gated_by_its_intervals(noise_runs, tmp_path):
    """`run --baseline` without --repeat (refused before, "needs intervals"): the run's own 95%
    intervals judge it. A rerun against a simulator with the same settings passes; one against a
    simulator whose iteration takes 10 ms, not 5, fails on the figures that changed."""
    from llm_locust.sim.process import SimProcess

    base = str(noise_runs["a"])
    codes = {}
    with SimProcess(slots=8) as same, SimProcess(slots=8, iter_base=0.010) as slow:
        for name, sim in (("same", same), ("slow", slow)):
            argv = ["run", "--host", sim.url, "-u", "8", "-t", "12s", "--baseline", base]
            argv += ["--synthetic", "requests=1000,input=32,output=64,seed=1", "--junit", f"{name}.xml"]
            p = subprocess.run(
                [sys.executable, "-m", "llm_locust.cli", *argv],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
            )
            codes[name] = (p.returncode, p.stdout, p.stderr)
    rc, out, err = codes["same"]
    assert rc == 0, out[-2000:] + err[-2000:]
    assert "within noise" in out and "significant" not in err
    cases = (tmp_path / "same.xml").read_text()
    assert "regression: tpot_p50" in cases and "<failure" not in cases
    rc, out, err = codes["slow"]
    assert rc == 1, out[-2000:] + err[-2000:]
    assert "worse, significant: 95% interval of the difference, one run each" in err
    assert "<failure" in (tmp_path / "slow.xml").read_text()


def _shifted(src, dst, factor):
    """A copy of a run whose output tokens/s is `factor` times its own, its interval kept."""

    def edit(d):
        d["summary"]["output_tokens_per_s"] *= factor

    return _edited(src, dst, edit)


def test_a_figure_with_too_few_samples_is_not_judged_not_passed(noise_runs, tmp_path, capsys):
    """About 100 requests a run: too few for a TTFT p99 interval. A candidate whose TTFT p99 is
    17x the baseline's (as against real llama-server with 1 slot, not 4) passed the regression
    gate silently (judged 'within noise'). It is now NOT JUDGED, said on stderr and skipped in
    JUnit, beside the figures that were judged; the exit status is theirs."""
    a = noise_runs["a"]

    def slower_tail(d):
        d["summary"]["latency"]["ttft"]["p99"] *= 17

    worse = _edited(a, tmp_path / "worse.json", slower_tail)
    junit = tmp_path / "g.xml"
    rc, _, err = _main(capsys, a, worse, "--fail-on", "regression", "--junit", junit)
    assert rc == 0, err
    line = next(ln for ln in err.splitlines() if "NOT JUDGED" in ln and "ttft_p99" in ln)
    assert "(+1600.0%): not judged: too few samples for a 95% interval" in line
    xml = junit.read_text()
    assert '<skipped message="ttft_p99' in xml and 'skipped="' in xml and "<failure" not in xml


def test_a_difference_within_noise_is_a_tie_not_a_winner(noise_runs, tmp_path, capsys):
    """The point estimates differ (the old matrix named the higher one the winner, 1.000 against
    0.970); within its interval, the matrix calls it a tie. Without intervals (a results file of
    before them) the point estimates rank as before."""
    w = _weights(tmp_path, "criteria:\n  - metric: output_tokens_per_s\n")
    a = noise_runs["a"]
    rel = _doc(a)["summary"]["intervals"]["rates"]["output_tokens_per_s"]["rel"]
    assert 0.002 < rel < 0.2
    close = _shifted(a, tmp_path / "close.json", 1 - rel / 2)  # well within the difference's noise
    rc, out, _ = _main(capsys, a, close, "--weights", w)
    assert rc == 0 and "tie: a, close (equal weighted totals: every difference within noise)" in out
    assert "· within noise" in out
    far = _shifted(a, tmp_path / "far.json", 1 - 3 * rel)  # 1.5x the interval of the difference away
    rc, out, _ = _main(capsys, a, far, "--weights", w)
    assert "best weighted total: a" in out and "· significant" in out
    bare = _edited(close, tmp_path / "bare.json", lambda d: d["summary"].pop("intervals"))
    assert "best weighted total: a" in _main(capsys, a, bare, "--weights", w)[1]
    # the gate: worse by rel / 2 at a tolerance of rel / 4 fails only where it is not within noise
    tol = f"{rel / 4 * 100:.3f}%"
    assert _main(capsys, a, close, "--weights", w, "--fail-on", "regression", "--tolerance", tol)[0] == 0
    assert _main(capsys, a, bare, "--weights", w, "--fail-on", "regression", "--tolerance", tol)[0] == 1


# ---- the error rate with its interval ----


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    """One closed-loop run of 8 users for 10 s against a simulator that answers 20% of requests
    with HTTP 500: about 30 failures among 150 answered."""
    from llm_locust.sim.process import SimProcess

    d = tmp_path_factory.mktemp("failing")
    path = d / "a.json"
    with SimProcess(slots=8, fault={"http500": 0.2}) as sim:
        p = _sim_run(sim.url, "10s", path, "--max-error-rate", "100%")
    said = " ".join(p.stdout.split())  # the summary wraps its lines to the terminal's width
    assert re.search(r"error rate \d+\.\d% ± \d+\.\d%", said), said  # its precision line says it
    return path


def test_the_error_rate_carries_its_interval(failing_run):
    s = _doc(failing_run)["summary"]
    assert s["failed"] >= 10, s["outcomes"]
    iv = s["intervals"]["rates"]["error_rate"]
    # the blocks count the same requests as the summary: the interval is about the summary's figure
    assert iv["low"] < s["error_rate"] < iv["high"]
    assert iv["rel"] == pytest.approx((iv["high"] - iv["low"]) / 2 / s["error_rate"])


def test_an_error_rate_within_its_noise_passes_the_gate(failing_run, tmp_path, capsys):
    """Against real llama-server, two identical runs' error rates (23.6% and 31.4%, from ~70
    requests each: where the run's end cut the trace's overlong prompts) failed the regression gate
    on point estimates. A change within the interval of the difference now passes; one well
    beyond it fails."""
    a = failing_run
    doc = _doc(a)["summary"]
    rel = doc["intervals"]["rates"]["error_rate"]["rel"]
    assert rel > 0.15  # ~30 failures: a 10% change in the error rate is noise

    def scaled(factor):
        def edit(d):
            d["summary"]["error_rate"] *= factor

        return edit

    close = _edited(a, tmp_path / "close.json", scaled(1.10))
    rc, out, err = _main(capsys, a, close, "--fail-on", "regression")
    row = next(ln for ln in out.splitlines() if ln.startswith("error_rate"))
    assert rc == 0 and row.rstrip().endswith("· within noise"), out + err
    far = _edited(a, tmp_path / "far.json", scaled(1 + 3 * rel))
    rc, _, err = _main(capsys, a, far, "--fail-on", "regression")
    assert rc == 1 and "error_rate" in err and "worse, significant" in err, err
