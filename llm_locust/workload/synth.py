"""Synthetic workloads, written out as a trace so the exact workload can be replayed again.

Lengths come from a distribution:
  `128`                     fixed
  `uniform:LO:HI`           integers LO..HI inclusive
  `normal:MEAN:STD`         rounded, at least 1
  `lognormal:MEAN:STD`      of the values themselves (not of their log), rounded, at least 1
  `empirical:TRACE`         drawn from the input (or output) lengths of a trace file
Arrivals: all at 0 (for closed-loop use), or `--rate R` per second: poisson, constant, or gamma
with `--burstiness B` (workload.arrivals: vLLM's definition; 1 = Poisson, below 1 burstier).
An optional shared prefix of P tokens (a common system prompt) is expressed as prefix blocks:
block size P, block 0 shared by every request, the rest of each prompt in blocks of its own.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from llm_locust.workload.agentic.synth_sessions import main as agentic_main
from llm_locust.workload.arrivals import ARRIVAL_KINDS, arrival_problem, interval_draw
from llm_locust.workload.load import load_trace
from llm_locust.workload.output import write_out
from llm_locust.workload.paths import check_input
from llm_locust.workload.prefix_dist import PrefixDist, law_line, parse_prefix_dist
from llm_locust.workload.rate_curve import RateCurve, curve_times, parse_rate_curve

PROG = "llm-locust trace synth"
Sampler = Callable[[random.Random], int]


def parse_dist(text: str, column: str = "input_tokens") -> Sampler:
    """A sampler from a distribution spec (see the module doc). ValueError names what is wrong."""
    kind, _, rest = text.partition(":")
    try:
        if not rest:
            value = int(kind)
            if value < 1:
                raise ValueError
            return lambda rng: value
        args = rest.split(":")
        if kind == "uniform":
            lo, hi = int(args[0]), int(args[1])
            if not 1 <= lo <= hi:
                raise ValueError
            return lambda rng: rng.randint(lo, hi)
        if kind == "normal":
            mean, std = float(args[0]), float(args[1])
            if not (mean >= 1 and std >= 0 and math.isfinite(mean + std)):  # a mean below 1 draws 1s only
                raise ValueError("normal:MEAN:STD needs MEAN >= 1 and STD >= 0")
            return lambda rng: max(1, round(rng.gauss(mean, std)))
        if kind == "lognormal":
            mean, std = float(args[0]), float(args[1])
            if not (mean > 0 and std >= 0 and math.isfinite(mean + std)):
                raise ValueError
            sigma2 = math.log(1 + (std / mean) ** 2)
            mu, sigma = math.log(mean) - sigma2 / 2, math.sqrt(sigma2)
            return lambda rng: max(1, round(rng.lognormvariate(mu, sigma)))
        if kind == "empirical":
            check_input(rest, "empirical:")
            trace = load_trace(rest)
            values = [v for v in (getattr(trace[i], column) for i in range(len(trace))) if v]
            if not values:
                raise ValueError(f"{rest}: no {column} values to draw from")
            return lambda rng: rng.choice(values)
    except (IndexError, ValueError) as e:
        detail = f": {e}" if str(e) else ""
        raise ValueError(f"bad distribution {text!r}{detail} (see `llm-locust trace synth --help`)") from None
    raise ValueError(f"unknown distribution {kind!r} in {text!r}: fixed N, uniform, normal, lognormal, empirical")


@dataclass(frozen=True, slots=True)
class SynthSpec:
    requests: int = 100
    input: str = "512"
    output: str = "128"
    rate: float = 0.0  # requests per second; 0 = every arrival at 0
    arrivals: str = "poisson"  # or "constant", "gamma" (workload.arrivals)
    prefix_tokens: int = 0
    seed: int = 0
    burstiness: float = 1.0  # gamma's shape: 1 = Poisson, < 1 burstier, > 1 smoother


def generate(spec: SynthSpec, curve: RateCurve | None = None, prefix_dist: PrefixDist | None = None) -> list[dict]:
    """The workload's rows; with a rate curve (workload.rate_curve), its arrivals follow the
    curve (spec.rate unused), drawn as spec.arrivals on the curve's time scale; with a prefix
    law (workload.prefix_dist), each prompt's first block (prefix_tokens) is one of the law's
    pool, drawn by its popularity, the rest its own."""
    if spec.requests < 1:
        raise ValueError("requests must be >= 1")
    problem = arrival_problem(spec.arrivals, spec.burstiness)
    if problem:
        raise ValueError(problem)
    if spec.rate < 0 or not math.isfinite(spec.rate):
        raise ValueError(f"rate must be >= 0 requests/s (0: every arrival at 0), got {spec.rate:g}")
    rng = random.Random(spec.seed)
    draw_in = parse_dist(spec.input, "input_tokens")
    draw_out = parse_dist(spec.output, "output_tokens")
    gap = interval_draw(spec.arrivals, spec.rate, spec.burstiness, rng) if spec.rate > 0 and curve is None else None
    times = (
        curve_times(curve, spec.requests, spec.arrivals, spec.burstiness, random.Random(spec.seed + 1))
        if curve
        else None
    )
    if prefix_dist is not None and not spec.prefix_tokens:
        raise ValueError(f"a prefix law ({prefix_dist.text}) needs prefix_tokens=N: the prefixes' length")
    prefix = prefix_dist.sampler(random.Random(spec.seed + 2)) if prefix_dist is not None else None
    t, next_block = 0.0, prefix_dist.pool if prefix_dist is not None else 1  # own blocks after the pool's ids
    rows = []
    for i in range(spec.requests if times is None else len(times)):
        if times is not None:
            t = times[i]
        elif gap is not None and i:
            t += gap()
        row: dict[str, Any] = {"timestamp": round(t, 6), "input_tokens": draw_in(rng), "output_tokens": draw_out(rng)}
        if spec.prefix_tokens:
            n_blocks = math.ceil(row["input_tokens"] / spec.prefix_tokens)
            row["hash_ids"] = [prefix() if prefix else 0] + list(range(next_block, next_block + n_blocks - 1))
            row["block_size"] = spec.prefix_tokens
            next_block += n_blocks - 1
        rows.append(row)
    return rows


def write(
    rows: list[dict],
    path: str | Path,
    spec: SynthSpec | None = None,
    curve: RateCurve | None = None,
    prefix_dist: PrefixDist | None = None,
) -> None:
    with open(path, "wb") as f:
        for row in rows:
            f.write(orjson.dumps(row) + b"\n")
    if spec is not None:  # the recipe beside the trace, so it can be made again
        recipe: dict[str, Any] = asdict(spec)
        if curve is not None:
            recipe["rate_curve"] = curve.text
        if prefix_dist is not None:
            recipe["prefix_dist"] = prefix_dist.text
        Path(f"{path}.spec.json").write_bytes(orjson.dumps(recipe, option=orjson.OPT_INDENT_2))


def parse_spec_text(text: str) -> SynthSpec:
    """`requests=200,input=uniform:100:500,output=128,rate=5` (the run command's --synthetic)."""
    fields = {}
    types = {"requests": int, "rate": float, "prefix_tokens": int, "seed": int, "burstiness": float}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in SynthSpec.__dataclass_fields__:
            raise ValueError(f"bad synthetic workload item {part!r}; keys: {', '.join(SynthSpec.__dataclass_fields__)}")
        fields[key] = types.get(key, str)(value)
    return SynthSpec(**fields)


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0, 1 (cannot write), 2 (bad arguments, or --out exists without --force);
    --help prints the help and returns 0."""
    args = sys.argv[1:] if argv is None else argv
    if any(a == "--agentic" or a.startswith("--agentic=") for a in args):  # sessions: agentic/synth_sessions.py
        return agentic_main(args)
    p = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="--agentic KEY=VALUE,...: an agentic session workload instead "
        "(`llm-locust trace synth --agentic '' --help` lists its keys)",
    )
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--input", default="512", help="input length distribution")
    p.add_argument("--output", default="128", help="output length distribution")
    p.add_argument(
        "--rate",
        default="0",
        help="arrivals per second (0: all at 0), or a curve: sine:mean=8,amp=4,period=60s, ramp:from=1,to=10,over=60s, "
        "file:RATES.csv (docs/load-shapes.md, Rate curves)",
    )
    p.add_argument("--arrivals", choices=ARRIVAL_KINDS, default="poisson")
    p.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        help="gamma arrivals' shape (vLLM's --burstiness): 1 = Poisson, below 1 burstier, above 1 smoother",
    )
    p.add_argument("--prefix-tokens", type=int, default=0, help="shared prefix (system prompt) length")
    p.add_argument(
        "--prefix-dist",
        default="",
        help="with --prefix-tokens: prefixes drawn from a pool by a popularity law, zipf:S[:POOL] or "
        "bimodal:HOT:SHARE[:POOL] (docs/prompts.md, Prefix popularity)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="trace file to write (our JSONL)")
    p.add_argument("--force", action="store_true", help="overwrite --out when it exists and is not empty")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    try:
        curve = parse_rate_curve(a.rate)
        constant_rate = curve.text if ":" not in curve.text else ""
        rate = float(constant_rate) if constant_rate else 0.0
        spec = SynthSpec(a.requests, a.input, a.output, rate, a.arrivals, a.prefix_tokens, a.seed, a.burstiness)
        law = parse_prefix_dist(a.prefix_dist) if a.prefix_dist else None
        rows = generate(spec, None if constant_rate else curve, law)
    except (ValueError, OSError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    writer = partial(write, curve=None if constant_rate else curve, prefix_dist=law)
    rc = write_out(writer, rows, a.out, spec, a.force, PROG)
    if rc:
        return rc
    print(f"wrote {len(rows)} requests to {a.out} (recipe in {a.out}.spec.json)")
    if law is not None:
        print(law_line(law, len(rows)))
    return 0
