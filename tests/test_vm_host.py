"""Host discovery, GPU selection and IOMMU-group viability on libvirt's test driver with fake hosts."""

from __future__ import annotations

import pytest

import vm_fakehost as fake
from gpulab.errors import GpulabError
from gpulab.vm import PciAddress, discover_host, select_gpus
from gpulab.vm.iommu import group_problems


@pytest.fixture(scope="module")
def p100():
    return discover_host(fake.connect("p100x4"), fake.sysfs("p100x4"))


@pytest.fixture(scope="module")
def shared():
    return discover_host(fake.connect("shared-groups"))


@pytest.fixture(scope="module")
def h200():
    return discover_host(fake.connect("h200x4"), fake.sysfs("h200x4"))


def addresses(gpus):
    return [str(g.address) for g in gpus]


def test_discovers_the_four_p100s_with_numa_link_group_and_bars(p100):
    assert addresses(p100.gpus) == ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0", "0000:87:00.0"]
    assert {g.name for g in p100.gpus} == {"Tesla P100-PCIE-16GB"}
    assert [g.numa_node for g in p100.gpus] == [0, 0, 1, 1]
    gpu = p100.gpus[0]
    assert gpu.device.pci_id == "10de:15f8"
    assert gpu.device.link is not None and (gpu.device.link.gen_max, gpu.device.link.width_max) == (3, 16)
    assert gpu.device.iommu_group == 30
    assert gpu.device.iommu_members == (PciAddress.parse("0000:3a:00.0"), PciAddress.parse("0000:3b:00.0"))
    assert gpu.companions == ()
    # BAR1 16 GiB + BAR3 32 MiB, read from the sysfs resource file; BAR0 is 32-bit and not counted.
    assert (gpu.bar_bytes, gpu.bar_source) == ((16 << 30) + (32 << 20), "sysfs")
    assert gpu.driver == "vfio-pci"
    # The X710 NIC and the bridges are PCI devices of the host but not GPUs.
    assert PciAddress.parse("18:00.0") in p100.devices
    assert len(p100.devices) == 11


def test_host_facts_come_from_the_sysfs_tree(p100, h200):
    assert p100.iommu_enabled is True
    assert p100.vfio_modules == {"vfio": True, "vfio_pci": True, "vfio_iommu_type1": True}
    assert [(n.node, n.cpus[:3], len(n.cpus)) for n in p100.numa] == [(0, (0, 1, 2), 20), (1, (10, 11, 12), 20)]
    # CPUs and memory from libvirt's node info (2 x 10 cores x 2 threads, 192 GiB); the fixture has no meminfo.
    assert (p100.cpus, p100.memory_mib) == (40, 192 * 1024)
    assert [n.memory_mib for n in p100.numa] == [None, None]
    assert p100.numa[1].free_pages(1048576) == 16
    assert "intel_iommu=on" in (p100.kernel_cmdline or "")
    assert h200.vfio_modules == {"vfio": False, "vfio_pci": False, "vfio_iommu_type1": False}
    assert [g.driver for g in h200.gpus] == ["nvidia"] * 4
    assert h200.gpus[0].bar_bytes == (256 << 30) + (32 << 20)


def test_without_sysfs_facts_are_unknown_and_bars_estimated_from_the_matrix(shared):
    assert shared.numa == ()
    assert shared.vfio_modules is None
    assert shared.iommu_enabled is True  # the node devices carry IOMMU groups
    p100 = shared.gpu_at(PciAddress.parse("06:00.0"))
    assert p100 is not None and p100.bar_source == "estimate"
    assert p100.bar_bytes == (16 << 30) + (32 << 20)


