"""Host facts libvirt does not report, read from sysfs and /proc under an injectable root.

`root` is "/" on the machine itself; tests and offline analysis point it at a copied or hand-made tree.
Every reader returns None when the file is absent, so an unknown fact stays unknown instead of looking false.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpulab.hw.host import read_iommu
from gpulab.vm.pci import PciAddress

VFIO_MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1")

# Linux `struct resource` flags (include/linux/ioport.h): a memory BAR, and one decoded above 4 GiB.
_IORESOURCE_MEM = 0x00000200
_IORESOURCE_MEM_64 = 0x00100000


@dataclass(frozen=True)
class Bar:
    index: int
    size: int  # bytes
    is_64bit: bool


def _text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def iommu_enabled(root: Path) -> bool | None:
    """True when the kernel has an IOMMU with groups; None when sysfs is not there to ask."""
    if not (root / "sys").is_dir():
        return None
    enabled, _groups = read_iommu(root)
    return bool(enabled)


def vfio_modules(root: Path) -> dict[str, bool] | None:
    """Which VFIO modules are loaded (built-in ones show in /sys/module too)."""
    modules = root / "sys/module"
    if not modules.is_dir():
        return None
    return {name: (modules / name).is_dir() for name in VFIO_MODULES}


def kernel_cmdline(root: Path) -> str | None:
    return _text(root / "proc/cmdline")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11), in the order the kernel lists them."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return tuple(cpus)


def format_cpulist(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 8, 9) -> '0-2,8-9' (sorted, ranges merged): the form libvirt's cpuset attributes take."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def numa_cpus(root: Path) -> dict[int, tuple[int, ...]] | None:
    nodes_dir = root / "sys/devices/system/node"
    if not nodes_dir.is_dir():
        return None
    found = {}
    for path in nodes_dir.glob("node[0-9]*"):
        cpulist = _text(path / "cpulist")
        if cpulist is not None:
            found[int(path.name[4:])] = parse_cpulist(cpulist)
    return found or None


def numa_memory(root: Path) -> dict[int, int] | None:
    """{node: MiB} from the "Node N MemTotal: X kB" line of /sys/devices/system/node/node*/meminfo."""
    nodes_dir = root / "sys/devices/system/node"
    if not nodes_dir.is_dir():
        return None
    found = {}
    for path in nodes_dir.glob("node[0-9]*"):
        for line in (_text(path / "meminfo") or "").splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[2] == "MemTotal:" and fields[3].isascii() and fields[3].isdigit():
                found[int(path.name[4:])] = int(fields[3]) // 1024
    return found or None


def hugepages(root: Path) -> dict[int, dict[int, tuple[int, int]]] | None:
    """{node: {page_kib: (free, total)}} from /sys/devices/system/node/node*/hugepages."""
    nodes_dir = root / "sys/devices/system/node"
    if not nodes_dir.is_dir():
        return None
    found: dict[int, dict[int, tuple[int, int]]] = {}
    for node in nodes_dir.glob("node[0-9]*"):
        pools: dict[int, tuple[int, int]] = {}
        for pool in (node / "hugepages").glob("hugepages-*kB"):
            free, total = _text(pool / "free_hugepages"), _text(pool / "nr_hugepages")
            if free is None or total is None:
                continue
            pools[int(pool.name.removeprefix("hugepages-").removesuffix("kB"))] = (int(free), int(total))
        found[int(node.name[4:])] = pools
    return found or None


def _device_dir(root: Path, address: PciAddress) -> Path:
    return root / "sys/bus/pci/devices" / str(address)


def bound_driver(root: Path, address: PciAddress) -> str | None:
    """The driver bound to a device: the name its `driver` link points to (None when unbound or unknown)."""
    try:
        return os.path.basename(os.readlink(_device_dir(root, address) / "driver"))
    except OSError:
        return None


def bars(root: Path, address: PciAddress) -> tuple[Bar, ...] | None:
    """Memory BARs 0-5 from the device's `resource` file (start end flags per line); None when absent."""
    text = _text(_device_dir(root, address) / "resource")
    if text is None:
        return None
    found = []
    for index, line in enumerate(text.splitlines()[:6]):
        fields = line.split()
        if len(fields) != 3:
            continue
        start, end, flags = (int(f, 16) for f in fields)
        if end > start and flags & _IORESOURCE_MEM:
            found.append(Bar(index=index, size=end - start + 1, is_64bit=bool(flags & _IORESOURCE_MEM_64)))
    return tuple(found)


def boot_vga(root: Path, address: PciAddress) -> bool | None:
    """True when the firmware booted the host's console on this device (sysfs `boot_vga` is 1)."""
    text = _text(_device_dir(root, address) / "boot_vga")
    return None if text is None else text == "1"


def device_link(root: Path, address: PciAddress) -> str | None:
    """Where /sys/bus/pci/devices/ADDR points: '../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0'."""
    try:
        return os.readlink(_device_dir(root, address))
    except OSError:
        return None
