"""What a KVM host offers for passthrough: its NVIDIA GPUs with their companions, NUMA nodes and IOMMU state.

PCI devices come from libvirt's node-device API, so any connection works (local, remote, the test driver);
facts libvirt does not report (VFIO modules, free hugepages, BAR sizes) come from sysfs under `root`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.compat import GpuSpec, gpu_by_pci_id
from gpulab.errors import GpulabError
from gpulab.hw import pci_gpu
from gpulab.vm import sysfs
from gpulab.vm.connection import error_text, is_local, libvirt_module
from gpulab.vm.cputopo import cores_of, siblings_from_capabilities, siblings_from_sysfs
from gpulab.vm.hostfacts import InterruptRemapping, interrupt_remapping, reset_methods
from gpulab.vm.nodedev import PciDevice, parse_pci_nodedev
from gpulab.vm.pci import PciAddress
from gpulab.vm.topology import UNKNOWN as UNKNOWN_DOMAIN
from gpulab.vm.topology import P2pDomain, p2p_domain

GIB = 1 << 30
MIB = 1 << 20
# When sysfs cannot be read, BAR1 comes from the matrix (its bar1_mib, else the memory rounded up to a power of
# two, as data-centre boards map it: a 141 GB H200 shows 262144 MiB); BAR3 adds 32 MiB. A GPU the matrix does
# not know gets a high guess, which only costs guest address space.
_BAR3_BYTES = 32 * MIB
_UNKNOWN_GPU_BAR_BYTES = 32 * GIB + _BAR3_BYTES


def _next_pow2(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def estimated_bar_bytes(spec: GpuSpec | None) -> int:
    """64-bit BAR space of one GPU from the matrix."""
    if spec is None:
        return _UNKNOWN_GPU_BAR_BYTES
    if spec.bar1_mib is not None:
        return spec.bar1_mib * MIB + _BAR3_BYTES
    return _next_pow2(int(spec.memory_gib * GIB)) + _BAR3_BYTES


@dataclass(frozen=True)
class Gpu:
    device: PciDevice
    name: str
    spec: GpuSpec | None
    companions: tuple[PciDevice, ...]  # other functions of the card (audio, USB-C), passed along with it
    bar_bytes: int  # 64-bit MMIO the guest firmware must place for this GPU
    bar_source: str  # "sysfs" or "estimate"
    driver: str | None
    foreign: tuple[PciDevice, ...] = ()  # other functions in the GPU's slot that are no part of a graphics board
    boot_vga: bool | None = None  # the host's console runs on it; None when sysfs was not read
    domain: P2pDomain = UNKNOWN_DOMAIN
    reset_methods: tuple[str, ...] | None = None  # flr, pm, bus...; (): none; None: unknown (no sysfs)

    @property
    def address(self) -> PciAddress:
        return self.device.address

    @property
    def numa_node(self) -> int | None:
        return self.device.numa_node

    def to_dict(self) -> dict[str, Any]:
        link = self.device.link
        return {
            "address": str(self.address),
            "pci_id": self.device.pci_id,
            "name": self.name,
            "numa_node": self.numa_node,
            "iommu_group": self.device.iommu_group,
            "iommu_members": [str(a) for a in self.device.iommu_members],
            "companions": [str(c.address) for c in self.companions],
            "foreign_functions": [str(f.address) for f in self.foreign],
            "driver": self.driver,
            "boot_vga": self.boot_vga,
            "p2p_domain": self.domain.label,
            "pcie": None
            if link is None
            else {
                "gen": link.gen_current,
                "gen_max": link.gen_max,
                "width": link.width_current,
                "width_max": link.width_max,
            },
            "bar_bytes": self.bar_bytes,
            "bar_source": self.bar_source,
            "reset_methods": None if self.reset_methods is None else list(self.reset_methods),
        }


@dataclass(frozen=True)
class NumaCell:
    """A host NUMA node as libvirt's capabilities call it (a cell): its CPUs, hugepage pools and memory."""

    node: int
    cpus: tuple[int, ...]
    hugepages: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # page KiB -> (free, total)
    memory_mib: int | None = None  # the node's RAM (hugepages included); None when unknown

    def free_pages(self, page_kib: int) -> int | None:
        pool = self.hugepages.get(page_kib)
        return None if pool is None else pool[0]


