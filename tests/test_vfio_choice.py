"""vfio_host passes through only the GPUs chosen for it, never the boot VGA device (the host's console), and refuses
vfio-pci's ids= binding when it would also take a device the host keeps. The role's read-only choice (tasks/choose.yml:
the vfio_devices module and the input check) runs on localhost over a sysfs tree shaped like a host with three V100s of
one model, the first the firmware's console."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from playbook import ansible_playbook
from provision.inventory import require_ansible
from test_role_vfio_host import fake_pci_function

CONSOLE, SECOND, THIRD = "0000:3b:00.0", "0000:3c:00.0", "0000:3d:00.0"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kvm-host")
    fake_pci_function(root, CONSOLE, "10de:1db4", 0x030000, None, 30, boot_vga="1")  # VGA class: the console
    fake_pci_function(root, "0000:3b:00.1", "10de:10f2", 0x040300, None, 30)  # its HDMI audio
    fake_pci_function(root, SECOND, "10de:1db4", 0x030200, None, 31, boot_vga="0")
    fake_pci_function(root, "0000:3c:00.1", "10de:10f2", 0x040300, None, 31)
    fake_pci_function(root, THIRD, "10de:1db4", 0x030200, None, 32, boot_vga="0")
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n")
    return root


def choose(tmp_path: Path, root: Path, **hostvars: object):
    require_ansible()
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    play = tmp_path / "choose.yml"
    report = tmp_path / "chosen.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "vfio_host's choice",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"vfio_host_root": str(root), **hostvars},
                    "tasks": [
                        {"ansible.builtin.include_role": {"name": "vfio_host", "tasks_from": "choose.yml"}},
                        {
                            "ansible.builtin.copy": {
                                "content": "{{ {'ids': vfio_host_effective_ids, "
                                "'devices': vfio_host_effective_devices} | to_yaml }}",
                                "dest": str(report),
                                "mode": "0644",
                            }
                        },
                    ],
                }
            ]
        )
    )
    run = ansible_playbook(play, inventory, "-e", f"ansible_python_interpreter={sys.executable}", timeout=300)
    return run, (yaml.safe_load(report.read_text()) if report.exists() else None)


def test_by_default_every_gpu_but_the_console_by_address(host, tmp_path):
    run, chosen = choose(tmp_path / "a", host, vfio_host_bind="driver_override")
    assert run.rc == 0, run.explain()
    assert chosen["devices"] == [SECOND, THIRD, "0000:3c:00.1"]  # the console and its audio stay with the host


def test_ids_binding_is_refused_when_it_would_take_the_console(host, tmp_path):
    run, chosen = choose(tmp_path / "b", host)  # vfio_host_bind: ids, the default
    assert run.rc != 0 and chosen is None
    said = " ".join(run.output.split())
    assert (
        f"vfio-pci ids= would also take {CONSOLE} (10de:1db4), which the host keeps (the boot VGA device): set "
        "vfio_host_bind: driver_override to bind the chosen GPUs by address."
    ) in said


def test_only_the_chosen_gpus_and_never_the_console(host, tmp_path):
    run, chosen = choose(tmp_path / "c", host, vfio_host_bind="driver_override", vfio_host_gpus=[THIRD])
    assert run.rc == 0, run.explain()
    assert chosen["devices"] == [THIRD]
    run, _ = choose(tmp_path / "d", host, vfio_host_bind="driver_override", vfio_host_gpus=[CONSOLE])
    said = " ".join(run.output.split())
    assert run.rc != 0 and f"{CONSOLE} is the boot VGA device (the host's console): it stays with the host" in said
    run, _ = choose(tmp_path / "e", host, vfio_host_bind="driver_override", vfio_host_gpus=["0000:19:00.0"])
    said = " ".join(run.output.split())
    assert run.rc != 0 and "'0000:19:00.0' in vfio_host_gpus is not an NVIDIA GPU on this host" in said
