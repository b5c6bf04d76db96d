"""Load ladders: the steps of a stepped test, their timing, the stability rule and the early stop.

    parse_ladder("concurrency:1..64", ...) -> Ladder     # PlanError (a ValueError) says why not
    parse_ladder("sla:rate:1..64:5%", ...) -> Ladder     # a search (Ladder.search): the highest load meeting every SLO
    parse_ladder("burst:rate=4,x=3,for=10s", ...) -> Ladder  # a burst (Ladder.burst): base rate, xN for T s, base again
    parse_ladder("rate:2@60s,8@30s,2@60s", ...) -> Ladder  # a rate series (Ladder.durations): each step its own length

The settings model (settings.model) reads a ladder's spec and timing from the command line or a
plan; the runtime's LadderShape walks it. Pure: no Locust.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from llm_locust.analysis.saturation import early_stop
from llm_locust.settings.limits import MAX_RATE, MAX_USERS
from llm_locust.settings.units import PlanError, bare_seconds
from llm_locust.workload.arrivals import ARRIVAL_KINDS, arrival_problem
from llm_locust.workload.values import suggest

LADDER_KINDS = ("concurrency", "rate", "speed")
ARRIVALS: tuple[str, ...] = ARRIVAL_KINDS
DEFAULT_DURATION = 40.0  # seconds per step, warm-up included
DEFAULT_WARMUP = 10.0  # seconds discarded at the start of each step
DEFAULT_FACTOR = 2.0
MAX_LEVELS = 200
SEARCH_KINDS = ("rate", "concurrency")  # sla:KIND
DEFAULT_SEARCH_RANGE = (1.0, 256.0)
DEFAULT_PRECISION = 0.05
DEFAULT_BURST_AFTER = 60.0  # seconds at the base rate after a burst, to see the recovery
BURST_KEYS = ("rate", "x", "for", "before", "after")
BURST_BARE_BELOW = 3600.0  # a burst's lengths: a bare number from this up is refused (units.bare_seconds)
SERIES_BARE_BELOW = 3600.0  # a rate series' step lengths: the same rule


@dataclass(frozen=True)
class Burst:
    """`burst:rate=R,x=N,for=T[,before=B][,after=A]`: an open loop at R requests/s for B seconds
    (default: the step duration, warm-up included), then N x R for T seconds, then R again for A
    seconds (default 60 s). Three ladder steps: base (with the warm-up), burst, after (no warm-up).
    The verdict (analysis.stability.burst_recovery): seconds after the burst until TTFT p50 is back
    within 10% of the base step's."""

    rate: float
    x: float
    seconds: float  # for=
    before: float | None = None
    after: float = DEFAULT_BURST_AFTER

    def spec(self) -> str:
        before = f",before={_fmt(self.before)}s" if self.before is not None else ""
        return f"rate={_fmt(self.rate)},x={_fmt(self.x)},for={_fmt(self.seconds)}s{before},after={_fmt(self.after)}s"

    def levels(self) -> tuple[float, float, float]:
        return (self.rate, float(f"{self.rate * self.x:.6g}"), self.rate)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": _plain(self.rate),
            "x": _plain(self.x),
            "for": self.seconds,
            "before": self.before,
            "after": self.after,
        }


@dataclass(frozen=True)
class Search:
    """`sla:KIND:LO..HI:P%`: find the highest load of `kind` in [lo, hi] meeting every SLO, to a
    relative precision (bracketing by doubling from lo, then bisection; see analysis.sla)."""

    kind: str
    lo: float
    hi: float
    precision: float = DEFAULT_PRECISION

    def spec(self) -> str:
        return f"sla:{self.kind}:{_fmt(self.lo)}..{_fmt(self.hi)}:{self.precision * 100:g}%"

    def max_probes(self) -> int:
        """At most this many probes: the doublings from lo to hi, then the halvings of the
        bracket down to the precision."""
        doublings = math.ceil(math.log2(self.hi / self.lo)) + 1
        return doublings + max(1, math.ceil(math.log2(1 / self.precision)))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "lo": _plain(self.lo), "hi": _plain(self.hi), "precision": self.precision}


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
        return {
            "window": self.window,
            "tolerance": self.tolerance,
            "max_extend": self.max_extend,
            "windows": self.windows,
        }


