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
from llm_locust.report.schema import Figures, ResultsDoc

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
    return doc["summary"]["{key}"]
"""


# slow: runs mypy twice over the schema module (several seconds)
@pytest.mark.slow
def test_a_renamed_results_field_fails_the_type_check(tmp_path):
    def mypy(key: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"reader_{key}.py"
        path.write_text(READER.replace("{key}", key))
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    good = mypy("tokens_out")
    assert good.returncode == 0, good.stdout + good.stderr
    renamed = mypy("tokens_outt")
    assert renamed.returncode == 1, renamed.stdout + renamed.stderr
    assert 'TypedDict "Figures" has no key "tokens_outt"' in renamed.stdout, renamed.stdout
