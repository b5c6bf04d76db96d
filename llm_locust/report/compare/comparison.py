"""The whole comparison: the runs, their comparability issues and the decision matrix (compare)."""

from __future__ import annotations

from dataclasses import dataclass

from llm_locust.report.compare.comparability import Issue, check_comparable
from llm_locust.report.compare.matrix import Matrix, score
from llm_locust.report.compare.runs import Run
from llm_locust.report.compare.tools import load_runs
from llm_locust.report.compare.weights import default_criteria, load_weights


@dataclass
class Comparison:
    runs: list[Run]
    issues: list[Issue]
    matrix: Matrix
    weights_source: str  # the weights file, or "default criteria"

    @property
    def comparable(self) -> bool:
        return not any(i.blocking for i in self.issues)


def compare(paths: list[str], labels: list[str] | tuple[str, ...] = (), weights: str | None = None) -> Comparison:
    criteria = load_weights(weights) if weights else None  # a bad weights file is reported before the runs are read
    runs = load_runs(paths, labels)
    if criteria is None:
        criteria = default_criteria(runs)
    return Comparison(
        runs, check_comparable(runs), score(runs, criteria), str(weights) if weights else "default criteria"
    )
