"""Pure parts of gpulab.vm: spec checking, PCI parsing, cpulists, node-device XML, templates."""

from __future__ import annotations

import ipaddress
import os
import signal
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
from guest import prereq

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
        None,  # auto: on where a GeForce board's guest driver needs it
        None,
        None,
    )
    assert (spec.guest_driver, spec.gpu_rom, spec.nvswitch) == (None, None, None)
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
    with pytest.raises(GpulabError, match=r"VM spec .*missing.yml does not exist"):
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
    tool = prereq.require_tool("virt-xml-validate")
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


# A valid spec with every string the guest or libvirt receives; each test below breaks one of them.
BASE = {
    "name": "vm1",
    "vcpus": 2,
    "memory_mib": 2048,
    "disk": {"base": "/images/base.qcow2"},
    "cloud_init": {"hostname": "vm1", "user": "gpulab", "ssh_authorized_keys": [KEY]},
    "network": {"name": "gpulab-net"},
}
# The family of bad strings: each must be refused, on one line, showing the value quoted.
BAD_TEXT = {
    "trailing newline": "vm1\n",
    "embedded newline": "vm\n1",
    "NUL": "vm\x001",
    "leading dash": "-vm1",
    "too long": "v" * 64,
    "empty": "",
    "non-ASCII": "vmé1",
}


def with_value(field: str, value: object) -> dict:
    data = yaml.safe_load(yaml.safe_dump(BASE))  # a deep copy
    *parents, key = field.split(".")
    target = data
    for parent in parents:
        target = target[parent]
    target[key] = value
    return data


def one_problem(data: dict) -> str:
    with pytest.raises(GpulabError) as err:
        spec_from_dict(data)
    text = str(err.value)
    assert "\n" not in text, text  # one problem, one line
    return text


def test_the_base_spec_is_valid():
    spec = spec_from_dict(BASE)
    assert spec.cloud_init is not None and spec.network is not None and spec.disk is not None


@pytest.mark.parametrize("case", sorted(BAD_TEXT))
@pytest.mark.parametrize("field", ["name", "cloud_init.hostname", "cloud_init.user", "network.name", "network"])
def test_names_refuse_the_whole_family(field, case):
    value = BAD_TEXT[case]  # "vm1" itself is a valid VM, host, user and network name
    text = one_problem(with_value(field, value))
    assert text.startswith(f"VM spec: {field}: {value!r} is not a "), text


def test_the_name_limits_are_inclusive():
    assert spec_from_dict(with_value("name", "v" * 63)).name == "v" * 63
    assert spec_from_dict(with_value("cloud_init.user", "u" * 32)).cloud_init is not None
    assert spec_from_dict(with_value("cloud_init.hostname", "h" * 63)).cloud_init is not None
    one_problem(with_value("cloud_init.hostname", "h" * 64))
    one_problem(with_value("cloud_init.hostname", "vm1-"))  # no dash at the end either


KEY_BODY, KEY_COMMENT = KEY.rsplit(" ", 1)


@pytest.mark.parametrize(
    "key",
    [
        KEY_BODY + "\n" + KEY_COMMENT,  # a second line in authorized_keys
        KEY_BODY + "\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGV2aWw= evil",
        KEY.replace("AAAA", "AA\x00AA", 1),
        KEY + "\x00",
        "-" + KEY,
        "ssh-ed25519 " + "A" * 20000 + " long",
        "",
        "ssh-ed25519",  # no key material
        KEY.replace("AAAAC3", "ÄAAAC3"),  # non-ASCII key material
        "sk-ключ AAAAC3NzaC1lZDI1NTE5 x",  # an unknown key type
        'from="10.0.0.1" ' + KEY,  # authorized_keys options are not a key line
    ],
)
def test_ssh_keys_are_one_openssh_line(key):
    text = one_problem(with_value("cloud_init.ssh_authorized_keys", [key]))
    assert "cloud_init.ssh_authorized_keys:" in text and "is not an OpenSSH public key line" in text
    assert len(text) < 400  # a long key is shown cut short


