"""`gpulab validate [pytest options]`: the validation suite run as `pytest validate/` runs it, for real (no GPU
needed)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.cli import build_parser, main
from gpulab.errors import GpulabError
from gpulab.validation import commands

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tests" / "fixtures" / "h200x4-firecracker" / "nvidia-smi-q-x.xml"


def _started(cmd, report_dir):
    report_dir.mkdir()
    args = [*cmd, "--report-dir", str(report_dir)]
    return subprocess.Popen(args, cwd=report_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _reports(directory):
    return sorted(directory.glob("report-*.json"))


@pytest.mark.slow
def test_gpulab_validate_runs_a_cpu_check_as_pytest_does(tmp_path):
    """A quick CPU probe, which passes on any machine: one report with its pages, as `pytest validate/` writes
    (tests/test_validate_suite.py holds what pytest itself does with the same options)."""
    gpulab = _started([sys.executable, "-m", "gpulab", "validate", "-k", "cpu_memory_copy"], tmp_path / "gpulab")
    out, _ = gpulab.communicate(timeout=600)
    assert gpulab.returncode == 0, out
    (report,) = _reports(tmp_path / "gpulab")
    assert f"report: {report}" in out and re.search(r"^verdict: PASS: 1 checks passed", out, re.M), out
    assert report.with_suffix(".md").is_file() and report.with_suffix(".html").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, status",
    [
        # pytest's own statuses for these, held by tests/test_validate_suite.py: a failed check, a usage error
        (["--from-xml", str(CAPTURE), "--expect-gpus", "8", "-k", "gpu_count"], 1),
        (["--gpus", "x"], 4),
    ],
    ids=["check-fails", "bad-option"],
)
def test_gpulab_validate_exits_with_pytests_status(tmp_path, args, status):
    proc = _started([sys.executable, "-m", "gpulab", "validate", *args], tmp_path / "out")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == status, out
    reports = _reports(tmp_path / "out")
    if status == 4:  # refused before anything runs: no report
        assert reports == [] and "--gpus 'x': use 'all', a count" in out
    else:
        assert len(reports) == 1 and f"report: {reports[0]}" in out and "expected 8 GPUs, the capture lists 4" in out


def test_gpulab_help_names_validate():
    text = build_parser().format_help()
    assert re.search(r"^\s+validate\s+run the validation suite", text, re.M), text


def test_every_argument_after_validate_goes_to_pytest_as_given():
    given = ["-k", "health", "--tier", "standard", "-h", "--version", "--", "x"]
    assert build_parser().parse_args(["validate", *given]).pytest_args == given
    assert build_parser().parse_args(["validate"]).pytest_args == []


def test_the_command_is_the_one_bootstrap_runs():
    suite = ROOT / "validate"
    assert commands.pytest_command(suite, ["-k", "x"]) == [
        sys.executable,
        "-m",
        "pytest",
        str(suite),
        "-p",
        "no:cacheprovider",
        "-k",
        "x",
    ]
    assert '-m pytest validate/ -p no:cacheprovider "$@"' in (ROOT / "bootstrap.sh").read_text()


def test_the_suite_is_found_beside_the_package_then_in_the_working_directory(tmp_path, monkeypatch):
    assert commands.is_suite(ROOT / "validate")
    assert commands.find_suite(env={}, cwd=tmp_path) == commands.CHECKOUT / "validate"
    assert commands.find_suite(env={"GPULAB_SUITE": str(ROOT / "validate")}) == ROOT / "validate"
    # An installed package (no checkout around it): the working directory's validate/.
    monkeypatch.setattr(commands, "CHECKOUT", tmp_path / "site-packages")
    (tmp_path / "validate").mkdir()
    (tmp_path / "validate" / "conftest.py").write_text("from gpulab.validation.plugin import *  # noqa: F403\n")
    assert commands.find_suite(env={}, cwd=tmp_path) == tmp_path / "validate"
    with pytest.raises(GpulabError, match=r"no validation suite found .* set GPULAB_SUITE"):
        commands.find_suite(env={}, cwd=tmp_path / "validate")


def test_a_wrong_suite_directory_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPULAB_SUITE", str(tmp_path))
    assert main(["validate", "-k", "x"]) == 2
    err = capsys.readouterr().err
    assert err == f"gpulab: error: GPULAB_SUITE={tmp_path}: not the validation suite (no conftest.py loading " + (
        "gpulab.validation.plugin there); point it at a gpulab checkout's validate/ directory, or unset it\n"
    )
