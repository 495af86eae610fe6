"""DDP's process-group backend is one value type, gpulab.names.CommBackend: read by its one parser at the edges
(`--backend`, a worker's message, a report), chosen by one function when none is asked for, and recorded on a DDP
row as its own field `comm_backend` from report schema /4 (older reports' params.backend is read into it)."""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import pytest

from gpulab.cli import build_parser
from gpulab.errors import GpulabError, UnknownValue
from gpulab.launch.planning import plan_batch
from gpulab.launch.spec import WorkerMessage
from gpulab.names import COMM_BACKENDS, CommBackend, Launcher
from gpulab.records import READABLE_SCHEMAS, SCHEMA_ID, Result, RunConfig
from gpulab.report.compare import compare
from gpulab.report.io import ReportError, load_report, report_from_data, schema_errors, write_report
from gpulab.report.render import to_markdown
from report_builders import sample_report
from vocabulary_reads import compared_with, offenders

REPORTS = Path(__file__).parent / "fixtures" / "reports"
BEFORE_V5 = "gpulab.report/4"  # the version that moved a DDP row's backend into comm_backend
# The recorded reports whose DDP rows carry params.backend: a /1 and a /3 one
OLD_DDP_REPORTS = [REPORTS / "h200x4-standard.json", REPORTS / "h200x2-standard-a.json"]


@pytest.mark.parametrize("member", list(CommBackend))
def test_each_backend_is_read_from_its_value_and_written_as_it(member):
    assert CommBackend.parse(member.value) is member and CommBackend.parse(member) is member
    assert str(member) == f"{member}" == member.value and json.dumps(member) == json.dumps(member.value)
    assert member.value in COMM_BACKENDS


@pytest.mark.parametrize("bad", ["NCCL", "Gloo", " nccl", "gloo\n", "mpi", "", "nccl,gloo", None, 1, True])
def test_a_bad_spelling_is_named_with_the_choices(bad):
    with pytest.raises(GpulabError) as err:
        CommBackend.parse(bad, "--backend")
    assert str(err.value) == f"unknown --backend {bad!r}; choose one of: nccl (GPUs), gloo (CPU processes)"


def test_the_command_line_takes_exactly_the_backends(capsys):
    parser = build_parser()
    for member in CommBackend:
        args = parser.parse_args(["run", "mnist", "--launcher", "ddp", "--backend", member.value])
        assert args.comm_backend is member
    assert parser.parse_args(["run", "mnist"]).comm_backend is None
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["run", "mnist", "--launcher", "ddp", "--backend", "Nccl"])
    assert stop.value.code == 2
    assert "argument --backend: unknown DDP backend 'Nccl'; choose one of: nccl" in capsys.readouterr().err


@pytest.mark.parametrize("gpus", [True, False])
def test_one_function_chooses_when_none_is_asked(gpus):
    assert CommBackend.choose(None, gpus=gpus) is (CommBackend.NCCL if gpus else CommBackend.GLOO)
    for asked in CommBackend:
        assert CommBackend.choose(asked, gpus=gpus) is asked


def test_a_worker_message_carries_the_backend_as_its_type(tmp_path):
    cfg = RunConfig("mnist", batch=16)
    message = WorkerMessage(cfg, plan_batch(cfg, 2), "ddp", comm_backend=CommBackend.GLOO, threads=1)
    path = message.write(tmp_path / "m.json")
    assert json.loads(path.read_text())["comm_backend"] == "gloo"
    assert WorkerMessage.read(path).comm_backend is CommBackend.GLOO
    data = json.loads(path.read_text())
    data["comm_backend"] = "mpi"
    with pytest.raises(UnknownValue) as err:
        WorkerMessage.from_dict(data)
    assert (err.value.what, err.value.value) == ("worker message's comm_backend", "mpi")


def _backend_spellings(tree: ast.AST) -> list[str]:
    """Comparisons with a backend's spelling (`x == "nccl"`, `x in ("nccl", "gloo")`): a second reading of it."""
    return compared_with(tree, COMM_BACKENDS)


def test_no_module_but_the_vocabulary_reads_a_backends_spelling():
    assert offenders(_backend_spellings, ["src/gpulab/names.py"]) == {}
    assert len(_backend_spellings(ast.parse('a = b == "nccl"\nc = d in ("nccl", "gloo")\ne = "gloo" != f\n'))) == 3


def _ddp_row(**fields: object) -> Result:
    return Result("resnet50", "torch", "ddp", 2, "bf16", 1900.0, "samples/s", devices=["cuda:0", "cuda:1"], **fields)