@dataclass(frozen=True)
class Host:
    uri: str
    devices: Mapping[PciAddress, PciDevice]
    gpus: tuple[Gpu, ...]
    numa: tuple[NumaCell, ...]  # empty when unknown
    iommu_enabled: bool | None
    vfio_modules: Mapping[str, bool] | None
    kernel_cmdline: str | None
    facts_root: Path | None  # where sysfs facts were read; None: libvirt only
    cpus: int | None = None  # logical CPUs; None when libvirt cannot say
    memory_mib: int | None = None  # RAM; None when libvirt cannot say
    nvswitches: tuple[PciDevice, ...] = ()  # NVIDIA NVSwitches (HGX/DGX baseboards)
    siblings: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # cpu -> its hyper-threads; {}: unknown
    interrupt_remapping: InterruptRemapping | None = None  # None: unknown (no sysfs)

    def gpu_at(self, address: PciAddress) -> Gpu | None:
        return next((g for g in self.gpus if g.address == address), None)

    def numa_node(self, node: int) -> NumaCell | None:
        return next((n for n in self.numa if n.node == node), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "iommu_enabled": self.iommu_enabled,
            "vfio_modules": None if self.vfio_modules is None else dict(self.vfio_modules),
            "kernel_cmdline": self.kernel_cmdline,
            "facts_root": None if self.facts_root is None else str(self.facts_root),
            "cpus": self.cpus,
            "memory_mib": self.memory_mib,
            "interrupt_remapping": None if self.interrupt_remapping is None else self.interrupt_remapping.to_dict(),
            "numa_nodes": [
                {
                    "node": n.node,
                    "cpus": sysfs.format_cpulist(n.cpus),
                    "cores": [sysfs.format_cpulist(core) for core in cores_of(n.cpus, self.siblings)],
                    "memory_mib": n.memory_mib,
                    "hugepages": {f"{kib}kB": {"free": f, "total": t} for kib, (f, t) in sorted(n.hugepages.items())},
                }
                for n in self.numa
            ],
            "gpus": [g.to_dict() for g in self.gpus],
            "nvswitches": [d.describe() for d in self.nvswitches],
        }


def list_pci_devices(conn: Any) -> dict[PciAddress, PciDevice]:
    libvirt = libvirt_module()
    try:
        nodedevs = conn.listAllDevices(libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV)
        xmls = [dev.XMLDesc(0) for dev in nodedevs]
    except libvirt.libvirtError as err:
        raise GpulabError(
            f"cannot list PCI devices through libvirt ({error_text(err)}); the node-device driver must be "
            "available (on Debian it is part of libvirt-daemon-system)."
        ) from err
    devices = {}
    for xml in xmls:
        device = parse_pci_nodedev(xml)
        if device is not None:
            devices[device.address] = device
    return devices


# libvirt writes cell memory in KiB; the other units of its schema are taken too.
_UNIT_BYTES = {"b": 1, "bytes": 1, "k": 1 << 10, "KiB": 1 << 10, "M": MIB, "MiB": MIB, "G": GIB, "GiB": GIB}


def _caps_numa(capabilities_xml: str) -> tuple[dict[int, tuple[int, ...]], dict[int, int]]:
    """NUMA cells with their CPUs and their memory in MiB from libvirt's host capabilities (empty when none)."""
    root = ET.fromstring(capabilities_xml)
    cells, memory = {}, {}
    for cell in root.findall("host/topology/cells/cell"):
        cpus = tuple(sorted(int(c.get("id", "-1")) for c in cell.findall("cpus/cpu")))
        if not cpus:
            continue
        node = int(cell.get("id", "0"))
        cells[node] = cpus
        size = cell.find("memory")
        text = (size.text or "").strip() if size is not None else ""
        unit = _UNIT_BYTES.get(size.get("unit", "KiB")) if size is not None else None
        if text.isascii() and text.isdigit() and unit:
            memory[node] = int(text) * unit // MIB
    return cells, memory