def test_ssh_keys_drop_surrounding_whitespace_and_keep_any_comment():
    spec = spec_from_dict(with_value("cloud_init.ssh_authorized_keys", [KEY + "\n", "  " + KEY_BODY + " José\t"]))
    assert spec.cloud_init is not None
    assert spec.cloud_init.ssh_authorized_keys == (KEY, KEY_BODY + " José")


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("cloud_init.ssh_authorized_key_files", ["/dev/zero"], "/dev/zero is a character device, not a file"),
        ("cloud_init.ssh_authorized_key_files", ["/nonexistent/id.pub"], "id.pub does not exist"),
        ("cloud_init.ssh_authorized_key_files", ["/"], "file / is a directory, not a file"),
        ("cloud_init.ssh_authorized_key_files", ["id\x00.pub"], "'id\\x00.pub' is not a path"),
        ("cloud_init.ssh_authorized_key_files", ["~no-such-user-here/id.pub"], "cannot expand its ~"),
        ("kernel_boot.kernel", "/boot/vmlinuz\n", "'/boot/vmlinuz\\n' is not a path"),
        ("kernel_boot.cmdline", "console=ttyS0\ninit=/bin/sh", "must be one line of text"),
        ("kernel_boot.cmdline", "quiet " * 400, "of at most 2047 characters"),
        ("console_log", "/var/log/x\x00.log", "'/var/log/x\\x00.log' is not a path"),
        ("disk.base", "/images/base\n.qcow2", "'/images/base\\n.qcow2' is not a path"),
        ("extra_hostdevs", ["07:00.0\x00"], "'07:00.0\\x00' is not a PCI address; write it as 0000:3b:00.0"),
        ("extra_hostdevs", ["07:00.0", "zz:00.0"], "'zz:00.0' is not a PCI address"),
    ],
)
def test_paths_command_lines_and_addresses_refuse_control_characters_and_unreadable_files(field, value, needle):
    data = with_value("kernel_boot", {"kernel": "/boot/vmlinuz"})
    if field.startswith("kernel_boot."):
        data["kernel_boot"][field.split(".")[1]] = value
    else:
        data = with_value(field, value)
    text = one_problem(data)
    assert text.startswith(f"VM spec: {field}: ") and needle in text, text


def test_key_files_that_are_not_utf8_or_not_regular_are_problems_not_crashes(tmp_path):
    binary = tmp_path / "id.pub"
    binary.write_bytes(b"\xff\xfe ssh-ed25519")
    text = one_problem(with_value("cloud_init.ssh_authorized_key_files", [str(binary)]))
    assert "is not UTF-8 text (byte 0xff at offset 0)" in text
    text = one_problem(with_value("cloud_init.ssh_authorized_key_files", ["/dev/zero"]))
    assert "SSH public key file /dev/zero is a character device, not a file" in text


# Numeric keys, each with the range it takes: 0, negative, huge, non-integer, bool and text are refused.
NUMBERS = {
    "vcpus": "from 1 to 1024",
    "memory_mib": "from 256 to 67108864",
    "disk.size_gib": "from 1 to 1048576",
    "mmio_window_gib": "power of two in GiB up to 1048576",
    "p2p_clique": "from 0 to 15",
    "gpus": "GPU",
}
BAD_NUMBERS = {"zero": 0, "negative": -1, "huge": 10**30, "non-integer": 1.5, "bool": True, "text": "4"}


@pytest.mark.parametrize("case", sorted(BAD_NUMBERS))
@pytest.mark.parametrize("field", sorted(NUMBERS))
def test_numbers_refuse_the_whole_family(field, case):
    value = BAD_NUMBERS[case]
    if (field, case) in {("mmio_window_gib", "zero"), ("p2p_clique", "zero"), ("gpus", "text")}:
        assert spec_from_dict(with_value(field, value))  # 0 turns the window off; clique 0 exists; '4' selects
        return
    text = one_problem(with_value(field, value))
    assert text.startswith(f"VM spec: {field}: "), text
    assert NUMBERS[field] in text, text


