"""The command: `llm-locust compare A.json B.json ... [--weights W.yaml] [--format] [-o OUT]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from llm_locust.report.compare.comparison import Comparison, compare
from llm_locust.report.compare.errors import CompareError
from llm_locust.report.compare.gates import GATES, cases_for, junit_xml
from llm_locust.report.compare.render import render_html, render_markdown, render_text
from llm_locust.report.files import check_outputs, write_atomic
from llm_locust.report.results import ResultsError
from llm_locust.report.summary import width
from llm_locust.safe.terminal import terminal_safe

FORMATS = ("text", "markdown", "html")

RENDERERS: dict[str, Callable[[Comparison], str]] = {
    "text": render_text,
    "markdown": render_markdown,
    "html": render_html,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-locust compare",
        description="Line up results files side by side and write a weighted decision matrix "
        "(docs/compare.md). Exit status 0: written (and every gate passed); 1: a gate of --fail-on failed; "
        "2: bad input, or runs not comparable with --strict.",
    )
    p.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS.json",
        help="results files of `llm-locust run --results`, or of another tool (AIPerf's profile_export_aiperf.json, "
        "GuideLLM's benchmarks JSON, vLLM bench serve's --save-result JSON), told apart by content",
    )
    p.add_argument(
        "--weights", metavar="W.yaml", help="criteria: metric, weight, pass line, scope (default: a built-in set)"
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="text (default), markdown or html; with -o, taken from its extension when not given",
    )
    p.add_argument("-o", "--output", metavar="OUT", help="write here (atomically) instead of standard output")
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME",
        help="a name per results file, in order (default: the file name)",
    )
    p.add_argument("--strict", action="store_true", help="refuse (exit 2) when the runs are not comparable")
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="GATE",
        help="exit 1 when a gate fails: pass-lines (a run misses a pass line of the weights), "
        "regression (a later run is worse than the first, the baseline, beyond --tolerance), "
        "stability (a run's burst / overlong / KV-pressure / soak verdict failed); "
        "repeat or comma-separate",
    )
    p.add_argument(
        "--tolerance",
        default="5%",
        metavar="PCT",
        help="regression: how much worse than the baseline a figure may be (default 5%%)",
    )
    p.add_argument("--junit", metavar="FILE", help="write the gates' test cases as JUnit XML")
    p.add_argument(
        "--baseline",
        metavar="BASE.json",
        help="regression mode: compare the runs with this baseline (put first) and fail on regression "
        "(same as giving it first with --fail-on regression); runs of --repeat N are judged beyond their noise",
    )
    return p


def _gates(args: argparse.Namespace) -> tuple[list[str], float]:
    gates = [g.strip() for a in args.fail_on for g in a.split(",") if g.strip()]
    if args.baseline:
        args.results = [args.baseline, *args.results]
        if "regression" not in gates:
            gates.append("regression")
    for g in gates:
        if g not in GATES:
            raise CompareError(f"--fail-on: unknown gate {g!r}; one of {', '.join(GATES)}")
    text = str(args.tolerance).strip()
    try:
        tol = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise CompareError(f"--tolerance: expected a fraction or a percentage (5%), got {text!r}") from None
    if not 0 <= tol < 1:
        raise CompareError(f"--tolerance: must be between 0 and 100%, got {text!r}")
    if "regression" in gates and len(args.results) < 2:
        raise CompareError("--fail-on regression needs a baseline and at least one run to compare with it")
    return gates, tol


def _check_outputs(args: argparse.Namespace) -> None:
    """ValueError before anything is read when -o or --junit is one of the runs compared (or the
    weights), the other output, or not a regular file: the same checks a run makes of its own."""
    inputs = {f"a results file ({p})": p for p in [*args.results, *([args.baseline] if args.baseline else [])]}
    if args.weights:
        inputs[f"--weights ({args.weights})"] = args.weights
    check_outputs({"-o": args.output or "", "--junit": args.junit or ""}, inputs)


def _say(text: str) -> None:
    """A message on stderr, terminal-safe: it may quote a file (a key, a model id, an error text)."""
    print(terminal_safe(text, lines=True), file=sys.stderr)


def _format_for(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    ext = Path(args.output).suffix.lower() if args.output else ""
    return {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}.get(ext, "text")


def main(argv: list[str] | None = None) -> int:
    """`llm-locust compare`: 0 when the comparison was written, 2 on bad input (one message on
    stderr, nothing written) or, with --strict, when the runs are not comparable."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else 2
    prog = "llm-locust compare"
    try:
        _check_outputs(args)
        gates, tolerance = _gates(args)
        cmp = compare(args.results, args.label, args.weights)
    except (ResultsError, CompareError, ValueError) as e:
        _say(f"{prog}: error: {e}")
        return 2
    blocking = [i for i in cmp.issues if i.blocking]
    if blocking and args.strict:
        _say(f"{prog}: error: the runs are not comparable (--strict):")
        for i in blocking:
            _say(f"  - {i.text()}")
        return 2
    fmt = _format_for(args)
    if fmt == "text" and not args.output:  # on a terminal (or COLUMNS): within its width
        text = render_text(cmp, width())
    else:
        text = RENDERERS[fmt](cmp)
    if args.output:
        try:
            write_atomic(args.output, text)
        except OSError as e:
            _say(f"{prog}: error: cannot write {args.output}: {e.strerror or e}")
            return 2
        for i in blocking:
            _say(f"{prog}: warning: {i.text()}")
        _say(f"{prog}: wrote {args.output} ({fmt})")
    else:
        if blocking and fmt != "text":
            for i in blocking:
                _say(f"{prog}: warning: {i.text()}")
        sys.stdout.write(terminal_safe(text, lines=True))  # the tables are; the lines around them quote files too
    return _run_gates(prog, cmp, gates, tolerance, args.junit)


def _run_gates(prog: str, cmp: Comparison, gates: list[str], tolerance: float, junit: str | None) -> int:
    cases = cases_for(cmp, gates or ["pass-lines"], tolerance) if (gates or junit) else []
    if junit:
        try:
            write_atomic(junit, junit_xml(cases))
        except OSError as e:
            _say(f"{prog}: error: cannot write {junit}: {e.strerror or e}")
            return 2
    failed = [k for k in cases if not k.passed]
    if gates:
        for k in cases:
            if not k.judged:
                _say(f"{prog}: NOT JUDGED {k.suite}: {k.message}")
    if gates and failed:
        for k in failed:
            _say(f"{prog}: FAIL {k.suite}: {k.message}")
        return 1
    return 0
