"""The llm-d Benchmark Report (v0.2.1) written by `llm-locust export llmd`: every report valid
against the vendored JSON Schema, one per judged ladder step with the step's own load and figures,
the units the schema allows, and the same reports from the same results file."""

from __future__ import annotations

import json

import jsonschema
import pytest
from support import ROOT, cli_process, run_cli

from llm_locust.report.llmd import reports

SCHEMA = json.loads((ROOT / "llm_locust" / "data" / "llmd" / "br_v0_2_1_json_schema.json").read_text())
UNITS = {  # the units llm-d's own models allow per field (its Pydantic validators; the schema only lists them)
    "time_to_first_token": ("ms", "s"),
    "request_latency": ("ms", "s"),
    "time_per_output_token": ("ms/token", "s/token"),
    "inter_token_latency": ("ms/token", "s/token"),
    "output_token_rate": ("tokens/s",),
    "input_token_rate": ("tokens/s",),
    "total_token_rate": ("tokens/s",),
    "request_rate": ("queries/s",),
}


def valid(report: dict) -> None:
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(report))
    assert not errors, [(list(e.path), e.message[:200]) for e in errors[:5]]
    agg = report["results"]["request_performance"]["aggregate"]
    for section in ("latency", "throughput"):
        for name, stat in agg[section].items():
            assert stat["units"] in UNITS[name], (name, stat["units"])


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, sims):
    tmp = tmp_path_factory.mktemp("llmd")
    results = tmp / "run.json"
    host = sims(slots=4).url
    p = run_cli(
        "--host", host, "--ladder", "concurrency:1,2,4", "--step-duration", "3s", "--warmup", "1s",
        "--no-early-stop", "--results", str(results),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return results


def test_a_ladder_gives_one_valid_report_per_step(ladder):
    doc = json.loads(ladder.read_text())
    out = reports(doc)
    steps = doc["ladder"]["steps"]
    assert len(out) == len(steps) == 3
    for r, s in zip(out, steps, strict=True):
        valid(r)
        load = r["scenario"]["load"]["standardized"]
        # the step's own number (1..N), as the summary and the HTML report number it (issue 35)
        assert load["stage"] == s["step"] and load["concurrency"] == int(s["offered"])
        assert load["tool"] == "llm-locust"
        row = next(x for x in doc["steps"] if x["step"] == s["step"])
        agg = r["results"]["request_performance"]["aggregate"]
        assert agg["latency"]["time_to_first_token"]["p50"] == row["latency"]["ttft"]["p50"]
        assert agg["latency"]["time_to_first_token"]["units"] == "s"
        assert agg["requests"]["total"] == row["sent"]
    assert len({r["run"]["eid"] for r in out}) == 1 and len({r["run"]["uid"] for r in out}) == 3
    assert reports(doc) == out  # the same results file, the same reports (uids included)


def test_the_export_command_writes_them_beside_the_results_and_never_over_them(ladder, tmp_path):
    p = cli_process("export", "llmd", str(ladder), "-o", str(tmp_path))
    assert p.returncode == 0, p.stderr
    written = sorted(tmp_path.glob("run.llmd-stage-*.json"))
    assert [f.name for f in written] == [f"run.llmd-stage-{k}.json" for k in (1, 2, 3)]
    for f in written:
        valid(json.loads(f.read_text()))
    bad = cli_process("export", "llmd", str(tmp_path / "nope.json"))
    assert bad.returncode == 2 and "nope.json" in bad.stderr


def test_a_closed_loop_is_one_report_at_its_concurrency(tmp_path, sims):
    results = tmp_path / "closed.json"
    p = run_cli("--host", sims(slots=4).url, "-u", "3", "-t", "3s", "--results", str(results))
    assert p.returncode == 0, p.stderr[-3000:]
    (r,) = reports(json.loads(results.read_text()))
    valid(r)
    assert r["scenario"]["load"]["standardized"]["concurrency"] == 3
    assert r["run"]["time"]["duration"].startswith("PT")


def test_an_empty_run_still_validates():
    minimal = {"run": {}, "summary": {"sent": 0, "latency": {}}, "environment": {}}
    (r,) = reports(minimal)
    valid(r)
