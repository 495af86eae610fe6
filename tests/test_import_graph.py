"""The import graph of src/gpulab, built from the source: no module cycles, and no package imports one above it.

Every import counts, at module level or inside a function (a function-level import hides an edge at import
time, not from a reader); `from gpulab.pkg import submodule` is an edge to the submodule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# The top-level packages and modules of gpulab, lowest first: each may import only those before it (or itself).
# "gpulab" is the package's own __init__ (its version).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("gpulab",),
    ("errors",),
    ("paths", "names", "interrupts", "progress_line"),
    ("records",),
    ("compat",),
    ("hw",),
    ("report",),
    ("telemetry",),
    ("vm",),
    ("workloads",),
    ("training",),
    ("launch",),
    ("probes",),
    ("checks",),
    ("studies",),
    ("validation",),
    ("cli",),
    ("__main__",),
)
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "gpulab").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str:
    """The module an imported dotted name lives in (`gpulab.report.judge.judge` -> `gpulab.report.judge`)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _targets(module: str, node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (_owner(a.name) for a in node.names if a.name.split(".")[0] == "gpulab")
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        if source.split(".")[0] != "gpulab":
            return
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            yield sub if sub in MODULES else _owner(source)


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[module] = {t for node in ast.walk(tree) for t in _targets(module, node)} - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package(module: str) -> str:
    return "gpulab" if module == "gpulab" else module.split(".")[1]


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if package(a) != package(b) and RANK[package(b)] > RANK[package(a)]
    )


GRAPH = import_graph()


def test_every_package_has_a_layer():
    assert sorted({package(m) for m in MODULES} - set(RANK)) == []


def test_no_module_cycles():
    assert cycles(GRAPH) == []


def test_no_package_imports_one_above_it():
    assert upward_edges(GRAPH) == []


@pytest.mark.parametrize(
    ("source", "edges"),
    [
        ("import gpulab.report.judge\n", {"gpulab.report.judge"}),
        ("from gpulab.report import judge, render\n", {"gpulab.report.judge", "gpulab.report.render"}),
        ("from gpulab.report.judge import side\n", {"gpulab.report.judge"}),
        ("from gpulab.records import Result\n", {"gpulab.records"}),
        ("def f():\n    from gpulab.hw import nvml\n", {"gpulab.hw.nvml"}),
        ("from gpulab.names import precision\n", {"gpulab.names"}),
        ("from . import io\n", {"gpulab.report.io"}),
        ("import json\n", set()),
    ],
)
def test_edges_read_from_source(source: str, edges: set[str]):
    tree = ast.parse(source)
    assert {t for node in ast.walk(tree) for t in _targets("gpulab.report.judge", node)} == edges


def test_the_checks_would_catch_a_cycle_and_an_upward_edge():
    graph = {"gpulab.hw.a": {"gpulab.report.b"}, "gpulab.report.b": {"gpulab.hw.a"}}
    assert cycles(graph) == [["gpulab.hw.a", "gpulab.report.b"]]
    assert upward_edges(graph) == ["gpulab.hw.a -> gpulab.report.b"]


def doors(pkg: str) -> tuple[str, ...] | None:
    """The modules package `pkg` lets others import besides its face (`DOORS` in its __init__, read from the source
    so the test imports nothing); None for a top-level module, which is its own face."""
    init = SRC / "gpulab" / pkg / "__init__.py"
    if not init.is_file():
        return None
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "DOORS" for t in targets) and node.value is not None:
                return tuple(ast.literal_eval(node.value))
    return ()


def through_other_doors(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one package into another that go neither to its face nor to a module its DOORS list."""
    found = []
    for a, targets in graph.items():
        for b in targets:
            pkg = package(b)
            if pkg == package(a) or b == f"gpulab.{pkg}" or pkg == "gpulab":
                continue
            allowed = doors(pkg)
            if allowed is not None and b.removeprefix(f"gpulab.{pkg}.") not in allowed:
                found.append(f"{a} -> {b}")
    return sorted(found)


def test_packages_are_entered_through_their_faces_and_doors():
    assert through_other_doors(GRAPH) == []


def test_every_door_is_a_module_of_its_package_that_others_use():
    used = {b for a, targets in GRAPH.items() for b in targets if package(a) != package(b)}
    for pkg in sorted({package(m) for m in MODULES} - {"gpulab"}):
        for door in doors(pkg) or ():
            assert f"gpulab.{pkg}.{door}" in MODULES, f"{pkg}'s DOORS lists {door}, which is not one of its modules"
            assert f"gpulab.{pkg}.{door}" in used, f"{pkg}'s DOORS lists {door}, which no other package imports"


def test_a_module_behind_the_doors_is_found():
    graph = {"gpulab.cli": {"gpulab.report.compare.rows", "gpulab.report.io", "gpulab.report"}}
    assert through_other_doors(graph) == ["gpulab.cli -> gpulab.report.compare.rows"]


def test_one_name_is_one_concept():
    """No two modules declare a public class of one name (two `Check`s, two `NumaNode`s were two concepts). The
    workloads' `Settings` are one concept: each workload's own knobs."""
    declared: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and path.name != "__init__.py":
                declared.setdefault(node.name, []).append(module)
    twice = {name: where for name, where in declared.items() if len(where) > 1 and name != "Settings"}
    assert twice == {}
