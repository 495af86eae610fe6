"""Pure parts of gpulab.vm: spec checking, PCI parsing, cpulists, node-device XML, templates."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from gpulab.errors import GpulabError
from gpulab.vm import NetworkSpec, PciAddress, load_spec, render_network, render_seed, spec_from_dict
from gpulab.vm.identity import domain_uuid, mac_address
from gpulab.vm.nodedev import parse_pci_nodedev
from gpulab.vm.spec import CloudInitSpec
from gpulab.vm.sysfs import bars, format_cpulist, parse_cpulist
from guest.prereq import missing

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHVuaXR0ZXN0a2V5 unit@test"


def test_pci_address_forms():
    assert PciAddress.parse("0000:3b:00.0") == PciAddress(0, 0x3B, 0, 0)
    assert PciAddress.parse(" 3B:00.1 ") == PciAddress(0, 0x3B, 0, 1)
    assert str(PciAddress.parse("10000:01:1f.7")) == "10000:01:1f.7"
    assert PciAddress.parse("3b:00.0").nodedev_name == "pci_0000_3b_00_0"
    assert PciAddress.from_nodedev_name("pci_0000_86_00_0") == PciAddress.parse("86:00.0")
    assert PciAddress.from_nodedev_name("net_eth0") is None
    for bad in ("3b:00", "3b:00.8", "zz:00.0", "0000-3b-00-0", ""):
        with pytest.raises(GpulabError, match="is not a PCI address"):
            PciAddress.parse(bad)


def test_cpulists_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert format_cpulist(parse_cpulist("0-9,20-29")) == "0-9,20-29"


def test_nodedev_without_iommu_numa_or_link():
    xml = textwrap.dedent("""\
        <device><name>pci_0000_00_02_0</name><parent>computer</parent><driver><name>i915</name></driver>
          <capability type='pci'><class>0x030000</class>
            <domain>0</domain><bus>0</bus><slot>2</slot><function>0</function>
            <product id='0x3e92'>UHD Graphics 630</product><vendor id='0x8086'>Intel Corporation</vendor>
            <numa node='-1'/></capability></device>""")
    dev = parse_pci_nodedev(xml)
    assert dev is not None
    assert (dev.pci_id, dev.iommu_group, dev.iommu_members, dev.numa_node, dev.link) == (
        "8086:3e92",
        None,
        (),
        None,
        None,
    )
    assert dev.driver == "i915" and dev.kind == "VGA controller" and not dev.is_nvidia_gpu
    assert parse_pci_nodedev("<device><name>computer</name><capability type='system'/></device>") is None
    with pytest.raises(GpulabError, match="does not parse"):
        parse_pci_nodedev("<device>")


def test_bars_from_a_resource_file(tmp_path):
    dev = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    dev.mkdir(parents=True)
    (dev / "resource").write_text(
        "0x00000000c5000000 0x00000000c5ffffff 0x0000000000040200\n"
        "0x0000038000000000 0x00000383ffffffff 0x000000000014220c\n"
        "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
        "0x000000000000e000 0x000000000000e07f 0x0000000000040101\n"
    )
    found = bars(tmp_path, PciAddress.parse("3b:00.0"))
    assert found is not None
    assert [(b.index, b.size, b.is_64bit) for b in found] == [(0, 16 << 20, False), (1, 16 << 30, True)]
    assert bars(tmp_path, PciAddress.parse("3c:00.0")) is None


def test_minimal_spec_gets_the_documented_defaults():
    spec = spec_from_dict({"name": "vm1", "vcpus": 4, "memory_mib": 4096})
    assert (spec.domain_type, spec.cpu_mode, spec.firmware) == ("kvm", "host-passthrough", "efi")
    assert (spec.hugepages, spec.numa_pinning, spec.kvm_hidden, spec.p2p_clique, spec.gpus) == (
        False,
        True,
        False,
        None,
        None,
    )
    tcg = spec_from_dict({"name": "vm1", "vcpus": 1, "memory_mib": 512, "domain_type": "qemu"})
    assert tcg.cpu_mode == "maximum"


def test_every_spec_problem_is_reported_at_once():
    with pytest.raises(GpulabError) as err:
        spec_from_dict(
            {
                "name": "-bad name",
                "vcpus": 0,
                "memory_mib": "lots",
                "hugepages": "yes",
                "p2p_clique": 16,
                "mmio_window_gib": 100,
                "firmware": "uefi",
                "disk": {"base": "/a.qcow2", "path": "/b.qcow2"},
                "network": {"name": "n", "address": "10.0.0.0/30"},
                "cloud_init": {"user": "Root"},
                "colour": "blue",
            }
        )
    text = str(err.value)
    for needle in (
        "name: '-bad name' is not a VM name",
        "vcpus: 0 is not a whole number from 1 to 1024",
        "memory_mib: 'lots' is not a whole number",
        "hugepages: 'yes' is not true or false",
        "p2p_clique: 16 is not a clique id",
        "mmio_window_gib: 100 is not 'auto' or a power of two",
        "firmware: 'uefi' is not one of efi, bios",
        "give exactly one of `base`",
        "leaves no room for DHCP",
        "cloud_init.user: 'Root' is not a Linux user name",
        "needs at least one SSH public key",
        "colour: unknown key; the keys are name, vcpus",
    ):
        assert needle in text, needle
    assert text.startswith("VM spec has 12 problem(s):")


def test_hugepages_need_whole_pages_and_host_passthrough_needs_kvm():
    with pytest.raises(GpulabError, match=r"memory_mib: 1536 MiB is not a whole number of 1G hugepages"):
        spec_from_dict({"name": "v", "vcpus": 1, "memory_mib": 1536, "hugepages": True})
    assert spec_from_dict({"name": "v", "vcpus": 1, "memory_mib": 1536, "hugepages": True, "hugepage_size": "2M"})
    with pytest.raises(GpulabError, match=r"host-passthrough needs hardware virtualisation"):
        spec_from_dict(
            {"name": "v", "vcpus": 1, "memory_mib": 512, "domain_type": "qemu", "cpu_mode": "host-passthrough"}
        )


def test_spec_file_paths_are_relative_to_the_file(tmp_path):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id.pub").write_text(KEY + "\n")
    path = tmp_path / "vm.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "vm1",
                "vcpus": 2,
                "memory_mib": 2048,
                "gpus": ["3b:00.0", "3c:00.0"],
                "disk": {"base": "images/base.qcow2", "dir": "vms"},
                "cloud_init": {"ssh_authorized_key_files": ["keys/id.pub"]},
                "kernel_boot": {"kernel": "boot/vmlinuz", "cmdline": "console=ttyS0"},
            }
        )
    )
    spec = load_spec(path)
    assert spec.gpus == "3b:00.0,3c:00.0"
    assert spec.disk is not None and spec.disk.base == tmp_path / "images/base.qcow2"
    assert spec.disk.disk_path("vm1") == tmp_path / "vms/vm1.qcow2"
    assert spec.cloud_init is not None and spec.cloud_init.ssh_authorized_keys == (KEY,)
    assert spec.cloud_init.hostname == "vm1" and spec.cloud_init.user == "gpulab"
    assert spec.kernel_boot is not None and spec.kernel_boot.kernel == tmp_path / "boot/vmlinuz"


def test_unreadable_and_invalid_spec_files(tmp_path):
    with pytest.raises(GpulabError, match=r"cannot read VM spec .*missing.yml"):
        load_spec(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(GpulabError, match="is not valid YAML"):
        load_spec(bad)
    bad.write_text("- a list\n")
    with pytest.raises(GpulabError, match="must be a mapping of keys"):
        load_spec(bad)


def test_isolated_network_template(tmp_path):
    xml = render_network(NetworkSpec("gpulab-net", ipaddress.IPv4Interface("10.77.0.1/24")))
    assert "<forward" not in xml and "<name>gpulab-net</name>" in xml
    assert "<ip address='10.77.0.1' netmask='255.255.255.0'>" in xml
    assert "<range start='10.77.0.2' end='10.77.0.254'/>" in xml
    top = render_network(NetworkSpec("n", ipaddress.IPv4Interface("10.77.0.254/24")))
    assert "<range start='10.77.0.1' end='10.77.0.253'/>" in top
    tool = shutil.which("virt-xml-validate")
    if tool is None:
        missing("needs virt-xml-validate (apt-get install libvirt-clients libxml2-utils)")
    for text in (xml, top):
        path = tmp_path / "network.xml"
        path.write_text(text)
        proc = subprocess.run([tool, str(path), "network"], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def test_cloud_init_documents_quote_everything():
    seed = render_seed("vm1", CloudInitSpec(hostname="vm1", user="gpulab", ssh_authorized_keys=(KEY + " a: b #c",)))
    user_data = yaml.safe_load(seed.user_data)
    assert seed.user_data.startswith("#cloud-config\n")
    assert user_data["users"][0]["ssh_authorized_keys"] == [KEY + " a: b #c"]
    assert user_data["hostname"] == "vm1" and user_data["ssh_pwauth"] is False
    meta = yaml.safe_load(seed.meta_data)
    assert meta["local-hostname"] == "vm1" and meta["instance-id"].startswith("vm1-")
    other = render_seed("vm1", CloudInitSpec(hostname="vm1", user="gpulab", ssh_authorized_keys=(KEY,)))
    assert other.digest != seed.digest and other.iso_path(Path("/d"), "vm1") != seed.iso_path(Path("/d"), "vm1")


def test_identities_are_stable_and_distinct():
    assert domain_uuid("a") == domain_uuid("a") != domain_uuid("b")
    assert mac_address("a").startswith("52:54:00:") and mac_address("a") != mac_address("b")


def test_normal_form_ignores_device_order_and_gpulab_metadata():
    from gpulab.vm.domain import normalise

    a = (
        "<domain type='kvm'><name>v</name><metadata><g:vm xmlns:g='urn:x'/></metadata>"
        "<devices><controller type='sata' index='0'/><disk type='file'><source file='/a &amp; b'/></disk></devices>"
        "</domain>"
    )
    b = (
        "<domain type='kvm'>\n  <name>v</name>\n  <devices>\n    <disk type='file'><source file='/a &amp; b'/></disk>"
        "\n    <controller type='sata' index='0'/>\n  </devices>\n</domain>\n"
    )
    assert normalise(a) == normalise(b)
    assert "metadata" not in normalise(a) and "<source file='/a &amp; b'/>" in normalise(a)
    assert normalise(normalise(a)) == normalise(a)
