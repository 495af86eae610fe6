"""`gpulab sweep --json`: stdout holds the JSON document and nothing else, whether the sweep succeeds or fails."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpulab.cli import main
from test_launch_stub import BUILDER

pytest.importorskip("torch")
pytest.importorskip("psweep")
TESTS = Path(__file__).parent
STUB = ["--builder", BUILDER, "--size", "tiny", "--warmup", "1", "--threads", "1", "--no-telemetry"]


@pytest.fixture
def stub_importable(monkeypatch):
    """Sweep runs are fresh processes; they import the stub workload from tests/."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))


def test_sweep_json_is_alone_on_stdout(tmp_path, stub_importable, capfd):
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", "stub", "--gpus", "1", "--runs", "2", "--sweep-dir", str(sweep_dir), *STUB, "--json"]) == 0
    captured = capfd.readouterr()  # file descriptors: also what forked workers and subprocesses write
    result = json.loads(captured.out)  # raises if anything but one JSON document is on stdout
    assert result["launcher"] == "sweep" and result["n"] == 1 and len(result["params"]["runs"]) == 2
    assert result["params"]["psweep_db"] == str(sweep_dir.resolve() / "database.pk")
    # The database's whereabouts are a message, on stderr.
    assert f"psweep database: {sweep_dir.resolve() / 'database.pk'} (run id " in captured.err


def test_failed_sweep_with_json_prints_nothing_on_stdout(tmp_path, stub_importable, capfd):
    argv = ["sweep", "stub_missing", "--gpus", "1", "--sweep-dir", str(tmp_path / "sw"), *STUB, "--json"]
    assert main(argv) == 2
    captured = capfd.readouterr()
    assert captured.out == ""
    errors = [line for line in captured.err.splitlines() if line.startswith("gpulab: error: ")]
    assert len(errors) == 1 and "1 of 1 sweep runs failed" in errors[0], captured.err