@dataclass(frozen=True)
class Ladder:
    """The load steps: `levels` of `kind` (users, requests/s, or trace speed factor)."""

    kind: str
    levels: tuple[float, ...]
    warmup: float = DEFAULT_WARMUP
    duration: float = DEFAULT_DURATION  # per step, warm-up included
    requests: int = 0  # > 0: the measurement ends once this many requests finished (duration caps it)
    stable: Stable | None = None
    arrivals: str = "poisson"  # rate ladders: poisson, constant or gamma inter-arrival times (workload.arrivals)
    search: Search | None = None  # sla:...: the levels are chosen one at a time (levels: the doublings)
    burst: Burst | None = None  # burst:...: three steps (base, burst, after) of their own lengths
    burstiness: float = 1.0  # gamma's shape (vLLM's --burstiness): 1 = Poisson, < 1 burstier, > 1 smoother
    durations: tuple[float, ...] = ()  # a rate series (rate:2@60s,8@30s): each step's own length

    @property
    def profile(self) -> bool:
        """A load profile over time (a burst, a rate series), not a ladder to a knee: its steps go
        up and down, last exactly as planned (no stability extension, no request count), and
        there is no knee and no early stop."""
        return self.burst is not None or bool(self.durations)

    def step_timing(self, index: int) -> tuple[float, float]:
        """(duration, warm-up) of step `index` (1-based); a burst's and a series' steps have their
        own lengths, and only their first step has the warm-up (the traffic is one profile)."""
        if self.durations:
            return self.durations[index - 1], (self.warmup if index == 1 else 0.0)
        b = self.burst
        if b is None:
            return self.duration, self.warmup
        if index == 1:
            return (b.before if b.before is not None else self.duration), self.warmup
        return (b.seconds if index == 2 else b.after), 0.0

    @property
    def window(self) -> float:
        """The measurement window of a step (seconds after warm-up)."""
        return self.duration - self.warmup

    def planned_time(self) -> tuple[float, float]:
        """(seconds without stability extensions, at most with them) for the whole ladder."""
        if self.durations:
            t = sum(self.durations)
            return t, t
        if self.burst is not None:
            t = sum(self.step_timing(i)[0] for i in (1, 2, 3))
            return t, t + (3 * self.stable.max_extend if self.stable else 0.0)
        n = self.search.max_probes() if self.search else len(self.levels)
        base = n * self.duration
        extra = n * self.stable.max_extend if self.stable else 0.0
        return base, base + extra

    def spec(self) -> str:
        """The levels in the short syntax (explicit list). A search: `KIND:sla:LO..HI:P%`, the kind
        first as every ladder's (the runtime reads a ladder's kind from the text's first word)."""
        if self.search is not None:
            se = self.search
            return f"{se.kind}:sla:{_fmt(se.lo)}..{_fmt(se.hi)}:{se.precision * 100:g}%"
        if self.burst is not None:
            return f"rate:burst:{self.burst.spec()}"
        if self.durations:
            steps = zip(self.levels, self.durations, strict=True)
            return f"{self.kind}:{','.join(f'{_fmt(v)}@{_fmt(d)}s' for v, d in steps)}"
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
            d["burstiness"] = self.burstiness
        if self.durations:
            d["durations"] = list(self.durations)
            d["spec"] = self.spec()
        if self.search is not None:
            d["search"] = self.search.to_dict()
            d["spec"] = self.search.spec()
        if self.burst is not None:
            d["burst"] = self.burst.to_dict()
            d["spec"] = self.spec()
        return d

    def problems(self) -> list[str]:
        """What is inconsistent, as "ladder.KEY: what" (empty: fine)."""
        return [f"ladder.{'.'.join(key)}: {msg}" for key, msg in _ladder_problems(self)]


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
    burstiness: float = 1.0,
) -> Ladder:
    """`KIND:LEVELS` -> Ladder. LEVELS: `A..B` (geometric, x2), `A..B:xF` (geometric, factor F),
    `A..B:+S` (linear, step S), `A,B,C` (explicit), or for rate `R@T,R@T,...` (a series: each
    step R requests/s for T, in any order). The ladder ends at B exactly. KIND: concurrency
    (whole users), rate (requests/s), speed (trace speed factor). PlanError says why not."""
    problems: list[str] = []
    m = _LADDER_RE.match(text or "")
    if not m:
        raise PlanError(
            [f"ladder {text!r}: expected KIND:LEVELS, e.g. concurrency:1..64, rate:1..10:+1, speed:0.5,1,2"]
        )
    kind, spec = m["kind"].lower(), m["spec"]
    where = f"ladder {text.strip()!r}"
    if (
        kind in SEARCH_KINDS and spec.split(":", 1)[0].strip().lower() == "sla"
    ):  # KIND:sla:..., as Ladder.spec writes it
        kind, spec = "sla", kind + spec[spec.index(":") :] if ":" in spec else kind
    if kind == "rate" and spec.split(":", 1)[0].strip().lower() == "burst":  # rate:burst:..., as Ladder.spec writes it
        kind, spec = "burst", spec.split(":", 1)[1] if ":" in spec else ""
    if kind == "burst":
        burst = _parse_burst(spec, where)
        ladder = Ladder(
            kind="rate",
            levels=burst.levels(),
            warmup=float(warmup),
            duration=float(duration),
            requests=int(requests),
            stable=stable,
            arrivals=arrivals,
            burstiness=float(burstiness),
            burst=burst,
        )
        return _checked(ladder, where)
    if kind == "sla":
        search = _parse_search(spec, where)
        ladder = Ladder(
            kind=search.kind,
            levels=_normalize_levels(search.kind, levels_geometric(search.lo, search.hi, DEFAULT_FACTOR)),
            warmup=float(warmup),
            duration=float(duration),
            requests=int(requests),
            stable=stable,
            arrivals=arrivals,
            burstiness=float(burstiness),
            search=search,
        )
        return _checked(ladder, where, skip=("steps",))
    if kind not in LADDER_KINDS:
        raise PlanError(
            [f"{where}: unknown kind {kind!r}; one of {', '.join(LADDER_KINDS)}{suggest(kind, LADDER_KINDS)}"]
        )
    if "@" in spec:
        return _checked(_series(kind, spec, where, warmup, stable, arrivals, burstiness), where)
    generated = ".." in spec
    levels = _range_levels(spec, where, problems) if generated else _list_levels(spec, where, problems)
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
        burstiness=float(burstiness),
    )
    return _checked(ladder, where)


