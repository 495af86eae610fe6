"""nvidia_driver's checks on a host whose driver runs: the loaded driver's version and the NVLink fabric.

There is no GPU here, so `nvidia-smi` is a stand-in on PATH that prints what the real one printed on a 4x H200
machine (tests/fixtures/h200x4-firecracker/nvidia-smi-q-x.xml, fabric Completed/Success), on a 1x H100 (fabric
N/A) and on a 2x P100 machine with driver 375 (no fabric element), or the H200 capture edited to a fabric that never
finished training. The role's
own task files run through ansible-playbook (tasks_from), on this machine (local connection).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from playbook import REPO, ansible_playbook
from provision.inventory import require_ansible

if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpulab.provision.plugins.filter.fabric import fabric_states

H200_XML = REPO / "tests/fixtures/h200x4-firecracker/nvidia-smi-q-x.xml"
P100_XML = REPO / "tests/fixtures/p100x2-driver375/nvidia-smi-q-x.xml"
H100_XML = REPO / "tests/fixtures/h100x1-firecracker/nvidia-smi-q-x.xml"


def test_fabric_states_of_real_captures():
    h200 = fabric_states(H200_XML.read_text())
    assert [g["bus_id"] for g in h200] == [f"00000000:00:0{i}.0" for i in (6, 7, 8, 9)]
    assert {(g["state"], g["status"], g["problem"]) for g in h200} == {("Completed", "Success", "")}
    p100 = fabric_states(P100_XML.read_text())  # driver 375 reports no fabric: nothing to wait for
    assert len(p100) == 2 and {(g["state"], g["problem"]) for g in p100} == {("N/A", "")}
    h100 = fabric_states(H100_XML.read_text())  # Hopper without an NVSwitch: the driver reports N/A
    assert h100 == [
        {"bus_id": "00000000:00:06.0", "name": "NVIDIA H100 80GB HBM3", "state": "N/A", "status": "N/A", "problem": ""}
    ]


def test_fabric_problems_are_named():
    text = H200_XML.read_text()
    training = text.replace("<state>Completed</state>", "<state>In Progress</state>", 1)
    failed = text.replace("<status>Success</status>", "<status>NVML_ERROR_INSUFFICIENT_RESOURCES</status>", 1)
    assert fabric_states(training)[0]["problem"] == "fabric state In Progress (status Success)"
    assert [g["problem"] for g in fabric_states(training)[1:]] == ["", "", ""]
    assert fabric_states(failed)[0]["problem"] == (
        "fabric training completed with status NVML_ERROR_INSUFFICIENT_RESOURCES"
    )
    with pytest.raises(ValueError, match="not XML"):
        fabric_states("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def stand_in_smi(directory: Path, xml: str, csv: str) -> Path:
    """An nvidia-smi that answers `-q -x` with `xml` and `--query-gpu=...` with `csv`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "smi.xml").write_text(xml)
    (directory / "smi.csv").write_text(csv)
    smi = directory / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *-x*) cat {directory}/smi.xml ;; *--query-gpu*) cat {directory}/smi.csv ;; *) exit 9 ;; esac\n'
    )
    smi.chmod(0o755)
    return directory


def run_tasks(tmp_path: Path, tasks_from: str, smi_dir: Path, **extra: object):
    """The role's `tasks_from` file on this machine, nvidia-smi found first in smi_dir."""
    gpus = [{"address": f"0000:00:0{i}.0", "pci_id": "10de:2335", "injected": False} for i in (6, 7, 8, 9)]
    play = [
        {
            "name": f"nvidia_driver {tasks_from}",
            "hosts": "localhost",
            "gather_facts": False,
            "environment": {"PATH": f"{smi_dir}:{{{{ lookup('ansible.builtin.env', 'PATH') }}}}"},
            "vars": {"nvidia_driver_version": "580.159.04", "gpulab_gpus": gpus, **extra},
            "tasks": [
                {
                    "name": "Run the role's tasks",
                    "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": tasks_from},
                }
            ],
        }
    ]
    playbook = tmp_path / f"{tasks_from}.play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        f"all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    return ansible_playbook(playbook, inventory)