@pytest.mark.parametrize(("value", "needle"), [(0, "0 is not a GPU count from 1 to 16"), (17, "17 is not a GPU")])
def test_gpu_counts_in_the_spec(value, needle):
    assert needle in one_problem(with_value("gpus", value))
    assert spec_from_dict(with_value("gpus", 16)).gpus == "16"
    assert spec_from_dict(with_value("gpus", [])).gpus is None  # an empty list is no GPU
    assert "gpus: is empty" in one_problem(with_value("gpus", " "))


def test_the_numeric_limits_are_inclusive():
    assert spec_from_dict(with_value("vcpus", 1024)).vcpus == 1024
    assert spec_from_dict(with_value("memory_mib", 64 * 1024 * 1024)).memory_mib == 64 * 1024 * 1024
    assert one_problem(with_value("vcpus", 1025))
    assert one_problem(with_value("memory_mib", 255))


def spec_file(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "vm.yml"
    path.write_bytes(content)
    return path


def file_problem(path: Path) -> str:
    with pytest.raises(GpulabError) as err:
        load_spec(path)
    text = str(err.value)
    assert "\n" not in text, text
    return text


def test_spec_files_that_cannot_be_a_spec(tmp_path):
    missing_spec = tmp_path / "missing.yml"
    assert file_problem(missing_spec) == (
        f"VM spec {missing_spec} does not exist; give the path of a VM spec file (YAML, see docs/vm.md)."
    )
    assert file_problem(tmp_path).endswith(
        " is a directory, not a file; give the path of a VM spec file (YAML, see docs/vm.md)."
    )
    assert "VM spec /dev/zero is a character device, not a file" in file_problem(Path("/dev/zero"))
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    signal.alarm(10)  # a blocking open would wait for a writer for ever: fail instead
    try:
        assert "is a named pipe, not a file" in file_problem(fifo)
    finally:
        signal.alarm(0)
    (tmp_path / "file").write_text("x")
    assert "a part of the path is a file, not a directory" in file_problem(tmp_path / "file" / "vm.yml")
    assert "is not UTF-8 text (byte 0xff at offset 6)" in file_problem(spec_file(tmp_path, b"name: \xff\xfe"))
    assert "more than such a file can be (1 MiB)" in file_problem(spec_file(tmp_path, b"# " + b"x" * (1 << 20)))


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"name: [unclosed\n", "is not valid YAML: expected ',' or ']', but got '<stream end>' at line 2, column 1"),
        (b'[vm]\nname = "x"\n', "is not valid YAML: expected '<document start>'"),  # TOML
        (b'{"name": "vm1", "vcpus": 2', "is not valid YAML: expected ',' or '}'"),  # broken JSON
        (b"name: a\x00b\n", "unacceptable character #x0000"),
        (b"[" * 100000, "nested more than 64 levels deep"),
        (b"- a list\n- of things\n", "must be a mapping of keys (name, vcpus, memory_mib, ...), not a list"),
        (b"just some text\n", "must be a mapping of keys (name, vcpus, memory_mib, ...), not text"),
        (b"", "is empty; write a mapping of keys"),
        (b"# only a comment\n", "is empty"),
        (b"name: vm1\nvcpus: 2\n", "VM spec <path>: memory_mib: required; give a whole number from 256"),
    ],
)
def test_spec_files_in_the_wrong_format(tmp_path, content, needle):
    path = spec_file(tmp_path, content)
    assert needle.replace("<path>", str(path)) in file_problem(path)


def test_a_json_spec_is_a_yaml_spec(tmp_path):
    path = spec_file(tmp_path, b'{"name": "vm1", "vcpus": 2, "memory_mib": 2048}')
    assert load_spec(path).name == "vm1"


def test_every_spec_key_is_documented():
    from gpulab.vm.spec import _KEYS

    table = (Path(__file__).parent.parent / "docs" / "vm.md").read_text()
    assert [key for key in _KEYS if f"| `{key}" not in table] == []