def _series(
    kind: str, spec: str, where: str, warmup: float, stable: Stable | None, arrivals: str, burstiness: float
) -> Ladder:
    """`R@T,R@T,...` -> a rate series: step k at R requests/s for T (a duration with its unit, or
    seconds). Every step names its length: --step-duration is not read, so the text alone is the
    whole profile (and reads back the same wherever it is kept)."""
    problems: list[str] = []
    usage = "a rate series is rate:R@T,R@T,... e.g. rate:2@60s,8@30s,2@60s"
    if kind != "rate":
        raise PlanError([f"{where}: steps with their own length (@) are for a rate series; {usage}"])
    if ".." in spec:
        raise PlanError([f"{where}: a range (A..B) cannot take lengths; {usage}"])
    levels: list[float] = []
    durations: list[float] = []
    for part in (p.strip() for p in spec.split(",")):
        rate_text, at, length = (x.strip() for x in part.partition("@"))
        if not at:
            problems.append(
                f"{where}: {part or 'an empty item'!r} has no length: every step of a series is R@T; {usage}"
            )
            continue
        v = _parse_level(rate_text, f"{where}: rate", problems)
        try:
            d = bare_seconds(length, SERIES_BARE_BELOW)
        except (ValueError, PlanError) as e:
            problems.append(f"{where}: {part!r}: {e}")
            continue
        if v is not None:
            levels.append(v)
            durations.append(float(d))
    if not problems:
        problems += [f"{where}: {_fmt(d)} s: every step's length must be > 0" for d in durations if not d > 0][:1]
    if problems:
        raise PlanError(problems)
    return Ladder(
        kind=kind,
        levels=tuple(levels),
        warmup=float(warmup),
        duration=max(durations),
        stable=stable,
        arrivals=arrivals,
        burstiness=float(burstiness),
        durations=tuple(durations),
    )


