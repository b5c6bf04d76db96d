"""CI gates over a comparison: each criterion of each run as a test case that passes or fails.

- pass lines (`--fail-on pass-lines`): a run fails a criterion whose pass line it misses;
- stability (`--fail-on stability`): a run fails each stability verdict (burst, overlong mix, KV
  pressure, soak; docs/verdicts.md) it holds that did not pass;
- regression (`--fail-on regression`): the first results file is the baseline; a later run fails
  a criterion whose figure is worse than the baseline's by more than the tolerance (a fraction
  of the baseline's value, in the criterion's direction; `--tolerance 5%`), or has none. When
  both runs carry `repeats` (`llm-locust run --repeat N`), a whole-run figure fails only when it
  is worse, beyond noise (Welch's t-test at 95%, analysis/repeats.py) and by more than the
  tolerance: a difference within noise passes, whatever its size. From one run each, a whole-run
  figure with its 95% interval in both (results `intervals`) fails the same way: only when it is
  worse, significant (the interval of the difference, sqrt(h_a^2 + h_b^2), excludes 0) and
  larger than the tolerance.

`junit_xml` writes the cases as JUnit XML (a test suite per run, a test case per criterion), the
format CI systems show test by test.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from llm_locust.analysis.repeats import HEADLINE, welch
from llm_locust.report.compare.comparison import Comparison
from llm_locust.report.compare.format import _fmt_pass, _fmt_value
from llm_locust.report.compare.matrix import differs, noise_word
from llm_locust.report.compare.metric_table import METRICS

GATES = ("pass-lines", "regression", "stability")


@dataclass(frozen=True)
class Case:
    suite: str  # the run's label
    name: str  # "pass line: ttft_p99" / "regression: ttft_p99"
    passed: bool
    message: str
    # False: the gate could not judge it (a figure with too few samples for an interval): neither
    # passed nor failed, said as NOT JUDGED and written to JUnit as skipped
    judged: bool = True


def pass_line_cases(c: Comparison) -> list[Case]:
    out = []
    for i, crit in enumerate(c.matrix.criteria):
        if crit.pass_line is None:
            continue
        for j, run in enumerate(c.runs):
            cell = c.matrix.cells[i][j]
            need = _fmt_pass(crit.metric, crit.pass_line, run)
            got = "no value" if cell.value is None else _fmt_value(run, crit.metric, cell.value, cell.bound)
            out.append(
                Case(run.label, f"pass line: {crit.name}", bool(cell.passed), f"{crit.name} {got}, needs {need}")
            )
    return out


def regression_cases(c: Comparison, tolerance: float) -> list[Case]:
    """Every run after the first against the first, criterion by criterion."""
    out: list[Case] = []
    if len(c.runs) < 2:
        return out
    base_run = c.runs[0]
    for i, crit in enumerate(c.matrix.criteria):
        base = c.matrix.cells[i][0].value
        if base is None:
            continue  # nothing to regress from
        higher = crit.metric.higher_is_better
        limit = base * (1 - tolerance) if higher else base * (1 + tolerance)
        for j in range(1, len(c.runs)):
            run = c.runs[j]
            v = c.matrix.cells[i][j].value
            shown_base = _fmt_value(base_run, crit.metric, base)
            if v is None:
                out.append(
                    Case(run.label, f"regression: {crit.name}", False, f"{crit.name}: no value (baseline {shown_base})")
                )
                continue
            noisy = _interval_case(c, i, j, tolerance)
            if noisy is None:
                noisy = one_run_case(c, i, j, tolerance)
            if noisy is not None:
                out.append(noisy)
                continue
            ok = v >= limit if higher else v <= limit
            change = (v - base) / base if base else 0.0
            out.append(
                Case(
                    run.label,
                    f"regression: {crit.name}",
                    ok,
                    f"{crit.name} {_fmt_value(run, crit.metric, v)} against the baseline's {shown_base} "
                    f"({change:+.1%}; allowed {'-' if higher else '+'}{tolerance:.1%})",
                )
            )
    return out


def one_run_case(c: Comparison, i: int, j: int, tolerance: float) -> Case | None:
    """One run each, both figures with their 95% interval (results `intervals`): the figure
    regresses when it is worse, the difference is significant (its interval, the half widths
    added in quadrature, excludes 0; matrix.differs) and the change is larger than the tolerance.
    None when either figure has no interval (the point estimates decide, as before)."""
    crit = c.matrix.criteria[i]
    a, b = c.matrix.cells[i][0], c.matrix.cells[i][j]
    if a.value is None or b.value is None or a.half is None or b.half is None:
        return None
    higher = crit.metric.higher_is_better
    diff = b.value - a.value
    worse = diff < 0 if higher else diff > 0
    change = diff / a.value if a.value else (0.0 if not diff else float("inf"))
    significant = differs(a.value, a.half, b.value, b.half)
    ok = not (worse and significant and abs(change) > tolerance)
    base_run, run = c.runs[0], c.runs[j]
    judged = math.isfinite(a.half) and math.isfinite(b.half)  # too few samples: no difference can be told

    def shown(r, cell) -> str:
        if not math.isfinite(cell.half):
            return f"{_fmt_value(r, crit.metric, cell.value)} (too few samples for an interval)"
        return f"{_fmt_value(r, crit.metric, cell.value)} +-{_fmt_value(r, crit.metric, cell.half)}"

    if not judged:
        return Case(
            run.label,
            f"regression: {crit.name}",
            True,
            f"{crit.name} {shown(run, b)} against the baseline's {shown(base_run, a)} ({change:+.1%}): "
            "not judged: too few samples for a 95% interval, so no difference can be told from noise "
            "(run longer, or --precision)",
            judged=False,
        )
    return Case(
        run.label,
        f"regression: {crit.name}",
        ok,
        f"{crit.name} {shown(run, b)} against the baseline's {shown(base_run, a)} ({change:+.1%}, "
        f"{'worse' if worse else 'not worse'}, {noise_word(a.half, b.half, not significant)}: 95% interval "
        f"of the difference, one run each; allowed {'-' if higher else '+'}{tolerance:.1%} when significant)",
    )


def repeated_figure(run, name: str) -> dict | None:
    """A whole-run figure in a run's `repeats` section (with an interval), or None."""
    f = ((run.doc.get("repeats") or {}).get("figures") or {}).get(name)
    return f if isinstance(f, dict) and f.get("sd") is not None and (f.get("n") or 0) >= 2 else None


