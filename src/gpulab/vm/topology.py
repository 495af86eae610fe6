"""P2P domains: which GPUs of a host can reach each other peer to peer, from where they sit.

NVIDIA's driver allows PCIe peer-to-peer between GPUs under one PCIe switch or one root complex (host bridge);
across sockets (QPI/UPI, `nvidia-smi topo -m` SYS) it does not. SXM boards reach each other over NVLink
whatever their PCIe path, so all SXM GPUs of a host are one domain. The PCIe path comes from libvirt's node
device (`<path>`, else the `<parent>` chain), else the sysfs link under the facts root; without any of them the
NUMA node stands in for the socket.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulab.compat import GpuSpec
from gpulab.vm import sysfs
from gpulab.vm.nodedev import PciDevice
from gpulab.vm.pci import PciAddress

_ROOT_BUS = re.compile(r"pci([0-9a-f]{4,8}):([0-9a-f]{2})")


@dataclass(frozen=True, order=True)
class P2pDomain:
    key: str  # stable sort and identity: "nvlink", "pci0000:3a", "numa1", "unknown"
    label: str  # for people: "root complex pci0000:3a"
    source: str  # nvlink | pcie | numa | unknown


UNKNOWN = P2pDomain("unknown", "unknown PCIe topology", "unknown")


def _root_bus_of_path(path: str) -> str | None:
    """'/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0' (or the relative sysfs link) -> 'pci0000:3a'."""
    for part in path.split("/"):
        m = _ROOT_BUS.fullmatch(part)
        if m:
            return part
    return None


def _root_bus_of_parents(device: PciDevice, by_name: Mapping[str, PciDevice]) -> str | None:
    """Walk `<parent>` up to the device on a root bus; None when libvirt gave no parent."""
    seen: set[str] = set()
    current = device
    while current.parent and current.parent in by_name and current.parent not in seen:
        seen.add(current.parent)
        current = by_name[current.parent]
    if current.parent is None:
        return None
    return f"pci{current.address.domain:04x}:{current.address.bus:02x}"


def root_bus(device: PciDevice, devices: Mapping[PciAddress, PciDevice], root: Path | None) -> str | None:
    """The host bridge a device hangs under, as sysfs names it ('pci0000:3a'); None when unknown."""
    if device.sysfs_path:
        found = _root_bus_of_path(device.sysfs_path)
        if found:
            return found
    by_name = {d.address.nodedev_name: d for d in devices.values()}
    found = _root_bus_of_parents(device, by_name)
    if found:
        return found
    link = sysfs.device_link(root, device.address) if root is not None else None
    return _root_bus_of_path(link) if link else None


def p2p_domain(
    device: PciDevice, spec: GpuSpec | None, devices: Mapping[PciAddress, PciDevice], root: Path | None
) -> P2pDomain:
    if spec is not None and spec.form_factor.upper().startswith("SXM"):
        return P2pDomain("nvlink", "NVLink (SXM boards)", "nvlink")
    bus = root_bus(device, devices, root)
    if bus is not None:
        return P2pDomain(bus, f"root complex {bus}", "pcie")
    if device.numa_node is not None:
        return P2pDomain(f"numa{device.numa_node}", f"NUMA node {device.numa_node}", "numa")
    return UNKNOWN