def _checked(ladder: Ladder, where: str, skip: tuple[str, ...] | None = None) -> Ladder:
    """The ladder, or PlanError with every problem _ladder_problems finds (but those under `skip`)."""
    problems = [f"{where}: {'.'.join(key)}: {msg}" for key, msg in _ladder_problems(ladder) if key != skip]
    if problems:
        raise PlanError(problems)
    return ladder


def _range_levels(spec: str, where: str, problems: list[str]) -> list[float]:
    """`A..B[:xF|:+S]` -> the generated levels; [] with the reasons appended to problems when invalid."""
    rng, _, mod = spec.partition(":")
    a, _, b = rng.partition("..")
    start = _parse_level(a.strip(), f"{where}: start", problems)
    stop = _parse_level(b.strip(), f"{where}: stop", problems)
    mod = mod.strip()
    factor: float | None = None
    step: float | None = None
    if not mod:
        factor = DEFAULT_FACTOR
    elif mod[0] in "x*":
        factor = _parse_level(mod[1:].strip(), f"{where}: factor", problems)
    elif mod[0] == "+":
        step = _parse_level(mod[1:].strip(), f"{where}: step", problems)
    else:
        problems.append(f"{where}: after A..B write :xF (geometric factor) or :+S (linear step), got {mod!r}")
    if problems or start is None or stop is None:  # a None start/stop always came with a problem
        return []
    problems += [f"{where}: {msg}" for _key, msg in _range_problems(start, stop, factor, step)]
    if problems:
        return []
    if factor is not None:
        return levels_geometric(start, stop, factor)
    assert step is not None  # neither a factor nor a step: a problem was appended above
    return levels_linear(start, stop, step)


def _list_levels(spec: str, where: str, problems: list[str]) -> list[float]:
    """`A,B,C` -> the explicit levels; the reasons appended to problems for the invalid ones."""
    levels: list[float] = []
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
    return levels


def _parse_burst(spec: str, where: str) -> Burst:
    """`rate=R,x=N,for=T[,before=B][,after=A]` (after `burst:`; a bare first number is the rate;
    T, B, A durations with a unit or seconds) -> Burst."""
    problems: list[str] = []
    vals: dict[str, float] = {}
    usage = "expected burst:rate=R,x=N,for=T[,before=B][,after=A], e.g. burst:rate=4,x=3,for=10s"
    for i, part in enumerate(p.strip() for p in spec.split(",")):
        if not part:
            problems.append(f"{where}: empty item; {usage}")
            continue
        key, eq, val = part.partition("=")
        key = key.strip().lower()
        if not eq:
            if i == 0:
                key, val = "rate", part
            else:
                problems.append(f"{where}: {part!r} is not KEY=VALUE; {usage}")
                continue
        if key not in BURST_KEYS:
            problems.append(f"{where}: unknown key {key!r}; one of {', '.join(BURST_KEYS)}{suggest(key, BURST_KEYS)}")
            continue
        if key in vals:
            problems.append(f"{where}: {key} given twice")
            continue
        try:
            v = (
                bare_seconds(val.strip(), BURST_BARE_BELOW)
                if key in ("for", "before", "after")
                else float(val.strip().lstrip("x"))
            )
        except (ValueError, PlanError) as e:
            problems.append(f"{where}: {key}: {e}")
            continue
        if not math.isfinite(v):
            problems.append(f"{where}: {key}: {val!r} is not a finite number")
            continue
        vals[key] = v
    for key in ("rate", "x", "for"):
        if key not in vals and not problems:
            problems.append(f"{where}: missing {key}=; {usage}")
    if not problems:
        problems += _burst_value_problems(vals, where)
    if problems:
        raise PlanError(problems)
    return Burst(
        rate=vals["rate"],
        x=vals["x"],
        seconds=vals["for"],
        before=vals.get("before"),
        after=vals.get("after", DEFAULT_BURST_AFTER),
    )


