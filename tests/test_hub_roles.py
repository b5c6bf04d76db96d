"""runtime/hub.py: one hub class per role, as Locust has one runner class per role. A local
runner's hub folds records into its totals; a worker's into deltas that leave with each report
(and nothing stays in its totals); a master's merges the workers' reports exactly and knows each
worker. A hub made for the wrong role is refused at install."""

from __future__ import annotations

import pytest
from support import free_port, stream_record

from llm_locust.metrics.records import RequestRecord


def _rec(i: int, step: int = 1) -> RequestRecord:
    return stream_record(i, tokens=8, ttft=0.05, step=step)


def _send(h, n: int, step: int = 1) -> None:
    for i in range(n):
        h.step = step
        rec = _rec(i, h.on_sent())
        h.on_done(rec)


def test_each_runner_gets_the_hub_of_its_role():
    from locust.env import Environment

    from llm_locust.runtime.hub import MasterHub, MetricsHub, WorkerHub, hub

    local = Environment()
    local.create_local_runner()
    assert type(hub(local)) is MetricsHub and hub(local) is hub(local)
    master = Environment()
    runner = master.create_master_runner("127.0.0.1", free_port())
    try:
        assert type(hub(master)) is MasterHub
    finally:
        runner.quit()
    assert not hasattr(MetricsHub, "report") and not hasattr(MetricsHub, "merge_report")
    assert hasattr(WorkerHub, "report") and hasattr(MasterHub, "merge_report")


def test_a_hub_made_before_its_runner_is_refused_at_install():
    from locust.env import Environment

    from llm_locust.runtime.hub import hub, install

    env = Environment()
    hub(env)  # no runner yet: a local runner's hub
    runner = env.create_master_runner("127.0.0.1", free_port())
    try:
        with pytest.raises(AssertionError, match="MetricsHub made before the runner"):
            install(env)
    finally:
        runner.quit()


def test_a_workers_records_leave_with_its_reports_and_the_master_merges_them_exactly():
    from locust.env import Environment

    from llm_locust.runtime.hub import REPORT_KEY, MasterHub, MetricsHub, WorkerHub

    workers = [WorkerHub(Environment()), WorkerHub(Environment())]
    master, local = MasterHub(Environment()), MetricsHub(Environment())
    for k, w in enumerate(workers):
        _send(w, 3 + k)
        _send(local, 3 + k)
        assert w.total.sent == 0 and not w.steps  # a worker keeps no totals: they go to the master
    for k, w in enumerate(workers):
        data: dict = {}
        w.report(data)
        assert data[REPORT_KEY]["steps"]["1"]["counters"]["sent"] == 3 + k
        master.merge_report(f"w{k}", data)
        again: dict = {}
        w.report(again)  # reported once: the next report carries nothing of it
        assert again[REPORT_KEY]["steps"] == {}
    assert master.total.sent == local.total.sent == 7 and master.total.outcomes == local.total.outcomes
    assert master.total.tokens_out == local.total.tokens_out == 56
    assert master.steps[1].hist["ttft"].count == local.steps[1].hist["ttft"].count == 7
    assert sorted(master.workers) == ["w0", "w1"] and [w.finished for w in master.workers.values()] == [3, 4]
    assert local.step_drained(1) and local.collect_final_reports() and local.account_lost() == 0


def test_a_local_runs_first_step_folds_once_and_keeps_its_own_figures_when_another_comes():
    """A local hub's first step is the run's totals themselves (one fold a record, not two) until
    another step comes: then it keeps its own figures, exactly those of its records, and the run's
    totals go on with both; a warm-up stays out of the run's."""
    from locust.env import Environment

    from llm_locust.metrics.aggregate import Aggregate, figures
    from llm_locust.runtime.hub import WARMUP_STEP, MetricsHub

    h = MetricsHub(Environment())
    alone = {WARMUP_STEP: Aggregate(), 0: Aggregate(), 1: Aggregate()}
    both = Aggregate()

    def send(n: int, step: int) -> None:
        for i in range(n):
            h.step = step
            rec = _rec(i + 100 * step, h.on_sent(warmup=step == WARMUP_STEP))
            h.on_done(rec)
            for agg in [alone[step]] + ([both] if step != WARMUP_STEP else []):
                agg.sent += 1
                agg.add(_rec(i + 100 * step, step))

    send(2, WARMUP_STEP)
    send(5, 0)
    assert h.steps[0] is h.total and h.total.sent == 5 and h.total.hist["ttft"].count == 5
    send(3, 1)
    assert h.steps[0] is not h.total and h.steps[1] is not h.total
    for got, want in (
        (h.steps[0], alone[0]),
        (h.steps[1], alone[1]),
        (h.total, both),
        (h.steps[WARMUP_STEP], alone[WARMUP_STEP]),
    ):
        assert figures(got) == figures(want) and list(got.series.items()) == list(want.series.items())
    assert (h.steps[0].sent, h.steps[1].sent, h.total.sent, h.steps[WARMUP_STEP].sent) == (5, 3, 8, 2)