def _node_info(conn: Any) -> tuple[int | None, int | None]:
    """(logical CPUs, memory MiB) from virNodeGetInfo; (None, None) when the driver does not say."""
    libvirt = libvirt_module()
    try:
        info = conn.getInfo()
    except libvirt.libvirtError:
        return None, None
    memory_mib, cpus = int(info[1]), int(info[2])
    return (cpus if cpus > 0 else None), (memory_mib if memory_mib > 0 else None)


def _gpu(device: PciDevice, devices: Mapping[PciAddress, PciDevice], root: Path | None) -> Gpu:
    spec = gpu_by_pci_id(device.pci_id)
    in_slot = [
        d for addr, d in sorted(devices.items()) if pci_gpu.in_slot(str(device.address), str(addr)) and not d.is_bridge
    ]
    companions = tuple(d for d in in_slot if pci_gpu.is_companion(str(device.address), str(d.address), d.class_code))
    found_bars = sysfs.bars(root, device.address) if root is not None else None
    if found_bars:
        bar_bytes, bar_source = sum(b.size for b in found_bars if b.is_64bit), "sysfs"
    else:
        bar_bytes, bar_source = estimated_bar_bytes(spec), "estimate"
    driver = device.driver or (sysfs.bound_driver(root, device.address) if root is not None else None)
    return Gpu(
        device=device,
        name=spec.name if spec else (device.product_name or f"NVIDIA {device.pci_id}"),
        spec=spec,
        companions=companions,
        bar_bytes=bar_bytes,
        bar_source=bar_source,
        driver=driver,
        foreign=tuple(d for d in in_slot if d not in companions),
        boot_vga=sysfs.boot_vga(root, device.address) if root is not None else None,
        domain=p2p_domain(device, spec, devices, root),
        reset_methods=reset_methods(root, device.address) if root is not None else None,
    )


def discover_host(conn: Any, root: Path | None = None) -> Host:
    """The host behind `conn`. `root` is where sysfs/proc facts are read; by default "/" for a local
    hypervisor URI and nothing for remote or test URIs (those facts are then unknown)."""
    uri = str(conn.getURI())
    if root is None and is_local(uri):
        root = Path("/")
    devices = list_pci_devices(conn)
    gpus = tuple(_gpu(d, devices, root) for addr, d in sorted(devices.items()) if d.is_nvidia_gpu)

    capabilities = conn.getCapabilities()
    cpus_by_node, memory_by_node = _caps_numa(capabilities)
    if not cpus_by_node and root is not None:
        cpus_by_node = sysfs.numa_cpus(root) or {}
    if root is not None and not memory_by_node:
        memory_by_node = sysfs.numa_memory(root) or {}
    pages = (sysfs.hugepages(root) or {}) if root is not None else {}
    numa = tuple(
        NumaCell(node=n, cpus=cpus, hugepages=pages.get(n, {}), memory_mib=memory_by_node.get(n))
        for n, cpus in sorted(cpus_by_node.items())
    )
    host_cpus, host_memory = _node_info(conn)
    siblings = siblings_from_capabilities(capabilities)
    if not siblings and root is not None:
        siblings = siblings_from_sysfs(root) or {}

    iommu = sysfs.iommu_enabled(root) if root is not None else None
    if iommu is None and any(d.iommu_group is not None for d in devices.values()):
        iommu = True  # libvirt only reports groups the kernel made
    return Host(
        uri=uri,
        devices=devices,
        gpus=gpus,
        numa=numa,
        iommu_enabled=iommu,
        vfio_modules=sysfs.vfio_modules(root) if root is not None else None,
        kernel_cmdline=sysfs.kernel_cmdline(root) if root is not None else None,
        facts_root=root,
        cpus=host_cpus or (sum(len(n.cpus) for n in numa) or None),
        memory_mib=host_memory,
        nvswitches=tuple(d for _addr, d in sorted(devices.items()) if d.is_nvswitch),
        siblings=siblings,
        interrupt_remapping=interrupt_remapping(root) if root is not None else None,
    )
