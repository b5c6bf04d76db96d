"""Verdicts people act on (issue 15): per-GPU throughput, interactivity and its Pareto frontier,
energy per token and cost per million tokens, per ladder step, at the knee and over the run.

Pure arithmetic on plain dicts (no Locust): the ladder's StepResult dicts, the GPU sidecar's
per-step scrape windows (`ServerSeries.window`), the GPUs the sidecar named (`gpu_facts`) and
the run's settings (any object, or mapping, with `gpus`, `prefill_gpus`, `decode_gpus`,
`gpu_hour_price`, `gpu_prices`). Every formula, its unit and its source: docs/verdicts.md.

    verdicts(steps, gpu_steps, gpu_info, settings, ...) -> dict      results["verdicts"]
    verdicts_for_results(results, settings=None) -> dict | None      the same from a results file
    pareto_front(points) -> [bool]; frontier_verdict(a, b) -> str     the frontier and its dominance
    verdicts_table(v) -> str                                          printed at the end of a run

A figure that cannot be computed is left out of its row (never 0, never a guess) and the reason
is listed in `notes` (no --gpus, no price, no GPU sidecar ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, Literal, cast

from llm_locust.schema import Figures, GpuCounts, GpuPrice, ResultsDoc, VerdictRow, Verdicts

# The GPU sidecar's (and dcgm-exporter's) power and energy, as rows of server_metrics.TABLE
# (quantity -> alternatives, the first present wins; summed over GPUs). The power gauge prefers the
# sidecar's average since the previous scrape (`_window_avg`, 10 Hz samples) over its latest value.
GPU_TABLE: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "gpu_power_watts": (
        ("llm_locust_gpu_power_watts_window_avg", {}),
        ("llm_locust_gpu_power_watts", {}),
        ("DCGM_FI_DEV_POWER_USAGE", {}),
    ),
    "gpu_energy_joules_total": (("llm_locust_gpu_energy_joules_total", {}),),  # J, a counter
    "gpu_energy_millijoules_total": (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", {}),),  # mJ, dcgm-exporter's
}
GPU_COUNTERS = ("gpu_energy_joules_total", "gpu_energy_millijoules_total")

MIN_ENERGY_SAMPLES = 5  # GPU scrapes in a step's window below which its energy figures are flagged
MIN_SPAN_SHARE = 0.5  # the energy counter's samples must span at least this share of the window
INTERACTIVITY_FROM = (
    "1 / TPOT p50: the median of the per-request 1/TPOT (1/x reverses the order of the "
    "requests, so the median of 1/TPOT is 1 over the median TPOT)"
)
ENERGY_RULE = (
    f"flagged few_samples when the step's window holds fewer than {MIN_ENERGY_SAMPLES} GPU scrapes, "
    f"or the energy counter's first and last samples span less than {MIN_SPAN_SHARE:.0%} of the window"
)

# The per-step figures (the keys compare's metric table may name) and their units.
FIGURES: dict[str, str] = {
    "output_tokens_per_s_per_gpu": "tok/s/GPU",
    "input_tokens_per_s_per_gpu": "tok/s/GPU",
    "total_tokens_per_s_per_gpu": "tok/s/GPU",
    "interactivity": "tok/s/user",
    "joules_per_output_token": "J/tok",
    "joules_per_total_token": "J/tok",
    "usd_per_million_output_tokens": "$/Mtok",
    "usd_per_million_total_tokens": "$/Mtok",
}


# ---- inputs ----


def _setting(settings: Any, name: str) -> Any:
    if settings is None:
        return None
    if isinstance(settings, Mapping):
        return settings.get(name)
    return getattr(settings, name, None)


def _num(v: Any) -> float | None:
    """A finite number, or None (bools, strings, NaN and infinities are not figures)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _count(v: Any) -> int | None:
    n = _num(v)
    return int(n) if n is not None and n >= 1 and n == int(n) else None


