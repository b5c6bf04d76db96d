"""Every request counted once: the check a results document passes before it is written.

Each section with counts (the run's `summary`, each of `steps`, `warmup`, and each endpoint's and
model's figures in them) must hold

    sent == ok + failed (by kind) + cancelled + client_cancelled + lost (+ in_flight in a checkpoint)

and `failed` must be the sum of the failure kinds in `outcomes` (a group's `failures`). A group (`by_endpoint`,
`by_model`) counts finished requests, not sent ones: its `finished` must be ok + failed +
cancelled + client_cancelled. A run's `steady` window, its ramp and its drain together hold its
finished requests, each once. A violation is a bug of the counting, never the server's: the
results carry it (`count_problems`), the writer logs it, and a run's `counts` gate fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

PARTS = ("ok", "failed", "cancelled", "client_cancelled", "lost")
NOT_FAILURES = ("ok", "cancelled", "client_cancelled")  # the outcomes `failed` leaves out


def count_problems(doc: Mapping[str, Any]) -> list[str]:
    """One line per section of a results document whose counts do not add up (empty: exact)."""
    out = [f"{where}: {problem}" for where, fig in _sections(doc) if (problem := section_problem(fig))]
    steady = steady_problem(doc)
    return out + [f"steady: {steady}"] if steady else out


def steady_problem(doc: Mapping[str, Any]) -> str | None:
    """A steady window's ramp, window and drain must hold every finished request of the run once
    (analysis/steady.py counts them by send second): why they do not, or None."""
    st, summary = doc.get("steady"), doc.get("summary")
    if not isinstance(st, Mapping) or not st.get("found") or not isinstance(summary, Mapping):
        return None
    parts = [(k, (st.get(k) or {}).get("requests") or 0) for k in ("ramp", "window", "drain")]
    if sum(n for _, n in parts) != summary.get("finished"):
        return " + ".join(f"{k} {n}" for k, n in parts) + f" != finished {summary.get('finished')}"
    return None


def _sections(doc: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(name, figures) of every section with counts, groups included."""
    tops: list[tuple[str, Any]] = [("summary", doc.get("summary")), ("warmup", doc.get("warmup"))]
    tops += [(f"steps[{i}] (step {row.get('step')})", row) for i, row in enumerate(_rows(doc.get("steps")))]
    for name, fig in tops:
        if not isinstance(fig, Mapping):
            continue
        yield name, fig
        for dim in ("by_endpoint", "by_model"):
            groups = fig.get(dim)
            if isinstance(groups, Mapping):
                for key, group in groups.items():
                    if isinstance(group, Mapping):
                        yield f"{name}.{dim}[{key}]", group


def _rows(steps: Any) -> list[Mapping[str, Any]]:
    return [r for r in steps if isinstance(r, Mapping)] if isinstance(steps, list) else []


def section_problem(fig: Mapping[str, Any]) -> str | None:
    """Why one section's counts do not add up, or None. A section with `sent` is held to sent ==
    ok + failed + cancelled + client_cancelled + lost; one without (a group) to finished == ok +
    failed + cancelled + client_cancelled; `failed` to the failure kinds of `outcomes`."""
    n = {k: fig.get(k) or 0 for k in (*PARTS, "in_flight")}
    total_name = "sent" if "sent" in fig else "finished"
    if total_name not in fig:
        return None
    total = fig[total_name] or 0
    parts = PARTS if total_name == "sent" else PARTS[:-1]
    if total_name == "sent" and "in_flight" in fig:  # a checkpoint's: sent, no outcome yet (report.outcome)
        parts = (*parts, "in_flight")
    if sum(n[k] for k in parts) != total:
        return f"{total_name} {total} != " + " + ".join(f"{k} {n[k]}" for k in parts)
    failures = fig.get("failures")  # a group's failures by kind
    if isinstance(failures, Mapping) and sum(failures.values()) != n["failed"]:
        return f"failed {n['failed']} != {sum(failures.values())}, the failures by kind"
    outcomes = fig.get("outcomes")
    if isinstance(outcomes, Mapping) and outcomes:
        if "finished" in fig and sum(outcomes.values()) != fig["finished"]:
            return f"finished {fig['finished']} != {sum(outcomes.values())}, the outcomes by kind"
        by_kind = sum(v for k, v in outcomes.items() if k not in NOT_FAILURES)
        if by_kind != n["failed"]:
            return f"failed {n['failed']} != {by_kind}, the failures by kind in outcomes"
        for k in NOT_FAILURES:
            if (outcomes.get(k) or 0) != n[k]:
                return f"{k} {n[k]} != outcomes' {outcomes.get(k) or 0}"
    return None
