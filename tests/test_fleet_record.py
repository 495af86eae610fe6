"""The fleet's driver branch written down beside the inventory (gpulab.compat.fleet_record), read back by the
pre-flight's next run and by `gpulab matrix resolve --fleet`; the play that writes it runs in
tests/test_operations.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.compat import fleet_record
from gpulab.compat.fleet_record import FleetRecord
from gpulab.errors import GpulabError


def test_the_written_record_reads_back() -> None:
    record = FleetRecord("580", "2026-11-28", ("node1", "node2"))
    text = fleet_record.render(record)
    assert fleet_record.parse(text, "f") == record
    assert text.startswith("# The NVIDIA driver branch of this inventory's GPU nodes")


def test_an_operator_s_edit_is_taken_as_written(tmp_path: Path) -> None:
    path = tmp_path / fleet_record.FILE_NAME
    path.write_text("driver_branch: R570\n")
    assert fleet_record.read(path) == FleetRecord("570", "", ())
    path.write_text("driver_branch: 535\nchosen: 2026-01-02\nhosts: [a]\n")
    assert fleet_record.read(path) == FleetRecord("535", "2026-01-02", ("a",))
    assert fleet_record.read(tmp_path / "absent.txt") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("driver_branch: [580]\n", "driver_branch [580] is not a branch like 580"),
        ("branch: 580\n", "no driver_branch"),
        ("driver_branch: '580'\nchosen: yesterday\n", "chosen 'yesterday' is not a date like 2026-11-28"),
        ("driver_branch: '580'\nhosts: node1\n", "hosts is not a list of node names"),
        ("driver_branch: 300\n", "driver 300 predates the compatibility matrix"),
        (": : :\n", "not valid YAML"),
    ],
)
def test_a_record_that_is_not_one_is_refused_naming_the_fix(text: str, message: str) -> None:
    with pytest.raises(GpulabError) as err:
        fleet_record.parse(text, "inventory/gpulab-fleet.txt")
    assert message in str(err.value)
    assert str(err.value).startswith("inventory/gpulab-fleet.txt: ") and "remove it to choose" in str(err.value)


def test_matrix_resolve_takes_the_fleet_s_branch_unless_driver_is_given(tmp_path: Path) -> None:
    path = tmp_path / fleet_record.FILE_NAME
    path.write_text(fleet_record.render(FleetRecord("570", "2026-11-28", ("n1", "n2"))))
    base = [sys.executable, "-m", "gpulab", "matrix", "resolve", "--gpu", "H100", "--os", "ubuntu24.04"]
    base += ["--driver-source", "cuda_repo", "--cuda-source", "cuda_repo", "--json"]

    def driver(*extra: str) -> str:
        proc = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return str(json.loads(proc.stdout)["target"]["driver"])

    assert driver("--fleet", str(path)).startswith("570")
    assert driver("--fleet", str(path), "--driver", "580").startswith("580")
    gone = subprocess.run([*base, "--fleet", str(tmp_path / "none.txt")], capture_output=True, text=True, timeout=120)
    assert gone.returncode == 2 and "no such file; pass the gpulab-fleet.txt a play wrote" in gone.stderr
