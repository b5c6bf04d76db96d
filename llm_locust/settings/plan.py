"""YAML test plans and load ladders: schema, loading, validation, command-line overrides.

    load_plan(path) -> Plan                      # PlanError (a ValueError) lists every problem
    plan_from_dict(data, *, source, base_dir) -> Plan
    parse_ladder("concurrency:1..64", ...) -> Ladder
    merge_cli(plan, overrides) -> Plan           # command-line options win
    Plan.to_dict() / dump_plan(plan)             # the effective plan: loads back to the same Plan

The schema is in docs/load-shapes.md; sample plans are in plans/. Paths read by a plan (trace
files, tokenizers, empirical length distributions) are relative to the plan's folder; the
results path is relative to the current directory, like --results. Pure: no Locust, no I/O
beyond reading the plan and checking that its input files exist.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from llm_locust.analysis.steps import check_slo_names, slo_vocabulary

LADDER_KINDS = ("concurrency", "rate", "speed")
ARRIVALS = ("poisson", "constant")
DEFAULT_DURATION = 40.0  # seconds per step, warm-up included
DEFAULT_WARMUP = 10.0  # seconds discarded at the start of each step
DEFAULT_FACTOR = 2.0
MAX_LEVELS = 200
DEFAULT_API = "openai-chat"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


class PlanError(ValueError):
    """A plan or ladder that cannot run; `problems` lists each one ("file:line: where: what")."""

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        head = f"invalid test plan {source}" if source else "invalid test plan"
        if len(self.problems) == 1 and not source:
            super().__init__(self.problems[0])
        else:
            super().__init__(head + ":\n" + "\n".join(f"  {p}" for p in self.problems))


# ---- the data ----


@dataclass(frozen=True)
class Stable:
    """Stability rule: a step's measurement is extended (by `window`, up to `max_extend` seconds)
    until the output throughput of its last `windows` windows of `window` seconds agree within
    `tolerance` (max - min <= tolerance * mean)."""

    window: float
    tolerance: float = 0.05
    max_extend: float = 0.0
    windows: int = 3

    def settled(self, rates: list[float]) -> bool:
        """Whether per-window throughputs (oldest first) meet the rule."""
        if len(rates) < self.windows:
            return False
        last = rates[-self.windows :]
        mean = sum(last) / len(last)
        if mean <= 0:
            return max(last) <= 0
        return (max(last) - min(last)) <= self.tolerance * mean

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window, "tolerance": self.tolerance, "max_extend": self.max_extend, "windows": self.windows}


@dataclass(frozen=True)
class Ladder:
    """The load steps: `levels` of `kind` (users, requests/s, or trace speed factor)."""

    kind: str
    levels: tuple[float, ...]
    warmup: float = DEFAULT_WARMUP
    duration: float = DEFAULT_DURATION  # per step, warm-up included
    requests: int = 0  # > 0: the measurement ends once this many requests finished (duration caps it)
    stable: Stable | None = None
    arrivals: str = "poisson"  # rate ladders: poisson or constant inter-arrival times

    @property
    def window(self) -> float:
        """The measurement window of a step (seconds after warm-up)."""
        return self.duration - self.warmup

    def planned_time(self) -> tuple[float, float]:
        """(seconds without stability extensions, at most with them) for the whole ladder."""
        base = len(self.levels) * self.duration
        extra = len(self.levels) * self.stable.max_extend if self.stable else 0.0
        return base, base + extra

    def spec(self) -> str:
        """The levels in the short syntax (explicit list)."""
        return f"{self.kind}:{','.join(_fmt(v) for v in self.levels)}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "kind": self.kind,
            "steps": [_plain(v) for v in self.levels],
            "duration": self.duration,
            "warmup": self.warmup,
            "requests": self.requests,
            "stable": self.stable.to_dict() if self.stable else None,
        }
        if self.kind == "rate":
            d["arrivals"] = self.arrivals
        return d

    def problems(self) -> list[str]:
        """What is inconsistent, as "ladder.KEY: what" (empty: fine)."""
        return [f"ladder.{'.'.join(key)}: {msg}" for key, msg in _ladder_problems(self)]


@dataclass(frozen=True)
class Workload:
    trace: str = ""  # a trace file (absolute once loaded); "" with no synthetic: the bundled sample
    format: str = ""  # force the trace format ("" = detect)
    synthetic: Any = None  # a workload.synth.SynthSpec
    tokenizer: str = ""
    think_time: float = 0.0
    max_in_flight: int = 0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.synthetic is not None:
            d["synthetic"] = asdict(self.synthetic)
        else:
            d["trace"] = self.trace
            d["format"] = self.format
        d.update(tokenizer=self.tokenizer, think_time=self.think_time, max_in_flight=self.max_in_flight)
        return d


@dataclass(frozen=True)
class PlanTimeouts:
    connect: float = 10.0
    no_progress: float = 60.0
    request: float = 600.0

    def to_dict(self) -> dict[str, Any]:
        return {"connect": self.connect, "no_progress": self.no_progress, "request": self.request}


@dataclass(frozen=True)
class EarlyStop:
    """When to stop the ladder before its top step (see saturation.early_stop)."""

    enabled: bool = True
    max_error_rate: float = 0.05
    flat_steps: int = 2  # 0: never on flat throughput
    flat_tolerance: float = 0.05
    on_slo: bool = False  # stop at the first step that breaks an SLO

    def check(self, steps: list, slos: dict[str, float]) -> str | None:
        """The reason to stop after the last of `steps` (StepResults), or None."""
        if not self.enabled:
            return None
        from llm_locust.analysis.saturation import early_stop

        return early_stop(
            steps,
            slos if self.on_slo else {},
            max_error_rate=self.max_error_rate,
            flat_steps=self.flat_steps,
            flat_tolerance=self.flat_tolerance,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "max_error_rate": self.max_error_rate,
            "flat_steps": self.flat_steps,
            "flat_tolerance": self.flat_tolerance,
            "on_slo": self.on_slo,
        }


@dataclass(frozen=True)
class SimOptions:
    """The built-in simulated server, used when the plan names no host."""

    slots: int = 8
    fast: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"slots": self.slots, "fast": self.fast}


@dataclass(frozen=True)
class Plan:
    ladder: Ladder | None = None  # None: one plain run, no steps
    host: str = ""  # "" = start the simulated server
    api: str = DEFAULT_API
    model: str = ""
    api_key_env: str = DEFAULT_API_KEY_ENV
    workload: Workload = field(default_factory=Workload)
    max_tokens: int = 0
    max_tokens_cap: int = 0
    force_length: bool = True
    continuous_usage: bool = False
    slos: dict[str, float] = field(default_factory=dict)
    timeouts: PlanTimeouts = field(default_factory=PlanTimeouts)
    early_stop: EarlyStop = field(default_factory=EarlyStop)
    seed: int = 0
    results: str = ""
    report: str = ""
    workers: int = 0
    sim: SimOptions = field(default_factory=SimOptions)
    name: str = ""
    description: str = ""
    source: str = field(default="", compare=False)  # the file it was read from; not part of the plan

    def to_dict(self) -> dict[str, Any]:
        """The effective plan, every value explicit: `plan_from_dict` of it gives this plan back."""
        return {
            "name": self.name,
            "description": self.description,
            "host": self.host,
            "api": self.api,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "workload": self.workload.to_dict(),
            "ladder": self.ladder.to_dict() if self.ladder else None,
            "max_tokens": self.max_tokens,
            "max_tokens_cap": self.max_tokens_cap,
            "force_length": self.force_length,
            "continuous_usage": self.continuous_usage,
            "slos": dict(self.slos),
            "timeouts": self.timeouts.to_dict(),
            "early_stop": self.early_stop.to_dict(),
            "seed": self.seed,
            "results": self.results,
            "report": self.report,
            "workers": self.workers,
            "sim": self.sim.to_dict(),
        }

    def options(self) -> dict[str, Any]:
        """The plan as values of llm-locust's command-line options (argparse dest names of
        options.add_argument), for the run command to apply. The API key is never here: only
        the name of its variable."""
        w = self.workload
        return {
            "api": self.api,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "trace": w.trace,
            "trace_format": w.format,
            "synthetic": synth_text(w.synthetic) if w.synthetic is not None else "",
            "tokenizer": w.tokenizer,
            "think_time": w.think_time,
            "max_in_flight": w.max_in_flight,
            "max_tokens": self.max_tokens,
            "max_tokens_cap": self.max_tokens_cap,
            "no_force_length": not self.force_length,
            "continuous_usage": self.continuous_usage,
            "connect_timeout": self.timeouts.connect,
            "no_progress_timeout": self.timeouts.no_progress,
            "request_timeout": self.timeouts.request,
            "slo": ",".join(f"{k}={_fmt(v)}" for k, v in self.slos.items()),
            "results": self.results,
            "report": self.report,
            "seed": self.seed,
        }


def dump_plan(plan: Plan) -> str:
    """The effective plan as YAML text (loads back to the same plan)."""
    return yaml.safe_dump(plan.to_dict(), sort_keys=False, default_flow_style=None)


def synth_text(spec) -> str:
    """A SynthSpec in the `key=value,...` form of workload.synth.parse_spec_text."""
    return ",".join(f"{k}={_fmt(v) if isinstance(v, float) else v}" for k, v in asdict(spec).items())


def _fmt(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _plain(v: float) -> int | float:
    return int(v) if float(v).is_integer() else float(v)


# ---- the short ladder syntax ----

_LADDER_RE = re.compile(r"^\s*(?P<kind>[A-Za-z_-]+)\s*:\s*(?P<spec>.*?)\s*$")


def levels_geometric(start: float, stop: float, factor: float) -> list[float]:
    """start, start*factor, ... up to stop; stop itself is the last level."""
    out: list[float] = []
    v = start
    while v <= stop * (1 + 1e-9) and len(out) <= MAX_LEVELS:
        out.append(float(f"{v:.6g}"))
        v *= factor
    if out[-1] < stop * (1 - 1e-9):
        out.append(float(stop))
    return out


def levels_linear(start: float, stop: float, step: float) -> list[float]:
    """start, start+step, ... up to stop; stop itself is the last level."""
    n = math.floor((stop - start) / step + 1e-9)
    out = [float(f"{start + i * step:.6g}") for i in range(min(n, MAX_LEVELS) + 1)]
    if out[-1] < stop * (1 - 1e-9):
        out.append(float(stop))
    return out


def _parse_level(text: str, what: str, problems: list[str]) -> float | None:
    try:
        v = float(text)
    except ValueError:
        problems.append(f"{what}: {text!r} is not a number")
        return None
    if not math.isfinite(v):
        problems.append(f"{what}: {text!r} is not a finite number")
        return None
    return v


def parse_ladder(
    text: str,
    *,
    warmup: float = DEFAULT_WARMUP,
    duration: float = DEFAULT_DURATION,
    requests: int = 0,
    stable: Stable | None = None,
    arrivals: str = "poisson",
) -> Ladder:
    """`KIND:LEVELS` -> Ladder. LEVELS: `A..B` (geometric, x2), `A..B:xF` (geometric, factor F),
    `A..B:+S` (linear, step S), or `A,B,C` (explicit). The ladder ends at B exactly. KIND:
    concurrency (whole users), rate (requests/s), speed (trace speed factor). PlanError says why not."""
    problems: list[str] = []
    m = _LADDER_RE.match(text or "")
    if not m:
        raise PlanError([f"ladder {text!r}: expected KIND:LEVELS, e.g. concurrency:1..64, rate:1..10:+1, speed:0.5,1,2"])
    kind, spec = m["kind"].lower(), m["spec"]
    where = f"ladder {text.strip()!r}"
    if kind not in LADDER_KINDS:
        raise PlanError([f"{where}: unknown kind {kind!r}; one of {', '.join(LADDER_KINDS)}{_suggest(kind, LADDER_KINDS)}"])
    levels: list[float] = []
    generated = ".." in spec
    if generated:
        rng, _, mod = spec.partition(":")
        a, _, b = rng.partition("..")
        start = _parse_level(a.strip(), f"{where}: start", problems)
        stop = _parse_level(b.strip(), f"{where}: stop", problems)
        mod = mod.strip()
        factor = step = None
        if not mod:
            factor = DEFAULT_FACTOR
        elif mod[0] in "x*":
            factor = _parse_level(mod[1:].strip(), f"{where}: factor", problems)
        elif mod[0] == "+":
            step = _parse_level(mod[1:].strip(), f"{where}: step", problems)
        else:
            problems.append(f"{where}: after A..B write :xF (geometric factor) or :+S (linear step), got {mod!r}")
        if not problems:
            problems += [f"{where}: {msg}" for _key, msg in _range_problems(start, stop, factor, step)]
        if not problems:
            levels = levels_geometric(start, stop, factor) if factor is not None else levels_linear(start, stop, step)
    else:
        parts = [p.strip() for p in spec.split(",")]
        if not spec.strip():
            problems.append(f"{where}: no levels given")
        elif any(not p for p in parts):
            problems.append(f"{where}: empty item in the list")
        else:
            for p in parts:
                v = _parse_level(p, where, problems)
                if v is not None:
                    levels.append(v)
    if problems:
        raise PlanError(problems)
    ladder = Ladder(
        kind=kind,
        levels=_normalize_levels(kind, levels) if generated else tuple(levels),
        warmup=float(warmup),
        duration=float(duration),
        requests=int(requests),
        stable=stable,
        arrivals=arrivals,
    )
    problems = [f"{where}: {'.'.join(key)}: {msg}" for key, msg in _ladder_problems(ladder)]
    if problems:
        raise PlanError(problems)
    return ladder


def _range_problems(start: float, stop: float, factor: float | None, step: float | None) -> list[tuple[str, str]]:
    """(key, what) for an inconsistent start/stop/factor/step range."""
    out = []
    if start <= 0:
        out.append(("start", f"start must be > 0, got {_fmt(start)}"))
    if start > stop:
        out.append(("start", f"start {_fmt(start)} > stop {_fmt(stop)}"))
    if factor is not None and factor <= 1:
        out.append(("factor", f"a geometric factor must be > 1, got {_fmt(factor)}"))
    if step is not None and step <= 0:
        out.append(("step", f"a linear step must be > 0, got {_fmt(step)}"))
    if not out:
        if factor is not None and math.log(stop / start) / math.log(factor) > MAX_LEVELS:
            out.append(("factor", f"more than {MAX_LEVELS} levels"))
        if step is not None and (stop - start) / step > MAX_LEVELS:
            out.append(("step", f"more than {MAX_LEVELS} levels"))
    return out


def _normalize_levels(kind: str, levels: list[float]) -> tuple[float, ...]:
    if kind == "concurrency":
        out: list[float] = []
        for v in levels:
            r = float(round(v)) if v >= 1 else v  # geometric factors like 1.5 give fractions: whole users
            if not out or r != out[-1]:
                out.append(r)
        return tuple(out)
    return tuple(float(v) for v in levels)


def _ladder_problems(ld: Ladder) -> list[tuple[tuple[str, ...], str]]:
    """(key path under ladder, what) for each inconsistency."""
    out: list[tuple[tuple[str, ...], str]] = []
    if ld.kind not in LADDER_KINDS:
        out.append((("kind",), f"unknown kind {ld.kind!r}; one of {', '.join(LADDER_KINDS)}{_suggest(ld.kind, LADDER_KINDS)}"))
    if not ld.levels:
        out.append((("steps",), "no levels (empty list)"))
    if len(ld.levels) > MAX_LEVELS:
        out.append((("steps",), f"{len(ld.levels)} levels, more than {MAX_LEVELS}"))
    for i, v in enumerate(ld.levels):
        if v <= 0:
            out.append((("steps",), f"every level must be > 0, got {_fmt(v)}"))
            break
        if ld.kind == "concurrency" and not float(v).is_integer():
            out.append((("steps",), f"concurrency levels are whole users, got {_fmt(v)}"))
            break
        if i and v <= ld.levels[i - 1]:
            out.append((("steps",), f"levels must increase, got {_fmt(v)} after {_fmt(ld.levels[i - 1])}"))
            break
    if ld.duration <= 0:
        out.append((("duration",), f"must be > 0 seconds, got {_fmt(ld.duration)}"))
    if ld.warmup < 0:
        out.append((("warmup",), f"must be >= 0 seconds, got {_fmt(ld.warmup)}"))
    elif ld.duration > 0 and ld.warmup >= ld.duration:
        out.append(
            (
                ("warmup",),
                f"{_fmt(ld.warmup)} s is not shorter than the step duration ({_fmt(ld.duration)} s, warm-up included): "
                "nothing would be measured",
            )
        )
    if ld.requests < 0:
        out.append((("requests",), f"must be >= 0 (0: steps end on time only), got {ld.requests}"))
    if ld.arrivals not in ARRIVALS:
        out.append((("arrivals",), f"must be one of {', '.join(ARRIVALS)}, got {ld.arrivals!r}"))
    st = ld.stable
    if st is not None:
        if st.window <= 0:
            out.append((("stable", "window"), f"must be > 0 seconds, got {_fmt(st.window)}"))
        elif ld.window > 0 and st.window > ld.window:
            out.append(
                (
                    ("stable", "window"),
                    f"{_fmt(st.window)} s is longer than the measurement window (duration - warmup = {_fmt(ld.window)} s)",
                )
            )
        if not 0 < st.tolerance < 1:
            out.append((("stable", "tolerance"), f"must be a fraction between 0 and 1 (0.05 = 5%), got {_fmt(st.tolerance)}"))
        if st.max_extend < 0:
            out.append((("stable", "max_extend"), f"must be >= 0 seconds, got {_fmt(st.max_extend)}"))
        if st.windows < 2:
            out.append((("stable", "windows"), f"must be >= 2, got {st.windows}"))
    return out


def _suggest(word: str, known) -> str:
    word = str(word)
    close = [k for k in known if word and k.startswith(word)] or difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ---- seconds ----

_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0}


def parse_seconds(value: Any) -> float:
    """A number of seconds, or a string like "500ms", "30s", "2m", "1h". ValueError if not."""
    if isinstance(value, bool):
        raise ValueError(f"expected seconds, got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number of seconds, got {value!r}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m:
            return float(m[1]) * _UNITS[m[2]]
    raise ValueError(f"expected seconds (a number, or e.g. 500ms, 30s, 2m), got {value!r}")


# ---- the YAML schema ----

TOP_KEYS = (
    "name",
    "description",
    "host",
    "api",
    "model",
    "api_key_env",
    "workload",
    "ladder",
    "max_tokens",
    "max_tokens_cap",
    "force_length",
    "continuous_usage",
    "slos",
    "timeouts",
    "early_stop",
    "seed",
    "results",
    "report",
    "workers",
    "sim",
)
WORKLOAD_KEYS = ("trace", "format", "synthetic", "tokenizer", "think_time", "max_in_flight")
LADDER_KEYS = ("kind", "steps", "start", "stop", "factor", "step", "duration", "warmup", "requests", "stable", "arrivals")
STABLE_KEYS = ("window", "tolerance", "max_extend", "windows")
TIMEOUT_KEYS = ("connect", "no_progress", "request")
EARLY_STOP_KEYS = ("enabled", "max_error_rate", "flat_steps", "flat_tolerance", "on_slo")
SIM_KEYS = ("slots", "fast")
SYNTH_KEYS = ("requests", "input", "output", "rate", "arrivals", "prefix_tokens", "seed")

_MISSING = object()


class _Check:
    """Reads a plain dict against the schema, collecting every problem with its line."""

    def __init__(self, source: str, lines: dict[tuple, int]) -> None:
        self.source = source
        self.lines = lines
        self.problems: list[str] = []
        self._order: list[int] = []

    def sorted_problems(self) -> list[str]:
        """The problems in file order (those without a line first)."""
        return [p for _, p in sorted(zip(self._order, self.problems), key=lambda t: t[0])]

    def err(self, path: tuple, msg: str) -> None:
        line = None
        p = path
        while p and line is None:
            line = self.lines.get(p)
            p = p[:-1]
        where = f"{self.source}:{line}" if line is not None else self.source
        dotted = ".".join(str(x) for x in path) if path else "plan"
        self.problems.append(f"{where}: {dotted}: {msg}" if where else f"{dotted}: {msg}")
        self._order.append(line or 0)

    def mapping(self, path: tuple, value: Any, known: tuple[str, ...]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.err(path, f"expected a mapping of {', '.join(known)}, got {_typename(value)}")
            return {}
        for key in value:
            if key not in known:
                self.err(path + (key,), f"unknown key {key!r}{_suggest(key, known)}; known: {', '.join(known)}")
        return value

    def string(self, d: dict, path: tuple, key: str, default: str = "") -> str:
        v = d.get(key, _MISSING)
        if v is _MISSING or v is None:
            return default
        if not isinstance(v, str):
            self.err(path + (key,), f"expected a string, got {_typename(v)} {v!r}")
            return default
        return v

    def boolean(self, d: dict, path: tuple, key: str, default: bool) -> bool:
        v = d.get(key, _MISSING)
        if v is _MISSING or v is None:
            return default
        if not isinstance(v, bool):
            self.err(path + (key,), f"expected true or false, got {_typename(v)} {v!r}")
            return default
        return v

    def number(self, d: dict, path: tuple, key: str, default, *, integer: bool = False, minimum=None, above=None):
        v = d.get(key, _MISSING)
        if v is _MISSING or v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            self.err(path + (key,), f"expected {'a whole number' if integer else 'a number'}, got {_typename(v)} {v!r}")
            return default
        if integer:
            if isinstance(v, float) and not v.is_integer():
                self.err(path + (key,), f"expected a whole number, got {v!r}")
                return default
            v = int(v)
        if minimum is not None and v < minimum:
            self.err(path + (key,), f"must be >= {minimum}, got {v!r}")
            return default
        if above is not None and v <= above:
            self.err(path + (key,), f"must be > {above}, got {v!r}")
            return default
        return v

    def seconds(self, d: dict, path: tuple, key: str, default: float | None) -> float | None:
        v = d.get(key, _MISSING)
        if v is _MISSING or v is None:
            return default
        try:
            return parse_seconds(v)
        except ValueError as e:
            self.err(path + (key,), str(e))
            return default


def _typename(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(v), type(v).__name__
    )


def _resolve(path: str, base_dir: Path | None) -> str:
    """An input path made absolute: relative ones are taken from base_dir."""
    if not path:
        return path
    p = Path(os.path.expanduser(path))
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return os.path.abspath(p)


def _read_slos(ck: _Check, value: Any) -> dict[str, float]:
    path = ("slos",)
    if value is None:
        return {}
    if isinstance(value, str):
        items: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, v = part.partition("=")
            if not sep:
                ck.err(path, f"bad SLO {part!r}: expected METRIC=SECONDS")
                continue
            items[name.strip()] = v.strip()
        value = items
    if not isinstance(value, dict):
        ck.err(path, f"expected a mapping of METRIC: limit, got {_typename(value)}")
        return {}
    out: dict[str, float] = {}
    for name, limit in value.items():
        try:
            check_slo_names({str(name): 0.0})
        except ValueError:
            ck.err(path + (name,), f"unknown SLO metric {name!r}{_suggest(name, _slo_examples())}; known: {slo_vocabulary()}")
            continue
        try:
            if name == "error_rate":
                if isinstance(limit, str) and limit.strip().endswith("%"):
                    limit = float(limit.strip()[:-1]) / 100
                elif isinstance(limit, str):
                    limit = float(limit)
                if isinstance(limit, bool) or not isinstance(limit, (int, float)):
                    raise ValueError(f"expected a fraction (0.01) or a percentage ('1%'), got {limit!r}")
                limit = float(limit)
            else:
                limit = parse_seconds(limit)
        except ValueError as e:
            ck.err(path + (name,), str(e))
            continue
        if limit < 0:
            ck.err(path + (name,), f"a limit must be >= 0, got {limit!r}")
            continue
        out[str(name)] = limit
    return out


def _slo_examples() -> list[str]:
    from llm_locust.metrics.aggregate import SLO_METRICS
    from llm_locust.analysis.steps import SLO_STATS, STEP_LATENCIES

    return list(SLO_METRICS) + ["error_rate"] + [f"{m}_{s}" for m in STEP_LATENCIES for s in SLO_STATS]


def _read_synthetic(ck: _Check, value: Any, base_dir: Path | None):
    from llm_locust.workload.synth import SynthSpec, parse_dist, parse_spec_text

    path = ("workload", "synthetic")
    if isinstance(value, str):
        try:
            spec = parse_spec_text(value)
        except (ValueError, TypeError) as e:
            ck.err(path, str(e))
            return None
    elif isinstance(value, dict):
        d = ck.mapping(path, value, SYNTH_KEYS)
        kw: dict[str, Any] = {}
        for key in SYNTH_KEYS:
            if key not in d or d[key] is None:
                continue
            v = d[key]
            if key in ("requests", "prefix_tokens", "seed"):
                kw[key] = ck.number(d, path, key, SynthSpec.__dataclass_fields__[key].default, integer=True, minimum=0)
            elif key == "rate":
                kw[key] = float(ck.number(d, path, key, 0.0, minimum=0))
            elif key in ("input", "output"):
                if isinstance(v, bool) or not isinstance(v, (int, str)):
                    ck.err(path + (key,), f"expected a length distribution (128, uniform:LO:HI, ...), got {v!r}")
                    continue
                kw[key] = str(v)
            else:
                kw[key] = ck.string(d, path, key, "poisson")
        spec = SynthSpec(**kw)
    else:
        ck.err(path, f"expected `key=value,...` text or a mapping of {', '.join(SYNTH_KEYS)}, got {_typename(value)}")
        return None
    if spec.requests < 1:
        ck.err(path + ("requests",), f"must be >= 1, got {spec.requests}")
    if spec.arrivals not in ARRIVALS:
        ck.err(path + ("arrivals",), f"must be one of {', '.join(ARRIVALS)}, got {spec.arrivals!r}")
    if spec.rate < 0:
        ck.err(path + ("rate",), f"must be >= 0, got {spec.rate}")
    for key in ("input", "output"):
        text = getattr(spec, key)
        if text.startswith("empirical:"):
            trace = _resolve(text.partition(":")[2], base_dir)
            if not Path(trace).is_file():
                ck.err(path + (key,), f"no such trace file {trace} (relative paths are read from the plan's folder)")
            else:
                spec = replace(spec, **{key: f"empirical:{trace}"})
            continue
        try:
            parse_dist(text)
        except ValueError as e:
            ck.err(path + (key,), str(e))
    return spec


def _read_ladder(ck: _Check, value: Any, base_dir: Path | None) -> Ladder | None:
    path = ("ladder",)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse_ladder(value)
        except PlanError as e:
            for p in e.problems:
                ck.err(path, p)
            return None
    d = ck.mapping(path, value, LADDER_KEYS)
    if not d and not isinstance(value, dict):
        return None
    kind = ck.string(d, path, "kind", "")
    if not kind:
        ck.err(path, f"missing kind: one of {', '.join(LADDER_KINDS)}")
        return None
    if kind not in LADDER_KINDS:
        ck.err(path + ("kind",), f"unknown kind {kind!r}; one of {', '.join(LADDER_KINDS)}{_suggest(kind, LADDER_KINDS)}")
        return None
    n_before = len(ck.problems)
    levels: list[float] = []
    has_list = "steps" in d
    has_range = any(k in d for k in ("start", "stop", "factor", "step"))
    if has_list and has_range:
        ck.err(path, "give either steps: [..] or start/stop (with factor or step), not both")
    elif has_list:
        raw = d["steps"]
        if not isinstance(raw, list):
            ck.err(path + ("steps",), f"expected a list of levels, got {_typename(raw)}")
        elif not raw:
            ck.err(path + ("steps",), "empty list: give at least one level")
        else:
            for i, v in enumerate(raw):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    ck.err(path + ("steps", i), f"expected a number, got {_typename(v)} {v!r}")
                else:
                    levels.append(float(v))
    elif has_range:
        start = ck.number(d, path, "start", None)
        stop = ck.number(d, path, "stop", None)
        factor = ck.number(d, path, "factor", None)
        step = ck.number(d, path, "step", None)
        if start is None or stop is None:
            if "start" not in d or "stop" not in d:
                ck.err(path, "a range needs both start and stop")
        elif factor is not None and step is not None:
            ck.err(path, "give factor (geometric) or step (linear), not both")
        else:
            if factor is None and step is None:
                factor = DEFAULT_FACTOR
            rp = _range_problems(float(start), float(stop), factor, step)
            for key, msg in rp:
                ck.err(path + (key,), msg)
            if not rp:
                levels = (
                    levels_geometric(float(start), float(stop), factor)
                    if factor is not None
                    else levels_linear(float(start), float(stop), step)
                )
    else:
        ck.err(path, "no levels: give steps: [..] or start/stop (with factor or step)")
    duration = ck.seconds(d, path, "duration", DEFAULT_DURATION)
    warmup = ck.seconds(d, path, "warmup", DEFAULT_WARMUP)
    requests = ck.number(d, path, "requests", 0, integer=True)
    arrivals = ck.string(d, path, "arrivals", "poisson")
    if "arrivals" in d and d["arrivals"] is not None and kind != "rate":
        ck.err(path + ("arrivals",), "applies to rate ladders only")
    stable = None
    if d.get("stable") is not None:
        sd = ck.mapping(path + ("stable",), d["stable"], STABLE_KEYS)
        if isinstance(d["stable"], dict):
            if "window" not in sd:
                ck.err(path + ("stable",), "missing window (seconds per throughput window)")
            stable = Stable(
                window=ck.seconds(sd, path + ("stable",), "window", 0.0) or 0.0,
                tolerance=float(ck.number(sd, path + ("stable",), "tolerance", 0.05)),
                max_extend=ck.seconds(sd, path + ("stable",), "max_extend", 0.0) or 0.0,
                windows=ck.number(sd, path + ("stable",), "windows", 3, integer=True),
            )
    if len(ck.problems) > n_before:
        return None
    ladder = Ladder(
        kind=kind,
        levels=_normalize_levels(kind, levels) if kind == "concurrency" and has_range else tuple(levels),
        warmup=warmup,
        duration=duration,
        requests=requests,
        stable=stable,
        arrivals=arrivals,
    )
    for key, msg in _ladder_problems(ladder):
        ck.err(path + key, msg)
    return ladder if len(ck.problems) == n_before else None


def plan_from_dict(data: Any, *, source: str = "", base_dir: str | Path | None = None, lines: dict[tuple, int] | None = None) -> Plan:
    """Build and validate a Plan from plain data (a parsed YAML document, or `Plan.to_dict()`).

    base_dir: the folder relative input paths are read from (default: the current directory).
    """
    ck = _Check(source, lines or {})
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PlanError([f"{source or 'plan'}: expected a mapping of {', '.join(TOP_KEYS)}, got {_typename(data)}"], source)
    if "api_key" in data:
        ck.err(("api_key",), f"never put the key in a plan: set an environment variable and name it with api_key_env (default {DEFAULT_API_KEY_ENV})")
    top = ck.mapping((), {k: v for k, v in data.items() if k != "api_key"}, TOP_KEYS)

    from llm_locust.protocols import API_NAMES

    host = ck.string(top, (), "host", "")
    if host and not re.match(r"^https?://[^/\s]+", host):
        ck.err(("host",), f"expected a URL like http://127.0.0.1:8000, got {host!r}")
    api = ck.string(top, (), "api", DEFAULT_API)
    if api not in API_NAMES:
        ck.err(("api",), f"unknown API {api!r}{_suggest(api, API_NAMES)}; one of {', '.join(API_NAMES)}")

    # workload
    wpath = ("workload",)
    wd = ck.mapping(wpath, top.get("workload"), WORKLOAD_KEYS)
    trace = ck.string(wd, wpath, "trace", "")
    fmt = ck.string(wd, wpath, "format", "")
    synthetic = None
    if wd.get("synthetic") is not None:
        if trace:
            ck.err(wpath, "give a trace or a synthetic workload, not both")
        synthetic = _read_synthetic(ck, wd["synthetic"], base)
    if trace:
        trace = _resolve(trace, base)
        if not Path(trace).is_file():
            ck.err(wpath + ("trace",), f"no such trace file {trace} (relative paths are read from the plan's folder)")
    if fmt:
        from llm_locust.workload.formats import FORMATS

        if fmt not in FORMATS:
            ck.err(wpath + ("format",), f"unknown trace format {fmt!r}{_suggest(fmt, FORMATS)}; one of {', '.join(FORMATS)}")
    tokenizer = ck.string(wd, wpath, "tokenizer", "")
    if tokenizer:
        tokenizer = _resolve(tokenizer, base)
        if not Path(tokenizer).exists():
            ck.err(wpath + ("tokenizer",), f"no such tokenizer file or folder {tokenizer}")
    workload = Workload(
        trace=trace,
        format=fmt,
        synthetic=synthetic,
        tokenizer=tokenizer,
        think_time=ck.seconds(wd, wpath, "think_time", 0.0),
        max_in_flight=ck.number(wd, wpath, "max_in_flight", 0, integer=True, minimum=0),
    )

    ladder = _read_ladder(ck, top.get("ladder"), base)

    tpath = ("timeouts",)
    td = ck.mapping(tpath, top.get("timeouts"), TIMEOUT_KEYS)
    timeouts = PlanTimeouts(
        connect=ck.seconds(td, tpath, "connect", 10.0),
        no_progress=ck.seconds(td, tpath, "no_progress", 60.0),
        request=ck.seconds(td, tpath, "request", 600.0),
    )
    for key in TIMEOUT_KEYS:
        if getattr(timeouts, key) <= 0:
            ck.err(tpath + (key,), f"must be > 0 seconds, got {getattr(timeouts, key)!r}")

    epath = ("early_stop",)
    es = top.get("early_stop")
    if isinstance(es, bool):
        early = EarlyStop(enabled=es)
    else:
        ed = ck.mapping(epath, es, EARLY_STOP_KEYS)
        early = EarlyStop(
            enabled=ck.boolean(ed, epath, "enabled", True),
            max_error_rate=float(ck.number(ed, epath, "max_error_rate", 0.05, minimum=0)),
            flat_steps=ck.number(ed, epath, "flat_steps", 2, integer=True, minimum=0),
            flat_tolerance=float(ck.number(ed, epath, "flat_tolerance", 0.05, minimum=0)),
            on_slo=ck.boolean(ed, epath, "on_slo", False),
        )

    spath = ("sim",)
    sd = ck.mapping(spath, top.get("sim"), SIM_KEYS)
    sim = SimOptions(slots=ck.number(sd, spath, "slots", 8, integer=True, minimum=1), fast=ck.boolean(sd, spath, "fast", False))

    plan = Plan(
        ladder=ladder,
        host=host,
        api=api,
        model=ck.string(top, (), "model", ""),
        api_key_env=ck.string(top, (), "api_key_env", DEFAULT_API_KEY_ENV) or DEFAULT_API_KEY_ENV,
        workload=workload,
        max_tokens=ck.number(top, (), "max_tokens", 0, integer=True, minimum=0),
        max_tokens_cap=ck.number(top, (), "max_tokens_cap", 0, integer=True, minimum=0),
        force_length=ck.boolean(top, (), "force_length", True),
        continuous_usage=ck.boolean(top, (), "continuous_usage", False),
        slos=_read_slos(ck, top.get("slos")),
        timeouts=timeouts,
        early_stop=early,
        seed=ck.number(top, (), "seed", 0, integer=True),
        results=ck.string(top, (), "results", ""),
        report=ck.string(top, (), "report", ""),
        workers=ck.number(top, (), "workers", 0, integer=True, minimum=0),
        sim=sim,
        name=_str_or_num(ck, top, "name"),
        description=_str_or_num(ck, top, "description"),
        source=source,
    )
    for p, at in _cross_problems(plan):
        ck.err(at, p)
    if ck.problems:
        raise PlanError(ck.sorted_problems(), source)
    return plan


def _str_or_num(ck: _Check, d: dict, key: str) -> str:
    v = d.get(key)
    if v is None:
        return ""
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        return str(v)
    ck.err((key,), f"expected text, got {_typename(v)}")
    return ""


def _cross_problems(plan: Plan) -> list[tuple[str, tuple]]:
    """Problems between sections (each section alone is fine)."""
    out = []
    ld = plan.ladder
    if ld is not None and ld.kind == "speed":
        syn = plan.workload.synthetic
        if syn is not None and syn.rate <= 0:
            out.append(
                ("a speed ladder replays arrival times: the synthetic workload needs rate > 0 (or use a trace)", ("ladder", "kind"))
            )
    if plan.max_tokens and plan.max_tokens_cap and plan.max_tokens > plan.max_tokens_cap:
        out.append((f"max_tokens {plan.max_tokens} is above max_tokens_cap {plan.max_tokens_cap}", ("max_tokens",)))
    return out


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


def load_plan(path: str | Path) -> Plan:
    """Read, check and resolve a YAML plan. PlanError lists every problem with its line."""
    data, lines = read_yaml(path, "plan")
    return plan_from_dict(data, source=str(path), base_dir=Path(path).resolve().parent, lines=lines)


# ---- the plan as command-line options ----


def synthetic_trace(spec, directory: str | Path | None = None) -> str:
    """Write a synthetic workload as a trace file (with its recipe beside it) and return its path.

    The file is named by the spec's content, so the same spec gives the same file (the workload
    is seeded): written once, reused after."""
    import hashlib
    import tempfile

    from llm_locust.workload.synth import generate, write

    key = hashlib.sha256(synth_text(spec).encode()).hexdigest()[:16]
    folder = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    path = folder / f"llm-locust-synth-{key}.jsonl"
    if not path.is_file():
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        write(generate(spec), tmp, spec)
        os.replace(tmp, path)
        os.replace(f"{tmp}.spec.json", f"{path}.spec.json")
    return str(path)


def plan_argv(plan: Plan, *, synth_dir: str | Path | None = None) -> tuple[list[str], str]:
    """(llm-locust options, host) that run the plan: for `llm-locust run PLAN.yaml`, which puts
    the command line's own options after these, so they win.

    A synthetic workload is written as a trace file first (`synthetic_trace`). Not expressible
    as options, so not carried: `early_stop.flat_steps`, `flat_tolerance` and `on_slo` (the run
    uses their defaults), `stable.windows` (3), `workers` and `sim` (options of `llm-locust run`
    itself, not of the locustfile), `name` and `description`.
    """
    w = plan.workload
    args: list[str] = ["--api", plan.api, "--api-key-env", plan.api_key_env]
    if plan.model:
        args += ["--model", plan.model]
    trace = synthetic_trace(w.synthetic, synth_dir) if w.synthetic is not None else w.trace
    if trace:
        args += ["--trace", trace]
    if w.format and w.synthetic is None:
        args += ["--trace-format", w.format]
    if w.tokenizer:
        args += ["--tokenizer", w.tokenizer]
    if w.think_time:
        args += ["--think-time", _fmt(float(w.think_time))]
    if w.max_in_flight:
        args += ["--max-in-flight", str(w.max_in_flight)]
    if plan.max_tokens:
        args += ["--max-tokens", str(plan.max_tokens)]
    if plan.max_tokens_cap:
        args += ["--max-tokens-cap", str(plan.max_tokens_cap)]
    if not plan.force_length:
        args.append("--no-force-length")
    if plan.continuous_usage:
        args.append("--continuous-usage")
    t = plan.timeouts
    args += [
        "--connect-timeout", _fmt(float(t.connect)),
        "--no-progress-timeout", _fmt(float(t.no_progress)),
        "--request-timeout", _fmt(float(t.request)),
    ]  # fmt: skip
    if plan.slos:
        args += ["--slo", ",".join(f"{k}={_fmt(float(v))}" for k, v in plan.slos.items())]
    ld = plan.ladder
    if ld is not None:
        args += ["--ladder", ld.spec(), "--warmup", _fmt(float(ld.warmup)), "--step-duration", _fmt(float(ld.duration))]
        if ld.requests:
            args += ["--step-requests", str(ld.requests)]
        if ld.stable is not None:
            st = ld.stable
            args += [
                "--stable-window", _fmt(float(st.window)),
                "--stable-tolerance", _fmt(float(st.tolerance)),
                "--stable-max-extend", _fmt(float(st.max_extend)),
            ]  # fmt: skip
        if ld.kind == "rate":
            args += ["--arrivals", ld.arrivals]
    es = plan.early_stop
    if not es.enabled:
        args.append("--no-early-stop")
    args += ["--max-error-rate", _fmt(float(es.max_error_rate))]
    if plan.results:
        args += ["--results", plan.results]
    if plan.report:
        args += ["--report", plan.report]
    args += ["--seed", str(plan.seed)]
    return args, plan.host


# ---- command-line overrides ----

OVERRIDE_KEYS = (
    "host",
    "api",
    "model",
    "api_key_env",
    "trace",
    "trace_format",
    "synthetic",
    "tokenizer",
    "think_time",
    "max_in_flight",
    "max_tokens",
    "max_tokens_cap",
    "force_length",
    "no_force_length",
    "continuous_usage",
    "connect_timeout",
    "no_progress_timeout",
    "request_timeout",
    "slo",
    "results",
    "report",
    "seed",
    "workers",
    "sim_slots",
    "sim_fast",
    "ladder",
    "warmup",
    "step_duration",
    "step_requests",
    "stable",
    "arrivals",
    "early_stop",
    "max_error_rate",
    "name",
)


def merge_cli(plan: Plan, overrides: dict[str, Any]) -> Plan:
    """The plan with command-line values applied; they win over the plan's.

    overrides: argparse dest names (`OVERRIDE_KEYS`) of the options the user gave; None values
    are skipped, so pass None for options left at their defaults. `trace` replaces a synthetic
    workload and `synthetic` (text, as `trace synth`) a trace; `slo` (text `ttft=0.5,...` or a
    dict) is merged per metric; `ladder` (short syntax) replaces the kind and levels, keeping the
    plan's step timing unless `warmup`, `step_duration`, `step_requests` or `stable` (text
    `window=10,tolerance=0.05,max_extend=60`) are given too. Relative paths are taken from the
    current directory. The result is validated again: PlanError on conflicts.
    """
    unknown = [k for k in overrides if k not in OVERRIDE_KEYS]
    if unknown:
        raise PlanError([f"unknown override(s) {', '.join(map(repr, unknown))}; known: {', '.join(OVERRIDE_KEYS)}"])
    o = {k: v for k, v in overrides.items() if v is not None}
    if not o:
        return plan
    d = plan.to_dict()
    cwd = Path.cwd()
    problems: list[str] = []
    simple = {
        "host": ("host",),
        "api": ("api",),
        "model": ("model",),
        "api_key_env": ("api_key_env",),
        "max_tokens": ("max_tokens",),
        "max_tokens_cap": ("max_tokens_cap",),
        "continuous_usage": ("continuous_usage",),
        "results": ("results",),
        "report": ("report",),
        "seed": ("seed",),
        "workers": ("workers",),
        "name": ("name",),
        "tokenizer": ("workload", "tokenizer"),
        "think_time": ("workload", "think_time"),
        "max_in_flight": ("workload", "max_in_flight"),
        "connect_timeout": ("timeouts", "connect"),
        "no_progress_timeout": ("timeouts", "no_progress"),
        "request_timeout": ("timeouts", "request"),
        "sim_slots": ("sim", "slots"),
        "sim_fast": ("sim", "fast"),
        "max_error_rate": ("early_stop", "max_error_rate"),
        "early_stop": ("early_stop", "enabled"),
    }
    for key, path in simple.items():
        if key in o:
            target = d
            for p in path[:-1]:
                target = target[p]
            target[path[-1]] = o[key]
    if "force_length" in o:
        d["force_length"] = bool(o["force_length"])
    if o.get("no_force_length"):
        d["force_length"] = False
    w = d["workload"]
    if "trace" in o:
        w.pop("synthetic", None)
        w["trace"] = o["trace"]
        w.setdefault("format", "")
    if "trace_format" in o:
        w["format"] = o["trace_format"]
    if "synthetic" in o:
        if "trace" in o and o["trace"]:
            problems.append("give --trace or --synthetic, not both")
        w.pop("trace", None)
        w.pop("format", None)
        w["synthetic"] = o["synthetic"]
    if "slo" in o:
        new = o["slo"]
        if isinstance(new, str):
            parsed: dict[str, Any] = {}
            for part in filter(None, (p.strip() for p in new.split(","))):
                name, sep, v = part.partition("=")
                if not sep:
                    problems.append(f"--slo: bad SLO {part!r}: expected METRIC=SECONDS")
                    continue
                parsed[name.strip()] = v.strip()
            new = parsed
        d["slos"] = {**d["slos"], **new}
    ladder_keys = ("ladder", "warmup", "step_duration", "step_requests", "stable", "arrivals")
    if any(k in o for k in ladder_keys):
        ld = d["ladder"]
        if "ladder" in o:
            try:
                parsed_ladder = parse_ladder(o["ladder"]) if isinstance(o["ladder"], str) else o["ladder"]
            except PlanError as e:
                raise PlanError([f"--ladder: {p}" for p in e.problems]) from None
            base = ld or {"duration": DEFAULT_DURATION, "warmup": DEFAULT_WARMUP, "requests": 0, "stable": None}
            ld = {
                "kind": parsed_ladder.kind,
                "steps": [_plain(v) for v in parsed_ladder.levels],
                "duration": base["duration"],
                "warmup": base["warmup"],
                "requests": base["requests"],
                "stable": base["stable"],
            }
            if parsed_ladder.kind == "rate":
                ld["arrivals"] = (base.get("arrivals") or "poisson") if plan.ladder and plan.ladder.kind == "rate" else "poisson"
        if ld is None:
            given = ", ".join(f"--{k.replace('_', '-')}" for k in ladder_keys if k in o)
            raise PlanError([f"{given} needs a ladder: give --ladder (e.g. concurrency:1..64) or a plan with one"])
        if "warmup" in o:
            ld["warmup"] = o["warmup"]
        if "step_duration" in o:
            ld["duration"] = o["step_duration"]
        if "step_requests" in o:
            ld["requests"] = o["step_requests"]
        if "arrivals" in o:
            ld["arrivals"] = o["arrivals"]
        if "stable" in o:
            st = o["stable"]
            if isinstance(st, str):
                if st.strip().lower() in ("", "off", "none", "no"):
                    st = None
                else:
                    parsed_st: dict[str, Any] = {}
                    for part in filter(None, (p.strip() for p in st.split(","))):
                        name, sep, v = part.partition("=")
                        if not sep:
                            problems.append(f"--stable: bad item {part!r}: expected KEY=VALUE with KEY one of {', '.join(STABLE_KEYS)}")
                            continue
                        try:
                            parsed_st[name.strip()] = float(v) if name.strip() != "windows" else int(v)
                        except ValueError:
                            parsed_st[name.strip()] = v.strip()
                    st = parsed_st
            ld["stable"] = st
        d["ladder"] = ld
    if problems:
        raise PlanError(problems)
    try:
        return plan_from_dict(d, source=plan.source or "", base_dir=cwd)
    except PlanError as e:
        raise PlanError(["after command-line overrides: " + p for p in e.problems], plan.source) from None



def plan_from_settings(settings, *, host: str, workers: int = 0, sim_slots: int | None = None) -> Plan:
    """The effective plan of a run, from the options it ran with (kept in its results).

    `host` "" with `sim_slots`: the run used the built-in simulator with that many slots.
    """
    d: dict[str, Any] = {
        "host": host,
        "api": settings.api,
        "model": settings.model,
        "api_key_env": settings.api_key_env,
        "workload": {
            "trace": settings.trace,
            "format": settings.trace_format,
            "tokenizer": settings.tokenizer,
            "think_time": settings.think_time,
            "max_in_flight": settings.max_in_flight,
        },
        "max_tokens": settings.max_tokens,
        "max_tokens_cap": settings.max_tokens_cap,
        "force_length": settings.force_length,
        "continuous_usage": settings.continuous_usage,
        "slos": dict(settings.slos),
        "timeouts": {
            "connect": settings.timeouts.connect,
            "no_progress": settings.timeouts.no_progress,
            "request": settings.timeouts.total,
        },
        "early_stop": {"enabled": not settings.no_early_stop, "max_error_rate": settings.max_error_rate},
        "seed": settings.seed,
        "results": settings.results,
        "report": settings.report,
        "workers": workers,
    }
    if sim_slots:
        d["sim"] = {"slots": sim_slots}
    if settings.ladder:
        d["ladder"] = parse_ladder(
            settings.ladder,
            warmup=settings.warmup,
            duration=settings.step_duration,
            requests=settings.step_requests,
            stable=Stable(settings.stable_window, settings.stable_tolerance, settings.stable_max_extend) if settings.stable_window else None,
            arrivals=settings.arrivals,
        ).to_dict()
    return plan_from_dict(d, source="effective options")
