"""One run's state in one process, reached through one accessor: `run_context(env)`.

Locust hands every listener and every user its `Environment`, so the run's own state rides on it,
as one typed attribute (`env.llm`) rather than an untyped attribute per part hung on Locust's
object by whoever made it first. Each part is still made where it is made (the hub on first use,
the ladder controller at init, the users' workload when the first user starts), and found here.

The settings are read from Locust's parsed options once, and again only when Locust changes those
options: the web UI's start form (master) and a worker's spawn message both write them just before
`test_start` fires, where the plugin's first listener calls `options_changed`. Reading them here
replaces a `from_options(env.parsed_options)` per use (once per worker message in the dispatcher).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from locust.runners import MasterRunner, WorkerRunner

from llm_locust.settings.derive import from_options

if TYPE_CHECKING:
    # Read by mypy only (start-up: none of them is needed to run this module). None of them
    # imports the runtime, so none makes a cycle: tests/test_structure.py counts them.
    from locust.env import Environment
    from prometheus_client import CollectorRegistry

    from llm_locust.metrics.records import RequestRecord
    from llm_locust.report.live import LiveView
    from llm_locust.schema import Precision
    from llm_locust.settings.model import Settings
    from llm_locust.workload.specs import StructuredCheck


# The parts made by runtime modules that import this one, as this module sees them: what is used
# of each through the context, not their classes (importing those would make an import cycle).
# Each part's own module narrows it back to its class where it needs more (hub.hub,
# shapes.controller, cache_reset.resets, closed_loop._users_state, replay_shares._dispatcher).


class HubPart(Protocol):
    """runtime/hub.py `MetricsHub` (of the process's role): the run's figures."""

    def on_done(self, rec: RequestRecord) -> None: ...


class WindowPart(Protocol):
    """runtime/shapes.py `StepWindow`: one ladder step, as the cache reset before it marks it."""

    cache_reset: dict[str, Any] | None


class LadderPart(Protocol):
    """runtime/shapes.py `LadderController`: its steps so far and its steps' precision."""

    @property
    def windows(self) -> Sequence[WindowPart]: ...

    def precision_report(self) -> Precision | None: ...


class CacheResetPart(Protocol):
    """runtime/cache_reset.py `LadderReset`: the reset before the run (the results' run.cache_reset)."""

    run: dict[str, Any] | None


class UsersPart(Protocol):
    """runtime/closed_loop.py `UsersState`: the closed-loop users' workload, read with these settings."""

    settings: Settings


class DispatcherPart(Protocol):
    """runtime/dispatcher.py `Dispatcher`: this process's share of an open-loop replay."""

    error: str | None


class RunClockPart(Protocol):
    """runtime/webui `RunClock`: when a test started from the web UI stops (None: not timed)."""

    ends_at: float | None


class PrecisionPart(Protocol):
    """runtime/precision_stop.py `Watch`: --precision's judge of a run."""

    def report(self) -> Precision: ...


@dataclass
class ReplayState:
    """An open-loop replay's coordination in this process: its dispatcher (worker, local), and on
    the master the workers planned, those ready and done, and whether "go" was sent."""

    dispatcher: DispatcherPart | None = None  # replay_shares._dispatcher: the Dispatcher
    ready: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker -> its "ready" message's data
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker -> its "done" message's data
    planned: list[str] = field(default_factory=list)
    go_sent: bool = False


class Unset(enum.Enum):
    """A part not made yet, where None is a made value (the one member: `UNSET`)."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET


class Role(enum.Enum):
    """What this process is in the run, as Locust's `create_master_runner` /
    `create_worker_runner` / `create_local_runner` made it."""

    MASTER = "master"  # coordinates the workers and reports; sends no load
    WORKER = "worker"  # sends load and reports to the master
    LOCAL = "local"  # one process: sends load and reports


def role_of(runner: object) -> Role:
    """The role of Locust's runner: the one place that asks its class (no runner yet: local, as a
    bare Environment in a test behaves)."""
    if isinstance(runner, MasterRunner):
        return Role.MASTER
    if isinstance(runner, WorkerRunner):
        return Role.WORKER
    return Role.LOCAL


@dataclass
class RunContext:
    """What this process knows of the run, each part None until it is made."""

    env: Environment  # Locust's
    hub: HubPart | None = None  # the figures (runtime/hub.py `hub`)
    ladder: LadderPart | None = None  # a ladder's (master, local)
    cache_reset: CacheResetPart | None = None  # --reset-cache's
    replay: ReplayState | None = None  # an open-loop replay (runtime/dispatcher.py)
    users: UsersPart | None = None  # the closed-loop users' workload and draws
    structured: StructuredCheck | None | Unset = UNSET  # --response-format's check (None: none)
    live_view: LiveView | None = None  # the web UI's /llm view
    run_clock: RunClockPart | None = None  # the web UI's run clock
    prometheus: CollectorRegistry | None = None  # the exporter's registry (runtime/exporter.py)
    precision: PrecisionPart | None = None  # --precision's judge of a run (not a ladder)
    _settings: Settings | None = None
    _role: Role | None = None

    @property
    def role(self) -> Role:
        """This process's role, decided once: at Locust's init (the plugin's first init listener
        reads it), or on first read after the runner is made. Before any runner (a bare
        Environment in a test) it reads as local and is not kept."""
        if self._role is None:
            if self.env.runner is None:
                return Role.LOCAL
            self._role = role_of(self.env.runner)
        return self._role

    def master_runner(self) -> MasterRunner:
        """Locust's runner, where this process is the master (asserted: a caller that asks decided so)."""
        assert self.role is Role.MASTER, f"the master's runner asked of a {self.role.value} process"
        return cast(MasterRunner, self.env.runner)

    def worker_runner(self) -> WorkerRunner:
        """Locust's runner, where this process is a worker (asserted: a caller that asks decided so)."""
        assert self.role is Role.WORKER, f"a worker's runner asked of a {self.role.value} process"
        return cast(WorkerRunner, self.env.runner)

    @property
    def settings(self) -> Settings:
        """The run's settings, read from Locust's options once (raises like `from_options` for an
        environment without llm-locust's options)."""
        if self._settings is None:
            self._settings = from_options(self.env.parsed_options)
        return self._settings

    def options_changed(self) -> None:
        """Locust's parsed options were written (start form, spawn message): read them again."""
        self._settings = None

    def replay_state(self) -> ReplayState:
        if self.replay is None:
            self.replay = ReplayState()
        return self.replay


def run_context(env: Environment) -> RunContext:
    """The run's state in this process, made on first use."""
    ctx = getattr(env, "llm", None)
    if ctx is None:
        ctx = RunContext(env)
        env.llm = ctx  # type: ignore[attr-defined]  # the one attribute of ours on Locust's Environment
    return ctx
