"""Accuracy under load, on the sending side: a seeded share of the requests are items of the
graded set (--graded, --graded-share) instead of the workload's, and each graded reply is graded
when its request ends (docs/verdicts.md, "Accuracy under load").

`maybe_graded` is what the closed loop (runtime.users) and the open loop (runtime.dispatcher)
call per request; `grade_record` is called by `account` for every finished request. A graded
request is accounted like any other (its latencies count) and carries its grade in
`rec.extra["graded"]` (True: right), which metrics.aggregate counts per step.
"""

from __future__ import annotations

import random

from llm_locust.metrics.records import RequestRecord
from llm_locust.protocols.base import RequestSpec
from llm_locust.workload.graded import GradedItem, load_graded

SOURCE_PREFIX = "graded:"
_ITEMS: dict[str, GradedItem] = {}  # source -> item, in this process (every set loaded here)
_SETS: dict[str, list[GradedItem]] = {}


def _items(name: str) -> list[GradedItem]:
    items = _SETS.get(name)
    if items is None:
        items = _SETS[name] = load_graded(name).items
        for it in items:
            _ITEMS[SOURCE_PREFIX + it.source] = it
    return items


class GradedMix:
    """One sender's draws: with probability `share` the next request is the set's next item
    (the items in turn, from a per-process offset)."""

    def __init__(self, settings, index: int = 0) -> None:
        self.settings = settings
        self.items = _items(settings.graded)
        self.share = settings.graded_share
        self.rng = random.Random(settings.seed * 1_000_003 + index * 7 + 91)
        self.next = (index * 7919) % len(self.items)

    def draw(self, model: str | None) -> tuple[RequestSpec, str] | None:
        if self.share <= 0 or self.rng.random() >= self.share:
            return None
        it = self.items[self.next % len(self.items)]
        self.next += 1
        s = self.settings
        spec = RequestSpec(
            model=model,
            messages=[dict(m) for m in it.messages],
            max_tokens=it.max_tokens or s.graded_max_tokens,
            force_length=False,
            continuous_usage=s.continuous_usage,
            extra_body={"temperature": 0},
        )
        return spec, SOURCE_PREFIX + it.source


def maybe_graded(owner, settings, spec: RequestSpec, source: str | None, index: int = 0):
    """(spec, source, graded): the workload's request, or in its place (at --graded-share) a
    graded item's, whose text is then collected. `owner` keeps the sender's draws."""
    if not settings.graded:
        return spec, source, False
    mix = owner.__dict__.get("_graded_mix")
    if mix is None:
        mix = owner.__dict__["_graded_mix"] = GradedMix(settings, index)
    got = mix.draw(spec.model)
    if got is None:
        return spec, source, False
    return got[0], got[1], True


def grade_record(rec: RequestRecord) -> None:
    """Grade a finished graded request that ended ok: `rec.extra["graded"]` = answered right."""
    src = rec.source
    if not src or not src.startswith(SOURCE_PREFIX) or not rec.ok:
        return
    it = _ITEMS.get(src)
    if it is None:
        return
    extra = rec.extra if rec.extra is not None else {}
    extra["graded"] = it.grade(rec.text or "")
    rec.extra = extra
