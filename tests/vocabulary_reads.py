"""How the vocabulary tests find code that reads a value's text outside its parser's edges: one scan per way of
reading it (a parser called, a membership test in the names, a table looked up, a comparison with the text) and one
walk over gpulab's modules and validate/, so each value type's test only says what its names are."""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = [*sorted((ROOT / "src" / "gpulab").rglob("*.py")), *sorted((ROOT / "validate").rglob("*.py"))]
Scan = Callable[[ast.AST], list[str]]


def _hit(node: ast.AST) -> str:
    return f"line {getattr(node, 'lineno', '?')}: {ast.unparse(node)}"


def text_reads(
    tree: ast.AST,
    *,
    types: tuple[str, ...],
    parsers: tuple[str, ...],
    functions: tuple[str, ...],
    names: str,
    table: str,
) -> list[str]:
    """Code that reads a value's text itself: a parser called (`Type.parse(...)` for each of `parsers`, a module
    function of `functions`, a member made from its value `Type("bf16")` for each of `types`), a membership test in a
    tuple of names ending in `names`, or the meaning table `table` used."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            parser = called.endswith(tuple(f"{t}.{p}" for t in types for p in parsers))
            by_value = called.split(".")[-1] in types and bool(node.args)
            function = called in functions and bool(node.args)
            if parser or by_value or function:
                found.append(_hit(node))
        membership = isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        if membership and any(ast.unparse(c).split(".")[-1].endswith(names) for c in node.comparators):
            found.append(_hit(node))
        if isinstance(node, ast.Name | ast.Attribute) and ast.unparse(node).split(".")[-1] == table:
            found.append(_hit(node))
    return found


def compared_with(tree: ast.AST, texts: Collection[str]) -> list[str]:
    """Comparisons with one of `texts` (`x == "nccl"`, `p in ("bf16", "fp16")`, `"tf32" != q`): a second reading
    of a value the member says."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            items = [e for s in sides for e in (s.elts if isinstance(s, ast.Tuple | ast.List | ast.Set) else [s])]
            if any(isinstance(e, ast.Constant) and e.value in texts for e in items):
                found.append(_hit(node))
    return found


def offenders(scan: Scan, allowed: Iterable[str]) -> dict[str, list[str]]:
    """Each module (path from the repository's root) outside `allowed` where `scan` finds something."""
    skip = set(allowed)
    return {
        rel: hits
        for path in PYTHON
        if (rel := str(path.relative_to(ROOT))) not in skip and (hits := scan(ast.parse(path.read_text(), str(path))))
    }


def quiet_edges(scan: Scan, edges: Iterable[str]) -> list[str]:
    """The edges (paths from the repository's root) where `scan` finds nothing: an edge that no longer parses is
    taken off its list, so the list stays the edges."""
    return [rel for rel in edges if not scan(ast.parse((ROOT / rel).read_text(), rel))]
