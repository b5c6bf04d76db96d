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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llm_locust.settings.derive import from_options

if TYPE_CHECKING:
    from locust.env import Environment

    from llm_locust.settings.model import Settings

# The parts are typed where they are made and read (hub.hub, shapes.controller, users._users_state
# return their own types); here they are Any, so that this module imports none of the modules that
# import it (the import graph stays without a cycle, type-only imports included).


@dataclass
class ReplayState:
    """An open-loop replay's coordination in this process: its dispatcher (worker, local), and on
    the master the workers planned, those ready and done, and whether "go" was sent."""

    dispatcher: Any = None  # runtime/dispatcher.py Dispatcher
    ready: dict[str, Any] = field(default_factory=dict)
    done: dict[str, Any] = field(default_factory=dict)
    planned: list[str] = field(default_factory=list)
    go_sent: bool = False


UNSET: Any = object()  # a part not made yet, where None is a made value


@dataclass
class RunContext:
    """What this process knows of the run, each part None until it is made."""

    env: Environment  # Locust's
    hub: Any = None  # the figures: runtime/hub.py MetricsHub (`hub`)
    ladder: Any = None  # a ladder's: runtime/shapes.py LadderController (master, local)
    cache_reset: Any = None  # --reset-cache: runtime/cache_reset.py LadderReset
    replay: ReplayState | None = None  # an open-loop replay (runtime/dispatcher.py)
    users: Any = None  # the closed-loop users' workload and draws: runtime/closed_loop.py UsersState
    structured: Any = UNSET  # --response-format's check, once made (None: no check)
    live_view: Any = None  # the web UI's /llm view: runtime/webui/data.py LiveView
    run_clock: Any = None  # the web UI's run clock (runtime/webui)
    prometheus: Any = None  # the exporter's registry (runtime/exporter.py)
    precision: Any = None  # --precision's judge of a run (not a ladder): runtime/precision_stop.py Watch
    _settings: Settings | None = None

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
