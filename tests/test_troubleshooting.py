"""docs/troubleshooting.md has an entry for every check name the validation suite can emit, and docs/validation.md
states the bounds the code judges by.

The names come from the checks' own declarations, read from the source: every `Check(NAME, ...)`, every `name = ...`
and `CHECK_* = ...` in the suite's checks, probes, validation plugin and validate/ (an f-string's fields match any
name part); the name pytest gives a test that stops before its verdict (`<module>.<test>`) and a module skipped whole
(`<module>.module`); and every name the real reports in tests/fixtures/reports/ hold.
"""

import ast
import json
import re
from pathlib import Path

from gpulab.probes.judge import BOUNDS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "troubleshooting.md"
VALIDATION_DOC = ROOT / "docs" / "validation.md"
SOURCES = [
    *sorted((ROOT / "src" / "gpulab" / "checks").rglob("*.py")),
    *sorted((ROOT / "src" / "gpulab" / "probes").rglob("*.py")),
    *sorted((ROOT / "src" / "gpulab" / "validation").rglob("*.py")),
    *sorted((ROOT / "validate").glob("test_*.py")),
]
FIELD = "\0"  # an f-string's field in a declared name
PART = r"[\w<>]+"  # what a field, or a documented <placeholder>, stands for
DOC_NAME = re.compile(r"`([a-z_]+(?:\.[\w<>]+)+)(?:\[[^`]*\])?`")


def _text(node: ast.AST) -> str | None:
    """A string or f-string as text, each f-string field as FIELD; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else FIELD for v in node.values]
        return "".join(str(p) for p in parts)
    return None


def _named(node: ast.AST) -> list[ast.AST]:
    """The expressions a node gives a check's name: `name = ...`, `CHECK_X = ...`, Check(NAME, ...)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        target = node.targets[0].id
        return [node.value] if target == "name" or target.startswith("CHECK_") else []
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Check":
        return node.args[:1] + [k.value for k in node.keywords if k.arg == "name"]
    return []


def declared_families() -> dict[str, str]:
    """The family (the name before `[`) of every declared check name, as a regex -> the file declaring it."""
    out = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for expr in _named(node):
                text = _text(expr)
                # A check's family starts with a written word ("health.", "probe."): a threshold's name does not.
                if text is None or not re.match(r"^[a-z_]+\.", text):
                    continue
                family = text.split("[")[0]
                out.setdefault(PART.join(re.escape(p) for p in family.split(FIELD)), path.name)
    return out


def test_names() -> set[str]:
    """`<module>.<test>`: a validate/ test that stops before its verdict; `<module>.module`: a module skipped whole."""
    out = set()
    for path in sorted((ROOT / "validate").glob("test_*.py")):
        module = path.stem.removeprefix("test_")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                out.add(f"{module}.{node.name.removeprefix('test_')}")
            if "importorskip" in ast.unparse(node) and isinstance(node, (ast.Expr, ast.Assign)):
                out.add(f"{module}.module")
    return out


test_names.__test__ = False  # a helper, not a test


def reported_families() -> set[str]:
    out = set()
    for path in sorted((ROOT / "tests" / "fixtures" / "reports").glob("*.json")):
        out |= {check["name"].split("[")[0] for check in json.loads(path.read_text())["checks"]}
    return out


def documented(text: str) -> set[str]:
    """Every check name the page writes in backticks, without its `[...]`."""
    return {m.group(1) for m in DOC_NAME.finditer(text)}


def _as_regex(name: str) -> str:
    return PART.join(re.escape(p) for p in re.split(r"<[^>]+>", name))


def test_every_declared_check_has_an_entry():
    names = documented(DOC.read_text(encoding="utf-8"))
    declared = declared_families()
    assert len(declared) > 25  # the reading works: the suite declares some thirty families
    missing = [f"{fam} ({where})" for fam, where in declared.items() if not any(re.fullmatch(fam, n) for n in names)]
    assert missing == []


def test_every_test_name_and_every_reported_name_has_an_entry():
    patterns = [_as_regex(n) for n in documented(DOC.read_text(encoding="utf-8"))]
    wanted = test_names() | reported_families()
    assert {"health.persistence_mode", "probes.module", "tensorflow.module", "probe.matmul.bf16"} <= wanted
    assert sorted(n for n in wanted if not any(re.fullmatch(p, n) for p in patterns)) == []


def test_every_entry_names_a_check_the_suite_can_emit():
    """No heading for a check that no longer exists."""
    text = DOC.read_text(encoding="utf-8")
    headings = " ".join(line for line in text.splitlines() if line.startswith("#"))
    known = [*declared_families(), *(re.escape(n) for n in test_names())]
    stale = [n for n in documented(headings) if not any(re.fullmatch(k, n) for k in known)]
    assert stale == []


def test_the_validation_page_states_each_probe_bound():
    rows = [line for line in VALIDATION_DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `probe.")]
    for (workload, precision), bound in BOUNDS.items():
        name = f"`probe.{workload}.{precision}["
        row = next((r for r in rows if name in r), None)
        assert row is not None, name
        assert f"≥ {bound.min_pct:g} %" in row, (row, bound.min_pct)
