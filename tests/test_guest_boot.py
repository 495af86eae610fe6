"""A real boot on qemu:///system (TCG) from gpulab's own template, and libvirt's passthrough refusal made clear."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gpulab.errors import GpulabError
from guest import boot, prereq, ssh
from guest.ssh import Guest

pytestmark = pytest.mark.slow

FAKE_GPU = "0000:3b:00.0"  # where the seeds' lab had its first P100; nothing is ever bound here
OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M"  # Debian's ovmf: .fd without Secure Boot, .ms.fd with Microsoft's keys
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


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


def _loader(dom: Any) -> str:
    """The firmware file libvirt resolved for a running domain (from its live XML)."""
    loader = ET.fromstring(dom.XMLDesc(0)).find("os/loader")
    assert loader is not None and loader.text, "libvirt resolved no firmware"
    return loader.text


@pytest.mark.parametrize(("secure_boot", "code"), [(False, f"{OVMF_CODE}.fd"), (True, f"{OVMF_CODE}.ms.fd")])
def test_firmware_features_resolve_to_the_intended_ovmf(libvirt_system: Any, secure_boot: bool, code: str) -> None:
    """qemu:///system picks the descriptor gpulab's features describe, not the first one installed."""
    import libvirt

    from gpulab import vm

    prereq.require_file(code)
    name = boot.guest_name(f"fw{int(secure_boot)}")
    spec = vm.spec_from_dict(
        {"name": name, "vcpus": 1, "memory_mib": 256, "domain_type": "qemu", "secure_boot": secure_boot}
    )
    dom = libvirt_system.defineXMLFlags(vm.plan(libvirt_system, spec).xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
    try:
        dom.createWithFlags(libvirt.VIR_DOMAIN_START_PAUSED)  # resolves the firmware; the guest never runs
        assert _loader(dom) == code
        live = dom.XMLDesc(0)
        assert ("<smm state='on'/>" in live) == secure_boot and ("secure='yes'" in live) == secure_boot
    finally:
        boot.remove_guest(libvirt_system, name)


def _two_node_host(conn: Any) -> Any:
    """This machine as gpulab's planner sees it, with the fake P100 host's GPUs on NUMA nodes 0 and 1 and this
    machine's CPUs 0 and 1 as those nodes: the plan then has two guest NUMA cells with a pxb-pcie each."""
    import vm_fakehost as fake
    from gpulab import vm

    fake_host = vm.discover_host(fake.connect("p100x4"), fake.sysfs("p100x4"))
    nodes = (vm.NumaCell(0, (0,)), vm.NumaCell(1, (1,)))
    memory = int(conn.getInfo()[1])
    return dataclasses.replace(fake_host, uri=str(conn.getURI()), numa=nodes, siblings={}, cpus=2, memory_mib=memory)


def _without_what_this_machine_lacks(xml: str) -> str:
    """No GPU to pass through and one host NUMA node: the hostdevs and the host memory binding go."""
    xml = re.sub(r"\s*<hostdev .*?</hostdev>", "", xml, flags=re.S)
    return re.sub(r"\s*<numatune>.*?</numatune>", "", xml, flags=re.S)


def test_ovmf_guest_with_numa_expanders_boots_to_ssh(
    libvirt_system: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """q35 + OVMF (Secure Boot off) + one pxb-pcie per guest NUMA cell, as gpulab plans a VM whose GPUs sit on
    two host nodes, booted under TCG to SSH."""
    prereq.require_file(f"{OVMF_CODE}.fd")  # libvirt's own words for its absence: "Unable to find any firmware"
    key = ssh.generate_key(tmp_path_factory.mktemp("ovmf-key"))
    name = boot.guest_name("ovmf")
    gpus = "0000:3b:00.0,0000:86:00.0"  # node 0 and node 1 of the fake host
    overrides = {"firmware": "efi", "numa_pinning": True, "gpus": gpus}
    started = time.monotonic()
    try:
        guest, seconds = boot.boot(
            libvirt_system,
            name,
            key,
            overrides=overrides,
            host=_two_node_host(libvirt_system),
            edit=_without_what_this_machine_lacks,
        )
        print(f"\nOVMF + pxb-pcie boot to SSH login: {seconds:.1f} s ({time.monotonic() - started:.1f} s with define)")
        dom = libvirt_system.lookupByName(name)
        assert _loader(dom) == f"{OVMF_CODE}.fd"
        live = dom.XMLDesc(0)
        assert live.count("model='pcie-expander-bus'") == 2 and "<topology sockets='2'" in live
        assert guest.ssh("test", "-d", "/sys/firmware/efi").returncode == 0  # booted through UEFI
        secure = guest.ssh(f"od -An -tu1 {SECURE_BOOT_VAR} 2>/dev/null || true").stdout.split()
        assert not secure or secure[-1] == "0", f"Secure Boot is on in the guest: {secure}"
        nodes = guest.ssh("ls", "/sys/devices/system/node").stdout.split()
        assert {"node0", "node1"} <= set(nodes), nodes
        assert guest.ssh("cat /sys/devices/system/cpu/cpu1/topology/physical_package_id").stdout.strip() == "1"
        # The root ports behind each expander (buses 0x80 and 0x90) sit on their guest NUMA node.
        numa = guest.ssh("cat /sys/bus/pci/devices/0000:80:00.0/numa_node /sys/bus/pci/devices/0000:90:00.0/numa_node")
        assert numa.stdout.split() == ["0", "1"]
        assert "HotPlug-" in guest.ssh("sudo", "-n", "lspci", "-vv", "-s", "80:00.0").stdout
    finally:
        boot.remove_guest(libvirt_system, name)
