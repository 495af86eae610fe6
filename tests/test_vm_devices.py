"""What the passed-through devices themselves ask of a plan, on fake hosts: P2P cliques per P2P domain, GeForce
boards (hidden KVM, ROM, boot VGA, BAR sizes), foreign functions in a GPU's slot, count selectors over viable
IOMMU groups, and NVSwitch fabrics."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import vm_fakehost as fake
from gpulab.cli import main
from gpulab.errors import GpulabError
from gpulab.vm import PciAddress, discover_host, plan, select_gpus, spec_from_dict
from gpulab.vm.nodedev import PciDevice
from gpulab.vm.plan import Plan
from gpulab.vm.topology import p2p_domain, root_bus


def planned(host: str, root: Path | None = None, **spec: Any) -> Plan:
    data = {"name": "t", "vcpus": 4, "memory_mib": 8192, **spec}
    return plan(fake.connect(host), spec_from_dict(data), root=root if root is not None else fake.sysfs(host))


def checks(p: Plan, name: str) -> list[tuple[str, str]]:
    return [(c.status, c.message) for c in p.checks if c.name == name]


def cliques(xml: str) -> list[str]:
    return [line.split("value='")[1].split("'")[0] for line in xml.splitlines() if "x-nv-gpudirect-clique" in line]


def addresses(gpus: Any) -> list[str]:
    return [str(g.address) for g in gpus]


# -- P2P domains and cliques -----------------------------------------------------------------------------------
def test_each_root_complex_gets_its_own_clique_and_spanning_them_warns():
    p = planned("p100x4", gpus="4xP100", vcpus=20, memory_mib=20480, p2p_clique=0)
    assert cliques(p.xml) == ["0", "0", "1", "1"]  # 3b, 3c under pci0000:3a; 86, 87 under pci0000:85
    [(_status, note)] = [c for c in checks(p, "p2p") if c[0] == "ok"]
    assert "0: 0000:3b:00.0, 0000:3c:00.0 (root complex pci0000:3a)" in note
    assert "1: 0000:86:00.0, 0000:87:00.0 (root complex pci0000:85)" in note
    [(_status, warning)] = [c for c in checks(p, "p2p") if c[0] == "warn"]
    assert "span 2 P2P domains" in warning and "select GPUs of one domain" in warning


def test_gpus_of_one_root_complex_share_one_clique_without_a_warning():
    p = planned("p100x4", gpus="2xP100", vcpus=8, memory_mib=16384, p2p_clique=5)
    assert cliques(p.xml) == ["5", "5"]
    assert [s for s, _m in checks(p, "p2p")] == ["ok"]


def test_clique_ids_past_15_are_refused_with_the_highest_start():
    with pytest.raises(GpulabError, match=r"span 2 P2P domains.*set p2p_clique to at most 14"):
        planned("p100x4", gpus="4xP100", vcpus=20, memory_mib=20480, p2p_clique=15)


def test_no_clique_without_p2p_clique():
    p = planned("p100x4", gpus="4xP100", vcpus=20, memory_mib=20480)
    assert cliques(p.xml) == [] and checks(p, "p2p") == []


def test_sxm_boards_are_one_nvlink_domain_whatever_their_pcie_path():
    h200 = discover_host(fake.connect("h200x4"), fake.sysfs("h200x4"))
    assert {g.domain.label for g in h200.gpus} == {"NVLink (SXM boards)"}


def _device(address: str, **kw: Any) -> PciDevice:
    return PciDevice(PciAddress.parse(address), 0x10DE, 0x15F8, 0x030200, **kw)


def test_root_complex_from_the_parent_chain_the_sysfs_link_or_the_numa_node(tmp_path):
    port = _device("0000:3a:00.0", parent="computer")
    gpu = _device("0000:3b:00.0", parent="pci_0000_3a_00_0", numa_node=0)
    devices = {d.address: d for d in (port, gpu)}
    assert root_bus(gpu, devices, None) == "pci0000:3a"  # libvirt's <parent> chain up to the root bus
    bare = _device("0000:3b:00.0", numa_node=1)
    link = tmp_path / "sys/bus/pci/devices"
    link.mkdir(parents=True)
    (link / "0000:3b:00.0").symlink_to("../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0")
    assert root_bus(bare, {bare.address: bare}, tmp_path) == "pci0000:3a"  # the sysfs link
    assert p2p_domain(bare, None, {bare.address: bare}, None).label == "NUMA node 1"
    assert p2p_domain(_device("0000:3b:00.0"), None, {}, None).source == "unknown"


# -- GeForce boards ------------------------------------------------------------------------------------------------
def test_geforce_with_an_old_guest_driver_gets_hidden_kvm_and_a_vendor_id():
    p = planned("geforce", gpus="GTX 1080 Ti", guest_driver="460.91.03")
    assert "<hidden state='on'/>" in p.xml and "<vendor_id state='on' value='gpulab'/>" in p.xml
    [(status, message)] = checks(p, "kvm_hidden")
    assert status == "ok" and "guest driver R460 (guest_driver)" in message


def test_geforce_with_r465_or_the_matrix_plan_stays_visible():
    assert "<hidden" not in planned("geforce", gpus="GTX 1080 Ti", guest_driver="R465").xml
    p = planned("geforce", gpus="GTX 1080 Ti")  # the matrix plans R580 for Pascal
    assert "<hidden" not in p.xml and checks(p, "kvm_hidden") == []


def test_turning_hidden_kvm_off_for_an_old_geforce_driver_warns_with_the_fix():
    p = planned("geforce", gpus="GTX 1080 Ti", guest_driver="R460", kvm_hidden=False)
    assert "<hidden" not in p.xml
    [(status, message)] = checks(p, "kvm_hidden")
    assert status == "warn" and "drivers before R465 refuse a GeForce board" in message
    assert "install R465 or later in the guest" in message


def test_datacentre_boards_need_no_hidden_kvm_and_tcg_ignores_it():
    assert "<hidden" not in planned("p100x4", gpus="1xP100", guest_driver="R460").xml
    p = planned("geforce", gpus="GTX 1080 Ti", kvm_hidden=True, domain_type="qemu")
    assert "<hidden" not in p.xml and checks(p, "kvm_hidden")[0][0] == "warn"


def test_geforce_bars_come_from_sysfs_else_the_matrix_not_from_the_memory_size():
    shared = discover_host(fake.connect("shared-groups"))
    gtx = shared.gpu_at(PciAddress.parse("01:00.0"))
    assert gtx is not None and (gtx.bar_bytes, gtx.bar_source) == ((256 + 32) << 20, "estimate")
    geforce = discover_host(fake.connect("geforce"), fake.sysfs("geforce"))
    assert {(g.bar_bytes, g.bar_source) for g in geforce.gpus} == {((256 + 32) << 20, "sysfs")}


def test_rom_file_and_rom_bar(tmp_path):
    rom = tmp_path / "gp102.rom"
    rom.write_bytes(b"\x55\xaa" + bytes(510))
    p = planned("geforce", gpus="GTX 1080 Ti", gpu_rom={"file": str(rom)})
    assert p.ok and f"<rom file='{rom}'/>" in p.xml
    assert "<rom bar='off'/>" in planned("geforce", gpus="GTX 1080 Ti", gpu_rom={"bar": False}).xml
    tool = fake.require_tool("virt-xml-validate")
    (tmp_path / "d.xml").write_text(p.xml)
    proc = subprocess.run([tool, str(tmp_path / "d.xml"), "domain"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: d / "missing.rom", "cannot be read (No such file or directory)"),
        (lambda d: d, "is not a regular file"),
    ],
)
def test_a_rom_file_that_is_not_a_file_is_refused(tmp_path, make, needle):
    p = planned("geforce", gpus="GTX 1080 Ti", gpu_rom={"file": str(make(tmp_path))})
    [(status, message)] = checks(p, "gpu_rom")
    assert status == "fail" and needle in message
    with pytest.raises(GpulabError) as err:
        p.raise_for_failures()
    assert "\n" not in str(err.value) and "[gpu_rom]" in str(err.value)


def test_one_rom_file_for_two_models_is_refused(tmp_path):
    rom = tmp_path / "a.rom"
    rom.write_bytes(b"\x55\xaa")
    p = planned("geforce", gpus="01:00.0,03:00.0", gpu_rom={"file": str(rom)})
    assert any(s == "fail" and "is one card's ROM" in m for s, m in checks(p, "gpu_rom"))


@pytest.mark.parametrize(
    ("rom", "needle"),
    [
        ({"file": "/x.rom", "bar": False}, "gpu_rom: a ROM file is shown through the ROM BAR"),
        ({"bar": "off"}, "gpu_rom.bar: 'off' is not true or false"),
        ({"path": "/x.rom"}, "gpu_rom.path: unknown key"),
    ],
)
def test_bad_gpu_rom_keys(rom, needle):
    with pytest.raises(GpulabError) as err:
        spec_from_dict({"name": "t", "vcpus": 1, "memory_mib": 512, "gpu_rom": rom})
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["R4x", "latest", True, "460\n"])
def test_bad_guest_driver(value):
    with pytest.raises(GpulabError, match=r"guest_driver: .* is not a driver branch or version; write e.g. R460"):
        spec_from_dict({"name": "t", "vcpus": 1, "memory_mib": 512, "guest_driver": value})


def test_the_boot_vga_card_is_refused_with_the_fix():
    p = planned("geforce", gpus="02:00.0")
    [(status, message)] = checks(p, "boot_vga")
    assert status == "fail" and "drives the host's console (boot_vga 1)" in message
    assert "primary display in the firmware setup" in message and "video=efifb:off" in message


def test_the_boot_vga_card_with_its_framebuffer_released_warns(tmp_path):
    root = fake.sysfs_copy("geforce", tmp_path)
    cmdline = root / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " video=efifb:off\n")
    p = planned("geforce", root, gpus="02:00.0")
    [(status, message)] = checks(p, "boot_vga")
    assert status == "warn" and "video=efifb:off releases" in message and "gpu_rom.file" in message


# -- Functions in a GPU's slot -------------------------------------------------------------------------------------
def test_audio_usb_and_ucsi_follow_the_gpu():
    p = planned("geforce", gpus="RTX 2080 Ti")
    assert p.ok and p.xml.count("<hostdev ") == 4 and "multifunction='on'" in p.xml


def test_a_foreign_function_in_the_gpus_group_is_named_in_the_group_listing():
    p = planned("geforce", gpus="04:00.0")
    [(status, message)] = checks(p, "iommu_groups")
    assert status == "fail" and "0000:04:00.1 Ethernet controller 8086:1533" in message
    assert "<- in the GPU's slot but no GPU function (audio, USB, UCSI)" in message
    assert "add it to `extra_hostdevs`" in message and "ACS" not in message
    assert "04:00.1" not in p.xml  # never passed along silently
    assert checks(p, "companions") == []  # one refusal for one cause
    assert planned("geforce", gpus="04:00.0", extra_hostdevs=["04:00.1"]).ok


def test_a_foreign_function_in_a_group_of_its_own_is_refused_unless_asked_for():
    p = planned("geforce", gpus="05:00.0")
    [(status, message)] = checks(p, "companions")
    assert status == "fail" and "0000:05:00.1 NVMe controller 144d:a808" in message
    assert "(IOMMU group 6)" in message and "add it to extra_hostdevs" in message
    asked = planned("geforce", gpus="05:00.0", extra_hostdevs=["05:00.1"])
    assert asked.ok and "function='0x1'" in asked.xml


# -- Count selectors over viable IOMMU groups ----------------------------------------------------------------------
def test_a_count_takes_the_pair_that_can_go_whole():
    shared = discover_host(fake.connect("shared-groups"))
    # 06:00.0 shares group 12 with a NIC; 0a and 0b share group 20: only the pair can go.
    assert addresses(select_gpus(shared, "2xP100")) == ["0000:0a:00.0", "0000:0b:00.0"]
    p = plan(fake.connect("shared-groups"), spec_from_dict({"name": "t", "vcpus": 4, "memory_mib": 4096, "gpus": 2}))
    assert addresses(p.gpus) == ["0000:0a:00.0", "0000:0b:00.0"] and p.ok


def test_a_count_with_no_viable_set_lists_why_on_one_line():
    shared = discover_host(fake.connect("shared-groups"))
    with pytest.raises(GpulabError) as err:
        select_gpus(shared, "1xP100")
    text = str(err.value)
    assert "\n" not in text and "no 1 x Tesla P100-PCIE-16GB on this host can go to a VM whole" in text
    assert "0000:06:00.0: shares IOMMU group 12 with 0000:07:00.0 Ethernet controller" in text
    assert "0000:0a:00.0, 0000:0b:00.0 share IOMMU group 20 and go only together (2 GPUs)" in text
    assert "extra_hostdevs" in text
    # The NIC taken along makes the lone P100 viable.
    assert addresses(select_gpus(shared, "1xP100", {PciAddress.parse("07:00.0")})) == ["0000:06:00.0"]


def test_a_count_skips_foreign_functions_and_the_console_card():
    geforce = discover_host(fake.connect("geforce"), fake.sysfs("geforce"))
    with pytest.raises(GpulabError) as err:
        select_gpus(geforce, "2xGTX 1080")
    assert "Ethernet controller 8086:1533 (I210 Gigabit Network Connection) sits in the GPU's slot" in str(err.value)
    assert "NVMe controller" in str(err.value)
    assert addresses(select_gpus(geforce, "2")) == ["0000:01:00.0", "0000:03:00.0"]  # not 02:00.0 (boot VGA)


def test_a_count_prefers_one_p2p_domain_and_one_node():
    p100 = discover_host(fake.connect("p100x4"), fake.sysfs("p100x4"))
    assert addresses(select_gpus(p100, "2")) == ["0000:3b:00.0", "0000:3c:00.0"]
    assert addresses(select_gpus(p100, "3xP100")) == ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0"]


# -- NVSwitch fabrics -------------------------------------------------------------------------------------------
HGX = {"vcpus": 16, "memory_mib": 65536}
LAYOUT = {0: ["18:00.0", "2a:00.0", "3a:00.0", "5d:00.0", "9a:00.0", "ab:00.0", "ba:00.0", "db:00.0"], 3: ["18:00.0"]}


def test_the_hgx_host_shows_its_nvswitches():
    hgx = discover_host(fake.connect("hgx-h100"))
    assert len(hgx.gpus) == 8 and [d.pci_id for d in hgx.nvswitches] == ["10de:22a3"] * 4
    assert not any(d.is_bridge or d.is_nvidia_gpu for d in hgx.nvswitches)


def test_full_passthrough_takes_every_gpu_and_nvswitch():
    p = planned("hgx-h100", gpus="all", **HGX)
    assert p.ok and p.xml.count("<hostdev ") == 12
    for bus in ("05", "06", "07", "08"):
        assert f"bus='0x{bus}' slot='0x00' function='0x0'/>" in p.xml
    [(status, message)] = checks(p, "nvswitch")
    assert status == "ok" and "nvidia-fabricmanager" in message


@pytest.mark.parametrize("extra", [{}, {"nvswitch": "passthrough"}])
def test_some_gpus_without_a_partition_are_refused_with_both_fixes(extra):
    p = planned("hgx-h100", gpus="2xH100", **HGX, **extra)
    [(status, message)] = checks(p, "nvswitch")
    assert status == "fail" and "error 802" in message and "4 NVSwitches (10de:22a3)" in message
    assert "nvswitch: passthrough" in message and "mode: shared, partition: ID" in message
    assert "<hostdev" in p.xml and "bus='0x05'" not in p.xml
    with pytest.raises(GpulabError) as err:
        p.raise_for_failures()
    assert "\n" not in str(err.value)


def test_a_shared_partition_selects_its_gpus_and_leaves_the_switches(tmp_path):
    p = planned("hgx-h100", nvswitch={"mode": "shared", "partition": 3, "partitions": LAYOUT}, **HGX)
    assert addresses(p.gpus) == ["0000:18:00.0"] and p.xml.count("<hostdev ") == 1
    assert "FABRIC_MODE=1" in checks(p, "nvswitch")[0][1]
    # The same layout as `fmpm -l` prints it.
    info = {
        "partitionInfo": [
            {"partitionId": pid, "isActive": 0, "gpuInfo": [{"physicalId": i + 1, "pciBusId": f"00000000:{a}"}]}
            for pid, members in LAYOUT.items()
            for i, a in enumerate(members[:1])
        ]
    }
    path = tmp_path / "partitions.json"
    path.write_text(json.dumps(info))
    p = planned("hgx-h100", nvswitch={"mode": "shared", "partition": 3, "partitions_file": str(path)}, **HGX)
    assert addresses(p.gpus) == ["0000:18:00.0"]


@pytest.mark.parametrize(
    ("nvswitch", "gpus", "needle"),
    [
        ({"mode": "shared", "partition": 9, "partitions": LAYOUT}, None, "partition 9 is not in the partition layout"),
        ({"mode": "shared", "partition": 3, "partitions": {3: ["01:00.0"]}}, None, "is no GPU of this host"),
        ({"mode": "shared", "partition": 3, "partitions": LAYOUT}, "2xH100", "differs from the GPUs of nvswitch"),
    ],
)
def test_bad_partitions_are_refused(nvswitch, gpus, needle):
    with pytest.raises(GpulabError) as err:
        planned("hgx-h100", nvswitch=nvswitch, **({"gpus": gpus} if gpus else {}), **HGX)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("full", "nvswitch.mode: 'full' is not passthrough"),
        ({"mode": "shared", "partitions": LAYOUT}, "shared mode needs the id of the partition"),
        ({"mode": "shared", "partition": 1}, "shared mode needs the partition layout"),
        ({"mode": "passthrough", "partition": 1}, "partitions only apply to mode shared"),
        ({"mode": "shared", "partition": 1, "partitions": {"a": ["x"]}}, "nvswitch.partitions: is not a mapping"),
        ({"mode": "shared", "partition": -1, "partitions": LAYOUT}, "-1 is not a partition id"),
        ({"mode": "shared", "partition": 1, "partitions_file": "/nonexistent.json"}, "does not exist"),
    ],
)
def test_bad_nvswitch_keys(value, needle):
    with pytest.raises(GpulabError) as err:
        spec_from_dict({"name": "t", "vcpus": 1, "memory_mib": 512, "nvswitch": value})
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_nvswitch_on_a_host_without_one_is_refused():
    p = planned("p100x4", gpus="1xP100", nvswitch="passthrough")
    assert checks(p, "nvswitch") == [("fail", "nvswitch is set but this host has no NVSwitch; leave the key out.")]


def test_the_cli_refuses_part_of_an_hgx_board_on_one_line(tmp_path, capsys):
    fake.require_libvirt()
    spec = tmp_path / "hgx.yml"
    spec.write_text("name: hgx\nvcpus: 8\nmemory_mib: 32768\ngpus: 2xH100\n")
    assert main(["vm", "plan", str(spec), "--connect", fake.uri("hgx-h100")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "[nvswitch]" in err and "error 802" in err


def test_vm_host_shows_p2p_domains_boot_vga_foreign_functions_and_nvswitches(capsys):
    fake.require_libvirt()
    assert main(["vm", "host", "--connect", fake.uri("geforce"), "--root", str(fake.sysfs("geforce"))]) == 0
    out = capsys.readouterr().out
    assert "P2P domain: root complex pci0000:00; boot VGA (drives the host's console)" in out
    assert "in its slot, no GPU function: 0000:04:00.1 Ethernet controller" in out
    assert main(["vm", "host", "--connect", fake.uri("hgx-h100")]) == 0
    out = capsys.readouterr().out
    assert "P2P domain: NVLink (SXM boards)" in out and "NVSwitches (4):" in out
    assert "0000:05:00.0 other bridge 10de:22a3 (GH100 [H100 NVSwitch])  IOMMU group 117" in out


def test_kvm_hidden_takes_true_false_or_auto():
    base = {"name": "t", "vcpus": 1, "memory_mib": 512}
    assert spec_from_dict({**base, "kvm_hidden": "auto"}).kvm_hidden is None
    assert spec_from_dict({**base, "kvm_hidden": True}).kvm_hidden is True
    with pytest.raises(GpulabError, match=r"^VM spec: kvm_hidden: 'yes' is not true, false or auto\.$"):
        spec_from_dict({**base, "kvm_hidden": "yes"})
