"""A precision is one value type, gpulab.names.Precision (a str enum: JSON, dict keys and `== "bf16"` see its
value), read by its one parser at the edges: `gpulab run --precision`, a study file and the rows of its database,
a worker's JSON config, a report row (and a child process's Result) and the shipped known-good table. Below the
edges every record holds the member, and nothing parses a precision's text again."""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path

import pytest

from gpulab.cli import build_parser
from gpulab.errors import UnknownValue
from gpulab.launch.planning import config_from_dict, config_to_dict, plan_batch
from gpulab.launch.spec import WorkerMessage
from gpulab.names import NO_PRECISION, PRECISIONS, REPORT_PRECISIONS, NoPrecision, Precision, ReportPrecision
from gpulab.records import Result, RunConfig, Scaling, Speedup
from gpulab.report.io import load_report, report_json
from gpulab.validation.expectations import cpu_config, speedup_config
from gpulab.workloads import precision_plan
from vocabulary_reads import compared_with, offenders, quiet_edges, text_reads

REPORTS = Path(__file__).parent / "fixtures" / "reports"
# The edges, each with what it reads; names.py is the parser itself.
EDGES = {
    "src/gpulab/names.py": "the parser",
    "src/gpulab/launch/commands.py": "gpulab run --precision",
    "src/gpulab/launch/planning.py": "a run config's JSON form (a worker's message)",
    "src/gpulab/records/report.py": "a report row, a child process's Result",
    "src/gpulab/studies/spec.py": "a study file",
    "src/gpulab/studies/task.py": "a pset (a row of the study's database) made a RunConfig",
    "src/gpulab/studies/report.py": "the study database's precision_used",
    "src/gpulab/studies/results.py": "the study database's precision_used, made report rows",
    "src/gpulab/validation/known_good.py": "the shipped known-good table",
}
PARSERS = {"parse", "parse_reported"}


def _precision_reads(tree: ast.AST) -> list[str]:
    """Code that reads a precision's text: the parser called (names.precision, Precision.parse, Precision("bf16")),
    a membership test in the precision names, or the meaning looked up in a table by name."""
    return text_reads(
        tree,
        types=("Precision", "NoPrecision"),
        parsers=("parse", "parse_reported"),
        functions=("names.precision", "precision"),
        names="PRECISIONS",
        table="PRECISION_TABLE",
    )


def test_no_module_but_the_edges_reads_a_precisions_text() -> None:
    assert offenders(_precision_reads, EDGES) == {}


def test_every_edge_named_still_reads_one() -> None:
    assert quiet_edges(_precision_reads, EDGES) == []


def test_the_check_finds_each_way_a_precision_was_read() -> None:
    source = (
        'a = names.precision(p)\nb = Precision.parse(p, training=True)\nc = names.Precision("bf16")\n'
        "d = p in names.PRECISIONS\ne = p not in TRAINING_PRECISIONS\nf = names.PRECISION_TABLE[p]\n"
        "g = Precision.parse_reported(p)\nh = precision(p)\n"
    )
    assert len(_precision_reads(ast.parse(source))) == 8
    assert _precision_reads(ast.parse("a = cfg.precision.tf32\nb = p is Precision.BF16\nc = list(Precision)\n")) == []


def test_no_module_compares_a_precision_with_its_text() -> None:
    def compared(tree: ast.AST) -> list[str]:
        return compared_with(tree, PRECISIONS)

    assert offenders(compared, ["src/gpulab/names.py"]) == {}
    source = 'a = r.precision == "fp32"\nb = p in ("bf16", "fp16")\nc = "tf32" != q\nd = p is Precision.FP32\n'
    assert len(compared(ast.parse(source))) == 3


@pytest.mark.parametrize("member", list(Precision), ids=str)
def test_each_precision_is_read_from_its_value_and_written_as_it(member: Precision) -> None:
    assert Precision.parse(member.value) is member and Precision.parse(member) is member
    assert Precision.parse_reported(member.value) is member
    assert str(member) == f"{member}" == member.value and json.dumps(member) == json.dumps(member.value)
    assert member == member.value and {member.value: 1}[member] == 1 and member.value in PRECISIONS


