"""`llm-locust compare` with other tools' results beside ours: AIPerf's profile_export_aiperf.json,
GuideLLM's benchmarks JSON and vLLM bench serve's result JSON, written by real runs of those
tools against the same llama-server (tests/fixtures/othertools/README.md has the commands). The
real CLI in a subprocess; every expected figure is computed here from the fixture's JSON."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from support import FIXTURES, cli_process

from llm_locust.report.compare.tools import ForeignRun, read_run

TOOLS = FIXTURES / "othertools"
OURS, AIPERF, GUIDELLM, VLLM = (TOOLS / n for n in ("llm-locust.json", "aiperf.json", "guidellm.json", "vllm.json"))
VLLM_FAILED = TOOLS / "vllm-2-failures.json"


def _load(p: Path) -> dict:
    return json.loads(p.read_text())


def _num(v: float) -> str:
    """compare's number format: 3 significant digits, whole numbers with thousands commas from 1,000."""
    return f"{v:,.0f}" if abs(v) >= 999.5 else f"{v:.3g}"


def _ms(seconds: float) -> str:
    return f"{_num(seconds * 1000)} ms"


def _compare(*files: Path, args: tuple[str, ...] = (), columns: int = 400):
    p = cli_process("compare", *files, *args, timeout=120, env={"COLUMNS": str(columns)})
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _key_figures(out: str) -> tuple[list[str], dict[str, list[str]], str]:
    """(the run labels, {row name: cells}, the text after the table) of the Key figures section."""
    part = out.split("\nKey figures (", 1)[1].split("\nDecision matrix", 1)[0]
    lines = [x for x in part.splitlines()[1:] if x.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    rows: dict[str, list[str]] = {}
    tail = []
    for line in lines[2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(header) + 1:
            rows[cells[0]] = cells[1:]
        else:
            tail.append(line)
    return header, rows, "\n".join(tail)


def _cell(rows: dict[str, list[str]], header: list[str], row: str, label: str) -> str:
    return rows[row][header.index(label)]


def _strip_ref(cell: str) -> str:
    """A figure without its footnote reference ("3,939 ms [1]" -> "3,939 ms")."""
    return re.sub(r" \[\d+\]$", "", cell)


def test_four_tools_one_table_with_mapped_figures_and_marks():
    p = _compare(OURS, AIPERF, GUIDELLM, VLLM)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    header, rows, tail = _key_figures(out)
    assert header == ["llm-locust", "aiperf", "guidellm", "vllm"]
    cell = lambda row, lab: _strip_ref(_cell(rows, header, row, lab))  # noqa: E731

    ours = _load(OURS)["summary"]
    assert cell("TTFT p50", "llm-locust") == _ms(ours["latency"]["ttft"]["p50"])
    assert cell("ITL p50", "llm-locust") == _ms(ours["latency"]["itl"]["p50"])

    ap = _load(AIPERF)  # ms, except benchmark_duration (sec)
    assert cell("TTFT p50", "aiperf") == f"{_num(ap['time_to_first_token']['p50'])} ms"
    assert cell("TTFT p99", "aiperf") == f"{_num(ap['time_to_first_token']['p99'])} ms"
    # its inter_token_latency is per request (E2E - TTFT) / (OSL - 1): our TPOT
    assert cell("TPOT p50", "aiperf") == f"{_num(ap['inter_token_latency']['p50'])} ms"
    assert cell("inter-chunk p50", "aiperf") == f"{_num(ap['inter_chunk_latency']['p50'])} ms"
    assert cell("E2E p99", "aiperf") == f"{_num(ap['request_latency']['p99'])} ms"
    assert _cell(rows, header, "ITL p50", "aiperf").startswith("not comparable: its ITL is a per-request TPOT")
    usage_tps = ap["total_usage_completion_tokens"]["avg"] / ap["benchmark_duration"]["avg"]
    assert cell("output tokens/s", "aiperf") == f"{_num(usage_tps)} tok/s"  # server usage, as ours
    assert cell("requests/s", "aiperf") == f"{_num(ap['request_throughput']['avg'])} req/s"
    ok, failed = int(ap["request_count"]["avg"]), int(ap["error_request_count"]["avg"])
    assert cell("requests ok / sent", "aiperf") == f"{ok} / {ok + failed}"
    assert cell("error rate", "aiperf") == f"{failed / (ok + failed) * 100:.3g}%"
    assert cell("failed", "aiperf") == f"{failed} (ClientOSError {failed})"

    gl = _load(GUIDELLM)["benchmarks"][0]["metrics"]
    ok_ = lambda name: gl[name]["successful"]  # noqa: E731
    assert cell("TTFT p50", "guidellm") == f"{_num(ok_('time_to_first_token_ms')['percentiles']['p50'])} ms"
    assert cell("E2E p99", "guidellm") == _ms(ok_("request_latency")["percentiles"]["p99"])  # seconds there
    assert cell("ITL mean", "guidellm") == f"{_num(ok_('inter_token_latency_ms')['mean'])} ms"
    assert cell("ITL p50", "guidellm").startswith("not comparable: per-request means")
    assert cell("TPOT p50", "guidellm") == "not comparable: its TPOT includes TTFT"
    assert cell("inter-chunk p50", "guidellm") == "-"
    assert cell("output tokens/s", "guidellm") == f"{_num(ok_('output_tokens_per_second')['mean'])} tok/s"
    assert cell("requests ok / sent", "guidellm") == f"{gl['request_totals']['successful']} / 40"

    vl = _load(VLLM)
    assert cell("TTFT p50", "vllm") == f"{_num(vl['p50_ttft_ms'])} ms"
    assert cell("TPOT p50", "vllm") == f"{_num(vl['p50_tpot_ms'])} ms"
    assert cell("inter-chunk p50", "vllm") == f"{_num(vl['p50_itl_ms'])} ms"  # its ITL: every chunk gap
    assert cell("ITL p50", "vllm") == "not comparable: per chunk, not per token (row inter-chunk)"
    assert cell("E2E p99", "vllm") == f"{_num(vl['p99_e2el_ms'])} ms"
    assert cell("output tokens/s", "vllm") == f"{_num(vl['output_throughput'])} tok/s"
    assert cell("output tokens", "vllm") == f"{_num(vl['total_output_tokens'])} tok"
    assert cell("concurrency (mean)", "vllm") == _num(sum(vl["latencies"]) / vl["duration"]).strip()

    # the footnotes say how a mapped figure is measured differently
    ttft_ref = _cell(rows, header, "TTFT p50", "aiperf").rsplit(" ", 1)[1]
    assert re.search(re.escape(ttft_ref) + r" AIPerf: starts before the TCP connect", tail), tail
    tok_ref = _cell(rows, header, "TPOT p50", "vllm").rsplit(" ", 1)[1]
    assert re.search(re.escape(tok_ref) + r" vLLM bench serve: output tokens counted by the tool's tokenizer", tail)
    # the same server, workload and load: comparable, with the notes that apply
    assert "comparable: no difference in workload lengths, load plan, model, api or SLOs" in out
    assert "the same server in every run that records it: llama.cpp b1-0c1e570" in out
    assert "note: workload not recorded, not checked: vllm: output tokens, forced" in out
    assert "different tools" in out and "AIPerf 0.13.0" in out and "GuideLLM 0.8.1" in out


def test_comparability_warnings_apply_to_other_tools(tmp_path):
    """Another load (vLLM at 8 in flight) and other lengths (AIPerf asking 64 output tokens) are
    named as not comparable, and --strict refuses them."""
    vl = _load(VLLM)
    vl["max_concurrency"] = 8
    (tmp_path / "vllm8.json").write_text(json.dumps(vl))
    ap = _load(AIPERF)
    ap["input_config"]["datasets"][0]["prompts"]["osl"]["mean"] = 64.0
    (tmp_path / "aiperf64.json").write_text(json.dumps(ap))
    p = _compare(OURS, tmp_path / "aiperf64.json", tmp_path / "vllm8.json")
    assert p.returncode == 0, p.stderr
    assert "WARNING: these runs are NOT comparable" in p.stdout
    assert (
        "not comparable: different load plan: llm-locust, aiperf64: closed loop, 4 users; vllm8: closed loop, 8 users"
        in p.stdout
    )
    assert "not comparable: workload: different output tokens per request: llm-locust: 32; aiperf64: 64" in p.stdout
    strict = _compare(OURS, tmp_path / "vllm8.json", args=("--strict",))
    assert strict.returncode == 2
    assert "different load plan" in strict.stderr and strict.stdout == ""


def test_unknown_or_broken_file_is_one_clear_error(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": [1, 2], "tool": "something else"}))
    p = _compare(OURS, other)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert str(other) in lines[0] and "not a results file compare reads" in lines[0]
    assert "AIPerf" in lines[0] and "GuideLLM" in lines[0] and "vLLM" in lines[0]
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00\x01 not json {")
    p = _compare(OURS, garbage)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert str(garbage) in p.stderr and "JSON" in p.stderr


def test_vllm_failures_are_shown():
    vl = _load(VLLM_FAILED)
    assert vl["failed"] == 2
    p = _compare(OURS, VLLM_FAILED)
    assert p.returncode == 0, p.stderr
    header, rows, _ = _key_figures(p.stdout)
    lab = "vllm-2-failures"
    classes = [e.strip().splitlines()[-1].split(":", 1)[0].rsplit(".", 1)[-1] for e in vl["errors"] if e]
    kinds = ", ".join(f"{c} {classes.count(c)}" for c in dict.fromkeys(classes))
    assert _cell(rows, header, "failed", lab) == f"{vl['failed']} ({kinds})"
    assert "ServerDisconnectedError 1" in kinds and "ClientOSError 1" in kinds
    assert _cell(rows, header, "requests ok / sent", lab) == f"{vl['completed']} / {vl['completed'] + vl['failed']}"
    assert _cell(rows, header, "error rate", lab) == f"{vl['failed'] / (vl['completed'] + vl['failed']) * 100:.3g}%"


def test_the_format_is_told_by_content_not_name(tmp_path):
    """Each tool's file under another tool's name is still read as what it is."""
    for src, name, tool in (
        (AIPERF, "guidellm.json", "AIPerf"),
        (GUIDELLM, "vllm.json", "GuideLLM"),
        (VLLM, "profile_export_aiperf.json", "vLLM bench serve"),
    ):
        dst = tmp_path / tool.replace(" ", "_") / name
        dst.parent.mkdir()
        shutil.copy(src, dst)
        run = read_run("x", str(dst))
        assert isinstance(run, ForeignRun) and run.foreign.tool == tool
    assert not isinstance(read_run("ours", str(OURS)), ForeignRun)


def test_the_comparison_fits_the_terminal_and_keeps_every_figure():
    """COLUMNS=80 (a terminal's width, or the default without one): no line wider, the runs'
    columns in blocks, long marks wrapped; every cell of the wide table still there (before:
    lines of 243-308 columns whatever COLUMNS said)."""
    wide, narrow = (
        _compare(OURS, AIPERF, GUIDELLM, VLLM).stdout,
        _compare(OURS, AIPERF, GUIDELLM, VLLM, columns=80).stdout,
    )
    assert max(len(line) for line in wide.splitlines()) > 200
    assert [line for line in narrow.splitlines() if len(line) > 80 and " " in line.strip()] == []
    header, rows, _ = _key_figures(wide)
    words = narrow.split()
    for name, cells in rows.items():
        for cell in cells:
            for word in cell.split():
                assert word in words, (name, cell)
    blocks = [line for line in narrow.splitlines() if line.startswith("TTFT p50")]
    assert len(blocks) >= 2  # the runs' columns dealt into blocks, each naming its rows


def test_an_output_that_is_an_input_is_refused_before_anything_is_read(tmp_path):
    """-o or --junit naming one of the runs compared: one line, exit 2, the run untouched (before:
    the comparison was written over it)."""
    run = tmp_path / "aiperf.json"
    run.write_bytes(AIPERF.read_bytes())
    before = run.read_bytes()
    for args in (("-o", str(run)), ("--junit", str(run))):
        p = _compare(OURS, run, args=args)
        assert p.returncode == 2, p.stderr
        assert f"{run}: that is a results file ({run}), which this run reads" in p.stderr, p.stderr
        assert run.read_bytes() == before
    p = _compare(OURS, run, args=("-o", str(tmp_path)))
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr


# ---- absurd files: refused, naming the file and the field ----


def _edit(src: Path, dst: Path, edit) -> Path:
    doc = _load(src)
    edit(doc)
    dst.write_text(json.dumps(doc))
    return dst


def _set(*keys, value):
    """An edit that sets doc[k0][k1]... = value."""

    def edit(doc):
        for k in keys[:-1]:
            doc = doc[k]
        doc[keys[-1]] = value

    return edit


@pytest.mark.parametrize(
    ("src", "edit", "field"),
    [
        (VLLM, _set("p99_ttft_ms", value=-5), "p99_ttft_ms is -5"),  # old: ranked best
        (VLLM, _set("output_throughput", value=-120.5), "output_throughput is -120.5"),  # old: printed
        (VLLM, _set("latencies", 3, value=-0.2), "latencies[3] is -0.2"),
        (AIPERF, _set("time_to_first_token", "p99", value=-1.0), "time_to_first_token.p99 is -1.0"),
        (AIPERF, _set("request_count", "avg", value=-3.0), "request_count.avg is -3.0"),
        (
            GUIDELLM,
            _set("benchmarks", 0, "metrics", "request_latency", "successful", "mean", value=-2.5),
            "benchmarks[0].metrics.request_latency.successful.mean is -2.5",
        ),
        (OURS, _set("summary", "ok", value=-5), "summary.ok is -5"),  # old: accepted
        (OURS, _set("summary", "latency", "ttft", "p99", value=-0.01), "summary.latency.ttft.p99 is -0.01"),
        (OURS, _set("summary", "output_tokens_per_s", value=-1.5), "summary.output_tokens_per_s is -1.5"),
        (OURS, _set("steps", 0, "failed", value=-1), "steps[0].failed is -1"),
        (OURS, _set("summary", "sent", value="12"), "summary.sent is '12', not a number"),
        (
            OURS,
            _set("repeats", value={"count": 2, "figures": {"ttft_p50": {"mean": 0.0, "values": [0.1, -0.1]}}}),
            "repeats.figures.ttft_p50.values[1] is -0.1",
        ),
    ],
)
def test_a_negative_figure_is_refused_naming_the_file_and_the_field(tmp_path, src, edit, field):
    """A count, latency or throughput below zero (or, in our files, not a number): exit 2, one
    line naming the file and the field as the file names it, nothing on stdout (old code: a
    vLLM p99 TTFT of -5 ms ranked best, negative throughputs printed, our `ok: -5` accepted)."""
    bad = _edit(src, tmp_path / src.name, edit)
    p = _compare(OURS, bad)
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout[-500:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and field in lines[0], p.stderr


def test_a_non_finite_figure_is_refused(tmp_path):
    """Infinity or NaN, as Python's json writes them, or a number past a double's range: exit 2,
    the file named with where in it; the check itself refuses them wherever they come from."""
    from llm_locust.report.compare.errors import CompareError
    from llm_locust.report.figure_checks import check_figures

    for text in ("Infinity", "NaN", "1e999"):
        bad = tmp_path / f"vllm-{text}.json"
        bad.write_text(VLLM.read_text().replace('"p99_ttft_ms": ', f'"p99_ttft_ms": {text}, "_was": ', 1))
        p = _compare(OURS, bad)
        assert p.returncode == 2 and p.stdout == "", p.stdout[-500:]
        assert str(bad) in p.stderr and "JSON" in p.stderr and "line 1" in p.stderr, p.stderr
    for v in (float("inf"), float("nan"), float("-inf")):
        with pytest.raises(CompareError, match=r"^f\.json: summary\.ok is .*not a finite number"):
            check_figures("f.json", [("summary.ok", v)], error=CompareError)


def test_pipes_are_refused_not_read_forever(tmp_path):
    """A named pipe as a results file or as --weights: exit 2 at once, naming it (old code: hung
    forever, where `report` refused the same file)."""
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    p = _compare(OURS, fifo)
    assert p.returncode == 2 and f"{fifo}: a named pipe, not a regular file" in p.stderr, p.stderr
    p = _compare(OURS, VLLM, args=("--weights", str(fifo)))
    assert p.returncode == 2 and f"{fifo}: a named pipe, not a regular file: give a weights file" in p.stderr
    p = _compare(OURS, tmp_path)
    assert p.returncode == 2 and f"{tmp_path}: a folder" in p.stderr, p.stderr


def test_a_version_key_does_not_decide_the_format(tmp_path):
    """A vLLM file that also carries `aiperf_version` is read as vLLM by its required keys, its
    figures there (old code: read as AIPerf, every figure n/a); a file with the required keys of
    two tools is refused, naming both."""
    vl = _edit(VLLM, tmp_path / "vllm.json", _set("aiperf_version", value="0.13.0"))
    run = read_run("v", str(vl))
    assert isinstance(run, ForeignRun) and run.foreign.tool == "vLLM bench serve"
    assert run.summary["latency"]["ttft"]["p50"] == pytest.approx(_load(VLLM)["p50_ttft_ms"] / 1000)
    both = _edit(
        AIPERF,
        tmp_path / "both.json",
        lambda d: d.update({k: _load(VLLM)[k] for k in ("backend", "completed", "duration", "mean_ttft_ms")}),
    )
    p = _compare(OURS, both)
    assert p.returncode == 2 and "aiperf_results and vllm_bench" in p.stderr, p.stderr


def test_a_file_over_the_input_limit_is_refused_unread(tmp_path):
    """A file over MAX_INPUT_BYTES (32 MiB) is refused, with its size, before it is read: the
    refusal allocates almost nothing (old code: a 60 MB file took 493 MB)."""
    import tracemalloc

    from llm_locust.report.compare.errors import CompareError
    from llm_locust.report.compare.tools import MAX_INPUT_BYTES

    doc = _load(VLLM)
    doc["generated_texts"] = ["x" * (1 << 20)] * (MAX_INPUT_BYTES // (1 << 20) + 1)
    big = tmp_path / "vllm-detailed.json"
    big.write_text(json.dumps(doc))
    tracemalloc.start()
    try:
        with pytest.raises(CompareError, match=r"MiB, over the 32 MiB read of a results file") as e:
            read_run("big", str(big))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(big) in str(e.value) and peak < 1 << 20, peak


# ---- what a file says, on the terminal ----

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\x9b31m\u202eevil"


def test_a_files_escapes_print_as_text(tmp_path):
    """Our results file whose model and server version carry escapes (a window title, a screen
    clear, an OSC 8 link, a C1 CSI, a bidi override) beside a vLLM file whose model_id does: no
    such character reaches stdout or stderr, in text or Markdown, or in --strict's refusal; the
    escapes show as text (old code: printed raw)."""

    def hostile(doc):
        doc["environment"]["server"]["model"] = "m" + ESCAPES
        doc["environment"]["server"]["version"] = "b1" + ESCAPES

    ours = _edit(OURS, tmp_path / "ours.json", hostile)
    vl = _edit(VLLM, tmp_path / "vllm.json", _set("model_id", value="v" + ESCAPES))
    for args in ((), ("--format", "markdown"), ("--strict",)):
        p = _compare(ours, vl, args=args)
        assert p.returncode == (2 if args == ("--strict",) else 0), p.stderr
        for name, text in (("stdout", p.stdout), ("stderr", p.stderr)):
            bad = sorted({hex(ord(c)) for c in text if c in "\x1b\x07\x9b\u202e"})
            assert not bad, (args, name, bad)
        said = p.stdout + p.stderr
        assert "\\x1b]0;pwned\\x07" in said and "\\u202eevil" in said, said[-2000:]


def test_an_error_quoting_the_file_prints_its_escapes_as_text(tmp_path):
    """read_results' refusal of a newer schema version quotes the file's `environment.llm_locust`:
    `compare` and `report` print it terminal-safe (old code: raw, from both)."""

    def newer(doc):
        doc["version"] = 99
        doc["environment"]["llm_locust"] = "9" + ESCAPES

    bad = _edit(OURS, tmp_path / "newer.json", newer)
    for args in (("compare", OURS, bad), ("report", bad, "-o", tmp_path / "r.html")):
        p = cli_process(*args, timeout=120)
        assert p.returncode == 2 and "results schema version 99" in p.stderr, p.stderr
        assert not {c for c in p.stdout + p.stderr if c in "\x1b\x07\x9b\u202e"}, (args[0], p.stderr)
        assert "written by llm-locust 9\\x1b]0;pwned\\x07" in p.stderr, p.stderr


@pytest.mark.parametrize("name", ["aiperf.json", "guidellm.json", "vllm.json"])
def test_another_tools_figures_are_named_by_the_schemas_keys(name):
    """The other tools' readers write their figures under our names into an open dict (a value may
    be None where ours is always a number), which mypy cannot check against the schema: a figure
    renamed in `Figures` and not in a reader fails here instead."""
    from llm_locust import schema

    run = read_run("x", str(TOOLS / name))
    summary = run.foreign.summary
    assert "output_tokens_per_s" in summary
    unknown = set(summary) - set(schema.Figures.__annotations__)
    assert not unknown, unknown
