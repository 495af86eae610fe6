"""Golden files of libvirt/domain.xml.j2 over a matrix of options; each golden is valid libvirt XML.

Regenerate after an intended template change: GPULAB_REGENERATE_GOLDEN=1 pytest tests/test_vm_golden.py
(then review the diff of tests/golden/vm/ before committing).
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

import vm_fakehost as fake
from gpulab.vm import plan, spec_from_dict

CASES = yaml.safe_load((fake.GOLDEN / "cases.yml").read_text())
REGENERATE = os.environ.get("GPULAB_REGENERATE_GOLDEN", "") not in ("", "0")


def planned(case: str):
    entry = CASES[case]
    conn = fake.connect(entry["host"])
    root = fake.sysfs(entry["host"]) if entry["sysfs"] else None
    return conn, plan(conn, spec_from_dict(entry["spec"], where=f"case {case}"), root=root)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_xml_matches_golden(case):
    _conn, p = planned(case)
    golden = fake.GOLDEN / f"{case}.xml"
    if REGENERATE:
        golden.write_text(p.xml)
    assert golden.is_file(), f"{golden} is missing; create it with GPULAB_REGENERATE_GOLDEN=1"
    assert p.xml == golden.read_text(), f"{case}: rendering differs from {golden.name} (regenerate if intended)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_validates_against_libvirt_schema(case):
    tool = fake.require_tool("virt-xml-validate")
    golden = fake.GOLDEN / f"{case}.xml"
    proc = subprocess.run([tool, str(golden), "domain"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_defines_with_libvirt_validation(case):
    """libvirt itself parses each golden with VIR_DOMAIN_DEFINE_VALIDATE (schema + its own checks)."""
    conn, p = planned(case)
    import libvirt

    dom = conn.defineXMLFlags((fake.GOLDEN / f"{case}.xml").read_text(), libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
    assert dom.name() == p.spec.name
    xml = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert xml.count("<hostdev ") == len(p.layout.hostdevs)


def test_plan_checks_of_the_matrix():
    """What each case's plan says beside its XML: every case is definable; the warnings are the expected ones."""
    expected_warnings = {
        "h200-4gpu-large-bar": {"vfio", "driver"},
        "h200-2gpu-tcg-large-bar": {"vfio", "driver"},
        "p100-4gpu-two-nodes-lab": {"p2p"},  # two root complexes, one clique each
        "p100-pair-shared-group": {"layout"},  # NUMA CPUs unknown without sysfs: not pinned
        "hgx-h100-full-passthrough": {"layout"},
        "hgx-h100-shared-partition": {"layout"},
        "ovmf-secure-boot-on": {"layout"},  # the module-signing path of Secure Boot
        "seabios-large-bar-pcihole64": {"vfio", "driver", "layout"},  # SeaBIOS cannot open a large window
        "topology-housekeeping-interleaved": {"vfio", "driver"},
    }
    for case in CASES:
        _conn, p = planned(case)
        assert p.ok, (case, [c.message for c in p.failures])
        assert {c.name for c in p.warnings} == expected_warnings.get(case, set()), (case, p.warnings)


