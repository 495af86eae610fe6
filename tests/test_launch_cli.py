"""`gpulab run` / `gpulab sweep`: result line, report appending (schema-valid, speedups and scaling recomputed)
and the errors a user can run into."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpulab.cli import main
from gpulab.errors import GpulabError
from gpulab.launch.commands import append_results, parse_params
from gpulab.names import Framework, Launcher, Precision
from gpulab.records import Report, Result, Scaling
from gpulab.report.io import load_report, write_report
from test_launch_stub import BUILDER

torch = pytest.importorskip("torch")
TESTS = Path(__file__).parent
STUB = ["--builder", BUILDER, "--size", "tiny", "--warmup", "1"]


def test_run_appends_to_a_new_then_an_existing_report(tmp_path, capsys):
    report = tmp_path / "r" / "report.json"
    assert main(["run", "stub", "--launcher", "cpu", "--threads", "1", *STUB, "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "stub cpu (1 threads) fp32:" in out and "samples/s" in out
    first = load_report(report)  # validates against the schema
    assert len(first.results) == 1 and first.fingerprint["host"]["hostname"]
    assert main(["run", "stub", "--launcher", "cpu", "--threads", "2", *STUB, "--report", str(report)]) == 0
    second = load_report(report)
    assert [(r.launcher, r.n) for r in second.results] == [("cpu", 1), ("cpu", 2)]
    assert second.created == first.created
    assert [(s.from_, s.to) for s in second.speedups] == [("cpu:1", "cpu:2")]
    assert [(s.launcher, s.n) for s in second.scaling] == [("cpu", 1), ("cpu", 2)]


def test_run_prints_json_and_passes_params(capsys):
    argv = ["run", "stub", "--launcher", "cpu", "--threads", "1", *STUB, "--json", "--batch", "4"]
    assert main([*argv, "--param", "learning_rate=0.25", "--steps", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch"] == 4 and data["iterations"] == 2 and data["params"]["lr_used"] == 0.25
    assert data["params"]["workload_params"] == {"learning_rate": 0.25}


def test_appending_keeps_expected_efficiencies(tmp_path):
    path = tmp_path / "report.json"
    torch_, gpu_, ddp_, bf16 = Framework.TORCH, Launcher.GPU, Launcher.DDP, Precision.BF16
    gpu = Result("resnet50", torch_, gpu_, 1, bf16, 100.0, "samples/s", devices=["cuda:0"])
    ddp = Result("resnet50", torch_, ddp_, 2, bf16, 196.0, "samples/s", devices=["cuda:0", "cuda:1"])
    old = Scaling("resnet50", torch_, ddp_, bf16, 2, 150.0, 1.5, 0.75, expected=0.98, expected_source="ref")
    write_report(Report(fingerprint={"host": {"hostname": "h"}}, results=[gpu], scaling=[old]), path)
    report = append_results(path, [ddp])
    (row,) = report.scaling
    assert row.efficiency == pytest.approx(0.98) and (row.expected, row.expected_source) == (0.98, "ref")
    assert load_report(path).scaling == report.scaling


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without GPUs")
def test_sweep_command_on_cpu_processes(tmp_path, monkeypatch, capsys):
    pytest.importorskip("psweep")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    report = tmp_path / "report.json"
    argv = ["sweep", "stub", "--gpus", "2", "--sweep-dir", str(tmp_path / "sw"), *STUB, "--report", str(report)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "psweep database:" in out and "stub sweep×2 on CPU processes fp32" in out
    (result,) = load_report(report).results
    assert result.launcher == "sweep" and result.n == 2 and len(result.params["runs"]) == 2


def test_parse_params():
    assert parse_params(["lr=0.1", "width=512", "name=abc", "flag=true", "empty="]) == {
        "lr": 0.1,
        "width": 512,
        "name": "abc",
        "flag": True,
        "empty": "",
    }
    assert parse_params(None) == {}
    for bad in ("lr", "=3", "a b=1"):
        with pytest.raises(GpulabError, match="KEY=VALUE"):
            parse_params([bad])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "stub", "--launcher", "cpu", "--param", "oops", *STUB], "KEY=VALUE"),
        (["run", "stub", "--launcher", "cpu", "--gpus", "2", *STUB], "one device"),
        (["run", "stub", "--launcher", "cpu", "--scale-lr", *STUB], "--launcher cpu has one"),
        (["run", "stub", "--launcher", "ddp", "--batch-policy", "global", *STUB], "needs the global batch"),
        (["run", "stub", "--launcher", "cpu", "--builder", "nowhere_at_all:build"], "cannot import"),
        (["run", "stub", "--launcher", "cpu", *STUB, "--data", "/nonexistent/data"], "no such file"),
    ],
)
def test_bad_input_is_a_clear_error(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_workload_is_refused(capsys):
    assert main(["run", "no_such_workload", "--launcher", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "no_such_workload" in err or "gpulab.workloads" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without GPUs")
def test_more_gpus_than_visible_is_refused(capsys):
    assert main(["run", "stub", "--launcher", "gpu", *STUB]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert main(["run", "stub", "--launcher", "dataparallel", "--gpus", "4", *STUB]) == 2
    assert "cannot run here" in capsys.readouterr().err
