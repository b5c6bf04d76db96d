"""Runs side by side and a weighted decision matrix: `llm-locust compare A.json B.json ...`.

    load_runs(paths, labels=()) -> list[Run]            # ResultsError (read_results' message)
    check_comparable(runs) -> list[Issue]               # what makes runs not comparable, and notes
    load_weights(path) -> list[Criterion]               # WeightsError: file:line, criteria[i], what
    parse_criteria(data, source=...) -> list[Criterion]
    resolve_metric(name) -> (Metric, scope)             # METRICS: the metric table
    score(runs, criteria) -> Matrix                     # normalised scores, pass lines, totals, ranks
    compare(paths, labels, weights) -> Comparison
    render_text / render_markdown / render_html(Comparison) -> str
    main(argv) -> int                                   # 0 done; 2 bad input or --strict refusal

No single score decides: each criterion is a results figure with a direction (lower or higher
is better), a weight and optionally a pass line. Per criterion the best run scores 1.0 and the
others in proportion (higher is better: value / best; lower is better: best / value); the
weighted total is sum(weight x score) / sum(weight). A run that misses a pass line is still
ranked, and marked "fails: ...". docs/compare.md has the metric table and the rules.

The modules, each importing only those above it (format.py names Run for type checking only):

    errors.py          CompareError
    metric_table.py    Metric, METRICS, resolve_metric; PassLine, parse_pass
    format.py          how figures are written (ms, %, loads, a metric's value or pass line)
    runs.py            Run (one results file and its facts)
    foreign.py         Foreign: another tool's run in our terms, its not-comparable marks and caveats
    aiperf_results.py / guidellm_results.py / vllm_bench.py   one reader per tool: matches(doc), read(doc) -> Foreign
    tools.py           ForeignRun, read_run, load_runs: a file of any known tool, told apart by content
    weights.py         Criterion, parse_criteria, load_weights, default_criteria, WeightsError
    comparability.py   Issue, check_comparable
    matrix.py          Cell, read_value, normalise, Matrix, score
    comparison.py      Comparison, compare
    sections.py        Table, sections: what every format renders
    render_text.py / render_markdown.py / render_html.py
    command.py         main(argv)
"""

from llm_locust.report.compare.command import FORMATS, RENDERERS, main
from llm_locust.report.compare.comparability import Issue, check_comparable
from llm_locust.report.compare.comparison import Comparison, compare
from llm_locust.report.compare.errors import CompareError
from llm_locust.report.compare.matrix import Cell, Matrix, normalise, read_value, score
from llm_locust.report.compare.metric_table import (
    LATENCY_METRICS,
    METRICS,
    OPERATORS,
    SCOPE_PREFIXES,
    Metric,
    PassLine,
    known_metrics_text,
    metric_names,
    parse_pass,
    resolve_metric,
)
from llm_locust.report.compare.render import render_html, render_markdown, render_text
from llm_locust.report.compare.runs import DEFAULT_RUN_TIME, DEFAULT_USERS, Run, _unique_labels
from llm_locust.report.compare.sections import Table, sections
from llm_locust.report.compare.tools import ForeignRun, load_runs, read_run
from llm_locust.report.compare.weights import (
    CRITERION_KEYS,
    DEFAULT_CRITERIA,
    SCOPES,
    TOP_KEYS,
    Criterion,
    WeightsError,
    default_criteria,
    load_weights,
    parse_criteria,
)

__all__ = [
    "CRITERION_KEYS",
    "Cell",
    "ForeignRun",
    "CompareError",
    "Comparison",
    "Criterion",
    "DEFAULT_CRITERIA",
    "DEFAULT_RUN_TIME",
    "DEFAULT_USERS",
    "FORMATS",
    "Issue",
    "LATENCY_METRICS",
    "METRICS",
    "Matrix",
    "Metric",
    "OPERATORS",
    "PassLine",
    "RENDERERS",
    "Run",
    "SCOPES",
    "SCOPE_PREFIXES",
    "TOP_KEYS",
    "Table",
    "WeightsError",
    "_unique_labels",  # not public: tests/test_compare.py reaches it here
    "check_comparable",
    "compare",
    "default_criteria",
    "known_metrics_text",
    "load_runs",
    "load_weights",
    "main",
    "metric_names",
    "normalise",
    "parse_criteria",
    "parse_pass",
    "read_run",
    "read_value",
    "render_html",
    "render_markdown",
    "render_text",
    "resolve_metric",
    "score",
    "sections",
]
