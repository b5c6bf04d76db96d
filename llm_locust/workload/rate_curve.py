"""The request rate as a function of time, for open-loop synthetic workloads (`--rate CURVE`).

A production day is not a constant rate: inference-perf takes the rate as a curve (a sine wave, a
ramp), and a soak against a diurnal curve finds what a flat rate hides. The curve is written in a
small grammar of its own, parsed here; nothing is evaluated (no `eval`, no expression library):

    8                                   a constant 8 requests/s
    sine:mean=8,amp=4,period=60s        8 + 4 sin(2 pi t / 60), phase=0 (radians) optional
    ramp:from=1,to=10,over=60s          linear from 1 to 10 over 60 s, then 10
    file:PATH                           a series of `t,rate` rows (seconds, requests/s; `#` comments),
                                        linear between rows, the last rate after the last row

Durations: `90` or `90s`, `500ms`, `2m`, `1h`. Rates are requests per second,
never negative (a sine's amp at most its mean).

Arrivals follow the curve by time rescaling: the arrivals of a process of rate 1 (poisson,
constant or gamma, workload.arrivals), drawn in "expected arrivals" s, are placed at the times t
where the curve's integral L(t) = integral of rate from 0 to t equals s. A constant process so
places exactly one arrival per unit of L, so the arrivals in any window [a, b] are L(b) - L(a)
within one; a Poisson one gives a Poisson process of intensity rate(t) (the standard
construction of an inhomogeneous Poisson process). L is in closed form for each curve; its
inverse is found by bisection to 1 microsecond.

Plain Python: no Locust, no gevent.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llm_locust.workload.arrivals import interval_draw
from llm_locust.workload.paths import InputError, read_regular

MAX_RATE = 1e6  # requests/s: a curve beyond it is a typo
MAX_POINTS = 100_000  # rows of a file curve
EXAMPLES = "8, sine:mean=8,amp=4,period=60s, ramp:from=1,to=10,over=60s or file:PATH"


class CurveError(ValueError):
    """A rate curve that cannot be read, in one line naming what is wrong."""


@dataclass(frozen=True)
class RateCurve:
    """A rate curve: its written form, and the rate and its integral as functions of seconds."""

    text: str
    rate: Callable[[float], float]
    integral: Callable[[float], float]
    bounded: float | None = None  # the integral's limit when the rate ends at 0 (arrivals stop), else None

    def time_of(self, s: float) -> float | None:
        """The time t at which the integral reaches s (None: it never does)."""
        if self.bounded is not None and s > self.bounded:
            return None
        hi = 1.0
        while self.integral(hi) < s:
            hi *= 2
            if hi > 1e9:
                return None
        lo = 0.0
        while hi - lo > 1e-6:
            mid = (lo + hi) / 2
            if self.integral(mid) < s:
                lo = mid
            else:
                hi = mid
        return hi

    def mean_rate(self, seconds: float) -> float:
        return self.integral(seconds) / seconds if seconds > 0 else self.rate(0.0)


def _number(key: str, text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise CurveError(f"{key}: expected a number, got {text!r}") from None
    if not math.isfinite(x):
        raise CurveError(f"{key}: expected a finite number, got {text!r}")
    return x


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(key: str, text: str) -> float:
    """`90`, `90s`, `1.5m`, `1h`, `500ms` as seconds, above 0."""
    t = text.strip()
    unit = next((u for u in ("ms", "s", "m", "h") if t.endswith(u)), "")
    x = _number(key, t[: len(t) - len(unit)] if unit else t) * _UNITS.get(unit, 1.0)
    if not x > 0:
        raise CurveError(f"{key}: expected a duration above 0, like 60s or 2m, got {text!r}")
    return x


def _rate_value(key: str, x: float) -> float:
    if not 0 <= x <= MAX_RATE:
        raise CurveError(f"{key}: {x:g} requests/s is outside 0..{MAX_RATE:g}")
    return x


def _items(kind: str, body: str, keys: dict[str, bool]) -> dict[str, str]:
    """`a=1,b=2` as {key: text}: every required key (keys[k] True) given, none unknown or twice."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or key not in keys:
            raise CurveError(f"{kind}: unknown item {part!r}; keys: {', '.join(keys)}")
        if key in out:
            raise CurveError(f"{kind}: {key} given twice")
        out[key] = value
    missing = [k for k, required in keys.items() if required and k not in out]
    if missing:
        raise CurveError(f"{kind}: missing {', '.join(missing)} (e.g. {EXAMPLES})")
    return out


def constant(r: float) -> RateCurve:
    r = _rate_value("rate", r)
    return RateCurve(f"{r:g}", lambda t: r, lambda t: r * t, 0.0 if r == 0 else None)


def sine(mean: float, amp: float, period: float, phase: float = 0.0) -> RateCurve:
    """mean + amp sin(2 pi t / period + phase); its integral in closed form."""
    _rate_value("mean", mean)
    if not 0 <= amp <= mean:
        raise CurveError(f"sine: amp {amp:g} must be within 0..mean ({mean:g}): a rate is never negative")
    w = 2 * math.pi / period
    text = f"sine:mean={mean:g},amp={amp:g},period={period:g}s" + (f",phase={phase:g}" if phase else "")

    def integral(t: float) -> float:
        return mean * t + amp / w * (math.cos(phase) - math.cos(w * t + phase))

    return RateCurve(text, lambda t: mean + amp * math.sin(w * t + phase), integral, 0.0 if mean == 0 else None)