CSV_580 = "".join(f"00000000:00:0{i}.0, NVIDIA H200, 580.159.04\n" for i in (6, 7, 8, 9))


def test_the_loaded_driver_version_is_checked_after_a_reboot(tmp_path):
    require_ansible()
    ok = run_tasks(tmp_path / "ok", "verify.yml", stand_in_smi(tmp_path / "ok/bin", "", CSV_580))
    assert ok.rc == 0, ok.explain()
    assert "NVIDIA driver 580.159.04 loaded" in ok.output
    # The machine came back on the old module: the count matches, the version does not.
    old = stand_in_smi(tmp_path / "old/bin", "", CSV_580.replace("580.159.04", "570.172.08"))
    stale = run_tasks(tmp_path / "old", "verify.yml", old)
    assert stale.rc == 2, stale.explain()
    said = " ".join(stale.output.split())
    assert (
        "The GPUs run NVIDIA driver 570.172.08, but 580.159.04 is installed: the old kernel module is still loaded."
        in said
    )
    assert "update-initramfs -u -k all" in said
    # A branch request (580) accepts any 580 point release, not 5800.
    branch = run_tasks(
        tmp_path / "branch",
        "verify.yml",
        stand_in_smi(tmp_path / "branch/bin", "", CSV_580),
        nvidia_driver_version="580",
    )
    assert branch.rc == 0, branch.explain()


def test_the_fabric_check_passes_on_a_trained_fabric_and_names_the_gpus_that_are_not(tmp_path):
    require_ansible()
    text = H200_XML.read_text()
    ready = run_tasks(tmp_path / "ready", "fabric_check.yml", stand_in_smi(tmp_path / "ready/bin", text, CSV_580))
    assert ready.rc == 0, ready.explain()
    assert "NVLink fabric ready: Completed on 4 GPU(s)" in ready.output

    # One GPU's training never finishes: the wait ends after the timeout and the check names the GPU.
    stuck = text.replace("<state>Completed</state>", "<state>In Progress</state>", 1)
    started = time.monotonic()
    run = run_tasks(
        tmp_path / "stuck",
        "fabric_check.yml",
        stand_in_smi(tmp_path / "stuck/bin", stuck, CSV_580),
        nvidia_driver_fabric_timeout=5,
    )
    assert run.rc == 2, run.explain()
    assert time.monotonic() - started < 120
    said = " ".join(run.output.split())
    assert (
        "The NVLink fabric is not ready on 1 GPU(s): 00000000:00:06.0: fabric state In Progress (status Success)."
        in said
    )
    assert "journalctl -u nvidia-fabricmanager" in said


def test_fabric_manager_is_not_restarted_under_work_on_the_gpus(tmp_path):
    """Fabric Manager's package changed while the driver stayed (no drain ran): a restart would reprogram the
    NVSwitches under the jobs, so the census looks first and a busy node keeps its running Fabric Manager."""
    require_ansible()
    busy = (REPO / "tests/fixtures/captures/v100s-pcie-x8-busy.xml").read_text()
    run = run_tasks(
        tmp_path / "busy",
        "fabric.yml",
        stand_in_smi(tmp_path / "busy/bin", busy, CSV_580),
        nvidia_driver_fabricmanager_install={"changed": True},
    )
    assert run.rc == 2, run.explain()
    said = " ".join(run.output.split())
    assert "localhost is busy (pid 37305 python (compute) on GPUs 0, 1, 2, 3, 4, 5, 6, 7" in said, said
    assert "so the running Fabric Manager was left alone" in said and "nvidia_driver_allow_busy: true" in said
    assert "TASK [nvidia_driver : Start Fabric Manager" not in run.output
