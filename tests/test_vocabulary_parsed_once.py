"""The vocabulary is parsed once: a driver branch's spellings (R580, 580, 580.95.05) are read by
`gpulab.names.DriverBranch` alone, in Python and in the roles, which take the branch from the collection's filters."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.names import DriverBranch, driver_version

ROOT = Path(__file__).resolve().parents[1]
PYTHON = [*sorted((ROOT / "src" / "gpulab").rglob("*.py")), *sorted((ROOT / "collections").rglob("*.py"))]
# The parsers themselves: names.py; versions.py reads version numbers, whose prefixes (v12.9, R580) it drops.
BRANCH_PATTERN = re.compile(r"\^?(R|\[rR\]|\[Rr\])\??\(?(\\d|\[0-9\])")  # a regular expression for R580
PARSERS = {ROOT / "src" / "gpulab" / "names.py", ROOT / "src" / "gpulab" / "compat" / "versions.py"}


def _branch_parses(tree: ast.AST) -> list[str]:
    """Code that reads a branch's spelling itself: strips an R, or slices the R off a branch's text."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            strips = node.func.attr in ("removeprefix", "lstrip", "strip")
            chars = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if strips and any(set(c) <= set("rRvV") and set(c) & set("rR") for c in chars):
                found.append(f"line {node.lineno}: .{node.func.attr}({chars[0]!r})")
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            lower = node.slice.lower
            if isinstance(lower, ast.Constant) and lower.value == 1 and "branch" in ast.unparse(node.value).lower():
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and BRANCH_PATTERN.match(node.value):
            found.append(f"line {node.lineno}: pattern {node.value!r}")
    return found


def test_no_python_module_but_the_parser_reads_a_branch_spelling() -> None:
    offenders = {
        str(path.relative_to(ROOT)): hits
        for path in PYTHON
        if path not in PARSERS and (hits := _branch_parses(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}


def test_the_check_finds_each_way_a_branch_was_read() -> None:
    source = 'a = b.removeprefix("R")\nc = int(branch[1:])\nd = re.compile(r"[rR]?(\\d+)")\ne = v.lstrip("vR")\n'
    assert len(_branch_parses(ast.parse(source))) == 4


def test_the_roles_take_the_branch_from_the_filters() -> None:
    text = "\n".join(p.read_text() for p in sorted((ROOT / "roles").rglob("*.yml")))
    assert "regex_replace('^[rR]'" not in text and "_plain_version | split('.')" not in text
    role_vars = (ROOT / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text()
    assert '_nvidia_driver_branch: "{{ nvidia_driver_version | gpulab.provision.driver_branch }}"' in role_vars
    assert '_nvidia_driver_plain_version: "{{ nvidia_driver_version | gpulab.provision.driver_version }}"' in role_vars


@pytest.mark.parametrize(
    ("spelling", "number", "plain"),
    [("R580", 580, "580"), ("r535", 535, "535"), ("580", 580, "580"), (580, 580, "580"),
     ("580.95.05", 580, "580.95.05"), ("R1010", 1010, "1010")],
)  # fmt: skip
def test_every_spelling_is_one_branch(spelling: object, number: int, plain: str) -> None:
    branch = DriverBranch.parse(spelling)
    assert branch == DriverBranch(number) and str(branch) == f"R{number}" and driver_version(spelling) == plain
    assert DriverBranch.parse(branch) is branch


@pytest.mark.parametrize("bad", ["", "R58", "latest", "580-1", " 580", "580\n", "R 580", True, 5.8, None, "٥٨٠"])
def test_a_bad_spelling_is_named_with_the_ones_taken(bad: object) -> None:
    with pytest.raises(GpulabError, match=r"guest_driver .* is not a driver branch or version; write e.g. R580, 580"):
        DriverBranch.parse(bad, "guest_driver")
