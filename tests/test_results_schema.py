"""The results document's one typed schema (llm_locust/report/schema.py): the published JSON
Schema is what the types generate, a document the writer builds conforms to it, docs/results.md
documents every key of the top level and of the summary (and nothing else), and a renamed field
fails the type check."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError
from support import stream_record

from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.records import RequestRecord
from llm_locust.report import schema
from llm_locust.report.results import build_results
from llm_locust.report.schema import Figures, LadderDoc, ResultsDoc, Worker

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results.md"


def _record(i: int, ok: bool = True) -> RequestRecord:
    """A 20-token stream, one token every 10 ms (a failed one: an HTTP error, no token)."""
    return stream_record(i, ok=ok)


def _doc() -> ResultsDoc:
    total, step = Aggregate(), Aggregate()
    for i in range(6):
        rec = _record(i, ok=i != 5)
        total.add(rec)
        step.add(rec)
    return build_results(total, {1: step}, {"host": "http://127.0.0.1:1", "seed": 1})


def test_the_published_json_schema_is_what_the_types_generate():
    published = schema.SCHEMA_FILE.read_text()
    assert published == schema.schema_text(), (
        "docs/results.schema.json is stale: run python -m llm_locust.report.schema"
    )
    assert schema.main(["--check"]) == 0


def test_a_stale_json_schema_is_found(tmp_path):
    stale = tmp_path / "results.schema.json"
    stale.write_text(schema.schema_text().replace('"tokens_out"', '"tokens_outt"'))
    assert schema.main(["--check", str(stale)]) == 1


def test_a_document_the_writer_builds_conforms_to_the_schema():
    doc = _doc()
    assert doc["summary"]["ok"] == 5 and doc["summary"]["failed"] == 1, doc["summary"]["outcomes"]
    assert doc["steps"][0]["step"] == 1
    adapter = TypeAdapter(ResultsDoc)
    adapter.validate_python(doc, strict=True)
    assert set(doc) <= set(ResultsDoc.__annotations__), set(doc) - set(ResultsDoc.__annotations__)
    assert set(doc["summary"]) <= set(Figures.__annotations__), set(doc["summary"]) - set(Figures.__annotations__)

    wrong = _doc()
    wrong["summary"]["ok"] = "five"  # type: ignore[typeddict-item]
    with pytest.raises(ValidationError, match=r"summary\.ok"):
        adapter.validate_python(wrong, strict=True)
    missing = _doc()
    del missing["summary"]["tokens_out"]  # type: ignore[misc]
    with pytest.raises(ValidationError, match=r"summary\.tokens_out"):
        adapter.validate_python(missing, strict=True)
    no_steps = _doc()
    del no_steps["steps"]  # type: ignore[misc]
    with pytest.raises(ValidationError, match=r"steps"):
        adapter.validate_python(no_steps, strict=True)


def _ladder_doc() -> dict:
    """A ladder section as the run writes it, from the producers' own code (runtime.shapes report:
    the ladder's to_dict, each window's, each StepResult's, the verdict, a burst's recovery, an SLA
    search's conclusion), every optional part present."""
    from llm_locust.analysis import sla
    from llm_locust.analysis.saturation import analyse, point
    from llm_locust.analysis.stability import burst_recovery
    from llm_locust.analysis.steps import step_result
    from llm_locust.runtime.shapes import StepWindow
    from llm_locust.settings.ladder import Burst, Ladder, Search, Stable

    agg = Aggregate()
    for i in range(6):
        agg.add(_record(i))
    wall = 1_800_000_100.0  # stream_record's first send
    steps = [
        step_result(
            agg,
            step=k,
            offered=level,
            offered_kind="rate",
            window=(wall, wall + 6),
            warmup=2.0,
            slos={"ttft_p99": 0.5},
            series=agg.series,
        )
        for k, level in enumerate((1, 2, 4), 1)
    ]
    verdict = analyse(steps, {"ttft_p99": 0.5})
    verdict.saturation = point(steps[1])  # a knee, whatever these flat steps give
    ladder = Ladder(
        kind="rate",
        levels=(1.0, 2.0, 4.0),
        stable=Stable(window=5.0),
        search=Search("rate", 1.0, 4.0),
        burst=Burst(rate=1.0, x=4.0, seconds=5.0, before=10.0),
    )
    search = sla.conclude([(1.0, True), (2.0, False)], "rate", 1.0, 4.0, 0.05)
    search["probes_detail"] = [{"step": 1, "level": 1.0, "met": True, "broken": []}]
    search["seconds"] = 12.5
    window = StepWindow(1, 1.0, wall - 2, wall, wall + 6, judged=wall + 7, cache_reset={"status": 200})
    return {
        "ladder": ladder.to_dict(),
        "windows": [window.to_dict(), StepWindow(2, 2.0, wall + 6).to_dict()],
        "steps": [s.to_dict() for s in steps[:-1]] + [{**steps[-1].to_dict(), "cut": True}],
        "saturation": verdict.to_dict(),
        "stop_reason": "interrupted",
        "cut_step": 3,
        "burst": burst_recovery(agg.by_sent, (wall, wall + 3), (wall + 3, wall + 4), wall + 6, window=1),
        "sla": search,
    }