def _burst_value_problems(vals: dict[str, float], where: str) -> list[str]:
    """What is out of range in a burst whose keys all parsed (rate, x and for present)."""
    problems: list[str] = []
    if vals["rate"] <= 0:
        problems.append(f"{where}: rate must be > 0 requests/s, got {_fmt(vals['rate'])}")
    if vals["x"] <= 1:
        problems.append(f"{where}: x (the burst factor) must be > 1, got {_fmt(vals['x'])}")
    for key in ("for", "before", "after"):
        if key in vals and vals[key] <= 0:
            problems.append(f"{where}: {key} must be > 0 seconds, got {_fmt(vals[key])}")
    return problems


def _parse_search(spec: str, where: str) -> Search:
    """`KIND[:LO..HI][:P%]` (after `sla:`) -> Search. P: a percentage (5%) or a fraction (0.05)."""
    problems: list[str] = []
    parts = [p.strip() for p in spec.split(":")]
    kind = parts[0].lower()
    if kind not in SEARCH_KINDS:
        hint = (
            " (a speed search is not supported: a trace's speed has no SLO-monotone meaning)" if kind == "speed" else ""
        )
        raise PlanError(
            [
                f"{where}: expected sla:KIND[:LO..HI][:P%] with KIND one of {', '.join(SEARCH_KINDS)}, "
                f"got {kind!r}{hint}{suggest(kind, SEARCH_KINDS)}"
            ]
        )
    lo, hi = DEFAULT_SEARCH_RANGE
    precision = DEFAULT_PRECISION
    seen_range = seen_precision = False
    for part in parts[1:]:
        if ".." in part and not seen_range:
            seen_range = True
            a, _, b = part.partition("..")
            va = _parse_level(a.strip(), f"{where}: lower bound", problems)
            vb = _parse_level(b.strip(), f"{where}: upper bound", problems)
            if va is not None and vb is not None:
                lo, hi = va, vb
        elif part and not seen_precision and ".." not in part:
            seen_precision = True
            pct = part.endswith("%")
            v = _parse_level(part[:-1].strip() if pct else part, f"{where}: precision", problems)
            if v is not None:
                precision = v / 100 if pct else v
        else:
            problems.append(f"{where}: unexpected {part!r}; expected sla:KIND[:LO..HI][:P%], e.g. sla:rate:1..64:5%")
    if not problems:
        if lo <= 0:
            problems.append(f"{where}: the lower bound must be > 0, got {_fmt(lo)}")
        if hi <= lo:
            problems.append(f"{where}: the upper bound {_fmt(hi)} must be above the lower bound {_fmt(lo)}")
        if not 0 < precision < 1:
            problems.append(f"{where}: the precision must be between 0 and 100% (e.g. 5%), got {precision * 100:g}%")
        elif precision < 0.001:
            problems.append(f"{where}: a precision below 0.1% is not measurable; got {precision * 100:g}%")
        if kind == "concurrency" and not (float(lo).is_integer() and float(hi).is_integer()):
            problems.append(f"{where}: concurrency bounds are whole users, got {_fmt(lo)}..{_fmt(hi)}")
        if not problems and math.log2(hi / lo) > MAX_LEVELS:
            problems.append(f"{where}: the range is too wide")
    if problems:
        raise PlanError(problems)
    return Search(kind=kind, lo=float(lo), hi=float(hi), precision=float(precision))


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


