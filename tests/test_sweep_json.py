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


def test_a_second_sweep_into_the_same_directory_keeps_both_sweeps_runs(tmp_path, stub_importable):
    sweep_dir = tmp_path / "sw"
    argv = ["sweep", "stub", "--gpus", "1", "--runs", "1", "--sweep-dir", str(sweep_dir), *STUB]
    assert main(argv) == 0 and main(argv) == 0  # psweep's column check refused the second sweep's runs
    rows = json.loads((sweep_dir / "database.json").read_text())
    assert len(rows) == 2 and len({r["_run_id"] for r in rows}) == 2 and all(r["samples_per_s"] for r in rows)
    assert not list(sweep_dir.glob(".*.tmp"))


def test_a_sweep_directory_holding_only_a_pickle_is_refused_unread(tmp_path, stub_importable, capfd):
    sweep_dir = tmp_path / "sw"
    sweep_dir.mkdir()
    (sweep_dir / "database.pk").write_bytes(b"\x80\x04cos\nsystem\n(Vtouch pwned\ntR.")  # os.system("touch pwned")
    argv = ["sweep", "stub", "--gpus", "1", "--runs", "1", "--sweep-dir", str(sweep_dir), *STUB]
    assert main(argv) == 2
    assert "database.pk has no database.json beside it; move" in capfd.readouterr().err
    assert not (Path.cwd() / "pwned").exists() and not (sweep_dir / "database.json").exists()
