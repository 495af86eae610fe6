"""A real boot on qemu:///system (TCG) from gpulab's own template, and libvirt's passthrough refusal made clear."""

from __future__ import annotations

import ipaddress
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gpulab.errors import GpulabError
from guest import boot
from guest.ssh import Guest

pytestmark = pytest.mark.slow

FAKE_GPU = "0000:3b:00.0"  # where the seeds' lab had its first P100; nothing is ever bound here


def test_guest_boots_to_ssh_from_the_gpulab_template(booted_guest: Guest) -> None:
    print(f"\nboot to SSH login: {booted_guest.boot_seconds:.1f} s")
    assert booted_guest.ssh("uname", "-r").stdout.strip() == booted_guest.kernel_release
    # The cloud-init seed gpulab built was applied: its hostname, and its user with passwordless sudo.
    assert booted_guest.ssh("hostname").stdout.strip() == booted_guest.name
    assert booted_guest.ssh("sudo", "-n", "id", "-u").stdout.strip() == "0"
    network = ipaddress.ip_interface(boot.NETWORK_ADDRESS).network
    assert ipaddress.ip_address(booted_guest.host) in network
    # TCG, as the spec asked: no KVM under the guest.
    assert booted_guest.ssh("systemd-detect-virt").stdout.strip() == "qemu"
    failed = booted_guest.ssh("systemctl", "--failed", "--no-legend", "--plain").stdout.strip()
    assert failed == "", f"units failed during boot:\n{failed}"


def test_inventory_lets_ansible_address_the_guest(booted_guest: Guest, tmp_path: Path) -> None:
    import yaml

    inventory = yaml.safe_load(booted_guest.inventory(tmp_path / "hosts.yml", ansible_port=22).read_text())
    host_vars = inventory["all"]["children"]["gpu_nodes"]["hosts"][booted_guest.name]
    assert host_vars["ansible_host"] == booted_guest.host
    assert host_vars["ansible_user"] == "gpulab"
    assert Path(host_vars["ansible_ssh_private_key_file"]).is_file()
    assert host_vars["ansible_port"] == 22


def _with_hostdev(xml: str, address: str) -> str:
    domain, rest = address.split(":", 1)
    bus, rest = rest.split(":")
    slot, function = rest.split(".")
    root = ET.fromstring(xml)
    hostdev = ET.SubElement(root.find("devices"), "hostdev", mode="subsystem", type="pci", managed="yes")  # type: ignore[arg-type]
    source = ET.SubElement(hostdev, "source")
    ET.SubElement(source, "address", domain=f"0x{domain}", bus=f"0x{bus}", slot=f"0x{slot}", function=f"0x{function}")
    return ET.tostring(root, encoding="unicode")


def test_start_with_a_hostdev_and_no_iommu_fails_with_the_fix(libvirt_system: Any) -> None:
    from gpulab import vm

    if any(Path("/sys/kernel/iommu_groups").glob("*")):
        pytest.skip("this host has IOMMU groups: libvirt would try the passthrough instead of refusing it")
    name = boot.guest_name("hostdev")
    spec = vm.spec_from_dict(
        {
            "name": name,
            "vcpus": 1,
            "memory_mib": 256,
            "domain_type": "qemu",
            "cpu_mode": "maximum",
            "firmware": "bios",
            "numa_pinning": False,
        }
    )
    # gpulab's plan refuses an address the host lacks, so the hostdev goes into its rendered XML by hand.
    xml = _with_hostdev(vm.plan(libvirt_system, spec).xml, FAKE_GPU)
    libvirt_system.defineXML(xml)
    try:
        with pytest.raises(GpulabError) as err:
            vm.start(libvirt_system, name)
        message = str(err.value)
        assert "host doesn't support passthrough of host PCI devices" in message  # libvirt's own words
        assert "no working IOMMU/VFIO" in message
        assert "intel_iommu=on" in message and "vfio_host role" in message  # the fix
        assert not libvirt_system.lookupByName(name).isActive()
    finally:
        boot.remove_guest(libvirt_system, name)
    assert name not in {d.name() for d in libvirt_system.listAllDomains()}


def test_daemon_check_sees_through_a_socket_left_by_a_dead_daemon(tmp_path: Path) -> None:
    import socket

    from guest import libvirtd

    path = tmp_path / "virtlogd-sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        assert libvirtd.accepts(path)
    assert path.exists() and not libvirtd.accepts(path)
