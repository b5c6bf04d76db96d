"""One run's state in one process (runtime/context.py): one object per Environment, the settings
read from Locust's options once and again only after Locust writes them (the plugin's first
test_start listener), each part found where it was put."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from support import free_port

from llm_locust.runtime import context
from llm_locust.runtime.context import UNSET, ReplayState, run_context
from llm_locust.settings import derive


def _options(*argv: str) -> argparse.Namespace:
    """Locust's own parser with our options on it, as a Locust process parses its command line."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    parser = get_empty_argument_parser()
    setup_parser_arguments(parser)
    derive.add_locust_arguments(parser)
    return parser.parse_args(list(argv))


def test_one_context_per_environment_and_each_part_found_where_it_was_put():
    a, b = SimpleNamespace(parsed_options=_options()), SimpleNamespace(parsed_options=_options())
    assert run_context(a) is run_context(a) and run_context(a) is not run_context(b)
    run_context(a).ladder = "the controller"  # type: ignore[assignment]
    assert run_context(a).ladder == "the controller" and run_context(b).ladder is None
    st = run_context(a).replay_state()
    assert isinstance(st, ReplayState) and run_context(a).replay_state() is st and run_context(b).replay is None
    assert run_context(a).structured is UNSET  # not made yet; None once made without a check


def test_the_settings_are_read_once_and_again_after_locust_writes_its_options(monkeypatch):
    """Read per use, as seven places did (once per worker message in the dispatcher), the settings
    cost a validation each time; read once, they must still follow the options Locust writes
    before test_start (the web UI's start form, a worker's spawn message)."""
    calls = []
    real = derive.from_options
    monkeypatch.setattr(context, "from_options", lambda ns: calls.append(1) or real(ns))
    env = SimpleNamespace(parsed_options=_options("--seed", "3"))
    run = run_context(env)
    assert [run.settings.seed for _ in range(5)] == [3] * 5 and len(calls) == 1
    vars(env.parsed_options).update({"seed": 11})  # what a spawn message's update does
    assert run.settings.seed == 3  # not read again until Locust says it wrote them
    run.options_changed()
    assert run.settings.seed == 11 and len(calls) == 2


def test_an_environment_without_options_reads_the_defaults_as_from_options_does():
    run = run_context(SimpleNamespace(parsed_options=None))
    assert run.settings == derive.from_options(None)  # the defaults: a bare namespace reads none


def _bare(cls: type) -> object:
    """An instance of one of Locust's runner classes that binds and connects nothing."""
    return type(cls.__name__, (cls,), {"__init__": lambda self: None, "greenlet": None})()


def test_the_role_is_read_off_each_runner_class_in_one_place():
    from locust.runners import LocalRunner, MasterRunner, WorkerRunner

    from llm_locust.runtime.context import Role, role_of

    assert role_of(_bare(MasterRunner)) is Role.MASTER
    assert role_of(_bare(WorkerRunner)) is Role.WORKER
    assert role_of(_bare(LocalRunner)) is Role.LOCAL
    assert role_of(None) is Role.LOCAL  # a bare Environment in a test, as the hub treats it


def test_the_plugins_init_decides_a_local_runners_role_once_on_the_context(monkeypatch):
    """Locust's create_local_runner, then its init event: the plugin's first init listener
    decides the role and keeps it on the run context; later reads do not ask the runner again
    (a runner swapped afterwards, as no real run does, is not seen)."""
    from locust.env import Environment
    from locust.runners import MasterRunner

    from llm_locust.runtime import plugin
    from llm_locust.runtime.context import Role
    from llm_locust.runtime.hub import MetricsHub, hub

    handed = []
    monkeypatch.setattr(plugin, "_init_runner", lambda env, h: handed.append((env, h)))  # the master/local part
    env = Environment(parsed_options=_options())
    env.create_local_runner()
    run = run_context(env)
    assert run._role is None  # not decided before init
    plugin._on_init(environment=env)
    assert run._role is Role.LOCAL and run.role is Role.LOCAL
    assert type(hub(env)) is MetricsHub and handed == [(env, hub(env))]
    env.runner = _bare(MasterRunner)  # type: ignore[assignment]
    assert run.role is Role.LOCAL  # decided once


def test_before_any_runner_the_role_reads_local_and_is_not_kept():
    from locust.env import Environment

    from llm_locust.runtime.context import Role

    env = Environment()
    run = run_context(env)
    assert run.role is Role.LOCAL and run._role is None
    runner = env.create_master_runner("127.0.0.1", free_port())
    try:
        assert run.role is Role.MASTER and run.master_runner() is runner
        with pytest.raises(AssertionError, match="a worker's runner asked of a master process"):
            run.worker_runner()
    finally:
        runner.quit()