def test_none_is_a_report_rows_precision_without_arithmetic() -> None:
    assert Precision.parse_reported("none") is NO_PRECISION and NO_PRECISION == "none" == str(NO_PRECISION)
    assert not isinstance(NO_PRECISION, Precision) and isinstance(NO_PRECISION, NoPrecision)
    assert (*PRECISIONS, "none") == REPORT_PRECISIONS
    with pytest.raises(UnknownValue) as err:
        Precision.parse("none")  # a run computes in some arithmetic
    assert (err.value.what, err.value.value) == ("precision", "none")


@pytest.mark.parametrize("bad", ["BF16", " fp32", "fp8", "", None, 16, True])
def test_a_bad_precision_is_one_error_with_the_choices(bad: object) -> None:
    with pytest.raises(UnknownValue) as err:
        Precision.parse(bad, who="mnist")
    assert (err.value.value, err.value.choices) == (bad, PRECISIONS)
    with pytest.raises(UnknownValue) as err:
        Precision.parse_reported(bad)
    assert err.value.choices == REPORT_PRECISIONS


def test_the_records_hold_the_type() -> None:
    assert typing.get_type_hints(RunConfig)["precision"] is Precision
    for record in (Result, Speedup, Scaling):
        assert typing.get_type_hints(record)["precision"] == ReportPrecision
    assert RunConfig("mnist").precision is Precision.FP32


def test_the_command_line_reads_a_precision_once(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for member in Precision:
        assert parser.parse_args(["run", "mnist", "--precision", member.value]).precision is member
    assert parser.parse_args(["run", "mnist"]).precision is Precision.FP32
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["run", "mnist", "--precision", "fp8"])
    assert stop.value.code == 2
    assert "argument --precision: unknown precision 'fp8'; choose one of: fp32, tf32, bf16, fp16" in (
        capsys.readouterr().err
    )


def test_a_workers_config_carries_the_precision_as_its_type(tmp_path: Path) -> None:
    cfg = RunConfig("mnist", precision=Precision.BF16, batch=16)
    assert config_to_dict(cfg)["precision"] == "bf16" and config_from_dict(config_to_dict(cfg)) == cfg
    message = WorkerMessage(cfg, plan_batch(cfg, 1), "gpu", threads=1)
    path = message.write(tmp_path / "m.json")
    assert json.loads(path.read_text())["run"]["precision"] == "bf16"
    assert WorkerMessage.read(path).run.precision is Precision.BF16
    with pytest.raises(UnknownValue, match="run config: unknown precision 'fp8'"):
        config_from_dict({**config_to_dict(cfg), "precision": "fp8"})


@pytest.mark.parametrize("architecture", precision_plan.architectures())
def test_from_an_architecture_to_a_run_the_precision_is_the_member(architecture: str) -> None:
    plan = precision_plan.for_architecture(precision_plan.plan_architecture(architecture))
    for workload in ("mnist", "resnet50", "style_transfer"):
        cfg = speedup_config(workload, "tiny", plan=plan)
        assert isinstance(cfg.precision, Precision) and cfg.precision is plan.training(workload).precision
        assert cpu_config(cfg).precision is Precision.FP32


@pytest.mark.parametrize("path", sorted(REPORTS.glob("*.json")), ids=lambda p: p.stem)
def test_a_recorded_reports_precisions_load_as_members(path: Path) -> None:
    raw = json.loads(path.read_text())
    report = load_report(path)
    rows = [*report.results, *report.speedups, *report.scaling]
    assert all(isinstance(r.precision, Precision | NoPrecision) for r in rows)
    assert [r.precision for r in report.results] == [r["precision"] for r in raw.get("results", [])]
    again = json.loads(report_json(report))  # written back, the rows' precisions are the text they were
    assert [r["precision"] for r in again["results"]] == [r["precision"] for r in raw.get("results", [])]
