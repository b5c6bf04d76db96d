"""Prefix popularity laws for synthetic workloads (`--prefix-dist`): which shared prefix (a system
prompt, a document) each prompt begins with.

One shared prefix with a hit ratio (`--prefix-hit`) is a single hot key. Production traffic has
many prefixes of unequal popularity, and a prefix cache's hit ratio depends on that law: SGLang's
bench_serving and vLLM's Rust client draw prefixes from a Zipf law, llm-d benchmarks a bimodal
one. Written forms, parsed here (no eval):

    zipf:S[:POOL]             prefix k of POOL (default 100) with probability k^-S / sum_j j^-S
                              (k = 1..POOL; S >= 0, 0 is uniform)
    bimodal:HOT:SHARE[:POOL]  a share SHARE (0..1) of prompts draw one of the HOT hottest prefixes
                              uniformly, the rest one of the POOL - HOT others uniformly

Each prompt's first block (the synthetic workload's `prefix_tokens` long) is the drawn prefix,
the rest its own. The ideal hit ratio of an unbounded cache, for n prompts, is in closed form:
a prompt is a hit when its prefix was drawn before, so the expected hits are
n - sum_k (1 - (1 - p_k)^n) (the expected number of distinct prefixes drawn); the run measures
the exact ideal of the drawn sequence besides (`ideal_hit_ratio`, docs/metrics.md "Prompt cache").

Plain Python: no Locust, no gevent.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate

DEFAULT_POOL = 100
MAX_POOL = 1_000_000
EXAMPLES = "zipf:1.1, zipf:0.8:500, bimodal:5:0.8 or bimodal:5:0.8:200"


@dataclass(frozen=True)
class PrefixDist:
    """A prefix popularity law: its written form and each prefix's probability (index 0 hottest)."""

    text: str
    probs: tuple[float, ...]

    @property
    def pool(self) -> int:
        return len(self.probs)

    def sampler(self, rng: random.Random):
        """A function drawing prefix indexes 0..pool-1 by the law, from `rng`."""
        cum = list(accumulate(self.probs))
        top = cum[-1]
        last = len(cum) - 1
        return lambda: min(bisect_left(cum, rng.random() * top), last)

    def expected_hits(self, n: int) -> float:
        """Prompts of n whose prefix was drawn before (an unbounded cache's hits), expected."""
        distinct = sum(-math.expm1(n * math.log1p(-p)) if p < 1 else 1.0 for p in self.probs if p > 0)
        return n - distinct


def _number(key: str, text: str, lo: float, hi: float) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"prefix_dist: {key}: expected a number, got {text!r}") from None
    if not (math.isfinite(x) and lo <= x <= hi):
        raise ValueError(f"prefix_dist: {key}: {text} is outside {lo:g}..{hi:g}")
    return x


def _whole(key: str, text: str, lo: int) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"prefix_dist: {key}: expected a whole number, got {text!r}")
    x = int(text)
    if not lo <= x <= MAX_POOL:
        raise ValueError(f"prefix_dist: {key}: {x} is outside {lo}..{MAX_POOL}")
    return x


def parse_prefix_dist(text: str) -> PrefixDist:
    """A law from its written form (the module doc's); ValueError says what is wrong."""
    parts = [p.strip() for p in text.strip().split(":")]
    kind, args = parts[0], parts[1:]
    if kind == "zipf" and len(args) in (1, 2):
        s = _number("S", args[0], 0.0, 10.0)
        pool = _whole("POOL", args[1], 1) if len(args) == 2 else DEFAULT_POOL
        weights = [k**-s for k in range(1, pool + 1)]
        total = sum(weights)
        return PrefixDist(f"zipf:{s:g}:{pool}", tuple(w / total for w in weights))
    if kind == "bimodal" and len(args) in (2, 3):
        hot = _whole("HOT", args[0], 1)
        share = _number("SHARE", args[1], 0.0, 1.0)
        pool = _whole("POOL", args[2], 1) if len(args) == 3 else DEFAULT_POOL
        if hot > pool or (hot == pool and share < 1):
            raise ValueError(f"prefix_dist: HOT {hot} must be below POOL {pool} (the cold prefixes are the rest)")
        cold = pool - hot
        probs = [share / hot] * hot + ([(1 - share) / cold] * cold if cold else [])
        return PrefixDist(f"bimodal:{hot}:{share:g}:{pool}", tuple(probs))
    raise ValueError(f"prefix_dist: unknown law {text!r}: {EXAMPLES}")


def law_line(law: PrefixDist, n: int) -> str:
    """What the law amounts to for n prompts, said when the workload is written."""
    share = law.expected_hits(n) / n if n else 0.0
    return (
        f"prefix law {law.text}: {n} prompts over {law.pool} prefixes; an unbounded prefix cache would "
        f"serve the prefix of {share:.1%} of them (expected, closed form)"
    )
