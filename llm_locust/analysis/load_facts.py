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


def _send_rate(spans: Sequence[tuple[int, int, float, int, int]]) -> float | None:
    """Sends per second over the seconds with a send, less the first and the last when three or
    more have one: a run starts and ends inside a second, and those part-seconds counted whole
    read as a lower rate (a 5 s replay at 10/s read 7.5/s). A folded row stands for `width`
    seconds alike, so one second of it is its sends / width."""
    rows = [(width, sent) for _, width, _, sent, _ in spans if sent]
    seconds = sum(w for w, _ in rows)
    total = sum(n for _, n in rows)
    if seconds >= 3:
        (w0, n0), (w1, n1) = rows[0], rows[-1]
        return (total - n0 / w0 - n1 / w1) / (seconds - 2)
    return total / seconds if seconds else None


def load_facts(
    mode: str | None,
    users: int | None,
    think_time: float,
    in_flight_mean: float,
    spans: Sequence[tuple[int, int, float, int, int]],
) -> dict[str, Any]:
    """What the load was (results `run.load_facts`): the mode, users and think time asked for; the
    requests in flight, their mean over the run (Little's law, `summary.concurrency`) and the p99
    over its seconds (each second's time-averaged count, metrics.flow); the sends per second
    over the seconds that had any, less the part-seconds at its ends (`_send_rate`), and the
    share sent on schedule (within metrics.flow.LATE_S of
    their due time: an open loop's offered rate against what it achieved)."""
    per_second: list[float] = []
    for _, width, busy, _, _ in spans:
        per_second += [busy / width] * width  # a folded row stands for `width` seconds alike
    sent = sum(row[3] for row in spans)
    late = sum(row[4] for row in spans)
    rate = _send_rate(spans)
    return {
        "mode": mode,
        "users": users,
        "think_time": think_time,
        "in_flight_mean": round(in_flight_mean, 3),
        "in_flight_p99": round(_p99(per_second), 3) if per_second else None,
        "sent_per_s": round(rate, 3) if rate is not None else None,
        "on_schedule": round(1 - late / sent, 4) if sent else None,
    }


def _p99(values: list[float]) -> float:
    """Nearest-rank p99 (the histograms' rule: rank max(round(0.99 n), 1))."""
    ordered = sorted(values)
    return ordered[max(round(0.99 * len(ordered)), 1) - 1]


def load_line(facts: Mapping[str, Any] | None) -> str | None:
    """The summary's line of what the load was. A closed loop's users against the requests it held
    in flight, beside its think time: 1,000 users with think time can hold 130 requests in
    flight, and a table that says "1,000 users" then misleads (docs/metrics.md, "What the load
    was"). An open loop's sends per second and the share on schedule. None for a ladder (its
    table has each step's offered and achieved load) or without figures."""
    if not facts or facts.get("mode") not in ("closed", "replay"):
        return None
    p99 = facts.get("in_flight_p99")
    held = f"{facts['in_flight_mean']:.1f} requests in flight (mean over the run" + (
        f"; p99 of its seconds {p99:.1f})" if p99 is not None else ")"
    )
    if facts["mode"] == "closed":
        users = facts.get("users")
        if not users:
            return None
        think = facts.get("think_time") or 0
        what = f" with {think:g} s think time" if think > 0 else " with no think time"
        return f"load: {users} users{what} held {held}, {facts['in_flight_mean'] / users:.0%} of the users"
    rate, kept = facts.get("sent_per_s"), facts.get("on_schedule")
    if rate is None or kept is None:
        return None
    sent = f"load: an open loop sent {rate:.2f} requests/s, {kept:.1%} on schedule (within 50 ms of their due time)"
    return f"{sent}; {held}"