def test_a_ddp_rows_backend_is_its_own_field_in_the_schema():
    report = sample_report()
    report.results = [_ddp_row(comm_backend=CommBackend.NCCL), _ddp_row()]
    data = json.loads(json.dumps(report.to_dict()))
    assert [r["comm_backend"] for r in data["results"]] == ["nccl", None] and schema_errors(data) == []
    assert [r.comm_backend for r in report_from_data(data).results] == [CommBackend.NCCL, None]
    data["results"][0]["comm_backend"] = "mpi"
    with pytest.raises(ReportError, match=r"\$\.results\[0\] \(resnet50 torch ddp n=2 bf16\)\.comm_backend"):
        report_from_data(data)


@pytest.mark.parametrize("path", OLD_DDP_REPORTS, ids=lambda p: p.stem)
def test_an_older_reports_ddp_rows_read_their_backend_from_params(path):
    raw = json.loads(path.read_text())
    assert raw["schema"] in READABLE_SCHEMAS and raw["schema"] != SCHEMA_ID
    report = load_report(path)
    for row, result in zip(raw["results"], report.results, strict=True):
        old = (row.get("params") or {}).get("backend")
        moved = row["launcher"] == "ddp" and old is not None
        probe = row["launcher"] in COMM_BACKENDS  # before /5 an all-reduce probe's launcher was its transport
        expected = CommBackend.parse(old) if moved else CommBackend.parse(row["launcher"]) if probe else None
        assert result.comm_backend == expected
        assert "backend" not in result.params or not moved
        assert result.key() == _key(row)  # compare's key is the row's, the probe's transport shown with ddp
    assert any(r.comm_backend is CommBackend.NCCL for r in report.results)


@pytest.mark.parametrize("path", OLD_DDP_REPORTS, ids=lambda p: p.stem)
def test_an_older_report_shows_and_compares_as_before(tmp_path, path):
    as_written = json.loads(path.read_text())
    as_written["schema"] = BEFORE_V5  # read without the /4 move: params.backend stays where the run wrote it
    before, now = report_from_data(as_written), load_report(path)
    assert to_markdown(now) == to_markdown(before)
    again = load_report(write_report(copy.deepcopy(now), tmp_path / "r.json"))  # written as the current version
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == SCHEMA_ID
    assert [r.comm_backend for r in again.results] == [r.comm_backend for r in now.results]
    c = compare([("before", before), ("again", again)])  # every row matched across versions
    assert c.rows and all(row.ratios[1] == pytest.approx(1.0) for row in c.rows)


def test_a_current_reports_params_are_left_as_written():
    """From /4 on a row's params are its own: a workload parameter called backend is not a process group's."""
    report = sample_report()
    report.results = [_ddp_row(params={"backend": "gloo"})]
    loaded = report_from_data(json.loads(json.dumps(report.to_dict())))
    assert loaded.results[0].comm_backend is None and loaded.results[0].params == {"backend": "gloo"}


def _key(row: dict) -> tuple:
    """A row's key as written before /5: an all-reduce probe's launcher, its transport, is read as "ddp · nccl"."""
    params = row.get("params") or {}
    series = f"{row['workload']} (epochs)" if params.get("mode") == "epochs" else row["workload"]
    launcher = f"ddp · {row['launcher']}" if row["launcher"] in COMM_BACKENDS else row["launcher"]
    return (series, row["framework"], launcher, row["n"], row["precision"], row.get("device") or "")


def test_a_report_written_on_two_h200s_names_nccl_on_its_ddp_rows():
    """A standard-tier run on a fresh 2x H200 machine (schema /4): the DDP rows name their backend in its field."""
    raw = json.loads((REPORTS / "h200x2-standard-v4.json").read_text())
    assert raw["schema"] == BEFORE_V5 and schema_errors(raw) == []
    rows = load_report(REPORTS / "h200x2-standard-v4.json").results
    ddp = [r for r in rows if r.launcher == "ddp" and not r.measures_transport()]
    assert [(r.n, r.comm_backend) for r in ddp] == [(1, CommBackend.NCCL), (2, CommBackend.NCCL)]
    # its all-reduce probe's row named nccl as its launcher, read as /5 writes it: ddp with nccl as its transport
    probe = [(r.launcher, r.comm_backend, r.launched()) for r in rows if r.measures_transport()]
    assert probe == [(Launcher.DDP, CommBackend.NCCL, "ddp · nccl")]
    assert not any("backend" in r.params for r in ddp)
