"""What `llm-locust run` hands the Locust processes it starts, as one typed object.

`run` calls Locust's main in its own process, and `--workers N` makes Locust start more
processes: so the handoff travels in one environment variable (`ENV`, JSON), written once by the
CLI and read once per process. Plain `locust -f` has none (`handoff()` is None): the plugin then
behaves as Locust's own tables and web UI expect.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cache
from typing import TypedDict

ENV = "LLM_LOCUST_HANDOFF"


class RunOnly(TypedDict, total=False):
    """What `run` used itself, for the effective plan (settings names) and the run's facts."""

    workers: int | str | None
    workers_why: str | None  # why `--workers auto` chose its count (a re-run chooses for its own machine)
    sim_slots: int | None
    sim_fast: bool
    sim_graded_accuracy: float | None
    sim_started: bool  # no --host: `run` started the simulator
    locustfile: str | None
    stream_rate: float | None
    web_keep_open: bool  # else --web ends the run when its test ends (runtime.webui)


@dataclass(frozen=True)
class Handoff:
    command: list[str]  # the command line as typed: kept in the results (redacted), its plan's path
    run_only: RunOnly = field(default_factory=lambda: RunOnly())

    def to_env(self) -> str:
        return json.dumps({"command": self.command, "run_only": self.run_only})


def hand_off(h: Handoff) -> None:
    """Written by `run` before Locust starts; every process Locust starts inherits it."""
    os.environ[ENV] = h.to_env()
    handoff.cache_clear()


@cache
def handoff() -> Handoff | None:
    """This process's handoff (read once), or None under plain `locust -f`."""
    raw = os.environ.get(ENV)
    if raw is None:
        return None
    doc = json.loads(raw)
    return Handoff(command=list(doc["command"]), run_only=RunOnly(**doc.get("run_only", {})))
