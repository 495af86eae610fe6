"""Which PCI functions are NVIDIA GPUs, and which other functions go with a GPU into a guest.

A GPU is a function of vendor 0x10de whose class is a VGA controller (0x0300, a board with display outputs) or a
3D controller (0x0302, a compute board): the two classes the NVIDIA kernel module binds (nv_pci_table in its
nvidia/nv-pci-table.c). Other NVIDIA functions are not GPUs: the audio (0x0403), USB (0x0c03) and USB-C
UCSI serial bus (0x0c80) functions of a board with display outputs, and NVSwitches (bridge, other: 0x0680).

A GPU's companions are the other functions of its PCI device (same domain:bus:slot, another function number)
of the classes a graphics board carries: audio, USB and USB-C UCSI. They share its IOMMU group, so vfio-pci must
own them too before the GPU can be passed through. Bridges are never companions: they are the path to the
device. Any other class in the slot (an Ethernet controller at function 1) is not part of the board as NVIDIA
builds it, so it is never taken along silently.

This file is the only definition. gpulab uses it as `gpulab.hw.pci_gpu`; the Ansible modules of the
gpulab.provision collection, which run on hosts without gpulab, import it as
`ansible_collections.gpulab.provision.plugins.module_utils.pci_gpu`, a symbolic link to this file that Ansible
ships with each module. So it imports nothing but the standard library and runs on the oldest Python a managed
host has.
"""

from __future__ import annotations

NVIDIA_VENDOR = 0x10DE
# Class codes without the programming interface byte (sysfs and libvirt give 0x030200: `class_code >> 8`).
GPU_CLASSES = (0x0300, 0x0302)  # VGA controller, 3D controller
NVSWITCH_CLASS = 0x0680  # bridge, other
BRIDGE_CLASSES = (0x0600, 0x0604)  # host bridge, PCI-to-PCI bridge (root and switch ports)
COMPANION_CLASSES = (0x0403, 0x0C03, 0x0C80)  # HD audio, USB controller, serial bus (USB-C UCSI)


def parse_id(text: str | None) -> int | None:
    """A hex id or class code as sysfs (`0x10de`, `0x030200`) or libvirt writes it -> int; None when unreadable."""
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def is_nvidia_gpu(vendor: int, class_code: int) -> bool:
    """True for an NVIDIA VGA or 3D controller; `class_code` is the 24-bit code (0x030200)."""
    return vendor == NVIDIA_VENDOR and class_code >> 8 in GPU_CLASSES


def is_nvswitch(vendor: int, class_code: int) -> bool:
    return vendor == NVIDIA_VENDOR and class_code >> 8 == NVSWITCH_CLASS


def is_bridge(class_code: int) -> bool:
    """Host and PCI-to-PCI bridges: part of the path to a device, never passed to a guest."""
    return class_code >> 8 in BRIDGE_CLASSES


def device_of(address: str) -> str:
    """'0000:3b:00.1' -> '0000:3b:00': the PCI device (slot) that all functions of one card share."""
    return address.strip().lower().rsplit(".", 1)[0]


def in_slot(gpu_address: str, address: str) -> bool:
    """True for another function of the GPU's PCI device (same domain:bus:slot)."""
    if address.strip().lower() == gpu_address.strip().lower():
        return False
    return device_of(address) == device_of(gpu_address)


def is_companion(gpu_address: str, address: str, class_code: int) -> bool:
    """True when the function at `address` must follow the GPU at `gpu_address` into passthrough: another
    function of the same PCI device that is the board's audio, USB or USB-C UCSI controller."""
    return in_slot(gpu_address, address) and class_code >> 8 in COMPANION_CLASSES
