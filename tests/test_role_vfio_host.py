"""vfio_host really runs against a Debian 12 root (community.general.chroot) with the GPUs' PCI ids given (this
machine has no GPU): the GRUB snippet, modprobe and modules-load files, the rebuilt initramfs; a second run changes
nothing; bad input is refused before any change."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from guest import image
from guest.prereq import missing
from playbook import REPO, ansible_env, ansible_playbook
from provision.inventory import chroot_inventory

P100 = "10de:15f8"
V100_AUDIO = "10de:10f2"  # a companion function id, to see that every id reaches vfio-pci
PLAY = """\
- name: vfio_host alone
  hosts: kvm_hosts
  gather_facts: false
  roles:
    - role: vfio_host
"""


def host_vendor() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("vendor_id"):
            return "intel" if "Intel" in line else "amd"
    raise AssertionError("no vendor_id in /proc/cpuinfo")


def handler_changed(output: str, name: str) -> bool:
    return re.search(rf"RUNNING HANDLER \[vfio_host : {re.escape(name)}\] \**\nchanged: \[kvm01\]", output) is not None


def run(tmp_path: Path, root: Path, name: str, **hostvars: object):
    inventory = chroot_inventory(tmp_path / name, {"kvm01": {"root": root, **hostvars}}, group="kvm_hosts")
    playbook = tmp_path / name / "vfio.yml"
    playbook.write_text(PLAY)
    return ansible_playbook(playbook, inventory)


def fake_pci_function(
    root: Path,
    address: str,
    pci_id: str,
    pci_class: int,
    driver: str | None,
    group: int | None,
    boot_vga: str | None = None,
):
    dev = root / "sys/bus/pci/devices" / address
    dev.mkdir(parents=True)
    vendor, device = pci_id.split(":")
    (dev / "vendor").write_text(f"0x{vendor}\n")
    (dev / "device").write_text(f"0x{device}\n")
    (dev / "class").write_text(f"0x{pci_class:06x}\n")
    if boot_vga is not None:
        (dev / "boot_vga").write_text(f"{boot_vga}\n")
    if driver:
        os.symlink(f"../../../../bus/pci/drivers/{driver}", dev / "driver")
    if group is not None:
        (root / f"sys/kernel/iommu_groups/{group}/devices").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../kernel/iommu_groups/{group}", dev / "iommu_group")


def test_discovery_finds_the_gpus_and_their_companion_functions(tmp_path: Path) -> None:
    """The role's module (gpulab.provision.vfio_devices), run by Ansible over a sysfs tree shaped like a host with two
    V100s."""
    exe = Path(sys.executable).parent / "ansible"
    if not exe.exists():
        missing("needs Ansible (pip install -c constraints.txt -e '.[ansible]')")
    root = tmp_path / "host"
    fake_pci_function(root, "0000:3b:00.0", "10de:1db4", 0x030200, "nvidia", 30)
    fake_pci_function(root, "0000:3b:00.1", "10de:10f2", 0x040300, "snd_hda_intel", 30)  # the GPU's HDMI audio
    fake_pci_function(root, "0000:3c:00.0", "10de:1db4", 0x030000, None, 31)
    fake_pci_function(root, "0000:19:00.0", "8086:1572", 0x020000, "i40e", 12)  # a NIC stays with the host
    fake_pci_function(root, "0000:00:1f.3", "8086:a348", 0x040300, "snd_hda_intel", 13)  # the board's audio too
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    argv = [str(exe), "localhost", "-c", "local", "-m", "gpulab.provision.vfio_devices", "-a", f"root={root}", "-o"]
    argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout.split("=>", 1)[1])
    assert [d["address"] for d in found["devices"]] == ["0000:3b:00.0", "0000:3c:00.0", "0000:3b:00.1"]
    assert [d["gpu"] for d in found["devices"]] == [True, True, False]
    assert found["devices"][0]["driver"] == "nvidia" and found["devices"][0]["iommu_group"] == 30
    assert found["devices"][1]["driver"] is None
    assert found["pci_ids"] == ["10de:1db4", "10de:10f2"]
    assert found["cpu_vendor"] == "amd"
    assert found["iommu_enabled"] is True
    assert found["changed"] is False


@pytest.mark.slow
def test_bad_input_is_refused_before_any_change(debian_root: Path, tmp_path: Path) -> None:
    result = run(tmp_path, debian_root, "bad", vfio_host_pci_ids=[P100, "10DE:15F8", "nvidia"])
    assert result.rc != 0
    text = " ".join(result.output.split())
    assert "'10DE:15F8' is not a vendor:device id" in text
    assert "'nvidia' is not a vendor:device id" in text
    assert "10de:15f8" in text  # the fix shows the right form
    assert not (debian_root / "etc/default/grub.d/gpulab-vfio.cfg").exists()
    assert not (debian_root / "etc/modprobe.d/gpulab-vfio.conf").exists()

    result = run(tmp_path, debian_root, "none")
    assert result.rc != 0
    assert "no NVIDIA GPU found in sysfs and vfio_host_pci_ids is empty" in " ".join(result.output.split())
    assert not (debian_root / "etc/modprobe.d/gpulab-vfio.conf").exists()


@pytest.mark.slow
def test_vfio_host_configures_the_image_and_a_rerun_changes_nothing(debian_root: Path, tmp_path: Path) -> None:
    root = debian_root
    release = image.kernel_release(root)
    initrd = root / f"boot/initrd.img-{release}"
    initrd_before = initrd.stat().st_mtime_ns
    ids = [P100, V100_AUDIO]

    first = run(tmp_path, root, "first", vfio_host_pci_ids=ids)
    assert first.rc == 0, first.explain()
    assert first.recap()["kvm01"]["changed"] > 0
    assert handler_changed(first.output, "Rebuild the initramfs for vfio")
    assert not handler_changed(first.output, "Regenerate GRUB's configuration")  # no GRUB in the image
    # A chroot cannot reboot: the play says so and leaves the check of the live host for after the reboot.
    assert "not active until kvm01 reboots" in " ".join(first.output.split())
    assert "vfio_host : Check that the IOMMU is on" not in first.output

    vendor = host_vendor()
    params = "intel_iommu=on iommu=pt" if vendor == "intel" else "iommu=pt"
    grub = (root / "etc/default/grub.d/gpulab-vfio.cfg").read_text()
    assert f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT {params}"' in grub
    modprobe = (root / "etc/modprobe.d/gpulab-vfio.conf").read_text()
    assert f"options vfio-pci ids={P100},{V100_AUDIO}\n" in modprobe
    for module in ("nouveau", "nvidia", "snd_hda_intel"):
        assert f"softdep {module} pre: vfio-pci\n" in modprobe
    assert (root / "etc/modules-load.d/gpulab-vfio.conf").read_text().split("\n")[1:4] == [
        "vfio",
        "vfio_iommu_type1",
        "vfio_pci",
    ]
    modules = (root / "etc/initramfs-tools/modules").read_text()
    assert "# BEGIN gpulab vfio_host\nvfio\nvfio_iommu_type1\nvfio_pci\n# END gpulab vfio_host\n" in modules

    assert initrd.stat().st_mtime_ns != initrd_before
    listing = image.in_chroot(root, "lsinitramfs", f"/boot/initrd.img-{release}").stdout.splitlines()
    assert any(path.endswith("/vfio-pci.ko") for path in listing), "vfio-pci.ko is not in the initramfs"
    assert any(path.endswith("/vfio_iommu_type1.ko") for path in listing)
    assert "etc/modprobe.d/gpulab-vfio.conf" in listing

    initrd_after_first = initrd.stat().st_mtime_ns
    second = run(tmp_path, root, "second", vfio_host_pci_ids=ids)
    assert second.rc == 0, second.explain()
    assert second.recap()["kvm01"]["changed"] == 0, second.changed_tasks()
    assert initrd.stat().st_mtime_ns == initrd_after_first

    other = "amd" if vendor == "intel" else "intel"
    third = run(tmp_path, root, "vendor", vfio_host_pci_ids=ids, vfio_host_cpu_vendor=other)
    assert third.rc == 0, third.explain()
    expected = "iommu=pt" if other == "amd" else "intel_iommu=on iommu=pt"
    assert f'"$GRUB_CMDLINE_LINUX_DEFAULT {expected}"' in (root / "etc/default/grub.d/gpulab-vfio.cfg").read_text()
    # Only the kernel command line changed: the initramfs is left alone.
    assert [task for task, _ in third.changed_tasks()] == [
        "vfio_host : Put the IOMMU parameters on the kernel command line"
    ]
