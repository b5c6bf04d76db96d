"""The package's layers hold: no import cycles, a core that never imports Locust or gevent, and a
plugin that nothing inside the package imports back.

Three layers. The core is what a reader can run and test without an event loop: the results
document's types, output safety, records and metrics, protocols, the workload, the analysis, the
settings and the report, in that order: each package imports only from those before it. The transport
(llm_locust.transport) runs on gevent and never on Locust: the wire and the reads of a server, I/O
only. Beside it on the same rules, the loop (llm_locust.loop): what runs on the event loop beside
the load and is not I/O (the clock across hosts, sessions, signals, the progress panel); it may
import the transport, never the other way. The runtime (llm_locust.runtime) is Locust's side, and
only that: every module in it imports Locust. `llm_locust.users` is the one public entry that wires it into Locust. The
simulator (`sim/`) and the GPU sidecar (`gpu/`) are programs of their own, importing nothing else
of the package; the trace recorder and the anonymizer (`tools/`) are asyncio programs on the core.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llm_locust"
# The core's packages, lowest first: a module imports from its own package and the ones before it,
# never from one after it (docs/architecture.md draws this order). At the bottom the results
# document's types (schema.py, like prometheus_client's samples.py: nothing of the package), then
# what makes any output safe to print (safe/: masking, terminal).
CORE = ("schema", "safe", "metrics", "protocols", "workload", "analysis", "settings", "report")
EVENT_LOOP = ("locust", "gevent", "geventhttpclient")


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(package modules, third-party top-level names) that module `name` imports anywhere in it,
    those under `if TYPE_CHECKING:` included: mypy reads them, and a type that can only be named
    from a module importing this one is a cycle all the same."""
    own, third = set(), set()
    package = name.split(".") + (["__init__"] if path.name == "__init__.py" else [])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join(package[: len(package) - node.level] + [node.module or ""]).strip(".")
                if node.level
                else node.module or ""
            )
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            third.add(t.split(".")[0])
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                own.add(t)
    return own, third


def _graph():
    mods = _modules()
    edges, third = {}, {}
    for name, path in mods.items():
        edges[name], third[name] = _imports(name, path, mods)
    return mods, edges, third


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def _core(name: str) -> bool:
    return any(_in(name, c) for c in CORE)


def _in(name: str, package: str) -> bool:
    return name == f"llm_locust.{package}" or name.startswith(f"llm_locust.{package}.")


# Runtime modules that import no Locust themselves, each with why it is Locust glue all the same.
# Any other module in runtime/ imports Locust (a type it is handed counts); one that needs none
# belongs to the loop or the transport (gevent) or the core (no event loop).
RUNTIME_WITHOUT_LOCUST = {
    "llm_locust.runtime.webui.guard": "Flask hooks on Locust's web UI (the WebUI the plugin hands it), "
    "installed before any route",
}


# Modules whose name stays when another module would take it: something outside the package's own
# imports names them. No two modules share a basename (test below); a new module that would share
# one of these names takes another.
KEEPS_ITS_NAME = {
    "users.py": "the public import a locustfile makes: `from llm_locust.users import LLMUser`",
    "cli.py": "the `llm-locust` entry point pyproject.toml names (llm_locust.cli:main)",
    "settings/model.py": "where every setting is declared, as the docs and README name it",
    "transport/http.py": "the HTTP/1.1 wire beside transport/grpc_*.py, named so across the docs",
    "protocols/base.py": "what every protocol adapter provides, beside the one module per --api",
    "protocols/sglang.py": "protocols/ names a module by its --api value (sglang)",
    "locustfiles/closed.py": "the bundled locustfiles are named by mode (closed/replay/ladder): user-visible",
    "locustfiles/replay.py": "the bundled locustfiles are named by mode (closed/replay/ladder): user-visible",
    "locustfiles/ladder.py": "the bundled locustfiles are named by mode (closed/replay/ladder): user-visible",
}
# Basenames that more than one module may carry, each with its reason: none today.
SHARED_BASENAMES: dict[str, str] = {}


