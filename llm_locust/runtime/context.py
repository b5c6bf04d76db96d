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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from locust.runners import MasterRunner, WorkerRunner

from llm_locust.settings.derive import from_options

if TYPE_CHECKING:
    # Type-only: each part's module imports this one, so these are read by mypy and never run
    # (tests/test_structure.py counts no import under `if TYPE_CHECKING:` in its cycle check).
    from locust.env import Environment
    from prometheus_client import CollectorRegistry

    from llm_locust.report.live import LiveView
    from llm_locust.runtime.cache_reset import LadderReset
    from llm_locust.runtime.closed_loop import UsersState
    from llm_locust.runtime.dispatcher import Dispatcher
    from llm_locust.runtime.hub import MetricsHub
    from llm_locust.runtime.precision_stop import Watch
    from llm_locust.runtime.shapes import LadderController
    from llm_locust.runtime.webui import RunClock
    from llm_locust.settings.model import Settings
    from llm_locust.workload.specs import StructuredCheck


@dataclass
class ReplayState:
    """An open-loop replay's coordination in this process: its dispatcher (worker, local), and on
    the master the workers planned, those ready and done, and whether "go" was sent."""

    dispatcher: Dispatcher | None = None
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
    hub: MetricsHub | None = None  # the figures (runtime/hub.py `hub`)
    ladder: LadderController | None = None  # a ladder's (master, local)
    cache_reset: LadderReset | None = None  # --reset-cache's
    replay: ReplayState | None = None  # an open-loop replay (runtime/dispatcher.py)
    users: UsersState | None = None  # the closed-loop users' workload and draws
    structured: StructuredCheck | None | Unset = UNSET  # --response-format's check (None: none)
    live_view: LiveView | None = None  # the web UI's /llm view
    run_clock: RunClock | None = None  # the web UI's run clock
    prometheus: CollectorRegistry | None = None  # the exporter's registry (runtime/exporter.py)
    precision: Watch | None = None  # --precision's judge of a run (not a ladder)
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
