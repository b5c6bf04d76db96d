"""The suite's own machinery: tiers decided from what a test starts, the fast tier's guard, shards,
data from ../shared that CI cannot skip, repeatable Hypothesis examples, and the lint gate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import support
import tiers
from hypothesis import given
from hypothesis import strategies as st

ROOT = support.ROOT


class FakeItem:
    """What tiers.needs and tiers.tier read of a collected test."""

    def __init__(self, path: Path, name: str, fixturenames=(), marks=(), module=None):
        self.path = path
        self.nodeid = f"{path.name}::{name}"
        self.fixturenames = list(fixturenames)
        self.module = module or types.SimpleNamespace()
        self._marks = [getattr(pytest.mark, m).mark for m in marks]

        def function():
            pass

        function.__name__ = name
        self.function = function

    def iter_markers(self):
        return iter(self._marks)

    def add_marker(self, name):
        self._marks.append(getattr(pytest.mark, name).mark)


MODULE = """
import subprocess
from support import run_cli

@pytest.fixture
def numbers():
    def get(n):
        return list(range(n))
    return get

@pytest.fixture
def engines():
    def get(**kwargs):
        return VllmServer(**kwargs)
    return get

@pytest.fixture
def server():
    with SimProcess(slots=2) as s:
        yield s

def _run(*args):
    return run_cli(*args)

def _cluster(tmp_path):
    return _run("--workers", "2")

class Proxy:
    def start(self):
        self.proc = subprocess.Popen(["true"])

def test_pure():
    assert 1 + 1 == 2

def test_runs_the_cli(tmp_path):
    _run("-t", "1s")

def test_uses_a_fixture(server):
    pass

def test_two_workers(tmp_path):
    _cluster(tmp_path)

def test_real(vllm_server):
    pass

def test_browser():
    from playwright.sync_api import sync_playwright

def test_through_a_class():
    Proxy().start()

def test_with_numbers(numbers):
    assert numbers(2)
