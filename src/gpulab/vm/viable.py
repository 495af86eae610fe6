"""Count selectors ("2xP100", "4") over the host's viable GPU sets.

A VM takes whole IOMMU groups, so GPUs that share a group are one unit, and a group with a device that cannot go
along (a NIC, a GPU of another model, a foreign function in the GPU's slot) is no unit at all. Among the units
whose GPUs add up to the count, the first set in this order wins: one P2P domain and one NUMA node, one P2P
domain, one NUMA node, then nodes filled in order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field

from gpulab.vm.cards import framebuffer_released
from gpulab.vm.host import Gpu, Host
from gpulab.vm.pci import PciAddress

_LAST = 1 << 30  # sorts unknown NUMA nodes last


@dataclass
class Unit:
    """GPUs that can only go to a VM together, and why they cannot go at all (empty: they can)."""

    gpus: list[Gpu]
    group: int | None
    reasons: list[str] = field(default_factory=list)

    @property
    def first(self) -> PciAddress:
        return self.gpus[0].address

    @property
    def node(self) -> int:
        nodes = {g.numa_node for g in self.gpus}
        node = nodes.pop() if len(nodes) == 1 else None
        return _LAST if node is None else node

    @property
    def domain(self) -> str | None:
        domains = {g.domain for g in self.gpus}
        one = domains.pop() if len(domains) == 1 else None
        return one.key if one is not None and one.source in ("pcie", "nvlink") else None

    def describe(self) -> str:
        names = ", ".join(str(g.address) for g in self.gpus)
        if self.reasons:
            return f"{names}: {'; '.join(self.reasons)}"
        return f"{names} share IOMMU group {self.group} and go only together ({len(self.gpus)} GPUs)"


def units(host: Host, candidates: Sequence[Gpu], extra: Collection[PciAddress] = ()) -> list[Unit]:
    """The candidates grouped by IOMMU group, each with the reasons its group cannot go to a VM."""
    by_group: dict[object, Unit] = {}
    for gpu in candidates:
        key: object = gpu.device.iommu_group if gpu.device.iommu_group is not None else gpu.address
        unit = by_group.setdefault(key, Unit([], gpu.device.iommu_group))
        unit.gpus.append(gpu)
    chosen = {g.address for g in candidates}
    console_free = framebuffer_released(host) is not None
    for unit in by_group.values():
        along = {g.address for g in unit.gpus} | set(extra)
        along |= {c.address for g in unit.gpus for c in g.companions}
        for gpu in unit.gpus:
            if gpu.boot_vga and not console_free:
                unit.reasons.append(f"{gpu.address} drives the host's console (boot_vga)")
            for device in gpu.foreign:
                if device.address not in extra:
                    unit.reasons.append(f"{device.describe()} sits in the GPU's slot and is no GPU function")
        for member in unit.gpus[0].device.iommu_members:
            found = host.devices.get(member)
            if member in along or (found is not None and found.is_bridge):
                continue
            if any(member == f.address for g in unit.gpus for f in g.foreign):
                continue  # already named as a foreign function
            what = "an unknown device" if found is None else found.describe()
            if found is not None and found.is_nvidia_gpu and member not in chosen:
                what += " (a GPU this selector does not take)"
            unit.reasons.append(f"shares IOMMU group {unit.group} with {what}")
    return sorted(by_group.values(), key=lambda u: u.first)


def _subset(options: Sequence[Unit], count: int) -> list[Unit] | None:
    """The first units, in order, whose GPUs add up to exactly `count`; None when no such set exists."""
    failed: set[tuple[int, int]] = set()

    def search(i: int, left: int) -> list[Unit] | None:
        if left == 0:
            return []
        if i == len(options) or (i, left) in failed:
            return None
        size = len(options[i].gpus)
        if size <= left:
            rest = search(i + 1, left - size)
            if rest is not None:
                return [options[i], *rest]
        rest = search(i + 1, left)
        if rest is None:
            failed.add((i, left))
        return rest

    return search(0, count)


def _within(options: Sequence[Unit], count: int, key: Callable[[Unit], Hashable | None]) -> list[Unit] | None:
    """A set inside one value of `key` (skipping units where it is unknown), trying values in address order."""
    groups: dict[Hashable, list[Unit]] = {}
    for unit in options:
        value = key(unit)
        if value is not None:
            groups.setdefault(value, []).append(unit)
    for members in groups.values():
        found = _subset(members, count)
        if found is not None:
            return found
    return None


def pick(all_units: Sequence[Unit], count: int) -> list[Gpu] | None:
    viable = [u for u in all_units if not u.reasons]
    by_node = sorted(viable, key=lambda u: (u.node, u.first))
    found = (
        _within(viable, count, lambda u: None if u.domain is None or u.node == _LAST else (u.domain, u.node))
        or _within(viable, count, lambda u: u.domain)
        or _within(by_node, count, lambda u: None if u.node == _LAST else u.node)
        or _subset(by_node, count)
    )
    return None if found is None else sorted((g for u in found for g in u.gpus), key=lambda g: g.address)


def why_not(all_units: Sequence[Unit]) -> str:
    """Why no set fits, unit by unit, on one line."""
    return "; ".join(u.describe() for u in all_units if u.reasons or len(u.gpus) > 1)