def _interval_case(c: Comparison, i: int, j: int, tolerance: float) -> Case | None:
    crit = c.matrix.criteria[i]
    if crit.scope not in ("summary", "run"):
        return None
    return interval_case(c.runs[0], c.runs[j], crit.metric, tolerance)


def interval_case(base_run, run, metric, tolerance: float) -> Case | None:
    """Both runs repeated: the figure regresses when it is worse, the difference is beyond noise
    (Welch's t-test at 95%) and the change is larger than the tolerance. None when either run
    has no interval for it."""
    a, b = repeated_figure(base_run, metric.name), repeated_figure(run, metric.name)
    if a is None or b is None:
        return None
    higher = metric.higher_is_better
    w = welch(a, b)
    diff = b["mean"] - a["mean"]
    worse = diff < 0 if higher else diff > 0
    change = diff / a["mean"] if a["mean"] else (0.0 if not diff else float("inf"))
    ok = not (worse and w["differs"] and abs(change) > tolerance)

    def shown(r, f):
        return f"{_fmt_value(r, metric, f['mean'])} +-{_fmt_value(r, metric, f['half_width'])} (n={f['n']})"

    noise = "beyond noise" if w["differs"] else "within noise"
    return Case(
        run.label,
        f"regression: {metric.name}",
        ok,
        f"{metric.name} {shown(run, b)} against the baseline's {shown(base_run, a)} ({change:+.1%}, "
        f"{'worse' if worse else 'not worse'}, {noise}: Welch t={w['t']:.2f}, {w['dof']:.1f} dof, "
        f"critical {w['critical']:.3f}; allowed {'-' if higher else '+'}{tolerance:.1%} beyond noise)",
    )


def headline_cases(c: Comparison, tolerance: float, done: set[tuple[str, str]]) -> list[Case]:
    """Repeated runs: every headline figure not already a criterion, as an interval case."""
    out = []
    for j in range(1, len(c.runs)):
        for name, _, _ in HEADLINE:
            if (c.runs[j].label, f"regression: {name}") in done or name not in METRICS:
                continue
            k = interval_case(c.runs[0], c.runs[j], METRICS[name], tolerance)
            if k is not None:
                out.append(k)
    return out


def stability_cases(c: Comparison) -> list[Case]:
    """Each run's stability verdicts (results["stability"]) as cases."""
    out = []
    for run in c.runs:
        st = run.doc.get("stability")
        for plan, v in st.items() if isinstance(st, dict) else ():
            if isinstance(v, dict) and "passed" in v:
                out.append(Case(run.label, f"stability: {plan}", bool(v["passed"]), f"{plan}: {v.get('reason', '')}"))
    return out


def cases_for(c: Comparison, gates: list[str], tolerance: float) -> list[Case]:
    out: list[Case] = []
    if "stability" in gates:
        out += stability_cases(c)
    if "pass-lines" in gates:
        out += pass_line_cases(c)
    if "regression" in gates:
        reg = regression_cases(c, tolerance)
        out += reg + headline_cases(c, tolerance, {(k.suite, k.name) for k in reg})
    return out


def junit_xml(cases: list[Case]) -> str:
    root = ET.Element(
        "testsuites", name="llm-locust compare", tests=str(len(cases)), failures=str(sum(not k.passed for k in cases))
    )
    if any(not k.judged for k in cases):
        root.set("skipped", str(sum(not k.judged for k in cases)))
    suites: dict[str, ET.Element] = {}
    for k in cases:
        suite = suites.get(k.suite)
        if suite is None:
            suite = suites[k.suite] = ET.SubElement(root, "testsuite", name=k.suite, tests="0", failures="0")
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
        case = ET.SubElement(suite, "testcase", classname=k.suite, name=k.name)
        if not k.judged:
            suite.set("skipped", str(int(suite.get("skipped", "0")) + 1))
            ET.SubElement(case, "skipped", message=k.message).text = k.message
        elif k.passed:
            ET.SubElement(case, "system-out").text = k.message
        else:
            suite.set("failures", str(int(suite.get("failures", "0")) + 1))
            ET.SubElement(case, "failure", message=k.message).text = k.message
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