def test_the_master_merges_a_report_once_while_a_run_has_one_step_and_exactly_after():
    """The master's first step is the run's totals themselves (each worker report merged once,
    not twice: half its cost, benchmarks/bench_master.py) until a second step's report comes;
    then every window's figures are exactly those of its records: step 0 (including a late
    report of it), step 1, the run's both, a warm-up apart. Before, each report was merged into
    the step and again into the run."""
    from locust.env import Environment

    from llm_locust.metrics.aggregate import Aggregate, figures
    from llm_locust.runtime.hub import WARMUP_STEP, MasterHub, WorkerHub

    master = MasterHub(Environment())
    alone = {WARMUP_STEP: Aggregate(), 0: Aggregate(), 1: Aggregate()}
    both = Aggregate()
    merges = []
    real = Aggregate.merge_wire

    def counted(self, d):
        merges.append(self)
        return real(self, d)

    def report(name: str, n: int, step: int, first: int) -> None:
        w = WorkerHub(Environment())
        for i in range(first, first + n):
            w.step = step
            rec = _rec(i, w.on_sent(warmup=step == WARMUP_STEP))
            w.on_done(rec)
            for agg in [alone[step]] + ([both] if step != WARMUP_STEP else []):
                agg.sent += 1
                agg.add(_rec(i, step))
        data: dict = {}
        w.report(data)
        master.merge_report(name, data)

    Aggregate.merge_wire = counted
    try:
        report("w0", 2, WARMUP_STEP, 0)
        report("w0", 4, 0, 10)
        report("w1", 3, 0, 20)
        assert master.steps[0] is master.total and len(merges) == 3  # one merge a report
        report("w0", 5, 1, 30)
        report("w1", 2, 0, 40)  # a late report of step 0
    finally:
        Aggregate.merge_wire = real
    assert master.steps[0] is not master.total
    for got, want in ((master.steps[0], alone[0]), (master.steps[1], alone[1]), (master.total, both)):
        assert figures(got) == figures(want)
    assert figures(master.steps[WARMUP_STEP]) == figures(alone[WARMUP_STEP])
    assert (master.steps[0].sent, master.steps[1].sent, master.total.sent) == (9, 5, 14)


def test_a_workers_figures_of_another_wire_version_are_refused_said_and_fail_the_run():
    """A worker of another llm-locust sends its figures in another wire version: the master merges
    none of them (where positional lists would have been read wrong), says so once, and its run's
    end names the worker (a line that exits 1); the other worker's figures are counted."""
    from locust.env import Environment

    from llm_locust.runtime.hub import REPORT_KEY, MasterHub, WorkerHub

    good, other = WorkerHub(Environment()), WorkerHub(Environment())
    master = MasterHub(Environment())
    _send(good, 3)
    _send(other, 4)
    for name, w in (("w0", good), ("w1", other)):
        data: dict = {}
        w.report(data)
        if w is other:
            data[REPORT_KEY]["steps"]["1"]["v"] = 1
        master.merge_report(name, data)
    assert master.total.sent == 3 and master.workers["w1"].refused_reports == 1
    assert master.workers["w1"].sent == 0
    (line,) = master.record_log_failures()
    assert line.startswith("worker w1: its figures were not counted (figures in wire version 1, where ")


def test_a_worker_builds_locusts_default_options_once_not_per_spawn_option(monkeypatch):
    """Locust's WorkerRunner calls argument_parser.default_args_dict() once for every option of
    every spawn message, and each call builds an argparse parser: with this plugin's 167 options
    a ladder's step held the worker's loop ~375 ms (a probe in a `--workers 1` ladder: 501 calls
    in 3 spawn messages before, 1 after). The plugin's init makes it build them once a process."""
    from locust import argument_parser

    from llm_locust.runtime import plugin

    built = []

    def build():
        built.append(1)
        return {"host": None, "users": 1}

    monkeypatch.setattr(argument_parser, "default_args_dict", build)
    plugin._cache_locust_defaults()
    options = {f"opt_{i}": i for i in range(167)} | {"host": "h"}
    for _ in range(3):  # three spawn messages, as runners.py tells custom options from Locust's
        custom = {k: v for k, v in options.items() if k not in argument_parser.default_args_dict()}
    assert len(built) == 1 and len(custom) == 167
    plugin._cache_locust_defaults()  # a second init in the process wraps nothing twice
    assert argument_parser.default_args_dict() == {"host": None, "users": 1} and len(built) == 1


NEW_MODULES_LOCUSTFILE = """
import os
import sys

from locust import events

from llm_locust.users import StreamingUser  # noqa: F401

_before = set()


@events.test_start.add_listener
def _start(**_kw):
    _before.update(sys.modules)


@events.test_stop.add_listener
def _stop(environment, **_kw):
    role = type(environment.runner).__name__
    new = sorted(m for m in set(sys.modules) - _before if m.split(".")[0] == "numpy")
    with open(os.path.join(os.environ["NEW_MODULES_DIR"], f"{role}.{os.getpid()}"), "w") as f:
        f.write("\\n".join(new))
"""


def test_no_process_imports_numpy_while_its_load_runs(tmp_path):
    """A Locust worker is forked before anything imports numpy, and the histograms import it at
    their first flush: the worker's first report, a second into the load, held its event loop
    100-200 ms (at 100 streams, 1.5% of first tokens read with the second, 10-30 ms late,
    docs/accuracy.md). The plugin's init imports it in every process, before any load."""
    import subprocess

    from support import run_cli

    locustfile = tmp_path / "new_modules.py"
    locustfile.write_text(NEW_MODULES_LOCUSTFILE)
    out = tmp_path / "new"
    out.mkdir()
    env = {"NEW_MODULES_DIR": str(out)}
    args = ("-f", str(locustfile), "-u", "4", "-t", "3s", "--workers", "1", "--results", str(tmp_path / "r.json"))
    # a process of its own, not the suite's fork server (which has numpy imported already)
    p = run_cli(*args, env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    seen = {f.name.split(".")[0]: f.read_text().split() for f in out.iterdir()}
    assert set(seen) == {"MasterRunner", "WorkerRunner"}, seen
    assert seen == {"MasterRunner": [], "WorkerRunner": []}, seen
