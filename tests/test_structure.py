"""The package's layers hold: no import cycles, a core that never imports Locust or gevent, and a
plugin that nothing inside the package imports back.

The core is what a reader can run and test without Locust: protocols, records and metrics, the
workload, the settings, the analysis and the report. The runtime (llm_locust.runtime) is where
Locust and gevent live; `llm_locust.users` is the one public entry that wires it into Locust.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llm_locust"
CORE = ("protocols", "metrics", "workload", "settings", "analysis", "report")
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
    """(package modules, third-party top-level names) that module `name` imports anywhere in it."""
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
    return any(name == f"llm_locust.{c}" or name.startswith(f"llm_locust.{c}.") for c in CORE)


def test_no_import_cycles():
    _, edges, _ = _graph()
    assert _cycles(edges) == []


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_core_never_imports_locust_gevent_or_the_runtime():
    _, edges, third = _graph()
    bad = {n: sorted(third[n] & set(EVENT_LOOP)) for n in edges if _core(n) and third[n] & set(EVENT_LOOP)}
    assert bad == {}
    into_runtime = {
        n: sorted(e for e in edges[n] if e.startswith("llm_locust.runtime") or e == "llm_locust.users")
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