"""


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiers") / "test_sample.py"
    path.write_text(MODULE)
    return path


@pytest.mark.parametrize(
    "name, fixtures, expected",
    [
        ("test_pure", (), "fast"),
        ("test_runs_the_cli", ("tmp_path",), "slow"),  # through a module helper
        ("test_uses_a_fixture", ("server",), "slow"),  # through the module's fixture
        ("test_two_workers", ("tmp_path",), "cluster"),  # "--workers" two helpers down
        ("test_real", ("vllm_server",), "real_server"),  # conftest's fixture
        ("test_browser", (), "browser"),
        ("test_through_a_class", (), "slow"),  # a helper object of the module
        # two fixtures' inner functions of one name are two functions: `engines`' `get` starts
        # vLLM, `numbers`' does not (read by bare name, every test of the simulator was real_server)
        ("test_with_numbers", ("numbers",), "fast"),
    ],
)
def test_a_test_lands_in_the_tier_of_what_it_starts(sample, name, fixtures, expected):
    item = FakeItem(sample, name, fixtures)
    tiers.apply([item])
    assert tiers.tier(item) == expected


def test_a_declared_timing_mark_wins_over_slow(sample):
    item = FakeItem(sample, "test_runs_the_cli", ("tmp_path",), marks=["timing"])
    tiers.apply([item])
    assert tiers.tier(item) == "timing"


def test_the_guard_refuses_a_process_and_remembers_it(sample):
    item = FakeItem(sample, "test_pure")
    with tiers.Guard(item) as guard:
        with pytest.raises(tiers.ProcessInFastTier, match="mark it @pytest.mark.slow"):
            subprocess.run(["true"], check=False)
    assert guard.started == ["['true']"]
    subprocess.run(["true"], check=True)  # and lets processes be once it has ended


def test_a_long_fast_test_is_named_with_the_limits(sample):
    item = FakeItem(sample, "test_pure")
    assert tiers.too_long(item, tiers.FAST_CPU_LIMIT_S - 0.1, tiers.FAST_WALL_LIMIT_S - 0.1) is None
    assert "took 9.0 s of CPU" in tiers.too_long(item, 9.0, 9.5)
    assert tiers.too_long(item, 0.1, tiers.FAST_WALL_LIMIT_S + 1) is not None


def test_shards_split_whole_modules_and_lose_none(tmp_path):
    items = []
    for m, n in [("a", 5), ("b", 1), ("c", 3), ("d", 3)]:
        (tmp_path / f"test_{m}.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(n)))
        items += [FakeItem(tmp_path / f"test_{m}.py", f"test_{i}") for i in range(n)]
    parts = [tiers.shard(items, k, 2, "nosuchtier") for k in (1, 2)]
    assert sorted(id(i) for p in parts for i in p) == sorted(id(i) for i in items)
    for p in parts:
        assert {i.nodeid.split("::")[0] for i in p}.isdisjoint(
            {i.nodeid.split("::")[0] for q in parts if q is not p for i in q}
        )
    assert sorted(len(p) for p in parts) == [6, 6]  # a (5) + b (1) beside c (3) + d (3)


def test_the_shared_vllm_servers_modules_share_a_shard_and_others_are_dealt_alone(tmp_path):
    """The modules that ask `vllm_server` for the shared arguments (no VLLM_SERVER_KWARGS of their
    own) go to one shard, one after another, to start it once; a module with its own vLLM arguments
    is dealt like any other (the old rule kept every vLLM module on one shard: a, b and c beside d)."""
    shared, own = types.SimpleNamespace(), types.SimpleNamespace(VLLM_SERVER_KWARGS={"max_num_seqs": 1})
    items = []
    for m, n, module in [("a", 3, shared), ("b", 3, shared), ("c", 3, own), ("d", 4, None)]:
        (tmp_path / f"test_{m}.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(n)))
        uses = ("vllm_server",) if module is not None else ()
        items += [FakeItem(tmp_path / f"test_{m}.py", f"test_{i}", uses, module=module) for i in range(n)]
    parts = [[i.nodeid.split("::")[0] for i in tiers.shard(items, k, 2, "nosuchtier")] for k in (1, 2)]
    assert parts[0] == ["test_a.py"] * 3 + ["test_b.py"] * 3  # the shared server's (6 s) first
    assert parts[1] == ["test_d.py"] * 4 + ["test_c.py"] * 3  # then d (4 s), then c beside d


def test_a_modules_time_alone_weighs_on_every_shard_alike(tmp_path, monkeypatch):
    """Dealt by the seconds not alone: a (10 s, 6 of them alone: every shard waits then) weighs 4, so
    b (8) goes first and a joins c (5); by the whole seconds a would have had a shard to itself. A
    unit with tests alone runs first in its shard, while the other shard still runs."""
    table = {"t": {"test_a.py": 10.0, "test_b.py": 8.0, "test_c.py": 5.0}, "t-alone": {"test_a.py": 6.0}}
    (tmp_path / "durations.json").write_text(json.dumps(table))
    monkeypatch.setattr(tiers, "DURATIONS", tmp_path / "durations.json")
    items = []
    for m in "abc":
        (tmp_path / f"test_{m}.py").write_text("def test_0():\n    pass\n")
        items.append(FakeItem(tmp_path / f"test_{m}.py", "test_0"))
    parts = [[i.nodeid.split("::")[0] for i in tiers.shard(items, k, 2, "t")] for k in (1, 2)]
    assert parts == [["test_b.py"], ["test_a.py", "test_c.py"]]
    del table["t-alone"]
    (tmp_path / "durations.json").write_text(json.dumps(table))
    parts = [[i.nodeid.split("::")[0] for i in tiers.shard(items, k, 2, "t")] for k in (1, 2)]
    assert parts == [["test_a.py"], ["test_b.py", "test_c.py"]]


def test_the_tests_that_ran_alone_are_read_from_junit_and_saved_apart(tmp_path, monkeypatch):
    """conftest marks a `timing` test's JUnit case (property alone); --save-durations keeps their
    seconds per module under "TIER-alone" for a tier whose shards take turns."""
    junit = tmp_path / "real-1.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_x" name="test_a" file="tests/test_x.py" time="7.5">'
        '<properties><property name="alone" value="1"/></properties></testcase>'
        '<testcase classname="tests.test_x" name="test_b" file="tests/test_x.py" time="2.0"/>'
        "</testsuite></testsuites>"
    )
    suite = _suite_script()
    assert suite.read_alone(junit) == {"tests/test_x.py::test_a"}
    monkeypatch.setattr(suite, "ROOT", tmp_path)
    (tmp_path / "tests").mkdir()
    out = suite.Outcome("real", 10.0, 0, suite.read_junit(junit), [], suite.read_alone(junit))
    suite.save_durations([out])
    saved = json.loads((tmp_path / "tests" / "durations.json").read_text())
    assert saved["real"] == {"tests/test_x.py": 9.5} and saved["real-alone"] == {"tests/test_x.py": 7.5}


def test_shared_data_skips_here_and_fails_in_ci(monkeypatch, tmp_path):
    monkeypatch.setattr(support, "SHARED", tmp_path / "nowhere")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        support.shared_file("traces/azure2023_conv.csv")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set, so this test must run"):
        support.shared_file("traces/azure2023_conv.csv")


def test_a_test_that_reads_shared_fails_under_ci_without_it(tmp_path):
    """End to end: the two-worker exactly-once replay test, in a copy of the tests beside no
    ../shared, under CI=true: it fails (before any load), it does not skip."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    target = "tests/test_adapters.py::test_fixture_copies_match_shared_captures"
    env = {**os.environ, "CI": "true"}
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1, p.stdout[-2000:]
    assert "1 failed" in p.stdout and "CI is set, so this test must run" in p.stdout