def test_a_ladder_section_the_run_writes_conforms_to_the_schema():
    """The ladder's types hold what its producers write: every part checked, strictly."""
    ladder = _ladder_doc()
    assert ladder["steps"][0]["latency"]["ttft"]["count"] == 6 and ladder["burst"]["passed"] in (True, False)
    adapter = TypeAdapter(LadderDoc)
    adapter.validate_python(ladder, strict=True)
    # a key the writer writes that its type lacks: pydantic passes over it, this does not
    for part, typed in (
        (ladder, schema.LadderDoc),
        (ladder["ladder"], schema.LadderSpec),
        (ladder["ladder"]["burst"], schema.BurstSpec),
        (ladder["windows"][0], schema.LadderWindow),
        (ladder["steps"][-1], schema.LadderStep),
        (ladder["saturation"], schema.Saturation),
        (ladder["saturation"]["saturation"], schema.KneePoint),
        (ladder["burst"], schema.BurstRecovery),
        (ladder["sla"], schema.SlaSearch),
    ):
        assert set(part) <= set(typed.__annotations__), (typed.__name__, set(part) - set(typed.__annotations__))
    ladder["steps"][0]["offered"] = "one"
    with pytest.raises(ValidationError, match=r"steps\.0\.offered"):
        adapter.validate_python(ladder, strict=True)
    no_probes = _ladder_doc()
    del no_probes["sla"]["probes_detail"]
    with pytest.raises(ValidationError, match=r"sla\.probes_detail"):
        adapter.validate_python(no_probes, strict=True)


def test_a_worker_row_the_master_writes_conforms_to_the_schema():
    """A worker's row as runtime.plugin writes it, its clock as transport.clock gives it."""
    from llm_locust.transport.clock import Estimate

    row = {
        "id": "host_1a2b",
        "index": 0,
        "reports": 12,
        "sent": 40,
        "finished": 40,
        "in_flight_at_last_report": 0,
        "lost": 0,
        "final_report": True,
        "lost_at": None,
        "rejoined_at": None,
        "left_at": None,
        "joined_at": 1_800_000_000.5,
        "clock": Estimate(0.0012, 0.0004, 8, 0.0009).as_dict(aligned=True),
    }
    adapter = TypeAdapter(Worker)
    adapter.validate_python(row, strict=True)
    assert set(row) == set(Worker.__annotations__) and set(row["clock"]) == set(schema.WorkerClock.__annotations__)
    adapter.validate_python({**row, "clock": None}, strict=True)
    with pytest.raises(ValidationError, match=r"joined_at"):
        adapter.validate_python({k: v for k, v in row.items() if k != "joined_at"}, strict=True)


def _documented(section: str) -> set[str]:
    """The backticked names in the first column of the tables of `## section` of docs/results.md."""
    text = DOC.read_text()
    m = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"docs/results.md has no section '## {section}'"
    names: set[str] = set()
    for line in m.group(1).splitlines():
        if not line.startswith("|") or re.match(r"^\|\s*-", line):
            continue
        first = line.split("|")[1]
        names.update(re.findall(r"`([^`]+)`", first))
    assert names, f"no table in '## {section}'"
    return names


@pytest.mark.parametrize(
    ("section", "typed"),
    [("Top level", ResultsDoc), ("summary", Figures)],
    ids=["top-level", "summary"],
)
def test_docs_results_md_documents_every_key_of_the_schema_and_no_other(section, typed):
    keys = {k for k in typed.__annotations__ if not k.startswith("_")}  # _path: added on reading
    documented = _documented(section)
    assert not keys - documented, f"not documented in docs/results.md '## {section}': {sorted(keys - documented)}"
    assert not documented - keys, (
        f"documented in '## {section}' but not in {typed.__name__}: {sorted(documented - keys)}"
    )


def test_the_section_parser_finds_a_missing_key():
    """A documented set that lacks a key of the type is told apart (the check above can fail)."""
    keys = set(Figures.__annotations__)
    assert keys - (_documented("summary") - {"tokens_out"}) == {"tokens_out"}


READER = """
from llm_locust.report.schema import ResultsDoc


def tokens(doc: ResultsDoc) -> int:
    return doc["summary"]["{summary}"]


def stop_reason(doc: ResultsDoc) -> str | None:
    return doc["ladder"]["{ladder}"]


def offered(doc: ResultsDoc) -> float:
    return doc["ladder"]["steps"][0]["{step}"]


def joined(doc: ResultsDoc) -> float:
    return doc["workers"][0]["{worker}"]
"""
# {placeholder: (the key, a misspelling of it, the TypedDict that must name it)}
FIELDS = {
    "summary": ("tokens_out", "tokens_outt", "Figures"),
    "ladder": ("stop_reason", "stop_reasn", "LadderDoc"),
    "step": ("offered", "offerd", "LadderStep"),
    "worker": ("joined_at", "joined_att", "Worker"),
}


# slow: runs mypy twice over the schema module (several seconds)
@pytest.mark.slow
def test_a_renamed_results_field_fails_the_type_check(tmp_path):
    """A reader of the summary, of the ladder (its own keys and a step's) and of a worker's row:
    each key misspelt fails mypy, which names it (one reader, so mypy runs twice, not per key)."""

    def mypy(which: int) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"reader_{which}.py"
        text = READER
        for name, keys in FIELDS.items():
            text = text.replace("{" + name + "}", keys[which])
        path.write_text(text)
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    good = mypy(0)
    assert good.returncode == 0, good.stdout + good.stderr
    renamed = mypy(1)
    assert renamed.returncode == 1, renamed.stdout + renamed.stderr
    for _, wrong, typed in FIELDS.values():
        assert f'TypedDict "{typed}" has no key "{wrong}"' in renamed.stdout, renamed.stdout
