"""The suite's tiers: what each test needs, decided in one place when pytest collects it.

A test's tier follows from what it starts, so a new test lands in the right one without anyone
marking it:

- ``real_server``: a real inference server (llama-server, vLLM, the router): CPU-bound, alone.
- ``browser``: headless Chromium.
- ``cluster``: a Locust master with worker processes.
- ``slow``: any other process of its own (the CLI, a Locust run, the simulator, the recording
  proxy, Prometheus): seconds each, mostly waiting, so these run several at a time.
- ``timing``: asserts wall-clock or millisecond figures, so it never shares the CPU with parallel
  workers. This one cannot be seen in the code; a test (or module) declares it with
  ``@pytest.mark.timing``.
- everything else is the fast tier: in this process, parallel, and guarded: a fast test that
  starts a process, or runs longer than ``FAST_CPU_LIMIT_S`` of CPU (or ``FAST_WALL_LIMIT_S`` of
  wall time), fails with a line saying how to mark it.

What a test starts is read from its source: the names it uses, those of the module's helpers and
fixtures it calls (transitively), and the fixtures it asks for (conftest's too). ``LAUNCHERS``
lists the names that start a process; ``CLUSTER_ARGS`` the command-line words that make a cluster.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

# in the order a test's tier is picked (declared in pyproject.toml's [tool.pytest.ini_options])
MARKS = ("real_server", "browser", "timing", "cluster", "slow")

# Names whose use starts a process (functions, classes, modules).
REAL_LAUNCHERS = {
    "LlamaServer",
    "VllmServer",
    "SmgRouter",
    "LlamaReplicas",
    "vllm_server",
    "vllm_servers",
    "llama_server_bin",
    "vllm_python",
    "chat_replay",
}
LAUNCHERS = REAL_LAUNCHERS | {
    "subprocess",
    "Popen",
    "run_cli",
    "cli_process",
    "run_ok",  # support: run_cli, its status checked
    "start_run",  # support: `llm-locust run` in the background
    "Background",  # support: `llm-locust run` in a session of its own, its lines read
    "Cluster",  # support: a Locust master and its workers
    "SimProcess",
    "ProxyProcess",
    "MlflowServer",  # realservers: an MLflow tracking server (not an inference server: the slow tier)
    "multiprocessing",
    "need_binary",  # prometheus, promtool, chromium: programs a test runs
}
BROWSER_WORDS = {"playwright", "sync_playwright", "chromium"}
CLUSTER_ARGS = {"--master", "--worker", "--workers", "--processes", "--expect-workers"}

# The limits of a fast test's call (its fixtures' set-up not counted): CPU seconds of this process,
# which another load on the machine barely moves, and wall seconds, for a test that waits.
FAST_CPU_LIMIT_S = 5.0
FAST_WALL_LIMIT_S = 20.0


class _Module:
    """One test module's functions (and conftest's), each with the names and strings it uses."""

    def __init__(self, path: Path):
        tree = ast.parse(path.read_text(), str(path))
        self.uses: dict[str, set[str]] = {}
        self.words: dict[str, set[str]] = {}
        # the module's own definitions, each with everything inside it: a class counts as what its
        # methods use (a test's helper object), a fixture as what its inner functions use. Inner
        # functions are no names of their own: two fixtures' `get` are two functions.
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.uses.setdefault(node.name, set()).update(_names(node))
                self.words.setdefault(node.name, set()).update(_strings(node))
        # module-level statements (constants, pytestmark) count for every test of the module
        top = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        self.module_words = set().union(*(_strings(n) for n in top)) if top else set()

    def closure(self, name: str, kind: str) -> set[str]:
        """The names (kind="uses") or strings (kind="words") of `name` and the module functions it
        calls, transitively."""
        table = self.uses if kind == "uses" else self.words
        seen, todo, out = set(), [name], set()
        while todo:
            fn = todo.pop()
            if fn in seen or fn not in self.uses:
                continue
            seen.add(fn)
            out |= table.get(fn, set())
            todo.extend(self.uses[fn] & self.uses.keys())
        return out


def _names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)  # fixtures a helper or fixture asks for
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for mod in [getattr(n, "module", None) or "", *(a.name for a in n.names)]:
                out.update(mod.split("."))
    return out


def _strings(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 40:
            out.add(n.value)
            out.update(n.value.split())
    return out


@functools.cache
def _module(path: str) -> _Module:
    return _Module(Path(path))


def _reads(item: pytest.Item) -> tuple[set[str], set[str]]:
    """(names, strings) a collected test uses: its own, its module's helpers' and fixtures' and
    conftest's fixtures', transitively."""
    fn = getattr(item, "function", None)
    if fn is None:
        return set(), set()
    mod = _module(str(item.path))
    conftest = _module(str(Path(__file__).with_name("conftest.py")))
    uses: set[str] = set()
    words: set[str] = set(mod.module_words)
    for name in [fn.__name__, *getattr(item, "fixturenames", ())]:
        for source in (mod, conftest):
            uses |= source.closure(name, "uses")
            words |= source.closure(name, "words")
    return uses | set(getattr(item, "fixturenames", ())), words


def needs(item: pytest.Item) -> set[str]:
    """The tier marks a collected test earns from what it starts (see the module docstring)."""
    uses, words = _reads(item)
    marks = set()
    if uses & REAL_LAUNCHERS:
        marks.add("real_server")
    if (uses | words) & BROWSER_WORDS:
        marks.add("browser")
    if uses & LAUNCHERS:
        marks.add("slow")
        if words & CLUSTER_ARGS:
            marks.add("cluster")
    return marks


def tier(item: pytest.Item) -> str:
    """The one tier a test runs in: real_server, browser, timing, cluster, slow or fast."""
    own = {m.name for m in item.iter_markers() if m.name in MARKS}
    for name in MARKS:
        if name in own:
            return name
    return "fast"


def apply(items: list[pytest.Item]) -> None:
    """Add the marks each test earns (a mark it declares stays)."""
    for item in items:
        for name in sorted(needs(item)):
            item.add_marker(name)


class ProcessInFastTier(Exception):
    """A test of the fast tier started a process."""


def _guarded_classes() -> list[type]:
    import subprocess
    import sys

    classes = [subprocess.Popen]
    gsub = sys.modules.get("gevent.subprocess")
    if gsub is not None and gsub.Popen not in classes:
        classes.append(gsub.Popen)
    return classes


@functools.cache
def warm_libraries() -> None:
    """Build, once per process and outside any guard, what a library builds on its first use by
    starting a process: matplotlib's font cache runs `fc-list` where no cache is kept yet (a fresh
    machine, CI's), which failed the first fast test that drew a report's plot."""
    try:
        import matplotlib.font_manager  # noqa: F401 (its import builds or loads the font cache)
    except ImportError:  # the package's report needs it; a checkout without it has other errors
        pass


class Guard:
    """While a fast test runs: starting a process fails it (and is remembered, in case the test
    swallowed the exception)."""

    def __init__(self, item: pytest.Item):
        self.item = item
        self.started: list[str] = []
        self._saved: list[tuple[type, object]] = []

    def __enter__(self) -> Guard:
        for cls in _guarded_classes():
            original = cls._execute_child  # type: ignore[attr-defined]
            self._saved.append((cls, original))

            def refuse(popen, args, *rest, **kw):
                self.started.append(str(args)[:200])
                raise ProcessInFastTier(self.message())

            cls._execute_child = refuse  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc) -> None:
        for cls, original in self._saved:
            cls._execute_child = original  # type: ignore[attr-defined]

    def message(self) -> str:
        return (
            f"{self.item.nodeid} is in the fast tier but started a process ({self.started[-1]}): "
            "use the helpers that tests/tiers.py knows (support.run_cli, SimProcess, ...) or mark it "
            "@pytest.mark.slow"
        )


def too_long(item: pytest.Item, cpu_s: float, wall_s: float) -> str | None:
    """Why a fast test's call, of `cpu_s` CPU and `wall_s` wall seconds, fails the tier, or None."""
    if cpu_s <= FAST_CPU_LIMIT_S and wall_s <= FAST_WALL_LIMIT_S:
        return None
    return (
        f"{item.nodeid} is in the fast tier but its call took {cpu_s:.1f} s of CPU and {wall_s:.1f} s in all "
        f"(the limits: {FAST_CPU_LIMIT_S:g} and {FAST_WALL_LIMIT_S:g} s): make it faster, or mark it "
        "@pytest.mark.slow (tests/tiers.py)"
    )