def _module_files() -> list[str]:
    """Every module's path under llm_locust/, `/`-separated."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def _shared_basenames(files: list[str]) -> dict[str, list[str]]:
    """Basename -> the modules carrying it, where more than one does (__init__ and __main__ exempt)."""
    by_name: dict[str, list[str]] = {}
    for f in files:
        name = f.rpartition("/")[2]
        if name not in ("__init__.py", "__main__.py") and name not in SHARED_BASENAMES:
            by_name.setdefault(name, []).append(f)
    return {n: fs for n, fs in by_name.items() if len(fs) > 1}


def test_no_two_modules_share_a_name():
    """`grid.py` in three packages reads as one module in a traceback, a grep or a review: each
    module's basename is its own. The one to rename is the one not in KEEPS_ITS_NAME."""
    files = _module_files()
    assert sorted(set(KEEPS_ITS_NAME) - set(files)) == [], "KEEPS_ITS_NAME names a module that is gone"
    shared = _shared_basenames(files)
    rename = {n: [f for f in fs if f not in KEEPS_ITS_NAME] for n, fs in shared.items()}
    assert shared == {}, f"modules sharing a basename: {shared}; rename {rename}"


def test_the_checker_finds_two_modules_of_one_name(monkeypatch):
    """What the rule above says of a second `metrics.py` and of a module taking a kept name."""
    files = _module_files() + ["report/metrics.py", "sim/metrics.py", "sim/users.py"]
    monkeypatch.setattr(sys.modules[__name__], "_module_files", lambda: files)
    try:
        test_no_two_modules_share_a_name()
    except AssertionError as e:
        assert "'metrics.py': ['report/metrics.py', 'sim/metrics.py']" in str(e), e
        assert "'users.py': ['sim/users.py']" in str(e), e  # rename the new one, not llm_locust/users.py
    else:
        raise AssertionError("two modules of one name passed")
    assert _shared_basenames(["a/__init__.py", "b/__init__.py", "a/__main__.py", "b/__main__.py"]) == {}


# Imports inside a function are the exception (issue 38: some were there only to dodge cycles).
# Allowed: in a module named here, an import of a dependency named here, an import in a `try` (an
# optional dependency met with its ImportError), or one whose line says why in a comment.
LAZY_MODULES = {
    "llm_locust/cli.py": "start-up: `llm-locust --help`, a plan check and `sim` load neither Locust "
    "(its import monkey-patches the process) nor the report; each command imports what it runs",
}
LAZY_DEPENDENCIES = {
    "grpc": "optional: grpcio, only for --api tgi-grpc / triton-grpc (the grpc extra)",
    "mlflow": "optional: only `--mlflow` (the mlflow extra)",
    "pyarrow": "optional: only the Parquet export (the parquet extra)",
    "uvloop": "optional: the simulator's faster loop where installed",
    "pynvml": "optional at run time: the GPU sidecar on a machine with NVIDIA's driver",
    "gevent": "the gRPC client's and the sidecar's check of gevent's patching, only on their paths",
    "locust": "start-up: the CLI reads Locust's own parser only for a run's --help",
    "pydantic": "start-up: the JSON Schema is built only when it is written or checked",
    "matplotlib": "start-up: a run's processes import the report but draw nothing (0.6 CPU-s each)",
    "numpy": "start-up: `compare`, `report` and the core's other readers of histograms never load it",
    "kneed": "start-up: the knee is found only at a ladder's end",
    "rich": "start-up: the live panel only on a terminal",
    "hpack": "start-up: HPACK only on a gRPC connection",
    "tokenizers": "start-up: a tokenizer only when --tokenizer is given",
    "jinja2": "start-up: a chat template only when a tokenizer brings one",
    "PIL": "start-up: images only for a multimodal workload",
    "jsonschema": "start-up: a schema check only for structured-output requests",
}