def ramp(start: float, end: float, over: float) -> RateCurve:
    """Linear from `start` to `end` over `over` seconds, then `end`."""
    _rate_value("from", start)
    _rate_value("to", end)
    slope = (end - start) / over
    at_end = start * over + slope * over * over / 2

    def rate(t: float) -> float:
        return start + slope * t if t < over else end

    def integral(t: float) -> float:
        return start * t + slope * t * t / 2 if t < over else at_end + end * (t - over)

    text = f"ramp:from={start:g},to={end:g},over={over:g}s"
    return RateCurve(text, rate, integral, at_end if end == 0 else None)


def series(points: list[tuple[float, float]], text: str) -> RateCurve:
    """Rates at times (seconds from 0, increasing), linear between them, the first before the
    first point, the last after the last."""
    ts = [t for t, _ in points]
    rs = [r for _, r in points]
    cum = [0.0]
    for i in range(1, len(points)):
        cum.append(cum[-1] + (rs[i] + rs[i - 1]) / 2 * (ts[i] - ts[i - 1]))
    before = rs[0] * ts[0]  # the first rate held from 0 to the first point

    def rate(t: float) -> float:
        i = bisect_right(ts, t)
        if i == 0:
            return rs[0]
        if i == len(ts):
            return rs[-1]
        f = (t - ts[i - 1]) / (ts[i] - ts[i - 1])
        return rs[i - 1] + f * (rs[i] - rs[i - 1])

    def integral(t: float) -> float:
        i = bisect_right(ts, t)
        if i == 0:
            return rs[0] * t
        if i == len(ts):
            return before + cum[-1] + rs[-1] * (t - ts[-1])
        dt = t - ts[i - 1]
        r_t = rate(t)
        return before + cum[i - 1] + (rs[i - 1] + r_t) / 2 * dt

    return RateCurve(text, rate, integral, before + cum[-1] if rs[-1] == 0 else None)


def _read_series(path: str) -> list[tuple[float, float]]:
    """`t,rate` rows of a file (CurveError naming file and line)."""
    try:
        data = read_regular(path, 16 << 20, "a rate series (t,rate rows)")
    except InputError as e:
        raise CurveError(f"file: {e}") from None
    points: list[tuple[float, float]] = []
    for n, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cells = [c.strip() for c in line.replace(";", ",").split(",")]
        if len(cells) != 2:
            raise CurveError(f"{path}:{n}: expected `t,rate` (seconds, requests/s), got {raw.strip()[:80]!r}")
        try:
            t, r = _number("t", cells[0]), _rate_value("rate", _number("rate", cells[1]))
        except CurveError as e:
            raise CurveError(f"{path}:{n}: {e}") from None
        if t < 0 or (points and t <= points[-1][0]):
            raise CurveError(f"{path}:{n}: times must start at 0 or later and increase, got {cells[0]}")
        points.append((t, r))
        if len(points) > MAX_POINTS:
            raise CurveError(f"{path}: more than {MAX_POINTS} rows")
    if not points:
        raise CurveError(f"{path}: no `t,rate` rows")
    return points


def parse_rate_curve(text: str) -> RateCurve:
    """A curve from its written form (the module doc's grammar); CurveError says what is wrong."""
    text = text.strip()
    kind, sep, body = text.partition(":")
    if not sep:
        return constant(_number("rate", text))
    if kind == "sine":
        v = _items("sine", body, {"mean": True, "amp": True, "period": True, "phase": False})
        period = _seconds("period", v["period"])
        return sine(_number("mean", v["mean"]), _number("amp", v["amp"]), period, _number("phase", v.get("phase", "0")))
    if kind == "ramp":
        v = _items("ramp", body, {"from": True, "to": True, "over": True})
        return ramp(_number("from", v["from"]), _number("to", v["to"]), _seconds("over", v["over"]))
    if kind == "file":
        if not body:
            raise CurveError("file: give a path (file:rates.csv)")
        return series(_read_series(body), f"file:{body}")
    raise CurveError(f"unknown rate curve {kind!r}: {EXAMPLES}")


def curve_times(curve: RateCurve, n: int, kind: str, burstiness: float, rng: random.Random) -> list[float]:
    """Up to n arrival times (seconds from 0) following the curve (time rescaling, module doc): a
    process of rate 1 of `kind` drawn from `rng`, each arrival placed where the curve's integral
    reaches it. Fewer than n when the curve ends at rate 0 first."""
    draw = interval_draw(kind, 1.0, burstiness, rng)
    out: list[float] = []
    s = 0.0
    for _ in range(n):
        t = curve.time_of(s)
        if t is None:
            break
        out.append(0.0 if s == 0 else t)
        s += draw()
    return out


def window_counts(times: list[float], width: float, until: float) -> list[int]:
    """Arrivals per window [k w, (k+1) w) up to `until` (a check of a schedule against its curve)."""
    counts = [0] * max(1, math.ceil(until / width))
    for t in times:
        k = int(t // width)
        if 0 <= k < len(counts):
            counts[k] += 1
    return counts


def expected_counts(curve: RateCurve, width: float, until: float) -> list[float]:
    """The curve's integral over each window of window_counts."""
    k = max(1, math.ceil(until / width))
    return [curve.integral(min((i + 1) * width, until)) - curve.integral(i * width) for i in range(k)]


def source_path(text: str) -> Path | None:
    """The file a `file:` curve reads (an input the run must not overwrite), else None."""
    kind, sep, body = text.strip().partition(":")
    return Path(body) if sep and kind == "file" and body else None