def gpu_counts(settings: Any) -> tuple[GpuCounts | None, list[str]]:
    """({gpus, prefill_gpus, decode_gpus, disaggregated}, notes). Disaggregated serving (both
    prefill and decode GPUs given): output tokens are divided by the decode GPUs, input tokens by
    the prefill GPUs, total tokens and GPU-hours by prefill + decode. Else by `gpus`. None (with a
    note) when the settings do not say how many GPUs served the model."""
    notes: list[str] = []
    raw = {k: _setting(settings, k) for k in ("gpus", "prefill_gpus", "decode_gpus")}
    counts = {k: _count(v) for k, v in raw.items()}
    for k, v in raw.items():
        if v is not None and counts[k] is None:
            notes.append(f"{k} = {v!r} is not a whole number >= 1: ignored")
    p, d = counts["prefill_gpus"], counts["decode_gpus"]
    if p is not None and d is not None:
        if counts["gpus"] is not None and counts["gpus"] != p + d:
            notes.append(
                f"gpus = {counts['gpus']} differs from prefill_gpus + decode_gpus = {p + d}: "
                f"{p + d} used (disaggregated serving)"
            )
        return {"gpus": p + d, "prefill_gpus": p, "decode_gpus": d, "disaggregated": True}, notes
    if (p is None) != (d is None):
        notes.append("only one of prefill_gpus / decode_gpus given: disaggregated division needs both")
    if counts["gpus"] is None:
        notes.append(
            "no GPU count (--gpus, or --prefill-gpus and --decode-gpus): per-GPU figures, the Pareto "
            "frontier and cost are left out"
        )
        return None, notes
    return {"gpus": counts["gpus"], "prefill_gpus": None, "decode_gpus": None, "disaggregated": False}, notes


def _type_key(name: str) -> str:
    name = re.sub(r"\s+", " ", str(name).strip().lower())
    return name[len("nvidia ") :] if name.startswith("nvidia ") else name


def _match_price(model_name: str, prices: Mapping[str, Any]) -> tuple[str, float] | None:
    """The price whose GPU type names this GPU: the same name (case, spaces and a leading "NVIDIA"
    aside), else the longest type found in the name as a whole word ("H100" in "NVIDIA H100 80GB
    HBM3"; "A100" not in "A100X")."""
    have = _type_key(model_name)
    best: tuple[str, float] | None = None
    for key, price in prices.items():
        p = _num(price)
        if p is None or p < 0:
            continue
        k = _type_key(key)
        if not k:
            continue
        if k == have:
            return key, p
        if re.search(r"(?<![a-z0-9])" + re.escape(k) + r"(?![a-z0-9])", have) and (
            best is None or len(k) > len(_type_key(best[0]))
        ):
            best = (key, p)
    return best


def _gpu_names(gpu_info: Any) -> list[str]:
    if isinstance(gpu_info, str):
        return [gpu_info]
    out = []
    for g in gpu_info or []:
        if isinstance(g, Mapping):
            name = g.get("model_name") or g.get("modelName") or g.get("name")
            if name:
                out.append(str(name))
        elif isinstance(g, str):
            out.append(g)
    return out


def gpu_price(settings: Any, gpu_info: Any) -> tuple[GpuPrice | None, list[str]]:
    """({usd_per_gpu_hour, source, gpu_type}, notes): the price of the GPU type the sidecar named
    from `gpu_prices`, else the flat `gpu_hour_price`; mixed GPU types: the mean over the GPUs
    listed. None (with a note) when neither applies."""
    notes: list[str] = []
    prices = _setting(settings, "gpu_prices") or {}
    prices = prices if isinstance(prices, Mapping) else {}
    flat = _num(_setting(settings, "gpu_hour_price"))
    if flat is not None and flat < 0:
        notes.append(f"gpu_hour_price = {flat:g} is negative: ignored")
        flat = None
    names = _gpu_names(gpu_info)
    if prices and names:
        found = [(n, _match_price(n, prices)) for n in names]
        if all(m is not None for _, m in found):
            values = [m[1] for _, m in found]  # type: ignore[index]
            keys = sorted({m[0] for _, m in found})  # type: ignore[index]
            types = sorted(set(names))
            price = sum(values) / len(values)
            src = (
                f"gpu_prices[{keys[0]}]"
                if len(keys) == 1
                else f"mean of gpu_prices[{', '.join(keys)}] over the {len(names)} GPUs"
            )
            return {"usd_per_gpu_hour": price, "source": src, "gpu_type": ", ".join(types)}, notes
        missing = sorted({n for n, m in found if m is None})
        notes.append(
            f"gpu_prices names no price for {', '.join(missing)}"
            + ("; gpu_hour_price used" if flat is not None else "")
        )
    elif prices and not names:
        notes.append(
            "gpu_prices given but no GPU type is known (no GPU sidecar): "
            + ("gpu_hour_price used" if flat is not None else "no price")
        )
    if flat is not None:
        return {
            "usd_per_gpu_hour": flat,
            "source": "gpu_hour_price",
            "gpu_type": ", ".join(sorted(set(names))) or None,
        }, notes
    if not prices:
        notes.append("no price (--gpu-hour-price or --gpu-prices): cost is left out")
    return None, notes