def _inner_imports(path: str, source: str) -> list[str]:
    """'path:line: text' for each import inside a function that none of the exceptions above allows."""
    if path in LAZY_MODULES:
        return []
    tree, lines = ast.parse(source), source.splitlines()
    parent = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.col_offset == 0:
            continue
        chain, up = [], parent.get(node)
        while up is not None:
            chain.append(up)
            up = parent.get(up)
        if not any(isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) for a in chain):
            continue  # TYPE_CHECKING blocks and the like
        name = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
        if any(isinstance(a, ast.Try) for a in chain) or name in LAZY_DEPENDENCIES or "#" in text:
            continue
        bad.append(f"{path}:{node.lineno}: {text.strip()}")
    return bad


def test_imports_sit_at_the_top_of_their_module():
    bad = []
    for p in sorted(PACKAGE.rglob("*.py")):
        bad += _inner_imports(p.relative_to(PACKAGE.parent).as_posix(), p.read_text())
    assert bad == []
    assert set(LAZY_MODULES) <= {p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*.py")}


def test_the_checker_finds_an_import_inside_a_function():
    source = """import os


def f():
    from llm_locust.report import html
    import json
    import numpy  # allowed: a dependency named above
    from x import y  # allowed: the line says why
    try:
        import anything
    except ImportError:
        pass
"""
    assert _inner_imports("llm_locust/x.py", source) == [
        "llm_locust/x.py:5: from llm_locust.report import html",
        "llm_locust/x.py:6: import json",
    ]
    assert _inner_imports("llm_locust/cli.py", source) == []


def test_no_import_cycles():
    """Type-only imports (`if TYPE_CHECKING:`) count: the run context names its parts by what it
    uses of them (runtime/context.py's protocols), not by the classes of modules that import it."""
    _, edges, _ = _graph()
    assert _cycles(edges) == []


def test_the_cycle_check_counts_a_type_only_import(tmp_path):
    """An import under `if TYPE_CHECKING:` (either spelling) is an edge like one beside it."""
    path = tmp_path / "a.py"
    path.write_text(
        "import typing\nfrom typing import TYPE_CHECKING\n\nfrom llm_locust import b\n\n"
        "if TYPE_CHECKING:\n    from llm_locust import c\nif typing.TYPE_CHECKING:\n    import llm_locust.d\n"
        "else:\n    import llm_locust.e\n"
    )
    known = {f"llm_locust.{m}": tmp_path for m in "abcde"}
    assert _imports("llm_locust.a", path, known)[0] == {f"llm_locust.{m}" for m in "bcde"}


def test_the_checker_finds_a_type_only_cycle_in_the_runtime():
    """The run context naming a part's class again (the cycle issue 38 removed) fails the check."""
    _, edges, _ = _graph()
    planted = {k: set(v) for k, v in edges.items()}
    planted["llm_locust.runtime.context"].add("llm_locust.runtime.hub")
    assert ["llm_locust.runtime.context", "llm_locust.runtime.hub"] in _cycles(planted)


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _package(name: str) -> str | None:
    """The core package module `name` belongs to (None outside the core)."""
    return next((c for c in CORE if _in(name, c)), None)


def _package_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The core's package graph: package -> the other core packages its modules import."""
    out: dict[str, set[str]] = {c: set() for c in CORE}
    for name, targets in edges.items():
        a = _package(name)
        if a is not None:
            out[a] |= {b for b in map(_package, targets) if b is not None and b != a}
    return out


def _upward(edges: dict[str, set[str]]) -> list[str]:
    """'module -> target' for each import from a core package into one after it in CORE."""
    bad = []
    for name, targets in sorted(edges.items()):
        a = _package(name)
        for t in sorted(targets):
            b = _package(t)
            if a is not None and b is not None and CORE.index(b) > CORE.index(a):
                bad.append(f"{name} -> {t}")
    return bad


def test_the_core_packages_follow_one_order():
    """Module cycles are not enough: six packages whose modules import each other in a ring are
    one knot although no two modules form a cycle. Each package imports only those before it."""
    _, edges, _ = _graph()
    assert _upward(edges) == []
    assert _cycles(_package_edges(edges)) == []


def test_the_results_types_import_nothing_of_the_package():
    _, edges, _ = _graph()
    assert sorted(edges["llm_locust.schema"] - {"llm_locust"}) == []


def test_the_checker_finds_a_package_cycle_and_an_upward_import():
    """What the order test says of the real graph with one import planted: metrics importing the
    report (upward), and that plus the report importing metrics (a package cycle)."""
    _, edges, _ = _graph()
    planted = {k: set(v) for k, v in edges.items()}
    planted["llm_locust.metrics.histogram"].add("llm_locust.report.summary")
    assert _upward(planted) == ["llm_locust.metrics.histogram -> llm_locust.report.summary"]
    assert ["metrics", "report"] in [sorted(set(c) & {"metrics", "report"}) for c in _cycles(_package_edges(planted))]
    lower = {k: set(v) for k, v in edges.items()}
    lower["llm_locust.workload.cancel"].add("llm_locust.settings.units")  # issue 38's own example
    assert _upward(lower) == ["llm_locust.workload.cancel -> llm_locust.settings.units"]


def test_core_never_imports_locust_gevent_the_transport_or_the_runtime():
    _, edges, third = _graph()
    bad = {n: sorted(third[n] & set(EVENT_LOOP)) for n in edges if _core(n) and third[n] & set(EVENT_LOOP)}
    assert bad == {}
    into_runtime = {
        n: sorted(
            e
            for e in edges[n]
            if _in(e, "runtime") or _in(e, "transport") or _in(e, "loop") or _in(e, "tools") or e == "llm_locust.users"
        )
        for n in edges
        if _core(n)
    }
    assert {n: v for n, v in into_runtime.items() if v} == {}


def test_nothing_in_the_package_imports_the_plugin_back():
    _, edges, _ = _graph()
    importers = sorted(n for n, e in edges.items() if "llm_locust.runtime.plugin" in e)
    assert importers == ["llm_locust.users"]
    assert sorted(n for n, e in edges.items() if "llm_locust.users" in e) == [
        "llm_locust.locustfiles.closed",
        "llm_locust.locustfiles.ladder",
        "llm_locust.locustfiles.replay",
    ]


def test_importing_the_whole_core_loads_no_event_loop():
    """The AST check above, confirmed by the interpreter: every core module imported, and neither
    Locust nor gevent (which monkey-patches the process) is in sys.modules afterwards."""
    mods, _, _ = _graph()
    core = sorted(n for n in mods if _core(n) and not n.endswith(".__main__"))
    code = (
        "import importlib, sys\n"
        f"for m in {core!r}: importlib.import_module(m)\n"
        f"print(sorted(k for k in sys.modules if k.split('.')[0] in {EVENT_LOOP!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_transport_and_the_loop_never_import_locust_or_the_runtime():
    _, edges, third = _graph()
    transport = [n for n in edges if _in(n, "transport") or _in(n, "loop")]
    assert len(transport) > 10 and "llm_locust.loop.clock" in transport
    assert {n: "locust" for n in transport if "locust" in third[n]} == {}
    upward = {n: sorted(e for e in edges[n] if _in(e, "runtime") or e == "llm_locust.users") for n in transport}
    assert {n: v for n, v in upward.items() if v} == {}


def _into_the_loop(edges: dict[str, set[str]]) -> list[str]:
    """'module -> target' for each import from the transport into the loop (the loop may import
    the transport: one direction between the two)."""
    return sorted(f"{n} -> {e}" for n, es in edges.items() if _in(n, "transport") for e in es if _in(e, "loop"))


def test_the_transport_never_imports_the_loop():
    _, edges, _ = _graph()
    assert _into_the_loop(edges) == []


def test_the_checker_finds_the_transport_importing_the_loop():
    _, edges, _ = _graph()
    planted = {k: set(v) for k, v in edges.items()}
    planted["llm_locust.transport.http"].add("llm_locust.loop.clock")
    assert _into_the_loop(planted) == ["llm_locust.transport.http -> llm_locust.loop.clock"]


def _runtime_without_locust(edges: dict[str, set[str]], third: dict[str, set[str]]) -> list[str]:
    """The runtime's modules that import no Locust themselves and are not listed with a reason."""
    runtime = (n for n in edges if _in(n, "runtime") and n != "llm_locust.runtime")
    return sorted(n for n in runtime if "locust" not in third[n] and n not in RUNTIME_WITHOUT_LOCUST)


def test_the_runtime_holds_only_modules_that_import_locust():
    """Each module in llm_locust.runtime imports Locust itself, or is listed with its reason:
    using Locust only through another runtime module (the hub, the run context) is not enough,
    or any module could land here by reaching for the run's state instead of being handed it."""
    _, edges, third = _graph()
    assert _runtime_without_locust(edges, third) == []
    assert set(RUNTIME_WITHOUT_LOCUST) <= set(edges), "RUNTIME_WITHOUT_LOCUST names a module that is gone"


def test_the_checker_finds_a_runtime_module_without_locust():
    """What the rule above says of the real graph with planted modules: one that imports gevent and
    the hub only (runtime/failfast.py before issue 38) fails, one that imports Locust passes, and the
    listed guard passes."""
    _, edges, third = _graph()
    planted_edges = {k: set(v) for k, v in edges.items()}
    planted_third = {k: set(v) for k, v in third.items()}
    planted_edges["llm_locust.runtime.watch"] = {"llm_locust.runtime.hub"}
    planted_third["llm_locust.runtime.watch"] = {"gevent", "llm_locust"}
    planted_edges["llm_locust.runtime.glue"] = set()
    planted_third["llm_locust.runtime.glue"] = {"locust"}
    assert _runtime_without_locust(planted_edges, planted_third) == ["llm_locust.runtime.watch"]
    assert "locust" not in third["llm_locust.runtime.webui.guard"]


def test_the_simulator_and_the_gpu_sidecar_import_nothing_else_of_the_package():
    _, edges, _ = _graph()
    for package in ("sim", "gpu"):
        outside = {
            n: sorted(e for e in edges[n] if not _in(e, package) and e != "llm_locust")
            for n in edges
            if _in(n, package)
        }
        assert {n: v for n, v in outside.items() if v} == {}, package


def test_the_tools_run_on_the_core_and_no_event_loop():
    """The recorder and the anonymizer are asyncio programs: gevent's monkey-patching would break
    them, so they import the core and each other only."""
    _, edges, third = _graph()
    tools = [n for n in edges if _in(n, "tools")]
    assert {"llm_locust.tools.record_proxy", "llm_locust.tools.anonymize"} <= set(tools)
    assert {n: sorted(third[n] & set(EVENT_LOOP)) for n in tools if third[n] & set(EVENT_LOOP)} == {}
    outside = {n: sorted(e for e in edges[n] if not (_core(e) or _in(e, "tools") or e == "llm_locust")) for n in tools}
    assert {n: v for n, v in outside.items() if v} == {}


def test_importing_the_transport_loads_no_locust():
    """Confirmed by the interpreter: every transport and loop module imported, and Locust is not
    loaded."""
    mods, _, _ = _graph()
    transport = sorted(n for n in mods if _in(n, "transport") or _in(n, "loop"))
    code = (
        "import importlib, sys\n"
        f"for m in {transport!r}: importlib.import_module(m)\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] == 'locust'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_importing_the_plugin_starts_no_greenlet():
    """Nothing runs at import (issue 38): a worker's command line, `import llm_locust.users` as a
    locustfile does, and no greenlet is spawned; the worker's wait-for-the-master warner starts
    when Locust builds its parser (before the worker connects), once."""
    code = (
        "import sys; sys.argv = ['locust', '--worker']\n"
        "import gevent\n"
        "spawned = []\n"
        "real = gevent.spawn\n"
        "gevent.spawn = lambda f, *a, **k: spawned.append(getattr(f, '__name__', f)) or real(f, *a, **k)\n"
        "import llm_locust.users\n"
        "print('import', spawned)\n"
        "from locust.argument_parser import get_parser\n"
        "get_parser(); get_parser()\n"
        "print('parser', spawned)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.splitlines() == ["import []", "parser ['_warn_while_master_silent']"], out
