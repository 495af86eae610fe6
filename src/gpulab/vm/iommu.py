"""IOMMU-group viability: a VM can only own whole groups.

Every endpoint in a chosen device's group must go to the VM with it. A GPU's own functions (audio, USB-C)
come along automatically; bridges and root ports are on the path and stay with the host; anything else
(a NIC behind the same switch) makes the group unusable, and the refusal says how to get a usable one.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpulab.vm.host import Gpu, Host
from gpulab.vm.nodedev import PciDevice
from gpulab.vm.pci import PciAddress

_FIX = (
    "A VM can only take a whole IOMMU group. Choose a GPU in another slot (`gpulab vm host` shows every group), "
    "move the card to a slot whose root port or switch supports ACS so it gets a group of its own, "
    "or, if the VM should own that device too, add it to `extra_hostdevs`."
)

# A function of the card itself shares the card's group wherever it sits, so ACS cannot split it off.
_SLOT_FIX = (
    "A function in the GPU's own slot that is no GPU function (audio, USB, UCSI) is not taken along silently: "
    "add it to `extra_hostdevs` if the VM should own it, or choose another GPU (`gpulab vm host` lists them)."
)


def passed_functions(gpus: Sequence[Gpu], extra: Sequence[PciDevice]) -> set[PciAddress]:
    """Every PCI function that goes to the VM: the GPUs, their companions and the extra devices."""
    passed = {g.address for g in gpus} | {d.address for d in extra}
    for gpu in gpus:
        passed.update(c.address for c in gpu.companions)
    return passed


def _member_line(
    host: Host, address: PciAddress, passed: set[PciAddress], foreign: set[PciAddress]
) -> tuple[str, bool]:
    """A listing line for a group member and whether it blocks passthrough."""
    device = host.devices.get(address)
    if device is None:
        return f"    {address}  (not in libvirt's device list)  <- unknown device", True
    if address in passed:
        return f"    {device.describe()}  [goes to the VM]", False
    if device.is_bridge:
        return f"    {device.describe()}  [bridge, stays with the host]", False
    if address in foreign:
        return f"    {device.describe()}  <- in the GPU's slot but no GPU function (audio, USB, UCSI)", True
    if device.is_nvidia_gpu:
        return f"    {device.describe()}  <- another GPU, not selected: select it too, or neither", True
    return f"    {device.describe()}  <- not selected", True


def group_problems(host: Host, gpus: Sequence[Gpu], extra: Sequence[PciDevice] = ()) -> list[str]:
    """One message per IOMMU group that cannot go to the VM as chosen; empty when every group is viable."""
    passed = passed_functions(gpus, extra)
    foreign = {f.address for g in gpus for f in g.foreign}
    problems: list[str] = []
    seen: set[int] = set()
    owners: list[tuple[str, PciDevice]] = [(f"GPU {g.address} ({g.name})", g.device) for g in gpus]
    owners += [(f"device {d.address} ({d.kind})", d) for d in extra]
    for label, device in owners:
        group = device.iommu_group
        if group is None or group in seen:
            continue
        seen.add(group)
        lines = [_member_line(host, member, passed, foreign) for member in device.iommu_members]
        if any(blocking for _line, blocking in lines):
            listing = "\n".join(line for line, _blocking in lines)
            in_slot = any(member in foreign for member in device.iommu_members)
            problems.append(
                f"{label} is in IOMMU group {group} with devices that cannot follow it:\n{listing}\n"
                f"{_SLOT_FIX if in_slot else _FIX}"
            )
    return problems
