"""Client cancellations (--cancel): which requests the client aborts, and when.

Real users close the tab and agents pre-empt their own requests; a load tester that never does
cannot ask whether the server frees the slot and what that does to everyone else. `--cancel
SHARE:after=WHEN` aborts a share of the requests, each one `WHEN` after it was sent:

  - `2s`, `500ms`          a delay from the send (any duration with its unit)
  - `10tok`                after the 10th token-bearing event of the stream
  - `uniform:1s:4s`        a delay drawn uniformly between the two, per request
  - `uniform:5tok:50tok`   a token count drawn uniformly (whole numbers, both ends included)

Which requests, and their draws, come from one seeded generator per process (settings.seed and
the worker's index), in the order the process sends: the same run sends the same number of
cancellations (the share of N requests is a fixed count for a seed), whatever the server does.
The client ends such a request as a stop does (the connection closed mid-stream), with its own
outcome, client_cancelled (metrics.records.Outcome). No gevent here: the client arms the timer.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from llm_locust.workload.values import parse_seconds

GRAMMAR = "SHARE:after=WHEN (WHEN: 2s, 500ms, 10tok, uniform:1s:4s or uniform:5tok:50tok)"
_TOKENS_RE = re.compile(r"^\s*([0-9]+)\s*tok\s*$")
MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class CancelSpec:
    """A share of requests to abort, after `lo`..`hi` seconds (unit "s") or tokens (unit "tok")."""

    share: float
    unit: str
    lo: float
    hi: float

    @property
    def text(self) -> str:
        """The spec as written back (plans, results): one form per meaning."""
        one = _amount(self.lo, self.unit)
        when = one if self.lo == self.hi else f"uniform:{one}:{_amount(self.hi, self.unit)}"
        return f"{self.share:g}:after={when}"


def _amount(v: float, unit: str) -> str:
    if unit == "tok":
        return f"{int(v)}tok"
    return f"{v * 1000:g}ms" if v < 1 else f"{v:g}s"


def _one(text: str) -> tuple[str, float]:
    """One amount: `10tok` or a duration with its unit (a bare number is refused: which unit?)."""
    m = _TOKENS_RE.match(text)
    if m:
        n = int(m.group(1))
        if not 1 <= n <= MAX_TOKENS:
            raise ValueError(f"{text!r}: a token count from 1 to {MAX_TOKENS}")
        return "tok", float(n)
    if not re.search(r"[a-z]\s*$", text):
        raise ValueError(f"{text!r} has no unit: write 2s, 500ms or 10tok")
    try:
        seconds = parse_seconds(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration (2s, 500ms) nor a token count (10tok)") from None
    if not seconds > 0:
        raise ValueError(f"{text!r}: the delay must be above 0")
    return "s", seconds


def parse_cancel(text: str) -> CancelSpec | None:
    """`--cancel`'s text as a CancelSpec; "" (or 0 share) is None. Raises ValueError saying what
    is wrong and the grammar."""
    text = str(text).strip()
    if not text:
        return None
    share_text, sep, rest = text.partition(":")
    if not sep or not rest.strip().startswith("after="):
        raise ValueError(f"--cancel {text!r}: expected {GRAMMAR}")
    try:
        share = float(share_text)
    except ValueError:
        raise ValueError(f"--cancel {text!r}: the share {share_text!r} is not a number from 0 to 1") from None
    if not 0 <= share <= 1:
        raise ValueError(f"--cancel {text!r}: the share {share_text} is outside 0..1")
    when = rest.strip()[len("after=") :].strip()
    if when.startswith("uniform:"):
        parts = when[len("uniform:") :].split(":")
        if len(parts) != 2:
            raise ValueError(f"--cancel {text!r}: expected uniform:LO:HI, e.g. uniform:1s:4s")
        (u1, lo), (u2, hi) = _one(parts[0]), _one(parts[1])
        if u1 != u2:
            raise ValueError(f"--cancel {text!r}: uniform's two ends in one unit (both times or both tokens)")
        if hi < lo:
            raise ValueError(f"--cancel {text!r}: uniform's LO is above its HI")
        unit = u1
    else:
        unit, lo = _one(when)
        hi = lo
    return None if share == 0 else CancelSpec(share, unit, lo, hi)


class CancelPlan:
    """Per process: for each request it sends, in order, whether and when the client aborts it."""

    def __init__(self, spec: CancelSpec, seed: int) -> None:
        self.spec = spec
        self._rng = random.Random(seed)

    def draw(self) -> tuple[float, int]:
        """(seconds, tokens) after which the next request is aborted; (0.0, 0): it is not. Two
        numbers are drawn for every request, so which requests are cancelled does not depend on
        the amounts drawn."""
        s = self.spec
        u, v = self._rng.random(), self._rng.random()
        if u >= s.share:
            return 0.0, 0
        if s.unit == "tok":
            return 0.0, int(s.lo) + min(int(v * (s.hi - s.lo + 1)), int(s.hi - s.lo))
        return s.lo + v * (s.hi - s.lo), 0


def process_plan(text: str, seed: int, index: int) -> CancelPlan | None:
    """The plan of one process (worker `index`) of a run, or None without --cancel."""
    spec = parse_cancel(text)
    return None if spec is None else CancelPlan(spec, seed * 1_000_037 + 7 * index + 11)
