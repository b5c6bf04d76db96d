"""Reading a results file of any tool compare knows: ours (read_results), or another tool's
(AIPerf, GuideLLM, vLLM bench serve), told apart by content, never by file name; a file of none of
these is one clear error naming it. Another tool's run is a ForeignRun: a Run whose facts come
from its reader (foreign.Foreign), so the comparison treats it as any other run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import orjson

import llm_locust.report.compare.aiperf_results as aiperf
import llm_locust.report.compare.guidellm_results as guidellm
import llm_locust.report.compare.vllm_bench as vllm_bench
from llm_locust.report.compare.errors import CompareError
from llm_locust.report.compare.foreign import Foreign
from llm_locust.report.compare.runs import Run, _unique_labels
from llm_locust.report.figure_checks import check_figures
from llm_locust.report.results import SCHEMA, read_results
from llm_locust.schema import ResultsDoc, Verdicts
from llm_locust.workload.paths import InputError, read_regular

READERS = (aiperf, guidellm, vllm_bench)
MAX_INPUT_BYTES = 32 << 20  # one input file; parsed, ~8 times its size in memory (a 38 MiB file: 290 MiB)
KNOWN = (
    "an llm-locust results file, AIPerf's profile_export_aiperf.json, GuideLLM's benchmarks JSON "
    "or vLLM bench serve's --save-result JSON"
)


@dataclass
class ForeignRun(Run):
    """Another tool's run: its figures in our terms (doc["summary"]), its facts from the reader."""

    foreign: Foreign

    @property
    def tool(self) -> str:
        return f"{self.foreign.tool} {self.foreign.version}".strip()

    @property
    def verdicts(self) -> Verdicts | None:
        return None

    @property
    def server(self) -> str:
        return f"not recorded ({self.foreign.server})" if self.foreign.server else "not recorded"

    @property
    def server_identity(self) -> tuple[Any, ...]:
        return ()  # unknown: servers_line leaves it out

    @property
    def model(self) -> str:
        return self.foreign.model

    @property
    def trace(self) -> str:
        return f"{self.foreign.prompts} (no trace file)"

    @property
    def load(self) -> str:
        return self.foreign.load

    @property
    def timing(self) -> str:
        return self.foreign.timing

    @property
    def output_length(self) -> str:
        out = self.foreign.output_len
        return f"max_tokens {out:g}" if out is not None else "not recorded"

    @property
    def force_length(self) -> str:
        return {True: "forced", False: "not forced", None: "forced or not: not recorded"}[self.foreign.forced]

    @property
    def api(self) -> str:
        return self.foreign.api

    @property
    def lengths(self) -> dict[str, Any]:
        f = self.foreign
        return {"input tokens": f.input_len, "output tokens": f.output_len, "forced": f.forced}

    def flag_items(self) -> list[tuple[int | None, str]]:
        return []


def _doc(f: Foreign, path: str) -> ResultsDoc:
    """A results-shaped document, so that what reads a run's doc (the matrix, the gates) reads this one.
    Partial (no schema, version, series, workers...): Run reads the parts a ForeignRun shares with it
    with .get / _get, never by a key this lacks."""
    doc = {
        "summary": f.summary,
        "steps": [],
        "validity": {"flags": []},
        "environment": {"trace": {}, "gpus": []},
        "run": {"settings": {"model": f.model, "api": f.api, "seed": f.seed, "slos": {}}, "started_at_utc": f.started},
        "_path": path,
    }
    return cast(ResultsDoc, doc)


def read_input(path: str, what: str = "a results file") -> bytes:
    """The bytes of one input file, or CompareError naming it (workload/paths.py `read_regular`:
    a pipe, a device or a folder, or a file over MAX_INPUT_BYTES, whose parse would take ~8 times
    its size in memory)."""
    try:
        return read_regular(path, MAX_INPUT_BYTES, what)
    except InputError as e:
        hint = ""
        if "MiB, over the" in str(e):  # a run's figures take far less
            hint = (
                " (a file this big holds every request's detail, e.g. vLLM's --save-detailed; save the run without it)"
            )
        raise CompareError(f"{e}{hint}") from None


def _json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None  # read_results says why


def _ours(label: str, path: str) -> Run:
    """Our results file: read_results' checks and messages, then its figures' (report/figure_checks.py)."""
    return Run(label, path, read_results(path))  # its figures checked there (report/figure_checks.py)


def read_run(label: str, path: str) -> Run:
    """One file as a run: ours through read_results (its messages as they are), another tool's
    through the reader its content matches (each reader's required keys: one reader, else an
    error naming them). ResultsError / CompareError name the file; so does a negative or
    non-finite figure (report/figure_checks.py)."""
    doc = _json(read_input(path))
    if doc is None or (isinstance(doc, dict) and doc.get("schema") == SCHEMA):
        del doc  # read again, checked, by read_results: one parsed copy at a time
        return _ours(label, path)
    readers = [r for r in READERS if r.matches(doc)]
    if not readers:
        found = f"keys {', '.join(list(doc)[:6])}" if isinstance(doc, dict) and doc else f"a JSON {type(doc).__name__}"
        raise CompareError(f"{path}: not a results file compare reads ({found}); expected {KNOWN}")
    if len(readers) > 1:
        names = " and ".join(_name(r) for r in readers)
        raise CompareError(f"{path}: has the required keys of {names} output at once: compare cannot tell which it is")
    reader = readers[0]
    check_figures(path, reader.fields(doc), error=CompareError)
    try:
        f = reader.read(doc)
    except CompareError as e:
        raise CompareError(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise CompareError(f"{path}: looks like {_name(reader)} output but cannot be read: {e!r}") from None
    return ForeignRun(label, path, _doc(f, path), f)


def _name(reader: Any) -> str:
    return str(reader.__name__.rsplit(".", 1)[-1])


def load_runs(paths: list[str], labels: list[str] | tuple[str, ...] = ()) -> list[Run]:
    """Each file as a run (read_run: ours through read_results, its ResultsError as it is;
    another tool's by its content), labelled."""
    if not paths:
        raise CompareError("no results files given")
    labs = _unique_labels([str(p) for p in paths], list(labels))
    return [read_run(lab, str(p)) for lab, p in zip(labs, paths, strict=True)]
