"""A framework's name is a value type, gpulab.names.Framework: an open set (a launch backend may add its own, a probe
tool names its rows, nccl-tests), so a str checked against FRAMEWORK_PATTERN rather than an enum; JSON, dict keys and
`==` see its text. Its parser reads a name at the edges only: `--framework`, the backends' registry (the entry
points packages declare), a study file, a report row (and a child process's Result) and the known-good table."""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path

import pytest

from gpulab.cli import build_parser
from gpulab.errors import GpulabError
from gpulab.launch import backends
from gpulab.launch.spec import Launch
from gpulab.names import DEFAULT_FRAMEWORK, FRAMEWORK_PATTERN, FRAMEWORKS, Framework
from gpulab.records import Result, RunConfig, Scaling, Speedup
from gpulab.report.io import load_report, report_json
from vocabulary_reads import offenders, quiet_edges, text_reads

REPORTS = Path(__file__).parent / "fixtures" / "reports"
EDGES = {
    "src/gpulab/names.py": "the parser",
    "src/gpulab/launch/commands.py": "--framework",
    "src/gpulab/launch/backends/__init__.py": "the backends' registry: the entry points packages declare",
    "src/gpulab/records/report.py": "a report row, a child process's Result",
    "src/gpulab/studies/spec.py": "a study file",
    "src/gpulab/validation/known_good.py": "the shipped known-good table",
    "src/gpulab/compat/wheels.py": "the dl_frameworks role's list of framework wheels to install (its own names)",
}


def _framework_reads(tree: ast.AST) -> list[str]:
    """Code that reads a framework's name: the parser called (Framework.parse, Framework("jax")), or a membership
    test in the framework names."""
    return text_reads(tree, types=("Framework",), parsers=("parse",), functions=(), names="FRAMEWORKS", table="-")


def test_no_module_but_the_edges_reads_a_frameworks_name() -> None:
    assert offenders(_framework_reads, EDGES) == {}
    assert quiet_edges(_framework_reads, EDGES) == []


def test_the_check_finds_each_way_a_framework_was_read() -> None:
    source = 'a = Framework.parse(x)\nb = names.Framework("jax")\nc = x in names.FRAMEWORKS\nd = x not in FRAMEWORKS\n'
    assert len(_framework_reads(ast.parse(source))) == 4
    assert _framework_reads(ast.parse("a = r.framework\nb = x == Framework.TORCH\nc = str(Framework.TORCH)\n")) == []


@pytest.mark.parametrize("name", ["torch", "tensorflow", "nccl-tests", "jax", "my_fw2"])
def test_a_frameworks_name_is_read_and_written_as_its_text(name: str) -> None:
    framework = Framework.parse(name)
    assert isinstance(framework, Framework) and Framework.parse(framework) is framework
    assert framework == name and str(framework) == f"{framework}" == name and json.dumps(framework) == json.dumps(name)
    assert {name: 1}[framework] == 1


@pytest.mark.parametrize("bad", ["Torch", " torch", "torch\n", "", "1fw", "tensor flow", "jäx", None, 5, True])
def test_a_bad_name_is_named_with_the_pattern(bad: object) -> None:
    with pytest.raises(GpulabError) as err:
        Framework.parse(bad, "a result's framework")
    assert str(err.value).startswith(f"a result's framework {bad!r} is not a framework's name: write it in lower case")
    assert FRAMEWORK_PATTERN in str(err.value)


def test_the_known_ones_are_constants() -> None:
    assert FRAMEWORKS == (Framework.TORCH, Framework.TENSORFLOW) == ("torch", "tensorflow")
    assert DEFAULT_FRAMEWORK is Framework.TORCH and Framework.NCCL_TESTS == "nccl-tests"
    assert all(isinstance(f, Framework) for f in (*FRAMEWORKS, Framework.NCCL_TESTS))


def test_the_records_hold_the_type() -> None:
    for record in (Result, Speedup, Scaling, Launch):
        assert typing.get_type_hints(record)["framework"] is Framework
    assert Launch(RunConfig("mnist")).framework is Framework.TORCH


def test_the_command_line_and_the_registry_give_the_type(capsys: pytest.CaptureFixture[str]) -> None:
    assert all(isinstance(f, Framework) for f in backends.available())
    parser = build_parser()
    for name in ("torch", "tensorflow"):
        framework = parser.parse_args(["run", "mnist", "--framework", name]).framework
        assert isinstance(framework, Framework) and framework == name
    assert parser.parse_args(["run", "mnist"]).framework is Framework.TORCH
    for bad, said in (("Torch!", "is not a framework's name"), ("jax", "invalid choice: 'jax'")):
        with pytest.raises(SystemExit):
            parser.parse_args(["run", "mnist", "--framework", bad])
        assert said in capsys.readouterr().err


def test_a_package_declaring_a_bad_name_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    class Entry:
        name, value = "Jax", "mypkg.backend:BACKEND"

    monkeypatch.setattr(backends, "entry_points", lambda group: [Entry()])
    with pytest.raises(GpulabError, match=r"entry point of mypkg\.backend:BACKEND: its name 'Jax' is not a framework"):
        backends.available()


@pytest.mark.parametrize("path", sorted(REPORTS.glob("*.json")), ids=lambda p: p.stem)
def test_a_recorded_reports_frameworks_load_as_the_type(path: Path) -> None:
    raw = json.loads(path.read_text())
    report = load_report(path)
    assert all(isinstance(r.framework, Framework) for r in [*report.results, *report.speedups, *report.scaling])
    again = json.loads(report_json(report))
    for key in ("results", "speedups", "scaling"):
        assert [r["framework"] for r in again[key]] == [r["framework"] for r in raw.get(key, [])]
