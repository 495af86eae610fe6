"""A launcher is one value type, gpulab.names.Launcher (a str enum: JSON, dict keys and `== "ddp"` see its value),
with what the old tuples said as properties (`.one_device`, `.multi_gpu`, `.runs`). It is read by its one parser at
the edges: `gpulab run --launcher`, a worker's message, a report row (and a child process's Result), a study file,
its database's rows and the shipped known-good table. Below the edges every record holds the member."""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path

import pytest

from gpulab.cli import build_parser
from gpulab.errors import UnknownValue
from gpulab.launch.planning import plan_batch
from gpulab.launch.spec import Launch, WorkerMessage
from gpulab.names import LAUNCHERS, REPORT_LAUNCHERS, RUN_LAUNCHERS, Launcher
from gpulab.records import Result, RunConfig, Scaling
from gpulab.report.io import load_report, report_json
from vocabulary_reads import compared_with, offenders, quiet_edges, text_reads

REPORTS = Path(__file__).parent / "fixtures" / "reports"
# The edges, each with what it reads; names.py is the parser itself.
EDGES = {
    "src/gpulab/names.py": "the parser",
    "src/gpulab/launch/commands.py": "gpulab run --launcher",
    "src/gpulab/launch/spec.py": "a worker's message (the launcher it serves)",
    "src/gpulab/records/report.py": "a report row, a child process's Result, an old probe row's transport",
    "src/gpulab/studies/spec.py": "a study file",
    "src/gpulab/studies/task.py": "a pset (a row of the study's database) made a `gpulab run` line",
    "src/gpulab/studies/results.py": "the study database's launcher_used, made report rows",
    "src/gpulab/validation/known_good.py": "the shipped known-good table",
}
# Texts that name nothing but a launcher; "cpu" and "gpu" also name devices, so they are looked for only where a
# comparison reads a launcher (`r.launcher == "cpu"`, `launcher != "gpu"`).
ONLY_LAUNCHERS = tuple(t for t in LAUNCHERS if t not in ("cpu", "gpu"))


def _launcher_reads(tree: ast.AST) -> list[str]:
    """Code that reads a launcher's text: the parser called (Launcher.parse, Launcher("ddp")), or a membership test
    in the launcher names (LAUNCHERS, RUN_LAUNCHERS, ...)."""
    return text_reads(tree, types=("Launcher",), parsers=("parse",), functions=(), names="LAUNCHERS", table="-")


def _launcher_texts(tree: ast.AST) -> list[str]:
    """Comparisons with a launcher's text: a second reading of what the member says."""
    found = set(compared_with(tree, ONLY_LAUNCHERS))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and "launcher" in ast.unparse(node):
            found.update(compared_with(node, ("cpu", "gpu")))
    return sorted(found)


def test_no_module_but_the_edges_reads_a_launchers_text() -> None:
    assert offenders(_launcher_reads, EDGES) == {}
    assert quiet_edges(_launcher_reads, EDGES) == []


def test_the_check_finds_each_way_a_launcher_was_read() -> None:
    source = (
        'a = Launcher.parse(x)\nb = names.Launcher("ddp")\nc = x in names.LAUNCHERS\nd = x not in RUN_LAUNCHERS\n'
        "e = names.Launcher.parse(x, run=True)\n"
    )
    assert len(_launcher_reads(ast.parse(source))) == 5
    assert _launcher_reads(ast.parse("a = r.launcher.one_device\nb = x == Launcher.DDP\nc = list(Launcher)\n")) == []


def test_no_module_compares_a_launcher_with_its_text() -> None:
    assert offenders(_launcher_texts, ["src/gpulab/names.py"]) == {}
    source = (
        'a = r.launcher == "cpu"\nb = launcher in ("ddp", "sweep")\nc = "mirrored" != m\nd = x.launcher != "gpu"\n'
        'e = device == "cpu"\nf = r.launcher == Launcher.CPU\n'
    )
    assert len(_launcher_texts(ast.parse(source))) == 4


