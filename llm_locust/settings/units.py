"""Reading values people write: durations with units, did-you-mean, YAML with the line of every key.

Shared by the settings model, the ladder syntax and compare's weights files. Pure: no Locust."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from llm_locust.settings.limits import MAX_SECONDS
from llm_locust.workload.paths import input_problem
from llm_locust.workload.values import parse_seconds


class PlanError(ValueError):
    """A plan or ladder that cannot run; `problems` lists each one ("file:line: where: what")."""

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        if source in ("command line", "options"):
            head = f"invalid {source}"
        else:
            head = f"invalid test plan {source}" if source else "invalid test plan"
        if len(self.problems) == 1 and not source:
            super().__init__(self.problems[0])
        else:
            super().__init__(head + ":\n" + "\n".join(f"  {p}" for p in self.problems))


_BARE_RE = re.compile(r"^\s*[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?\s*$")


def is_bare(value: Any) -> bool:
    """A number written without a unit (5, 2.5, "500"): read as seconds."""
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or (isinstance(value, str) and bool(_BARE_RE.match(value)))


def bare_seconds(value: Any, below: float | None, label: str = "", units: tuple[str, ...] = ("ms", "s")) -> float:
    """parse_seconds with the rules every duration follows: a bare number is seconds, and one of
    `below` or more is refused, as it is almost surely milliseconds meant (`--think-time 500`), with
    the "write the unit" message. A value with its unit is taken as written, up to
    limits.MAX_SECONDS (30 days): more is a typo, not a run (`-t 1e12s`). A trace-time window
    (bare below a year: a long trace's offset, played faster by --speed) is not wall time: unbounded."""
    seconds = parse_seconds(value)
    if below is None or below <= MAX_SECONDS:
        check_bound(seconds, label)
    if below is not None and is_bare(value) and seconds >= below:
        n = _number(seconds)
        raise ValueError(
            f"{label or n} would be {n} seconds: write the unit ({' or '.join(n + u for u in units)}); "
            f"a bare number is seconds below {_number(below)}"
        )
    return seconds


def check_bound(seconds: float, label: str = "") -> float:
    """ValueError for a duration over limits.MAX_SECONDS, saying the bound; else the seconds."""
    if seconds > MAX_SECONDS:
        what = f"{label} is " if label else ""
        raise ValueError(
            f"{what}{_number(seconds)} seconds, more than {_number(MAX_SECONDS)} s ({MAX_SECONDS / 86400:g} days), "
            "the longest duration a run takes"
        )
    return seconds


_RUN_TIME_RE = re.compile(r"^\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s?)?\s*$")


def run_time_seconds(text: str) -> float | None:
    """Locust's run time (30s, 5m, 1h30m, a bare number of seconds) in seconds; None if it is not one."""
    m = _RUN_TIME_RE.match(text)
    if m is None:
        return None
    h, mi, s = (int(x) if x else 0 for x in m.groups())
    return float(h * 3600 + mi * 60 + s)


def _number(v: float) -> str:
    """31536000, not 3.1536e+07; 0.5 as 0.5."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e18 else f"{v:g}"


def _typename(v: Any) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(v), type(v).__name__)


def _line_map(node, path: tuple, lines: dict[tuple, int], problems: list[str], source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                dotted = ".".join(str(x) for x in path + (key,))
                problems.append(f"{source}:{line}: {dotted}: duplicate key (first at line {seen[key]})")
            seen[key] = line
            lines[path + (key,)] = line
            _line_map(value_node, path + (key,), lines, problems, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            _line_map(item, path + (i,), lines, problems, source)


def read_yaml(path: str | Path, what: str = "plan") -> tuple[Any, dict[tuple, int]]:
    """(data, the line of each key path) of one YAML file; PlanError with file:line for a file
    that cannot be read, is not YAML or repeats a key. Plans and compare's weights files use it."""
    source = str(path)
    why = input_problem(path)  # a pipe would be read forever, a device until memory runs out
    if why is not None:
        raise PlanError([f"{source}: cannot read the {what}: {why}"], source)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PlanError([f"{source}: cannot read the {what}: {e.strerror or e}"], source) from None
    lines: dict[tuple, int] = {}
    dup: list[str] = []
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _line_map(node, (), lines, dup, source)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e)
        raise PlanError([f"{where}: not valid YAML: {problem}"], source) from None
    if dup:
        raise PlanError(dup, source)
    return data, lines
