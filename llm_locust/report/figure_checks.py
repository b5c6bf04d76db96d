"""Figures checked before they are used: a results file whose counts, latencies or throughputs are
negative, or not finite, is refused with one line naming the file and the field, so that a file
with `p99_ttft_ms: -5` cannot rank best and `ok: -5` is not printed as a count (docs/compare.md,
"What compare refuses"). Our own results files are checked where they are read
(report/results.py `read_results`: `report`, `export`, `compare`, the grid and the repetitions);
another tool's by compare's readers (compare/tools.py).

Each reader names the fields it reads as the file writes them (ours: `summary.ok`,
`steps[2].latency.ttft.p99`; vLLM's `p99_ttft_ms`, AIPerf's `time_to_first_token.p99`, GuideLLM's
`benchmarks[0].metrics.request_latency.successful.mean`), and `check_figures` judges them:

- a number must be finite and not below zero;
- a missing figure (absent or null) is no figure: shown as n/a, as before;
- in our own files, a figure that is there must be a number (a string or a boolean is refused);
  another tool's readers already read anything but a number as n/a.

A tool's fields that may be negative are not named (AIPerf's `osl_mismatch_diff_pct`, GuideLLM's
`samples: -1`); neither are our figures of the client's own timing (`schedule_lag`, `client`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, cast, get_args

from llm_locust.schema import Figures, LadderStep

Field = tuple[str, Any]  # (the field as the file names it, its value)

# our figures of a whole run or a step that are counts, durations, rates or shares: none is
# negative. By their results names, typed: `_figure` reads each by the schema's `Figures` (a ladder
# step's own: `LadderStep`), so that a renamed figure fails mypy here
Ours = Literal[
    "sent",
    "ok",
    "failed",
    "cancelled",
    "client_cancelled",
    "lost",
    "workers_lost",
    "finished",
    "tokens_in",
    "tokens_out",
    "tokens_out_failed",
    "length_mismatch",
    "length_checked",
    "duration_s",
    "output_tokens_per_s",
    "requests_per_s",
    "concurrency",
    "error_rate",
    "goodput_requests_per_s",
    "goodput_tokens_per_s",
]
OUR_FIGURES: tuple[Ours | Literal["offered"], ...] = (
    *get_args(Ours),
    "offered",  # a ladder step's load (users, req/s, tok/s)
)
OUR_COUNTS = ("outcomes", "causes")  # {kind: count}
LATENCY_STATS = ("count", "min", "max", "mean", "p50", "p90", "p95", "p99", "p99.9")
SIGNED_LATENCIES = ("schedule_lag",)  # the client's own lag against its schedule: not the server's figure


def _figure(row: Mapping[str, Any], key: Ours | Literal["offered"]) -> Any:
    """row[key], by the schema's names."""
    return cast(LadderStep, row)[key] if key == "offered" else cast(Figures, row)[key]


def _figures_of(row: Any, at: str) -> Iterator[Field]:
    """The count, rate and latency fields of one set of figures (the summary, a step)."""
    if not isinstance(row, dict):
        return
    for name in OUR_FIGURES:
        if name in row:
            yield f"{at}.{name}", _figure(row, name)
    for key in OUR_COUNTS:
        counts = row.get(key)
        if isinstance(counts, dict):
            yield from ((f"{at}.{key}.{k}", v) for k, v in counts.items())
    errors = row.get("errors")
    if isinstance(errors, dict):
        for kind, texts in errors.items():
            if isinstance(texts, dict):
                yield from ((f"{at}.errors.{kind}[{i}]", v) for i, v in enumerate(texts.values()))
    lat = row.get("latency")
    if isinstance(lat, dict):
        for name, stats in lat.items():
            if name not in SIGNED_LATENCIES and isinstance(stats, dict):
                yield from ((f"{at}.latency.{name}.{s}", stats[s]) for s in LATENCY_STATS if s in stats)


def our_fields(doc: Any) -> Iterator[Field]:
    """An llm-locust results file's figures: the summary, each step's, each ladder step's, the
    warm-up's, the ladder's verdict loads and --repeat's combined figures."""
    yield from _figures_of(doc.get("summary"), "summary")
    for i, row in enumerate(doc.get("steps") or []):
        yield from _figures_of(row, f"steps[{i}]")
    ladder = doc.get("ladder")
    if isinstance(ladder, dict):
        for i, row in enumerate(ladder.get("steps") or []):
            yield from _figures_of(row, f"ladder.steps[{i}]")
    yield from _figures_of(doc.get("warmup"), "warmup")
    yield from _verdict_fields(doc)
    yield from _repeat_fields(doc.get("repeats"))


def _verdict_fields(doc: Any) -> Iterator[Field]:
    """The ladder's verdict figures compare scores (saturation_load, max_slo_load)."""
    sat = doc.get("ladder", {}).get("saturation") if isinstance(doc.get("ladder"), dict) else None
    if not isinstance(sat, dict):
        return
    if isinstance(sat.get("saturation"), dict):
        yield "ladder.saturation.saturation.offered", sat["saturation"].get("offered")
    yield "ladder.saturation.max_slo_load", sat.get("max_slo_load")


def _repeat_fields(reps: Any) -> Iterator[Field]:
    """--repeat N's combined figures: each headline figure's mean, sd, half width and values."""
    if not isinstance(reps, dict):
        return
    yield "repeats.count", reps.get("count")
    for name, f in (reps.get("figures") or {}).items():
        if isinstance(f, dict):
            yield from ((f"repeats.figures.{name}.{k}", f.get(k)) for k in ("mean", "sd", "half_width"))
            values = f.get("values")
            if isinstance(values, list):
                yield from ((f"repeats.figures.{name}.values[{i}]", v) for i, v in enumerate(values))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_figures(
    path: str, fields: Iterable[Field], numbers_only: bool = False, error: type[ValueError] = ValueError
) -> None:
    """`error` naming `path` and the first field that is negative or not finite (with
    `numbers_only`, also one that is not a number); a missing (None) figure passes."""
    for name, v in fields:
        if v is None:
            continue
        if not _is_number(v):
            if numbers_only:
                raise error(f"{path}: {name} is {v!r}, not a number: no figure is read from it")
            continue
        if not math.isfinite(v):
            raise error(f"{path}: {name} is {v!r}, not a finite number: no figure is read from it")
        if v < 0:
            raise error(
                f"{path}: {name} is {v!r}: a count, latency or throughput cannot be negative; "
                "no figure is read from this file"
            )