def test_the_matrix_covers_the_options():
    """The cases render what their names promise (so a renamed option cannot leave the matrix silently)."""
    xml = {case: (fake.GOLDEN / f"{case}.xml").read_text() for case in CASES}
    assert xml["p100-1gpu-kvm"].count("<hostdev ") == 1 and "X-PciMmio64Mb" not in xml["p100-1gpu-kvm"]
    # p100x4's siblings are 20 apart: vCPU pairs on whole cores after core 0 (0,20), which QEMU's threads get.
    assert "<numatune>" in xml["p100-1gpu-kvm"] and "<vcpupin vcpu='7' cpuset='24'/>" in xml["p100-1gpu-kvm"]
    assert "<topology sockets='1' dies='1' cores='4' threads='2'/>" in xml["p100-1gpu-kvm"]
    assert "<emulatorpin cpuset='0,20'/>" in xml["p100-1gpu-kvm"]
    lab = xml["p100-4gpu-two-nodes-lab"]
    assert lab.count("<hostdev ") == 4 and lab.count("pxb-pcie") == 2 and "<cell id='1' cpus='10-19'" in lab
    assert "<vcpupin vcpu='10' cpuset='10'/>" in lab and "<vcpupin vcpu='11' cpuset='30'/>" in lab  # node 1's cores
    assert "<topology sockets='2' dies='1' cores='5' threads='2'/>" in lab  # one socket per guest NUMA cell
    assert "<iothreadpin iothread='1' cpuset='0,20'/>" in lab and "iothread='1'/>" in lab
    assert lab.count("hotplug='off'") == 4
    assert "string=131072" in lab and lab.count("x-nv-gpudirect-clique") == 4
    # One clique per root complex: P2P does not cross the sockets.
    assert lab.count("type='unsigned' value='0'/>") == 2 and lab.count("type='unsigned' value='1'/>") == 2
    assert "<hugepages>" in lab and "<hugepages>" not in xml["p100-4gpu-unpinned"]
    assert "<cputune>" not in xml["p100-4gpu-unpinned"] and "pxb-pcie" not in xml["p100-4gpu-unpinned"]
    h200 = xml["h200-4gpu-large-bar"]
    assert "string=2097152" in h200 and "<maxphysaddr mode='passthrough'/>" in h200  # 4 x 256 GiB BAR1 -> 2 TiB
    tcg = xml["h200-2gpu-tcg-large-bar"]
    assert "<domain type='qemu'" in tcg and "<cpu mode='maximum'" in tcg and "mode='emulate' bits=" in tcg
    gtx = xml["gtx-companion-hidden-bios"]
    assert "<hidden state='on'/>" in gtx and "firmware='efi'" not in gtx
    assert "<vendor_id state='on' value='gpulab'/>" in gtx and "X-PciMmio64Mb" not in gtx  # 256 MiB BAR1
    assert "function='0x1'/>" in gtx and "multifunction='on'" in gtx  # the HDMI audio beside the GPU
    rtx = xml["rtx2080ti-four-functions-rom-bar-off"]
    assert rtx.count("<hostdev ") == 4 and "function='0x3'/>" in rtx and "<rom bar='off'/>" in rtx
    for text in (gtx, rtx):  # the GeForce host numbers siblings 8 apart (0,8): core 0 for QEMU's threads
        assert "<emulatorpin cpuset='0,8'/>" in text
        assert "<topology sockets='1' dies='1' cores='2' threads='2'/>" in text
    hgx = xml["hgx-h100-full-passthrough"]
    assert hgx.count("<hostdev ") == 12 and hgx.count("<alias name='ua-hostdev") == 4  # 8 GPUs, 4 NVSwitches
    assert hgx.count("x-nv-gpudirect-clique") == 8 and "value='1'/>" not in hgx  # NVLink: one clique
    part = xml["hgx-h100-shared-partition"]
    assert part.count("<hostdev ") == 2 and "ua-hostdev" not in part  # the host keeps the NVSwitches
    for case, text in xml.items():  # firmware chosen by features, never the first descriptor that matches
        efi = CASES[case]["spec"].get("firmware", "efi") == "efi"
        assert ("<feature enabled='no' name='secure-boot'/>" in text) == (efi and case != "ovmf-secure-boot-on")
        assert ("firmware='efi'" in text) == ("<firmware>" in text) == efi, case
    sb_off = xml["ovmf-secure-boot-off-expander"]
    assert "<feature enabled='no' name='enrolled-keys'/>" in sb_off and "<smm" not in sb_off
    assert sb_off.count("pcie-expander-bus") == 2 and "<topology sockets='2' dies='1' cores='2' threads='2'/>" in sb_off
    sb_on = xml["ovmf-secure-boot-on"]
    assert "<feature enabled='yes' name='secure-boot'/>" in sb_on and "<smm state='on'/>" in sb_on
    assert "<feature enabled='yes' name='enrolled-keys'/>" in sb_on
    split = xml["topology-housekeeping-split"]
    assert "<topology sockets='1' dies='1' cores='3' threads='2'/>" in split
    assert "<vcpupin vcpu='0' cpuset='1'/>" in split and "<vcpupin vcpu='1' cpuset='21'/>" in split
    assert "<emulatorpin cpuset='0,20'/>" in split and "<iothreadpin iothread='1' cpuset='0,20'/>" in split
    interleaved = xml["topology-housekeeping-interleaved"]  # siblings side by side (0,1); housekeeping named
    assert "<vcpupin vcpu='0' cpuset='0'/>" in interleaved and "<vcpupin vcpu='1' cpuset='1'/>" in interleaved
    assert "<emulatorpin cpuset='62-63'/>" in interleaved
    assert "<iothreadpin iothread='1' cpuset='62-63'/>" in interleaved
    assert "<topology sockets='1' dies='1' cores='4' threads='2'/>" in interleaved
    seabios = xml["seabios-large-bar-pcihole64"]
    assert "<pcihole64 unit='KiB'>536870912</pcihole64>" in seabios and "X-PciMmio64Mb" not in seabios
    assert "<pcihole64" not in h200  # OVMF: the window is OVMF's, QEMU's ACPI follows what OVMF assigned
    boot = xml["tcg-boot-no-gpu"]
    assert "<kernel>/var/lib/gpulab/images/vmlinuz</kernel>" in boot and "<hostdev" not in boot
    assert "/var/lib/gpulab/vms/tcg-boot-seed-" in boot and "<source network='gpulab-test'/>" in boot
