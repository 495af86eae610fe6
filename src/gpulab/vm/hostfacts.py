"""Host facts that decide whether a passed-through GPU is safe and resettable: interrupt remapping and each
device's reset methods, read from sysfs under an injectable root (None where sysfs cannot say).

Without interrupt remapping VFIO refuses to assign devices unless `allow_unsafe_interrupts` is set, which lets
a guest forge interrupts into the host. A device without a reset method cannot be brought back to a clean
state between guest boots, so a reboot of the VM may find the card hung.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpulab.vm.pci import PciAddress

_ECAP_IR = 1 << 3  # VT-d extended capability register: Interrupt Remapping support
_IR_OFF_SWITCHES = ("intremap=off", "nointremap")
_UNSAFE_PARAM = "vfio_iommu_type1.allow_unsafe_interrupts"


@dataclass(frozen=True)
class InterruptRemapping:
    enabled: bool | None  # None: no IOMMU unit could be read
    detail: str  # what it was read from, or why it is off
    allow_unsafe: bool  # vfio_iommu_type1.allow_unsafe_interrupts is set

    def to_dict(self) -> dict[str, object]:
        return {"enabled": self.enabled, "detail": self.detail, "allow_unsafe_interrupts": self.allow_unsafe}


def _text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _allow_unsafe(root: Path, cmdline: str) -> bool:
    value = _text(root / "sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts")
    if value is not None:
        return value in ("Y", "1")
    return any(arg in (f"{_UNSAFE_PARAM}=1", f"{_UNSAFE_PARAM}=Y", f"{_UNSAFE_PARAM}=y") for arg in cmdline.split())


def interrupt_remapping(root: Path) -> InterruptRemapping | None:
    """Whether the kernel remaps device interrupts; None when sysfs is not there to ask.

    Intel: every DMAR unit must report IR in its `ecap` (the kernel turns IR off if one lacks it). AMD-Vi units
    (`ivhd*`) always remap. Either way `intremap=off`/`nointremap` on the command line turns it off."""
    if not (root / "sys").is_dir():
        return None
    cmdline = _text(root / "proc/cmdline") or ""
    unsafe = _allow_unsafe(root, cmdline)
    units = sorted((root / "sys/class/iommu").glob("*"))
    ecaps = [(u.name, _text(u / "intel-iommu/ecap")) for u in units if (u / "intel-iommu").is_dir()]
    amd = [u.name for u in units if (u / "amd-iommu").is_dir()]
    if not ecaps and not amd:
        return InterruptRemapping(None, "no IOMMU unit in /sys/class/iommu tells", unsafe)
    switch = next((arg for arg in cmdline.split() if arg in _IR_OFF_SWITCHES), None)
    if switch:
        return InterruptRemapping(False, f"turned off by {switch} on the kernel command line", unsafe)
    if amd:
        return InterruptRemapping(True, f"AMD-Vi ({', '.join(amd)})", unsafe)
    lacking = [name for name, ecap in ecaps if ecap is None or not int(ecap, 16) & _ECAP_IR]
    if lacking:
        return InterruptRemapping(False, f"VT-d unit {', '.join(lacking)} reports no interrupt remapping", unsafe)
    return InterruptRemapping(True, f"VT-d ({', '.join(name for name, _ in ecaps)})", unsafe)


def reset_methods(root: Path, address: PciAddress) -> tuple[str, ...] | None:
    """How the kernel can reset a device (`flr`, `pm`, `bus`, ...), from `reset_method` (Linux 5.15+).

    The kernel hides `reset_method` and `reset` on a device it cannot reset, so an existing device directory
    without them means no method: (). Before 5.15 only `reset` shows, with the method unknown: ("reset",).
    None when the device is not in the tree at all."""
    device = root / "sys/bus/pci/devices" / str(address)
    text = _text(device / "reset_method")
    if text is not None:
        return tuple(text.split())
    if (device / "reset").exists():
        return ("reset",)
    return () if device.is_dir() else None