# ---- the figures of one step ----


def _energy(gw: Mapping[str, Any] | None, window: float | None) -> dict[str, Any]:
    """Average GPU power over the step's window (W, all GPUs) and where it came from: the energy
    counter's increase over the time its samples span, else the mean of the scraped power."""
    out: dict[str, Any] = {}
    if not gw:
        return out
    samples = int(_num(gw.get("samples")) or 0)
    flags: list[str] = []
    power = None
    for q, scale in (("gpu_energy_joules_total", 1.0), ("gpu_energy_millijoules_total", 1e-3)):
        c = gw.get(q)
        if not isinstance(c, Mapping):
            continue
        inc, per_s = _num(c.get("increase")), _num(c.get("per_s"))
        if inc is None or per_s is None:
            continue  # fewer than two samples carry the counter: no increase to read
        if inc < 0:
            flags.append("energy_counter_reset")  # a GPU reset or lost in the window: the sum went back
            continue
        power = per_s * scale
        out["energy_from"] = "counter"
        span = inc / per_s if per_s > 0 else None
        if window and span is not None and span < MIN_SPAN_SHARE * window:
            flags.append("few_samples")
        break
    if power is None:
        pw = gw.get("gpu_power_watts")
        mean = _num(pw.get("mean")) if isinstance(pw, Mapping) else None
        if mean is not None and mean >= 0:
            power = mean
            out["energy_from"] = "power"
    if power is None:
        if flags:
            out["energy_flags"] = flags
        return out
    if samples < MIN_ENERGY_SAMPLES and "few_samples" not in flags:
        flags.append("few_samples")
    out["gpu_power_watts"] = power
    if window:
        out["energy_joules"] = power * window
    out["energy_samples"] = samples
    out["energy_flags"] = flags
    out["energy_valid"] = not flags
    return out


# the figures `step_figures` reads of a step or a summary, by their results names: read through
# `_figure`, typed by the schema's `Figures`, so that a renamed figure fails mypy here
StepFigure = Literal["output_tokens_per_s", "duration_s", "latency"]


def _figure(st: Mapping[str, Any], key: StepFigure) -> Any:
    """st.get(key), by a name of `Figures` (None: absent)."""
    f = cast(Figures, st)
    return f[key] if key in f else None