@pytest.mark.parametrize("member", list(Launcher), ids=str)
def test_each_launcher_is_read_from_its_value_and_written_as_it(member: Launcher) -> None:
    assert Launcher.parse(member.value) is member and Launcher.parse(member) is member
    assert str(member) == f"{member}" == member.value and json.dumps(member) == json.dumps(member.value)
    assert member == member.value and {member.value: 1}[member] == 1 and member.value in LAUNCHERS


def test_the_properties_say_what_the_tuples_said() -> None:
    assert [m.value for m in Launcher if m.one_device] == ["cpu", "gpu"]
    assert [m.value for m in Launcher if m.multi_gpu] == ["ddp", "dataparallel", "mirrored", "sweep"]
    assert (
        [m.value for m in Launcher if m.runs]
        == list(RUN_LAUNCHERS)
        == ["cpu", "gpu", "ddp", "dataparallel", "mirrored"]
    )
    assert (*LAUNCHERS, "nccl", "gloo") == REPORT_LAUNCHERS  # older reports' probe rows: read as ddp


@pytest.mark.parametrize("bad", ["DDP", " gpu", "gpu\n", "nccl", "gloo", "horovod", "", None, 1, True])
def test_a_bad_launcher_is_one_error_with_the_choices(bad: object) -> None:
    with pytest.raises(UnknownValue) as err:
        Launcher.parse(bad, "a result's launcher")
    assert (err.value.what, err.value.value, err.value.choices) == ("a result's launcher", bad, LAUNCHERS)


def test_gpulab_run_takes_every_launcher_but_the_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for member in Launcher:
        if member.runs:
            assert parser.parse_args(["run", "mnist", "--launcher", member.value]).launcher is member
    assert parser.parse_args(["run", "mnist"]).launcher is Launcher.GPU
    for bad in ("sweep", "nccl"):
        with pytest.raises(SystemExit) as stop:
            parser.parse_args(["run", "mnist", "--launcher", bad])
        assert stop.value.code == 2
        assert (
            f"argument --launcher: unknown launcher '{bad}'; choose one of: cpu, gpu, ddp, dataparallel, mirrored"
            in (capsys.readouterr().err)
        )
    with pytest.raises(UnknownValue):
        Launcher.parse(Launcher.SWEEP, run=True)


def test_the_records_hold_the_type() -> None:
    for record in (Result, Scaling, Launch):
        assert typing.get_type_hints(record)["launcher"] is Launcher
    assert typing.get_type_hints(WorkerMessage)["mode"] is Launcher
    assert Launch(RunConfig("mnist")).launcher is Launcher.GPU


def test_a_workers_message_carries_the_launcher_as_its_type(tmp_path: Path) -> None:
    cfg = RunConfig("mnist", batch=16)
    path = WorkerMessage(cfg, plan_batch(cfg, 2), Launcher.MIRRORED, threads=1).write(tmp_path / "m.json")
    assert json.loads(path.read_text())["mode"] == "mirrored"
    assert WorkerMessage.read(path).mode is Launcher.MIRRORED
    data = {**json.loads(path.read_text()), "mode": "horovod"}
    with pytest.raises(UnknownValue) as err:
        WorkerMessage.from_dict(data)
    assert (err.value.what, err.value.value) == ("worker message's mode", "horovod")


@pytest.mark.parametrize("path", sorted(REPORTS.glob("*.json")), ids=lambda p: p.stem)
def test_a_recorded_reports_launchers_load_as_members(path: Path) -> None:
    raw = json.loads(path.read_text())
    report = load_report(path)
    assert all(isinstance(r.launcher, Launcher) for r in [*report.results, *report.scaling])
    again = json.loads(report_json(report))  # written back, a launcher is the text it was; a probe's is ddp
    written = [r["launcher"] if r["launcher"] in LAUNCHERS else "ddp" for r in raw.get("results", [])]
    assert [r["launcher"] for r in again["results"]] == written
    assert [s["launcher"] for s in again["scaling"]] == [s["launcher"] for s in raw.get("scaling", [])]