def test_gpu_functions_come_along_as_companions(shared):
    gtx = shared.gpu_at(PciAddress.parse("0000:01:00.0"))
    assert gtx is not None and gtx.name == "NVIDIA GeForce GTX 1080 Ti"
    assert [str(c.address) for c in gtx.companions] == ["0000:01:00.1"]
    assert gtx.companions[0].kind == "audio device"


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("all", ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0", "0000:87:00.0"]),
        ("4x10de:15f8", ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0", "0000:87:00.0"]),
        ("2x10de:15f8", ["0000:3b:00.0", "0000:3c:00.0"]),  # one NUMA node when one node has enough
        ("2xP100", ["0000:3b:00.0", "0000:3c:00.0"]),
        ("3 x Tesla P100-PCIE-16GB", ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0"]),
        ("P100", ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0", "0000:87:00.0"]),
        ("10DE:15F8", ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0", "0000:87:00.0"]),
        ("0x10de:15f8", ["0000:3b:00.0", "0000:3c:00.0", "0000:86:00.0", "0000:87:00.0"]),
        ("1", ["0000:3b:00.0"]),
        ("0000:86:00.0,0000:3b:00.0", ["0000:86:00.0", "0000:3b:00.0"]),
        ("86:00.0, 87:00.0", ["0000:86:00.0", "0000:87:00.0"]),
        (["0000:3c:00.0", "87:00.0"], ["0000:3c:00.0", "0000:87:00.0"]),
        ("none", []),
        (None, []),
    ],
)
def test_selector_forms(p100, selector, expected):
    assert addresses(select_gpus(p100, selector)) == expected


@pytest.mark.parametrize(
    ("selector", "needles"),
    [
        (
            "5x10de:15f8",
            [
                "asks for 5 x 10de:15f8, but this host has 4; ask for at most 4",
                "0000:86:00.0 Tesla P100-PCIE-16GB (10de:15f8, NUMA node 1); 0000:87:00.0",
            ],
        ),
        ("0000:5e:00.0", ["no PCI device 0000:5e:00.0 on this host", "this host has 4 NVIDIA GPUs"]),
        ("0000:18:00.0", ["Ethernet controller 8086:1572", "is not an NVIDIA GPU", "extra_hostdevs"]),
        ("3b:00.0,3b:00.0", ["selected twice"]),
        ("2xH200", ["no NVIDIA H200 on this host", "0000:3b:00.0 Tesla P100-PCIE-16GB (10de:15f8, NUMA node 0);"]),
        ("2xQuadro 9999", ["unknown GPU model 'Quadro 9999'", "gpulab matrix gpus"]),
        ("0xP100", ["asks for 0 GPUs", "ask for at least 1, or use 'none'"]),
        ("99xP100", ["asks for 99 x Tesla P100-PCIE-16GB, but this host has 4; ask for at most 4"]),
        ("99999999999999999999999x10de:15f8", ["asks for 99999999999999999999999 x 10de:15f8"]),
        ("-1xP100", ["'-1xP100': -1 is not a GPU count; ask for a whole number of at least 1"]),
        ("1.5xP100", ["'1.5xP100': 1.5 is not a GPU count"]),
        ("0", ["asks for 0 GPUs"]),
        ("-2", ["-2 is not a GPU count"]),
        ("2.0", ["2.0 is not a GPU count"]),
        ("9", ["asks for 9 x NVIDIA GPU, but this host has 4"]),
        ("²", ["unknown GPU model '²'"]),  # a digit to str.isdigit(), not to int()
        ("2x\nP100", ["unknown GPU model '2x\\nP100'"]),  # the message shows it quoted, on one line
        ("0000:3b:00.0\x00", ["unknown GPU model '0000:3b:00.0\\x00'"]),
        ("", ["GPU selector '' is empty", "'none' for no GPU"]),
        (" , ", ["is empty"]),
        ("3b:00", ["unknown GPU model '3b:00'"]),
        ("all,3b:00.0", ["cannot combine GPU selectors"]),
    ],
)
def test_selector_errors_name_the_problem_and_list_the_host(p100, selector, needles):
    with pytest.raises(GpulabError) as err:
        select_gpus(p100, selector)
    for needle in needles:
        assert needle in str(err.value)
    assert "\n" not in str(err.value)  # the CLI prints one line


def test_selecting_a_companion_function_points_at_its_gpu(shared):
    with pytest.raises(GpulabError, match=r"0000:01:00.1 is the audio device of GPU 0000:01:00.0"):
        select_gpus(shared, "01:00.1")


def test_malformed_address_shows_the_accepted_forms(p100):
    with pytest.raises(GpulabError, match=r"not a PCI address; write it as 0000:3b:00.0"):
        PciAddress.parse("3b.00.0")


def test_own_groups_with_bridges_are_viable(p100):
    assert group_problems(p100, p100.gpus) == []


def test_gpu_sharing_its_group_with_a_nic_is_refused_with_the_listing_and_the_fix(shared):
    gpus = select_gpus(shared, "0000:06:00.0")
    problems = group_problems(shared, gpus)
    assert len(problems) == 1
    text = problems[0]
    assert "IOMMU group 12" in text
    assert "0000:07:00.0 Ethernet controller 8086:10fb" in text and "<- not selected" in text
    assert "0000:05:00.0 PCI bridge" in text and "[bridge, stays with the host]" in text
    assert "another slot" in text and "ACS" in text
    assert "override" not in text.lower()  # never the out-of-tree ACS override patch


def test_nic_passed_along_makes_the_shared_group_viable(shared):
    gpus = select_gpus(shared, "0000:06:00.0")
    assert group_problems(shared, gpus, [shared.devices[PciAddress.parse("07:00.0")]]) == []


def test_two_gpus_in_one_group_go_together_or_not_at_all(shared):
    alone = group_problems(shared, select_gpus(shared, "0000:0a:00.0"))
    assert len(alone) == 1 and "0000:0b:00.0" in alone[0] and "another GPU, not selected" in alone[0]
    assert group_problems(shared, select_gpus(shared, "0000:0a:00.0,0000:0b:00.0")) == []


def test_gpu_with_its_audio_function_is_viable(shared):
    assert group_problems(shared, select_gpus(shared, "GTX 1080 Ti")) == []