def _size_problems(ld: Ladder) -> list[tuple[tuple[str, ...], str]]:
    """A level past the sensible limits (settings.limits): the run would only overload the machine."""
    most = {"concurrency": (MAX_USERS, "users in one run"), "rate": (MAX_RATE, "requests/s")}.get(ld.kind)
    if most is not None and ld.levels and max(ld.levels) > most[0]:
        return [(("levels",), f"{_plain(max(ld.levels))} is more than {_plain(most[0])}, the most {most[1]}")]
    return []


def _ladder_problems(ld: Ladder) -> list[tuple[tuple[str, ...], str]]:
    """(key path under ladder, what) for each inconsistency."""
    out: list[tuple[tuple[str, ...], str]] = []
    if ld.kind not in LADDER_KINDS:
        out.append(
            (("kind",), f"unknown kind {ld.kind!r}; one of {', '.join(LADDER_KINDS)}{suggest(ld.kind, LADDER_KINDS)}")
        )
    if not ld.levels:
        out.append((("steps",), "no levels (empty list)"))
    if len(ld.levels) > MAX_LEVELS:
        out.append((("steps",), f"{len(ld.levels)} levels, more than {MAX_LEVELS}"))
    out += _size_problems(ld)
    for i, v in enumerate(ld.levels):
        if v <= 0:
            out.append((("steps",), f"every level must be > 0, got {_fmt(v)}"))
            break
        if ld.kind == "concurrency" and not float(v).is_integer():
            out.append((("steps",), f"concurrency levels are whole users, got {_fmt(v)}"))
            break
        if i and v <= ld.levels[i - 1] and not ld.profile:
            out.append((("steps",), f"levels must increase, got {_fmt(v)} after {_fmt(ld.levels[i - 1])}"))
            break
    if ld.duration <= 0:
        out.append((("duration",), f"must be > 0 seconds, got {_fmt(ld.duration)}"))
    if ld.warmup < 0:
        out.append((("warmup",), f"must be >= 0 seconds, got {_fmt(ld.warmup)}"))
    elif ld.profile:
        pass  # its first step's length against the warm-up: Settings.cross_problems (the warm-up comes apart)
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
    out += _arrival_problems(ld)
    if ld.stable is not None and not ld.durations:
        out += _stable_problems(ld.stable, ld.window)
    return out


def _arrival_problems(ld: Ladder) -> list[tuple[tuple[str, ...], str]]:
    """The arrivals and burstiness (workload.arrivals), and what a rate series cannot take."""
    out: list[tuple[tuple[str, ...], str]] = []
    if ld.arrivals not in ARRIVALS:
        out.append((("arrivals",), f"must be one of {', '.join(ARRIVALS)}, got {ld.arrivals!r}"))
    elif (problem := arrival_problem(ld.arrivals, ld.burstiness)) is not None:
        out.append((("burstiness",), problem.removeprefix("burstiness: ")))
    if ld.durations and (ld.requests or ld.stable is not None):
        out.append(
            (
                ("requests" if ld.requests else "stable",),
                "a rate series' steps last exactly as written: drop the request count and the stability rule",
            )
        )
    return out


def _stable_problems(st: Stable, window: float) -> list[tuple[tuple[str, ...], str]]:
    """(key path under ladder, what) for the stability check, against the step's measurement window."""
    out: list[tuple[tuple[str, ...], str]] = []
    if st.window <= 0:
        out.append((("stable", "window"), f"must be > 0 seconds, got {_fmt(st.window)}"))
    elif window > 0 and st.window > window:
        out.append(
            (
                ("stable", "window"),
                f"{_fmt(st.window)} s is longer than the measurement window (duration - warmup = {_fmt(window)} s)",
            )
        )
    if not 0 < st.tolerance < 1:
        out.append(
            (("stable", "tolerance"), f"must be a fraction between 0 and 1 (0.05 = 5%), got {_fmt(st.tolerance)}")
        )
    if st.max_extend < 0:
        out.append((("stable", "max_extend"), f"must be >= 0 seconds, got {_fmt(st.max_extend)}"))
    if st.windows < 2:
        out.append((("stable", "windows"), f"must be >= 2, got {st.windows}"))
    return out