def test_a_fast_test_that_draws_a_plot_passes_on_a_machine_with_no_font_cache(tmp_path):
    """A fresh machine keeps no matplotlib font cache, and matplotlib builds it on its first use
    by running `fc-list`: inside the fast tier's guard that was a process, and the first fast test
    to draw a report's plot failed (a fresh clone's CI, 3 tests). conftest builds it first."""
    target = "tests/test_cache_figures.py::test_html_report_without_cache_figures_has_no_cache_parts"
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}  # an empty cache: a fresh machine's
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'bt'}", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-2000:]
    assert list((tmp_path / "mpl").glob("fontlist-*.json")), "matplotlib built no font cache there"


SEEN: list[list[int]] = []


@given(st.lists(st.integers()))
def _draw(xs):
    SEEN[-1].append(len(xs) * 1000 + (sum(xs) % 997))


def test_hypothesis_draws_the_same_examples_every_run():
    """The suite's profile is derandomized with no example database: two runs of one property,
    like two CI runs of one commit, see the same examples in the same order."""
    for _ in range(2):
        SEEN.append([])
        _draw()
    assert SEEN[-1] == SEEN[-2] and len(SEEN[-1]) > 10


def test_lint_fails_fast_on_a_planted_error_and_passes_without(tmp_path):
    """`scripts/suite.py lint` (the first step of .ci/run) on a copy of the tree: a type error
    planted in the package fails it, with the file named; the tree as it is passes."""
    copy = tmp_path / "repo"
    for part in ("llm_locust", "tests", "benchmarks", "scripts"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    if (ROOT / ".mypy_cache").is_dir():  # the suite's own lint step made it: mypy reads the copy warm
        shutil.copytree(ROOT / ".mypy_cache", copy / ".mypy_cache")
    lint = [sys.executable, str(copy / "scripts" / "suite.py"), "lint"]
    ok = subprocess.run(lint, cwd=copy, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    target = copy / "llm_locust" / "metrics" / "units_planted.py"
    target.write_text(
        textwrap.dedent('''\
        """A planted type error."""

        COUNT: int = "three"
    ''')
    )
    bad = subprocess.run(lint, cwd=copy, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1
    assert "units_planted.py:3" in bad.stdout and "mypy: FAILED" in bad.stdout
    assert "no test was run" in bad.stdout


def _suite_script():
    """scripts/suite.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_script", ROOT / "scripts" / "suite.py")
    suite = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = suite  # its dataclasses look their module up
    spec.loader.exec_module(suite)
    return suite


def test_the_summary_ends_with_what_each_failed_test_said(tmp_path):
    """A CI page shows a long log's start and end: the end names each failure and its message."""
    suite = _suite_script()
    junit = tmp_path / "t.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase file="tests/test_a.py" name="test_ok" time="0.1"/>'
        '<testcase file="tests/test_a.py" name="test_bad" time="2.0">'
        "<failure message=\"AssertionError: (1, 12.5, 'stderr tail')\">long traceback</failure></testcase>"
        '<testcase file="tests/test_b.py" name="test_broken" time="0.3"><error message="">boom\nat setup</error>'
        "</testcase></testsuite></testsuites>"
    )
    why = suite.failures(junit)
    assert why == [
        "  tests/test_a.py::test_bad: AssertionError: (1, 12.5, 'stderr tail')",
        "  tests/test_b.py::test_broken: boom at setup",
    ]
    text = suite.summary([suite.Outcome("timing", 3.0, 1, suite.read_junit(junit), why)], 0.0)
    assert text.splitlines()[-3:-1] == why and "[suite] 2 failed" in text
