"""The results document's one typed schema (llm_locust/schema.py): the published JSON
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

from llm_locust import schema
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.records import RequestRecord
from llm_locust.report.results import build_results
from llm_locust.schema import Figures, LadderDoc, ResultsDoc, Worker

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
    return build_results(total, {1: step}, _run_facts())


def _run_facts(s=None) -> dict:
    """`run` as runtime.plugin _run_facts and report.outcome write it (the end's facts added)."""
    from llm_locust.settings import derive

    s = s or derive.resolve(None, derive.cli_values(derive.run_parser().parse_known_args([])[0]))
    return {
        "host": "http://127.0.0.1:1",
        "settings": s.public(),
        "runner": "LocalRunner",
        "command": ["llm-locust", "run"],
        "seed": 1,
        "load": {"mode": "closed", "users": 2, "spawn_rate": 2.0, "run_time": 3, "shape": None},
        "name": "",
        "cache_reset": None,
        "started_at": 1_800_000_090.0,
        "ended_at": 1_800_000_110.0,
        "server": {"model": "m"},
        "started_at_utc": "2027-01-15T08:01:30+00:00",
        "workers_why": None,
        "interrupted": None,
        "stopped_early": None,
    }


def test_the_published_json_schema_is_what_the_types_generate():
    published = schema.SCHEMA_FILE.read_text()
    assert published == schema.schema_text(), "docs/results.schema.json is stale: run python -m llm_locust.schema"
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


# the rows that hold the same figures: the summary, a ladder step, the knee, an efficiency row, a
# KV-pressure row
FIGURE_ROWS = ("Figures", "LadderStep", "KneePoint", "EfficiencyStep", "KvPressureRow")


def _declared() -> dict[str, tuple[list[str], set[str]]]:
    """{class: (its bases, the keys its own body declares)} of llm_locust/schema.py, from its source
    (a TypedDict's __annotations__ holds its bases' keys too)."""
    import ast

    tree = ast.parse(Path(schema.__file__).read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = [b.id for b in node.bases if isinstance(b, ast.Name) and b.id != "TypedDict"]
            own = {a.target.id for a in node.body if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)}
            out[node.name] = (bases, own)
    return out


def test_each_figure_the_rows_share_is_declared_once():
    """A key two figure rows share, with the same type and the same presence, is declared in one
    class that both derive from: renamed there, it is renamed in every row (old code: the summary,
    each ladder step, the knee and each efficiency row each declared output_tokens_per_s)."""
    import itertools
    import typing

    declared = _declared()

    def lineage(name: str) -> set[str]:
        bases = declared.get(name, ([], set()))[0]
        return {name}.union(*(lineage(b) for b in bases))

    def shape(typed, key):
        return typing.get_type_hints(typed, include_extras=True)[key], key in typed.__required_keys__

    twice = []
    for a, b in itertools.combinations(FIGURE_ROWS, 2):
        ta, tb = getattr(schema, a), getattr(schema, b)
        for key in set(ta.__annotations__) & set(tb.__annotations__):
            if shape(ta, key) != shape(tb, key):
                continue  # the same name for another shape (the knee's flat latencies): not one figure
            where = sorted(c for c in lineage(a) | lineage(b) if key in declared[c][1])
            if len(where) != 1:
                twice.append(f"{key} ({a}, {b}): declared in {', '.join(where)}")
    assert not twice, twice
    assert "output_tokens_per_s" in declared["Throughput"][1]
    assert all("Throughput" in lineage(r) for r in ("Figures", "LadderStep", "KneePoint", "EfficiencyStep"))


def _resolves(typed, path: tuple[str, ...]) -> bool:
    """Whether `path` names a key at each level of the TypedDict `typed` (a `dict[str, X]` level
    takes any key), as a reader that walks a document by strings (`("summary", "ok")`) reads it."""
    import types
    import typing

    t = typed
    for k in path:
        while typing.get_origin(t) in (typing.Union, types.UnionType, typing.NotRequired, typing.Required):
            t = next(a for a in typing.get_args(t) if a is not type(None))
        if typing.get_origin(t) is dict:
            t = typing.get_args(t)[1]
        elif isinstance(t, type) and hasattr(t, "__required_keys__") and k in typing.get_type_hints(t):
            t = typing.get_type_hints(t)[k]
        else:
            return False
    return True


def test_the_figure_names_readers_list_as_strings_are_keys_of_the_schema():
    """A reader that lists figures by name (a tuple of names, a path into the document) escapes
    mypy: renaming a figure in the schema fails here instead (each list checked against the type
    its names are read from)."""
    from llm_locust.analysis import repeats
    from llm_locust.metrics import blocks
    from llm_locust.report import figure_checks, mlflow_log, precision

    rows = set(schema.Figures.__annotations__) | set(schema.LadderStep.__annotations__)
    lists = {
        "mlflow_log.HEADLINE": (mlflow_log.HEADLINE, rows),
        "mlflow_log.STEP_FIGURES": (mlflow_log.STEP_FIGURES, set(schema.LadderStep.__annotations__)),
        "figure_checks.OUR_FIGURES": (figure_checks.OUR_FIGURES, rows),
        "blocks.RATES": (tuple(blocks.RATES), set(schema.WindowFigures.__annotations__)),
        "precision.RATE_LABELS": (tuple(n for n, _, _ in precision.RATE_LABELS), set(schema.Figures.__annotations__)),
    }
    unknown = {where: sorted(set(names) - keys) for where, (names, keys) in lists.items() if set(names) - keys}
    assert not unknown, unknown
    assert set(blocks.RATES) == set(schema.SteadyRates.__annotations__)  # analysis.steady writes every one
    # compare's criteria: a rate or a verdict's figure by its results name, a load by its path
    from llm_locust.report.compare.metric_table import METRICS

    named = set(schema.Figures.__annotations__) | set(schema.VerdictRow.__annotations__)
    fields = [m.field for m in METRICS.values() if not m.field.startswith("latency.")]
    assert "output_tokens_per_s" in fields
    wrong = [f for f in fields if f not in named and not _resolves(ResultsDoc, tuple(f.split(".")))]
    assert not wrong, wrong
    paths = [path for _, path, _ in repeats.HEADLINE]
    assert ("summary", "output_tokens_per_s") in paths
    assert not [p for p in paths if not _resolves(ResultsDoc, p)], [p for p in paths if not _resolves(ResultsDoc, p)]
    assert not _resolves(ResultsDoc, ("summary", "output_tokens_per_ss"))  # the walk can fail


def _ladder_doc() -> dict:
    """A ladder section as the run writes it, from the producers' own code (runtime.shapes report:
    the ladder's to_dict, each window's, each StepResult's, the verdict, a burst's recovery, an SLA
    search's conclusion), every optional part present."""
    from llm_locust.analysis import sla
    from llm_locust.analysis.saturation import analyse, point
    from llm_locust.analysis.stability import burst_recovery
    from llm_locust.analysis.steps import step_result
    from llm_locust.runtime.shapes import StepWindow
    from llm_locust.settings.ladder_spec import Burst, Ladder, Search, Stable

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
    """A worker's row as runtime.plugin writes it, its clock as loop.clock gives it."""
    from llm_locust.loop.clock import Estimate

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


def _settings(*argv: str):
    from llm_locust.settings import derive

    return derive.resolve(None, derive.cli_values(derive.run_parser().parse_known_args(list(argv))[0]))


def _series(url: str, wall: float, figures) -> object:
    """A /metrics series read every second from wall - 10 to wall + 10: figures(k) the k-th read's."""
    from llm_locust.analysis.server_metrics import Sample, ServerSeries

    return ServerSeries(url, "vllm", [Sample(wall - 10 + k, figures(k)) for k in range(21)], info={"i": [{"a": "b"}]})


def _ended_run():
    """The end of a ladder run as report.outcome builds it, in process: the ladder's report (its
    producers' code), the server's /metrics (every quantity of the table, counters and gauges) and
    the GPU sidecar's, GPUs and a price, the stability plans (KV pressure, the burst, the overlong
    mix, a soak), endpoints, sessions and an interruption: every section and optional part written."""
    from llm_locust.analysis.server_metrics import COUNTERS, quantities
    from llm_locust.report import outcome
    from llm_locust.settings import derive

    s = _settings(
        "--ladder", "concurrency:1,2,4", "--kv-pressure", "--soak-window", "1s", "--gpus", "2",
        "--gpu-hour-price", "3", "--overlong-share", "0.1", "--overlong-tokens", "5000",
    )  # fmt: skip
    ladder = _ladder_doc()
    wall = 1_800_000_100.0
    total = Aggregate()
    for i in range(6):
        total.add(_record(i))
    server = _series(
        "http://h", wall, lambda k: {q: (10.0 * k if q in COUNTERS else 0.5) for q in quantities() if "gpu" not in q}
    )
    gpu = _series(
        "http://g", wall, lambda k: {q: (5.0 * k if q in COUNTERS else 2.0**34) for q in quantities() if "gpu" in q}
    )
    e = outcome.Ended(
        settings=s,
        total=total,
        steps={1: total},
        started_at=wall - 10,
        ended_at=wall + 10,
        ladder=ladder,
        windows=ladder["windows"],
        servers={"http://h": server, "http://h2": server},
        gpu=gpu,
        status={"endpoints": {"http://h": {"sent": 6, "in_flight": 0, "down_on": 0, "processes": 1, "down": False}},
                "sessions": {"started": 2, "done": 1, "broken": 1}},
        run=_run_facts(s),
        server_info={"model": "m"},
        plan=derive.to_plan(s),
        interruption=outcome.Interruption("SIGINT", wall + 9, "step 3 of 3"),
    )  # fmt: skip
    return outcome.build(e).results


# {section: its TypedDict} and, for each, its nested parts: (a path into the section, the type)
SECTION_PARTS = {
    "run": [((), "Run"), (("settings",), "RunSettings"), (("settings", "ladder"), "RunSettingsLadder"),
            (("load",), "RunLoad"), (("interrupted",), "Interrupted"), (("endpoints", "http://h"), "EndpointStatus"),
            (("sessions",), "Sessions")],
    "server_metrics": [((), "MetricsWindows"), (("source",), "SeriesSource"), (("run",), "MetricsWindow"),
                       (("steps", 0), "StepMetricsWindow")],
    "gpu_metrics": [((), "MetricsWindows"), (("run",), "MetricsWindow"), (("steps", 0), "StepMetricsWindow")],
    "efficiency": [((), "Efficiency"), (("steps", 0), "EfficiencyStep")],
    "verdicts": [((), "Verdicts"), (("gpus",), "GpuCounts"), (("price",), "GpuPrice"), (("steps", 0), "VerdictRow"),
                 (("knee",), "VerdictRow"), (("run",), "VerdictRow")],
    "stability": [((), "Stability"), (("kv_pressure",), "KvPressure"), (("kv_pressure", "rows", 0), "KvPressureRow"),
                  (("burst",), "BurstRecovery"), (("overlong",), "OverlongMix"),
                  (("overlong", "others"), "OverlongOthers"),
                  (("soak",), "Soak"), (("soak", "rows", 0), "SoakRow"), (("soak", "ttft_drift"), "Drift")],
}  # fmt: skip


def _part(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _strictly(part: dict, typed) -> None:
    """pydantic passes over a key its type lacks: this does not."""
    assert set(part) <= set(typed.__annotations__), (typed.__name__, set(part) - set(typed.__annotations__))


def test_the_sections_the_end_of_a_run_writes_conform_to_their_types():
    """run, the server's and the GPU's metrics windows, efficiency, verdicts and stability, as
    report.outcome writes them from a ladder run's parts: strictly valid, and no key written that
    its TypedDict lacks (each nested part too)."""
    doc = _ended_run()
    TypeAdapter(ResultsDoc).validate_python(doc, strict=True)
    for section, parts in SECTION_PARTS.items():
        for path, name in parts:
            _strictly(_part(doc[section], path), getattr(schema, name))
    assert doc["verdicts"]["knee"] is not None and doc["stability"]["kv_pressure"]["first_step"] == 1
    assert set(doc["server_metrics_by_endpoint"]) == {"http://h", "http://h2"}
    window = doc["server_metrics"]["run"]
    assert "preemptions_total" in window and "prefix_cache_hit_ratio" in window, sorted(window)
    wrong = _ended_run()
    wrong["verdicts"]["steps"][0]["pareto"] = "yes"
    with pytest.raises(ValidationError, match=r"verdicts\.steps\.0\.pareto"):
        TypeAdapter(ResultsDoc).validate_python(wrong, strict=True)


def test_a_metrics_window_names_every_quantity_the_series_read():
    """MetricsWindow holds each quantity of server_metrics' tables and what a window derives: a
    quantity added to the tables without the type fails here."""
    from llm_locust.analysis.server_metrics import DERIVED, quantities

    keys = set(schema.MetricsWindow.__annotations__)
    assert set(quantities()) | set(DERIVED) <= keys, (set(quantities()) | set(DERIVED)) - keys


def test_the_repeats_section_conforms_to_its_type():
    """`repeats` as analysis.repeats combine writes it from two repetitions."""
    from llm_locust.analysis.repeats import combine

    docs = [_doc(), _doc()]
    docs[1]["summary"]["output_tokens_per_s"] *= 1.1
    rep = combine(docs, ["r.rep1.json", "r.rep2.json"], "no reset")["repeats"]
    TypeAdapter(schema.Repeats).validate_python(rep, strict=True)
    _strictly(rep, schema.Repeats)
    assert rep["figures"], rep
    for f in rep["figures"].values():
        _strictly(f, schema.RepeatFigure)


def _plan_paths(typed, prefix=()):
    """The plan paths a Plan TypedDict holds: its keys, nested through its groups' TypedDicts."""
    import typing

    out = set()
    for k, t in typing.get_type_hints(typed).items():
        if isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__annotations__"):
            out |= _plan_paths(t, (*prefix, k))
        else:
            out.add(".".join((*prefix, k)))
    return out


def test_the_plan_types_hold_every_plan_key_and_no_other():
    """Plan's keys are the options' plan paths (settings.model), the ladder's written form aside:
    an option added to plans without its type fails here. An effective plan with every group
    present is strictly valid."""
    from llm_locust.settings import derive
    from llm_locust.settings.model import options

    paths = {o.plan for _, o in options().values() if o.plan} - {"ladder"}
    typed = _plan_paths(schema.Plan)
    written = {"ladder.kind", "ladder.steps", "ladder.search", "ladder.burst"}  # settings.derive _ladder_plan
    assert typed - written == paths, (sorted(paths - typed), sorted(typed - written - paths))
    s = _settings(
        "--ladder", "rate:1,2", "--synthetic", "requests=5,input=16,output=8", "--slo", "ttft=500ms,tpot=4000s",
        "--gpu-prices", "H200=3.5", "--gpus", "2", "--step-duration", "4000s",
    )  # fmt: skip
    plan = derive.to_plan(s)
    TypeAdapter(schema.Plan).validate_python(plan, strict=True)
    for group in ("ladder", "workload", "cost", "stability", "timeouts"):
        assert group in plan, sorted(plan)


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
from llm_locust.schema import ResultsDoc


def tokens(doc: ResultsDoc) -> int:
    return doc["summary"]["{summary}"]


def stop_reason(doc: ResultsDoc) -> str | None:
    return doc["ladder"]["{ladder}"]


def offered(doc: ResultsDoc) -> float:
    return doc["ladder"]["steps"][0]["{step}"]


def joined(doc: ResultsDoc) -> float:
    return doc["workers"][0]["{worker}"]


def command(doc: ResultsDoc) -> list[str]:
    return doc["run"]["{run}"]


def description(doc: ResultsDoc) -> str | None:
    plan = doc.get("plan")
    return plan["{plan}"] if plan else None


def samples(doc: ResultsDoc) -> int:
    return doc["server_metrics"]["run"]["{window}"]


def saturated(doc: ResultsDoc) -> float | None:
    return doc["efficiency"]["{efficiency}"]


def notes(doc: ResultsDoc) -> list[str]:
    return doc["verdicts"]["{verdicts}"]


def soak_passed(doc: ResultsDoc) -> bool:
    return doc["stability"]["soak"]["{stability}"]


def repetitions(doc: ResultsDoc) -> int:
    return doc["repeats"]["{repeats}"]
"""
# {placeholder: (the key, a misspelling of it, the TypedDict that must name it)}
FIELDS = {
    "summary": ("tokens_out", "tokens_outt", "Figures"),
    "ladder": ("stop_reason", "stop_reasn", "LadderDoc"),
    "step": ("offered", "offerd", "LadderStep"),
    "worker": ("joined_at", "joined_att", "Worker"),
    "run": ("command", "comand", "Run"),
    "plan": ("description", "descripton", "Plan"),
    "window": ("samples", "sampels", "MetricsWindow"),
    "efficiency": ("max_load_before_kv_saturation", "max_load_before_kv_saturaton", "Efficiency"),
    "verdicts": ("notes", "note", "Verdicts"),
    "stability": ("passed", "pased", "Soak"),
    "repeats": ("count", "cnt", "Repeats"),
}


# slow: runs mypy twice over the schema module (several seconds)
@pytest.mark.slow
def test_a_renamed_results_field_fails_the_type_check(tmp_path):
    """A reader of the summary, of the ladder (its own keys and a step's), of a worker's row, of
    run, plan, a metrics window, efficiency, verdicts, stability and repeats: each key misspelt
    fails mypy, which names it (one reader, so mypy runs twice, not per key)."""

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