DURATIONS = Path(__file__).with_name("durations.json")


# The modules that share one vLLM server (conftest's `vllm_server` with realservers.VLLM_SHARED: those
# that set no VLLM_SERVER_KWARGS of their own) go to one shard together, to start it once. Any other
# module that starts vLLM is dealt alone: a vLLM server is one busy thread (realservers.VllmServer:
# one OpenMP thread, the model runner in the engine's process), so two shards each running one
# share 2 cores as two llama-servers would; conftest stops a server no later module asks for, so
# at most one runs a shard (~4 GiB each).
SHARED_VLLM = "vllm-shared"


def unit(item: pytest.Item) -> str:
    """What a test is dealt to a shard with: its module, or the modules of the shared vLLM server."""
    uses, _ = _reads(item)
    if uses & {"vllm_server", "vllm_servers"} and not hasattr(item.module, "VLLM_SERVER_KWARGS"):
        return SHARED_VLLM
    return item.nodeid.split("::")[0]


def shard(items: list[pytest.Item], k: int, n: int, tier_name: str) -> list[pytest.Item]:
    """The items of shard `k` of `n` (1-based): whole modules (their module-scoped servers start
    once) or the modules of the shared vLLM server (SHARED_VLLM), dealt to the lightest shard,
    heaviest first, by the seconds tests/durations.json recorded for each module in this tier (one
    it does not know: 1 s a test), less those of its tests that ran alone ("TIER-alone": while one
    runs, every shard waits, so they weigh on all alike)."""
    import json

    table = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    known, alone = table.get(tier_name, {}), table.get(f"{tier_name}-alone", {})
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(unit(item), []).append(item)

    def weight(name: str) -> float:  # a test's time alone stops every shard alike: it does not count
        modules = {i.nodeid.split("::")[0] for i in units[name]}
        return sum(
            known.get(m, float(sum(1 for i in units[name] if i.nodeid.startswith(m)))) - alone.get(m, 0.0)
            for m in modules
        )

    def alone_s(name: str) -> float:
        return sum(alone.get(m, 0.0) for m in {i.nodeid.split("::")[0] for i in units[name]})

    load = [0.0] * n
    mine = []
    for name in sorted(units, key=lambda u: (-weight(u), u)):
        j = min(range(n), key=lambda i: (load[i], i))
        load[j] += weight(name)
        if j == k - 1:
            mine.append(name)
    # the units with tests alone first: then they run while every shard still has tests to run
    # (each waits its turn), not at the end of one shard after the others have ended, where the
    # time alone adds to the wall (the run of 2b335ce: the knee and the SLA search, 104 s, last on
    # one shard, after the other had ended)
    mine.sort(key=lambda u: alone_s(u) == 0)
    return [item for name in mine for item in units[name]]  # a unit's tests together: its servers start once