def step_figures(
    st: Mapping[str, Any],
    gw: Mapping[str, Any] | None,
    counts: GpuCounts | None,
    price: GpuPrice | None,
    tokens: tuple[Any, Any] | None = None,
) -> VerdictRow:
    """The figures of one step (or of the whole run: `st` a summary). st: output_tokens_per_s,
    latency.tpot.p50 and the window (`window`, or window_end - window_start, or duration_s);
    gw: its GPU scrape window; tokens: (input, output) tokens of its requests, for input tokens/s."""
    out_tps = _num(_figure(st, "output_tokens_per_s"))
    row: dict[str, Any] = {"step": st.get("step"), "offered": st.get("offered"), "output_tokens_per_s": out_tps}
    window = _num(st.get("window"))
    if window is None and _num(st.get("window_end")) is not None and _num(st.get("window_start")) is not None:
        window = float(st["window_end"]) - float(st["window_start"])
    if window is None:
        window = _num(_figure(st, "duration_s"))
    window = window if window is not None and window > 0 else None
    row["window_s"] = window
    # input tokens/s: the output rate scaled by the step's input/output token ratio (the rates are
    # the steady state's; the counts are those of the requests sent in the step)
    t_in, t_out = tokens or (None, None)
    t_in, t_out = _num(t_in), _num(t_out)
    in_tps = out_tps * t_in / t_out if out_tps is not None and t_in and t_out else None
    row["input_tokens_per_s"] = in_tps
    total_tps = out_tps + in_tps if out_tps is not None and in_tps is not None else None
    row["total_tokens_per_s"] = total_tps
    tpot = _num(((_figure(st, "latency") or {}).get("tpot") or {}).get("p50"))
    row["tpot_p50_s"] = tpot
    if tpot is not None and tpot > 0:
        row["interactivity"] = 1.0 / tpot
    if counts and out_tps is not None:
        n, p, d = counts["gpus"], counts["prefill_gpus"], counts["decode_gpus"]
        # disaggregated: output by the decode GPUs, input by the prefill GPUs (both set, gpu_counts)
        out_gpus = d if counts["disaggregated"] and d is not None else n
        row["output_tokens_per_s_per_gpu"] = out_tps / out_gpus
        if in_tps is not None and total_tps is not None:
            in_gpus = p if counts["disaggregated"] and p is not None else n
            row["input_tokens_per_s_per_gpu"] = in_tps / in_gpus
            row["total_tokens_per_s_per_gpu"] = total_tps / n
        if window:
            row["gpu_hours"] = n * window / 3600.0
    row.update(_energy(gw, window))
    power = row.get("gpu_power_watts")
    if power is not None and out_tps:
        row["joules_per_output_token"] = power / out_tps
        if total_tps:
            row["joules_per_total_token"] = power / total_tps
    if counts and price and out_tps:
        usd_per_s = counts["gpus"] * price["usd_per_gpu_hour"] / 3600.0
        row["usd_per_million_output_tokens"] = usd_per_s / out_tps * 1e6
        if total_tps:
            row["usd_per_million_total_tokens"] = usd_per_s / total_tps * 1e6
        if window:
            row["usd"] = usd_per_s * window
    row["flags"] = list(st.get("flags") or [])
    return cast(VerdictRow, row)  # built in the file's key order, its figures only when computed


# ---- the Pareto frontier ----


def pareto_front(points: Sequence[tuple[float, float] | None]) -> list[bool]:
    """Per point (x, y), higher better in both: True when no other point dominates it, i.e. is at
    least as good in both and better in one (equal points are both on the frontier). None: not a
    candidate (False)."""
    out = []
    for i, p in enumerate(points):
        if p is None:
            out.append(False)
            continue
        dominated = any(
            q is not None and j != i and q[0] >= p[0] and q[1] >= p[1] and (q[0] > p[0] or q[1] > p[1])
            for j, q in enumerate(points)
        )
        out.append(not dominated)
    return out


def covers(a: Sequence[tuple[float, float]], p: tuple[float, float]) -> bool:
    """Some point of `a` is at least as good as `p` in both."""
    return any(q[0] >= p[0] and q[1] >= p[1] for q in a)


