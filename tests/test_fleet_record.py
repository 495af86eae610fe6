"""The fleet's driver branch written down beside the inventory (gpulab.compat.fleet_record) by the pre-flight of a
play over two GPU nodes, read back by a later `--limit` run and by `gpulab matrix resolve --fleet`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.compat import fleet_record
from gpulab.compat.fleet_record import FleetRecord
from gpulab.errors import GpulabError
from playbook import ansible_playbook
from provision.inventory import require_ansible

P100 = "10de:15f8"
PREFLIGHT = """\
- name: The pre-flight alone (it reads the hosts and changes nothing on them)
  hosts: gpu_nodes
  gather_facts: false
  roles: [gpulab_preflight]
"""


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


@pytest.mark.slow
def test_a_play_over_two_nodes_writes_the_branch_and_a_later_limit_run_takes_it(tmp_path: Path) -> None:
    """Two nodes (this machine twice, a P100 assumed, the default sources): the pre-flight of the play over both
    chooses one branch and writes it beside the inventory; a later run of one node reads it back and says so."""
    require_ansible()
    (tmp_path / "inventory").mkdir()
    inventory = tmp_path / "inventory" / "hosts.yml"
    node = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpulab_preflight_gpu_pci_ids": [P100],
    }
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"node1": node, "node2": node}}}}}))
    play = tmp_path / "preflight.yml"
    play.write_text(PREFLIGHT)
    record = tmp_path / "inventory" / fleet_record.FILE_NAME

    first = ansible_playbook(play, inventory)
    assert first.rc == 0, first.explain()
    assert first.recap()["node1"]["changed"] == 0  # a record on the controller; no host changed
    written = fleet_record.read(record)
    assert written is not None and written.hosts == ("node1", "node2")
    branch = written.driver_branch
    assert f"profile auto: driver={branch}." in " ".join(first.output.split())  # the branch the plan took

    later = ansible_playbook(play, inventory, "--limit", "node2")
    assert later.rc == 0, later.explain()
    said = " ".join(later.output.split()).replace("''", "'")  # the YAML callback's quoting undone
    assert f"The fleet's driver branch is R{branch}, written down in {record} on {written.chosen}" in said, said
    assert fleet_record.read(record) == written  # read, not written again

    # The operator's decision: a branch set by hand is the fleet's from then on.
    other = "535" if branch != "535" else "580"
    record.write_text(record.read_text().replace(f'driver_branch: "{branch}"', f'driver_branch: "{other}"'))
    moved = ansible_playbook(play, inventory, "--limit", "node1")
    said = " ".join(moved.output.split()).replace("''", "'")
    assert f"The fleet's driver branch is R{other}" in said and f"today R{branch} would be chosen" in said, said
