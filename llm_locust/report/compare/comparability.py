"""Whether runs measure the same thing: check_comparable lists the differences that make them
not comparable (trace, load plan, model, api, output lengths, SLOs) and the ones only worth a note."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from llm_locust.report.compare.runs import Run
from llm_locust.report.compare.tools import ForeignRun


@dataclass(frozen=True)
class Issue:
    what: str  # short: "different trace (sha256)", "different load plan", ...
    detail: str  # the values, by run
    severity: str = "incomparable"  # incomparable: the figures measure different things | note

    @property
    def blocking(self) -> bool:
        return self.severity == "incomparable"

    def text(self) -> str:
        return f"{'not comparable' if self.blocking else 'note'}: {self.what}: {self.detail}"


def _groups(runs: list[Run], key: Callable[[Run], Any], show: Callable[[Run], str] | None = None) -> str | None:
    """None when every run has the same key; else "A, B: value; C: other value"."""
    by: dict[Any, list[Run]] = {}
    for r in runs:
        by.setdefault(_hashable(key(r)), []).append(r)
    if len(by) < 2:
        return None
    show = show or (lambda r: str(key(r)))
    return "; ".join(f"{', '.join(r.label for r in rs)}: {show(rs[0])}" for rs in by.values())


def _hashable(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v


def check_comparable(runs: list[Run]) -> list[Issue]:
    """Why these runs' figures do not measure the same thing (incomparable), and differences
    worth knowing that do not change what was measured (notes). Server, GPU and their versions
    are what a comparison compares: never an issue."""
    if len(runs) < 2:
        return []
    issues: list[Issue] = []

    def add(
        what: str, key: Callable[[Run], Any], show: Callable[[Run], str] | None = None, severity: str = "incomparable"
    ) -> None:
        d = _groups(runs, key, show)
        if d:
            issues.append(Issue(f"different {what}", d, severity))

    ours = [r for r in runs if not isinstance(r, ForeignRun)]
    mixed = len(ours) < len(runs)  # another tool's run among them: its workload is compared by lengths
    issues += _trace_issues(ours)
    if mixed:
        issues += _workload_issues(runs)
    known_load = [r for r in runs if "?" not in r.load]
    d = _groups(known_load, lambda r: r.load)
    if d:
        issues.append(Issue("different load plan", d))
    if len(known_load) < len(runs):
        issues.append(
            Issue(
                "load not checked",
                f"{', '.join(r.label for r in runs if r not in known_load)}: the results do not say how many users ran",
                "note",
            )
        )
    add("model", lambda r: r.model)
    add("api", lambda r: r.api)
    if not mixed:
        add("max_tokens", lambda r: r.output_length)
        add("force_length", lambda r: r.force_length)
    add("SLOs (goodput and max_slo_load are judged against them)", lambda r: r.slos, lambda r: r.slo_text)
    add("step timing / run time", lambda r: r.timing, severity="note")
    add("seed", lambda r: r.settings.get("seed", r.doc["run"].get("seed")), severity="note")
    if mixed:
        add(
            "tools (each times and counts in its own way: docs/compare.md, Other tools)",
            lambda r: r.tool,
            severity="note",
        )
    else:
        add("llm-locust version", lambda r: (r.doc.get("environment") or {}).get("llm_locust"), severity="note")
    ours_facts: tuple[tuple[str, Callable[[Run], Any]], ...] = (
        # environment and workers: not required on reading (tests/test_repeat.py's synthetic files lack them)
        ("client machine", lambda r: (r.doc.get("environment") or {}).get("hostname")),
        ("worker processes", lambda r: len(r.doc.get("workers") or [])),
    )
    for what, key in ours_facts:
        d = _groups(ours, key)
        if d:
            issues.append(Issue(f"different {what}", d, "note"))
    issues += _cache_state_issues(ours)
    # the verdicts (docs/verdicts.md): $/Mtok compares the prices as well as the servers
    priced = [r for r in runs if r.price is not None]
    if len({r.price for r in priced}) > 1 or (priced and len(priced) < len(runs)):
        issues.append(
            Issue(
                "GPU-hour price ($/Mtok compares the prices too)",
                _groups(runs, lambda r: r.price, lambda r: f"${r.price:g}" if r.price is not None else "no price")
                or "",
                "note",
            )
        )
    counted = [r for r in runs if (v := r.verdicts) and (g := v.get("gpus")) and g.get("gpus")]
    if counted and len(counted) < len(runs):
        missing = ", ".join(r.label for r in runs if r not in counted)
        issues.append(
            Issue(
                "per-GPU figures missing",
                f"{missing}: no GPU count (--gpus): no tok/s per GPU, frontier or cost",
                "note",
            )
        )
    return issues


def _cache_state_issues(runs: list[Run]) -> list[Issue]:
    """A warm prompt cache against a cold one (docs/metrics.md "What the load was"): the same
    server measured twice can differ many times over in TTFT by its cache alone. A note, not a
    block: comparing them may be the point; "unknown" against a known state is said too."""
    states: dict[str, dict[str, Any]] = {r.label: dict((r.doc.get("run") or {}).get("cache_state") or {}) for r in runs}
    known = {label: st.get("state") for label, st in states.items() if st.get("state")}
    if len(known) < 2 or len(set(known.values())) < 2:
        return []
    detail = _groups([r for r in runs if r.label in known], lambda r: known[r.label]) or ""
    what = "prompt cache state before the load (warm, reset, fresh: TTFT can differ by the cache alone)"
    return [Issue(f"different {what}", detail, "note")]


def _trace_issues(runs: list[Run]) -> list[Issue]:
    """The trace check over llm-locust runs (another tool's run has no trace file): by sha256, and
    by file for runs without one."""
    out: list[Issue] = []
    if not runs:
        return out
    with_sha = [r for r in runs if r.trace_sha]
    if len({r.trace_sha for r in with_sha}) > 1:
        out.append(Issue("different trace (sha256)", _groups(with_sha, lambda r: r.trace_sha, lambda r: r.trace) or ""))
    without = [r for r in runs if not r.trace_sha]
    if without:
        unverified = ", ".join(r.label for r in without)
        path = lambda r: os.path.abspath(r.trace_path) if r.trace_path else ""  # noqa: E731
        sha_paths = {path(r) for r in with_sha}
        d = _groups(runs, path, lambda r: r.trace_path or "?")
        # only what the sha256 check has not said already: an unverified run's file differs
        if d and (not out or any(path(r) not in sha_paths for r in without)):
            out.append(Issue(f"different trace (file; no sha256 recorded for {unverified})", d))
        else:
            out.append(
                Issue(
                    "trace not verified",
                    f"{unverified}: no sha256 recorded (an older results file, or the"
                    " trace could not be read): the same trace file, its content not verified",
                    "note",
                )
            )
    return out


LENGTHS = ("input tokens", "output tokens", "forced")


def _length_text(v: Any) -> str:
    if isinstance(v, bool):
        return "forced" if v else "not forced"
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def _length_of(r: Run, key: str) -> str:
    return _length_text(r.lengths[key])


def _workload_issues(runs: list[Run]) -> list[Issue]:
    """With another tool's run: the workloads compared by what each asked for per request (input
    and output tokens, forced or not), which every tool records; the prompt texts always differ
    (each tool makes its own), a note. A length a file does not record is not checked, and said."""
    out: list[Issue] = []
    for key in LENGTHS:
        known = [r for r in runs if r.lengths.get(key) is not None]
        d = _groups(known, partial(_length_of, key=key))
        if d:
            out.append(Issue(f"workload: different {key} per request", d))
    missing = {r.label: [k for k in LENGTHS if r.lengths.get(k) is None] for r in runs}
    text = "; ".join(f"{lab}: {', '.join(ks)}" for lab, ks in missing.items() if ks)
    if text:
        out.append(Issue("workload not recorded, not checked", text, "note"))
    d = _groups(runs, lambda r: r.trace)
    if d:
        out.append(Issue("prompt texts (each tool makes its own; the lengths above are what compares)", d, "note"))
    return out