def frontier_verdict(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> str:
    """ "dominates" (every point of b is matched or beaten by a point of a, and a has a point b does
    not match), "dominated" (the reverse), "equal" (each covers the other), "crossing" (neither
    covers the other: which is better depends on the interactivity wanted), or "n/a" (a frontier is
    empty)."""
    if not a or not b:
        return "n/a"
    ab = all(covers(a, p) for p in b)
    ba = all(covers(b, p) for p in a)
    if ab and ba:
        return "equal"
    if ab:
        return "dominates"
    if ba:
        return "dominated"
    return "crossing"


def frontier_points(v: Mapping[str, Any] | None) -> list[tuple[float, float]]:
    """The (output tok/s/GPU, tok/s/user) points on a verdicts dict's frontier, by x."""
    if not v:
        return []
    rows = {r.get("step"): r for r in v.get("steps") or []}
    pts = [
        (rows[s]["output_tokens_per_s_per_gpu"], rows[s]["interactivity"]) for s in v.get("frontier") or [] if s in rows
    ]
    return sorted(pts)


# ---- the whole ----


def verdicts(
    steps: Sequence[Mapping[str, Any]] | None,
    gpu_steps: Sequence[Mapping[str, Any]] | None,
    gpu_info: Any,
    settings: Any,
    *,
    step_tokens: Mapping[int | None, tuple[Any, Any]] | None = None,
    summary: Mapping[str, Any] | None = None,
    gpu_run: Mapping[str, Any] | None = None,
    saturation: Mapping[str, Any] | None = None,
) -> Verdicts:
    """The verdicts of a run (results["verdicts"]).

    steps: the ladder's StepResult dicts (ladder["steps"]; empty for a run without a ladder);
    gpu_steps: the GPU sidecar's per-step windows (gpu_metrics["steps"], matched by `step`);
    gpu_info: the GPUs the sidecar named (environment["gpus"], dicts with model_name) or a type name;
    settings: gpus, prefill_gpus, decode_gpus, gpu_hour_price, gpu_prices (attributes or keys);
    step_tokens: {step: (input tokens, output tokens)} of each step's requests (results["steps"]);
    summary, gpu_run: the whole run's figures and GPU window, for the `run` row;
    saturation: the ladder's verdict (ladder["saturation"]), for the `knee` row."""
    counts, notes = gpu_counts(settings)
    price, price_notes = gpu_price(settings, gpu_info)
    notes += price_notes
    by_step = {w.get("step"): w for w in gpu_steps or [] if isinstance(w, Mapping)}
    if not gpu_steps:
        notes.append("no GPU sidecar windows (--gpu-metrics): energy is left out")
    rows = [
        step_figures(st, by_step.get(st.get("step")), counts, price, (step_tokens or {}).get(st.get("step")))
        for st in steps or []
    ]
    if rows and all(r.get("input_tokens_per_s") is None for r in rows):
        notes.append("input token counts unknown: total-token figures are left out")
    if gpu_steps and rows and all(r.get("gpu_power_watts") is None for r in rows):
        notes.append("the GPU windows carry neither the energy counter nor power: energy is left out")
    pts = [
        (r["output_tokens_per_s_per_gpu"], r["interactivity"])
        if r.get("output_tokens_per_s_per_gpu") and r.get("interactivity")
        else None
        for r in rows
    ]
    front = pareto_front(pts)
    for r, on in zip(rows, front, strict=True):
        r["pareto"] = on
    frontier = [
        r["step"]
        for p, r, on in sorted(zip(pts, rows, front, strict=True), key=lambda t: t[0] or (0.0, 0.0))
        if on and r["step"] is not None  # (a ladder step's row has its step: only the run's has None)
    ]
    knee = None
    sat = (saturation or {}).get("saturation") if isinstance(saturation, Mapping) else None
    if isinstance(sat, Mapping):
        knee = next((r.copy() for r in rows if r["step"] == sat.get("step")), None)
    run = None
    if summary:
        t = (summary.get("tokens_in"), summary.get("tokens_out"))
        run = step_figures({**summary, "step": None, "offered": None, "window": None}, gpu_run, counts, price, t)
        run.pop("flags", None)
    return {
        "gpus": counts,
        "price": price,
        "interactivity_from": INTERACTIVITY_FROM,
        "energy_rule": ENERGY_RULE,
        "steps": rows,
        "frontier": frontier,
        "knee": knee,
        "run": run,
        "notes": notes,
    }


def _cost_settings(results: ResultsDoc) -> SimpleNamespace:
    plan = _mapping(results.get("plan"))
    cost = dict(plan.get("cost") or {}) if isinstance(plan.get("cost"), Mapping) else {}
    # a file written before the plan kept cost.* had them in run.settings: read by name
    settings: Mapping[str, Any] = cast("Mapping[str, Any]", (results.get("run") or {}).get("settings") or {})
    for k in ("gpus", "prefill_gpus", "decode_gpus", "gpu_hour_price", "gpu_prices"):
        if k not in cost and k in settings:
            cost[k] = settings[k]
    return SimpleNamespace(
        **{k: cost.get(k) for k in ("gpus", "prefill_gpus", "decode_gpus", "gpu_hour_price", "gpu_prices")}
    )


def _mapping(v: Any) -> Mapping[str, Any]:
    """A results section that should be a mapping: anything else (absent, malformed) reads as empty."""
    return v if isinstance(v, Mapping) else {}


def verdicts_for_results(results: ResultsDoc, settings: Any = None) -> Verdicts | None:
    """`verdicts` from a results document (its ladder, GPU windows, GPUs, per-step token counts,
    summary and, without `settings`, the effective plan's cost.* keys). None for a run with neither
    a ladder nor a summary. A part absent or malformed (a hand-edited file, a test's few parts) reads
    as empty: hence .get on the document's required keys here."""
    ladder = _mapping(results.get("ladder"))
    steps = ladder.get("steps") or []
    summary: Figures | None = results.get("summary")
    if not isinstance(summary, Mapping):  # a hand-edited file
        summary = None
    if not steps and not summary:
        return None
    gpu = _mapping(results.get("gpu_metrics"))
    tokens: dict[int | None, tuple[Any, Any]] = {
        r["step"]: (r["tokens_in"], r["tokens_out"]) for r in results.get("steps") or [] if isinstance(r, Mapping)
    }
    return verdicts(
        steps,
        gpu.get("steps"),
        (results.get("environment") or {}).get("gpus") or [],
        settings if settings is not None else _cost_settings(results),
        step_tokens=tokens,
        summary=summary,
        gpu_run=gpu.get("run"),
        saturation=ladder.get("saturation"),
    )


def has_figures(v: Mapping[str, Any] | None) -> bool:
    """Whether a verdicts dict says more than interactivity (per-GPU, energy or cost figures)."""
    if not v:
        return False
    keys = set(FIGURES) - {"interactivity"}
    return any(k in r for r in [*(v.get("steps") or []), v.get("run") or {}] for k in keys)


# ---- text ----


def _f(v: Any, digits: int = 3) -> str:
    n = _num(v)
    if n is None:
        return "-"
    return f"{n:,.0f}" if abs(n) >= 10**digits else f"{n:.{digits}g}"


COLUMNS = (
    ("tok/s/GPU", "output_tokens_per_s_per_gpu"),
    ("total tok/s/GPU", "total_tokens_per_s_per_gpu"),
    ("tok/s/user", "interactivity"),
    ("W", "gpu_power_watts"),
    ("J/tok", "joules_per_output_token"),
    ("$/Mtok out", "usd_per_million_output_tokens"),
    ("$/Mtok total", "usd_per_million_total_tokens"),
)


def verdicts_table(v: Mapping[str, Any] | None) -> str:
    """Per step: tok/s/GPU, tok/s/user, power, J/token, $/Mtok, frontier and energy flags ("" when
    no step has any of them)."""
    if not v or not v.get("steps") or not has_figures(v):
        return ""
    rows = v["steps"]
    present = [c for c in COLUMNS if any(r.get(c[1]) is not None for r in rows)]
    head = f"{'step':>4}  {'offered':>8}" + "".join(f"  {c[0]:>{max(len(c[0]), 7)}}" for c in present)
    lines = ["efficiency and cost", head, "-" * len(head)]
    for r in rows:
        line = f"{r['step']:>4}  {_f(r.get('offered')):>8}"
        for label, key in present:
            line += f"  {_f(r.get(key)):>{max(len(label), 7)}}"
        marks = (["frontier"] if r.get("pareto") else []) + list(r.get("energy_flags") or [])
        lines.append(line + ("  " + ", ".join(marks) if marks else ""))
    if v.get("frontier"):
        lines.append(f"Pareto frontier (tok/s/GPU vs tok/s/user): steps {', '.join(str(s) for s in v['frontier'])}")
    k = v.get("knee")
    if k and k.get("usd_per_million_output_tokens") is not None:
        lines.append(
            f"at the knee (step {k['step']}): ${_f(k['usd_per_million_output_tokens'])} per million output tokens"
        )
    if v.get("price"):
        lines.append(f"price: ${v['price']['usd_per_gpu_hour']:g} per GPU-hour ({v['price']['source']})")
    lines += [f"note: {n}" for n in v.get("notes") or []]
    return "\n".join(lines)
