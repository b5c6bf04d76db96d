"""What the load really was, beside what was asked for (docs/metrics.md, "What the load was").

A result is read against the conditions it ran in. Ten back-to-back identical runs against a real
llama-server went from 0% to 99.6% of prompt tokens served from its cache, and TTFT mean from
4,174 ms to 84 ms: a run against a warm cache and one against a cold cache measure different
servers. So each run says its prompt cache's state before the load, by the first rule that holds:

- `warm`: the run's first-sent ok request (warm-up included) whose server said its cached prompt
  tokens was served some from the cache. No request of this run could have put them there
  before it, so the cache held them from before the run (even after a reset: the reset did not
  empty it).
- `reset`: the run reset the server's prefix cache before the load (--reset-cache), and it
  answered ok.
- `fresh`: the run started the built-in simulator itself: its cache began empty.
- `unknown`: none of these: the first request's cached tokens were 0 (the cache held nothing of
  that prompt, which says nothing of the rest) or not reported by the server.

Plain Python: no Locust, no gevent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

STATES = ("warm", "reset", "fresh", "unknown")


def cache_state(
    reset: Mapping[str, Any] | None, sim_started: bool, first_cached: Sequence[float] | None
) -> dict[str, str]:
    """{"state": one of STATES, "why": in words} by the rules above, in their order."""
    if first_cached is not None and first_cached[1] > 0:
        cached = int(first_cached[1])
        also = " (despite the reset before the run)" if reset and reset.get("outcome") == "ok" else ""
        why = f"the run's first request was served {cached} cached prompt tokens: the cache held them from before{also}"
        return {"state": "warm", "why": why}
    if reset and reset.get("outcome") == "ok":
        return {"state": "reset", "why": "the run reset the server's prefix cache before the load"}
    if sim_started:
        return {"state": "fresh", "why": "the run started the built-in simulator: its cache began empty"}
    if first_cached is not None:
        why = "no reset; the first request was served no cached tokens (of its own prompt only)"
    else:
        why = "no reset, and the server did not say its cached prompt tokens"
    return {"state": "unknown", "why": why}


def first_cached(*parts: Sequence[float] | None) -> Sequence[float] | None:
    """The earliest-sent of several aggregates' [wall sent, cached tokens] (the warm-up's, the run's)."""
    known = [p for p in parts if p is not None]
    return min(known, key=lambda p: p[0]) if known else None


def cache_line(state: Mapping[str, str] | None) -> str | None:
    """The summary's line of the cache state; None when the results have none (an older file)."""
    if not state:
        return None
    return f"prompt cache before the load: {state['state']} ({state['why']})"


def load_line(mode: str | None, users: int | None, think_time: float, in_flight: float) -> str | None:
    """A closed loop's users against the requests it really kept in flight, and the think time
    between them: 1,000 users with think time can hold 130 requests in flight, and a table that
    says "1,000 users" then misleads (docs/metrics.md, "What the load was"). None for an open loop
    (its rate is the load) or without a user count."""
    if mode != "closed" or not users:
        return None
    think = f" with {think_time:g} s think time" if think_time > 0 else " with no think time"
    return (
        f"load: {users} users{think} held {in_flight:.1f} requests in flight (mean over the run), "
        f"{in_flight / users:.0%} of the users"
    )
