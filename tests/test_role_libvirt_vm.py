"""playbooks/vms.yml (the libvirt_vm role) from localhost as the KVM host.

- On libvirt's test driver with the fake 4x P100 host: the lab's VM is defined with its four GPUs, added to
  gpu_nodes with its address, and a wrong GPU count is refused with the host's GPUs listed. (The test driver keeps
  no state between connections, so idempotence is shown on the real daemon below.)
- On qemu:///system: a real guest is defined, started, waited for and added to gpu_nodes; a follow-up play logs in
  to it over SSH with the variables add_host gave it; the second run changes nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from guest import boot, disk, ssh
from guest.prereq import missing, require_module
from guest.ssh import Guest
from playbook import REPO, ansible_env, ansible_playbook

pytestmark = pytest.mark.slow

GPULAB = str(Path(sys.executable).parent / "gpulab")
FOLLOW_UP = """\
- name: The VMs the role added
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Log in and read the kernel release
      ansible.builtin.command: uname -r
      register: follow_up_uname
      changed_when: false
    - name: Show it
      ansible.builtin.debug:
        msg: "added {{ inventory_hostname }} at {{ ansible_host }} as {{ ansible_user }}: {{ follow_up_uname.stdout }}"
"""
PRINT_GROUP = """\
- name: What the role added
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Show gpu_nodes
      ansible.builtin.debug:
        msg: >-
          gpu_nodes={{ groups['gpu_nodes'] | join(',') }}
          {% for h in groups['gpu_nodes'] %}{{ h }}@{{ hostvars[h].ansible_host }}/{{ hostvars[h].ansible_user }}
          {% endfor %}
"""


def kvm_inventory(directory: Path, **hostvars: Any) -> Path:
    """localhost as the KVM host, run as this user with this Python (gpulab and libvirt-python importable)."""
    directory.mkdir(parents=True, exist_ok=True)
    host = {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        "libvirt_vm_gpulab": GPULAB,
        "libvirt_vm_spec_dir": str(directory / "specs"),
        **hostvars,
    }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"kvm_hosts": {"hosts": {"localhost": host}}}}}))
    return path


@pytest.fixture
def vm_tools() -> None:
    require_module("libvirt", "vm")
    if not Path(GPULAB).exists() or not (Path(sys.executable).parent / "ansible-playbook").exists():
        missing("needs gpulab and Ansible in this environment (pip install -c constraints.txt -e '.[vm,ansible]')")


def test_lab_vm_on_the_fake_p100_host_is_defined_with_its_gpus(vm_tools, tmp_path: Path) -> None:
    lab = yaml.safe_load((REPO / "inventory/host_vars/kvm01.yml").read_text())["libvirt_vm_vms"][0]
    # The lab's VM as declared, on the fake host; its disk and seed stay in tmp (the base image is not there).
    vm = {k: v for k, v in lab.items() if k not in ("disk", "cloud_init", "network")}
    inventory = kvm_inventory(
        tmp_path / "fake",
        libvirt_vm_connect=f"test://{REPO / 'tests/fixtures/libvirt/p100x4.xml'}",
        libvirt_vm_vms=[vm],
        libvirt_vm_start=False,
        libvirt_vm_addresses={vm["name"]: "192.0.2.30"},
    )
    show = tmp_path / "show.yml"
    show.write_text(PRINT_GROUP)
    result = ansible_playbook("playbooks/vms.yml", inventory, str(show))
    assert result.rc == 0, result.explain()
    assert result.recap()["localhost"]["changed"] >= 2  # the spec written, the VM defined
    text = " ".join(result.output.split())
    assert "gpu_nodes=gpu-vm01 gpu-vm01@192.0.2.30/gpulab" in text
    assert yaml.safe_load((tmp_path / "fake/specs/gpu-vm01.yml").read_text())["gpus"] == "4x10de:15f8"

    # Five P100s on a four-P100 host: gpulab's refusal, listing what the host has; nothing defined.
    refused = kvm_inventory(
        tmp_path / "five",
        libvirt_vm_connect=f"test://{REPO / 'tests/fixtures/libvirt/p100x4.xml'}",
        libvirt_vm_vms=[{**vm, "gpus": "5x10de:15f8"}],
        libvirt_vm_start=False,
    )
    result = ansible_playbook("playbooks/vms.yml", refused)
    assert result.rc != 0
    assert "Define the VMs" in result.output
    text = " ".join(result.output.split())  # Ansible wraps long lines
    assert "asks for 5 x 10de:15f8, but this host has 4" in text
    assert "0000:86:00.0 Tesla P100-PCIE-16GB (10de:15f8, NUMA node 1)" in text  # the host's GPUs listed


def test_vms_play_boots_a_guest_adds_it_and_a_rerun_changes_nothing(
    vm_tools, libvirt_system: Any, booted_guest: Guest, tmp_path: Path
) -> None:
    """Runs beside the session's guest: two clones of one image must not share a DHCP lease (or an address)."""
    key = ssh.generate_key(tmp_path / "key")
    name = boot.guest_name("role")
    workdir = boot.runs_dir() / name
    workdir.mkdir(exist_ok=True)
    workdir.chmod(0o755)
    spec = boot.spec_dict(name, disk.base_disk(), Path(f"{key}.pub").read_text().strip(), workdir, 2, 2048)
    inventory = kvm_inventory(
        tmp_path / "real",
        libvirt_vm_connect="qemu:///system",
        libvirt_vm_vms=[spec],
        libvirt_vm_ssh_private_key_file=str(key),
        # Test guests share the image's host key and reuse addresses: keep them out of ~/.ssh/known_hosts.
        libvirt_vm_ssh_common_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        libvirt_vm_ssh_timeout=int(boot.BOOT_TIMEOUT),
    )
    follow_up = tmp_path / "follow_up.yml"
    follow_up.write_text(FOLLOW_UP)
    # A TCG guest on a loaded machine can be slow to accept a connection; earlier guests had the same address,
    # so SSH control sockets stay private to this test.
    env = ansible_env(ANSIBLE_SSH_RETRIES="3", ANSIBLE_TIMEOUT="60", ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"))
    try:
        first = ansible_playbook("playbooks/vms.yml", inventory, str(follow_up), timeout=1800, env=env)
        assert first.rc == 0, first.explain()
        assert first.recap()["localhost"]["changed"] >= 3  # spec written, VM defined, VM started
        kernel = disk.base_disk().kernel_release
        added = re.search(rf"added {name} at (192\.168\.213\.\d+) ", first.output)
        assert added, first.output[-3000:]
        assert added.group(1) != booted_guest.host, f"{name} got the address of the running guest {booted_guest.name}"
        assert f"as gpulab: {kernel}" in first.output

        second = ansible_playbook("playbooks/vms.yml", inventory, str(follow_up), timeout=1800, env=env)
        assert second.rc == 0, second.explain()
        assert second.recap()["localhost"]["changed"] == 0, second.changed_tasks()
        assert second.recap()[name]["changed"] == 0
        assert f"as gpulab: {kernel}" in second.output
        assert booted_guest.ssh("hostname").returncode == 0  # the other guest kept its address
    finally:
        boot.remove_guest(libvirt_system, name)
