#!/usr/bin/python
"""The PCI functions a KVM host must hand to vfio-pci: its NVIDIA GPUs and every other function of their slots
(HDMI audio, USB-C controllers), read from sysfs; and the CPU vendor and IOMMU state the boot parameters depend on."""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.provision.plugins.module_utils.pci_gpu import is_companion, is_nvidia_gpu, parse_id

DOCUMENTATION = r"""
module: vfio_devices
short_description: NVIDIA GPUs and their companion functions, CPU vendor and IOMMU state, from sysfs
description:
  - Lists NVIDIA GPUs (PCI vendor 0x10de, class 0x0300 VGA or 0x0302 3D controller) under
    C(/sys/bus/pci/devices) and every other function of the same device (domain:bus:slot) that is not a bridge,
    such as the GPU's audio and USB functions, which have to be passed through with the GPU.
  - The GPUs are the ones in I(gpus), or every NVIDIA GPU except the boot VGA device (C(boot_vga) is 1, the
    firmware's console), which stays with the host.
  - Reports the CPU vendor from C(/proc/cpuinfo), whether the IOMMU is on (C(/sys/kernel/iommu_groups) has groups)
    and the kernel driver each listed function is bound to.
  - Changes nothing.
version_added: "0.1.0"
author: gpulab
options:
  root:
    description: Directory the C(sys) and C(proc) trees are read from (C(/) on a real host).
    type: path
    default: /
  gpus:
    description: PCI addresses of the GPUs chosen for passthrough; empty for every NVIDIA GPU but the boot VGA device.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Find the GPUs to pass through
  gpulab.provision.vfio_devices:
  register: found
"""

RETURN = r"""
devices:
  description: The GPUs and their companion functions, GPUs first.
  returned: always
  type: list
  elements: dict
  contains:
    address: {description: PCI address (0000:3b:00.0)., type: str}
    pci_id: {description: vendor:device (10de:15f8)., type: str}
    gpu: {description: True for the GPU function itself., type: bool}
    driver: {description: Bound kernel driver, or null., type: str}
    iommu_group: {description: IOMMU group number, or null when the IOMMU is off., type: int}
pci_ids:
  description: The distinct vendor:device ids of I(devices), GPUs first (the vfio-pci ids= list).
  returned: always
  type: list
  elements: str
cpu_vendor:
  description: intel, amd, or unknown.
  returned: always
  type: str
iommu_enabled:
  description: True when the kernel created IOMMU groups.
  returned: always
  type: bool
boot_vga:
  description: The NVIDIA GPUs the firmware boots its console on (kept by the host unless named in I(gpus)).
  returned: always
  type: list
  elements: str
kept_same_id:
  description:
    - Functions the host keeps that carry a vendor:device id of I(pci_ids) (a console GPU or a GPU not chosen, of
      the same model, and their companions); vfio-pci's ids= option would take them too.
  returned: always
  type: list
  elements: dict
unknown:
  description: Addresses in I(gpus) that are not NVIDIA GPUs on this host.
  returned: always
  type: list
  elements: str
"""

CPU_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "amd"}


def read(path: str, default: str | None = None) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return default


def link_name(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def function_info(devices_dir: str, address: str) -> dict[str, Any]:
    base = os.path.join(devices_dir, address)
    vendor = read(os.path.join(base, "vendor"), "0x0000")
    device = read(os.path.join(base, "device"), "0x0000")
    group = link_name(os.path.join(base, "iommu_group"))
    return {
        "address": address,
        "pci_id": f"{vendor[2:]}:{device[2:]}".lower(),
        "vendor": parse_id(vendor) or 0,
        "class": parse_id(read(os.path.join(base, "class"))) or 0,
        "driver": link_name(os.path.join(base, "driver")),
        "iommu_group": int(group) if group and group.isdigit() else None,
    }


def _functions(root: str) -> list[dict[str, Any]]:
    devices_dir = os.path.join(root, "sys/bus/pci/devices")
    try:
        addresses = sorted(os.listdir(devices_dir))
    except OSError:
        addresses = []
    return [function_info(devices_dir, a) for a in addresses]


def boot_vga(root: str) -> list[str]:
    """The NVIDIA GPUs whose boot_vga attribute is 1 (the firmware's console)."""
    devices_dir = os.path.join(root, "sys/bus/pci/devices")
    return [
        f["address"]
        for f in _functions(root)
        if is_nvidia_gpu(f["vendor"], f["class"]) and read(os.path.join(devices_dir, f["address"], "boot_vga")) == "1"
    ]


def discover(root: str, chosen: list[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The GPUs for passthrough (`chosen` addresses, or every NVIDIA GPU but the boot VGA device) and their
    companion functions, and their distinct vendor:device ids."""
    functions = _functions(root)
    console = boot_vga(root)
    wanted = {a.strip().lower() for a in chosen or []}
    gpus = [
        f
        for f in functions
        if is_nvidia_gpu(f["vendor"], f["class"])
        and (f["address"] in wanted if wanted else f["address"] not in console)
    ]
    companions = [
        f
        for f in functions
        if f not in gpus and any(is_companion(g["address"], f["address"], f["class"]) for g in gpus)
    ]
    chosen = gpus + companions
    devices = [dict({k: f[k] for k in ("address", "pci_id", "driver", "iommu_group")}, gpu=f in gpus) for f in chosen]
    pci_ids = []
    for d in devices:
        if d["pci_id"] not in pci_ids:
            pci_ids.append(d["pci_id"])
    return devices, pci_ids


def kept_same_id(root: str, devices: list[dict[str, Any]], pci_ids: list[str]) -> list[dict[str, str]]:
    """Functions not chosen that carry one of the chosen ids: vfio-pci's ids= would claim them too."""
    chosen = {d["address"] for d in devices}
    return [
        {"address": f["address"], "pci_id": f["pci_id"]}
        for f in _functions(root)
        if f["address"] not in chosen and f["pci_id"] in pci_ids
    ]


def cpu_vendor(root: str) -> str:
    for line in (read(os.path.join(root, "proc/cpuinfo"), "") or "").splitlines():
        if line.startswith("vendor_id"):
            return CPU_VENDORS.get(line.split(":", 1)[1].strip(), "unknown")
    return "unknown"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "gpus": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    root, chosen = module.params["root"], module.params["gpus"]
    devices, pci_ids = discover(root, chosen)
    gpus = {f["address"] for f in _functions(root) if is_nvidia_gpu(f["vendor"], f["class"])}
    groups_dir = os.path.join(root, "sys/kernel/iommu_groups")
    iommu = os.path.isdir(groups_dir) and bool(os.listdir(groups_dir))
    module.exit_json(
        changed=False,
        devices=devices,
        pci_ids=pci_ids,
        cpu_vendor=cpu_vendor(root),
        iommu_enabled=iommu,
        boot_vga=boot_vga(root),
        kept_same_id=kept_same_id(root, devices, pci_ids),
        unknown=[a for a in chosen if a.strip().lower() not in gpus],
    )


if __name__ == "__main__":
    main()
