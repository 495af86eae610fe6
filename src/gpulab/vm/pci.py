"""PCI addresses and device classes: parsing what users type and naming what the host has."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpulab.errors import GpulabError
from gpulab.hw.pci_gpu import NVIDIA_VENDOR, is_bridge

__all__ = ["NVIDIA_VENDOR", "PciAddress", "class_name", "is_bridge"]

# "0000:3b:00.0" or the short "3b:00.0" (domain 0), case-insensitive.
_ADDRESS = re.compile(  # used with fullmatch: `$` would also take a trailing newline
    r"(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<slot>[0-9a-fA-F]{2})\.(?P<function>[0-7])"
)

# PCI base class / sub-class names for the devices a GPU host shows (PCI Code and ID Assignment spec).
_CLASS_NAMES = {
    0x0100: "SCSI storage controller",
    0x0104: "RAID controller",
    0x0106: "SATA controller",
    0x0108: "NVMe controller",
    0x0200: "Ethernet controller",
    0x0207: "InfiniBand controller",
    0x0280: "network controller",
    0x0300: "VGA controller",
    0x0302: "3D controller",
    0x0380: "display controller",
    0x0403: "audio device",
    0x0600: "host bridge",
    0x0601: "ISA bridge",
    0x0604: "PCI bridge",
    0x0680: "other bridge",
    0x0880: "system peripheral",
    0x0C03: "USB controller",
    0x0C80: "serial bus controller",
}
_BASE_NAMES = {
    0x01: "storage",
    0x02: "network",
    0x03: "display",
    0x04: "multimedia",
    0x06: "bridge",
    0x0C: "serial bus",
}


@dataclass(frozen=True, order=True)
class PciAddress:
    domain: int
    bus: int
    slot: int
    function: int

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        """'0000:3b:00.0' or '3b:00.0' -> PciAddress; anything else is a GpulabError showing the forms."""
        m = _ADDRESS.fullmatch(text.strip())
        if m is None:
            raise GpulabError(
                f"{text!r} is not a PCI address; write it as 0000:3b:00.0 (domain:bus:slot.function) or 3b:00.0."
            )
        return cls(
            domain=int(m.group("domain") or "0", 16),
            bus=int(m.group("bus"), 16),
            slot=int(m.group("slot"), 16),
            function=int(m.group("function")),
        )

    @classmethod
    def looks_like(cls, text: str) -> bool:
        return _ADDRESS.fullmatch(text.strip()) is not None

    @classmethod
    def from_nodedev_name(cls, name: str) -> PciAddress | None:
        """'pci_0000_3b_00_0' -> PciAddress; None for other node devices."""
        m = re.fullmatch(r"pci_([0-9a-f]{4,8})_([0-9a-f]{2})_([0-9a-f]{2})_([0-7])", name)
        if m is None:
            return None
        return cls(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4)))

    @property
    def nodedev_name(self) -> str:
        return f"pci_{self.domain:04x}_{self.bus:02x}_{self.slot:02x}_{self.function:x}"

    @property
    def slot_key(self) -> tuple[int, int, int]:
        """The physical slot: all functions of one card share it."""
        return (self.domain, self.bus, self.slot)

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"


def class_name(class_code: int) -> str:
    """0x030200 -> '3D controller'; unknown codes fall back to the base class, then the hex code."""
    sub = class_code >> 8
    if sub in _CLASS_NAMES:
        return _CLASS_NAMES[sub]
    base = class_code >> 16
    if base in _BASE_NAMES:
        return f"{_BASE_NAMES[base]} device"
    return f"class 0x{class_code:06x}"
