#!/usr/bin/python
"""Facts a GPU node needs before anything is installed: NVIDIA GPUs and NVSwitches from sysfs (no driver needed),
Secure Boot state from the EFI variables, the running and the installed kernels."""

from __future__ import annotations

import os
import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.provision.plugins.module_utils.pci_gpu import is_nvidia_gpu, is_nvswitch, parse_id

DOCUMENTATION = r"""
module: gpu_facts
short_description: NVIDIA GPUs, NVSwitches, Secure Boot and kernels of a host, read from sysfs
description:
  - Lists NVIDIA GPUs (PCI vendor 0x10de, class 0x0300 VGA or 0x0302 3D controller; not their audio or USB
    functions) and NVSwitch bridges (vendor 0x10de, class 0x0680) from C(/sys/bus/pci/devices); no NVIDIA driver
    is needed.
  - Reads the Secure Boot state from the C(SecureBoot) EFI variable.
  - Reports the running kernel and every kernel installed under C(/boot) (C(vmlinuz-<release>)), which are the
    kernels a DKMS module must be built for. In a chroot the running kernel is the build host's, so only the
    installed list describes the image.
version_added: "0.1.0"
author: gpulab
options:
  pci_ids:
    description:
      - NVIDIA PCI ids (C(10de:15f8)) to report instead of reading the PCI bus, one entry per GPU. Used to
        provision an image or a host whose GPUs are not visible yet, and by tests.
    type: list
    elements: str
    default: []
  root:
    description: Directory the C(sys) and C(boot) trees are read from (C(/) on a real host).
    type: path
    default: /
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Read GPU facts
  gpulab.provision.gpu_facts:

- name: Pretend the host has four Tesla P100s
  gpulab.provision.gpu_facts:
    pci_ids: ["10de:15f8", "10de:15f8", "10de:15f8", "10de:15f8"]
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    gpulab_gpus:
      description: One entry per NVIDIA GPU with C(address), C(pci_id), C(driver) (bound kernel driver or null)
        and C(injected) (true when it came from I(pci_ids)).
      type: list
      elements: dict
    gpulab_nvswitches:
      description: PCI addresses of NVSwitch devices (Fabric Manager is needed when any are present).
      type: list
      elements: str
    gpulab_secure_boot:
      description: C(enabled), C(disabled), or C(unsupported) when the host did not boot through EFI.
      type: str
    gpulab_kernel:
      description: The running kernel release.
      type: str
    gpulab_kernels:
      description: Kernel releases installed under C(/boot), newest last.
      type: list
      elements: str
"""

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
PCI_ID = re.compile(r"^10de:[0-9a-f]{4}$")


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def pci_devices(root: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(gpus, nvswitches) from sysfs; a device whose files cannot be read is skipped."""
    base = os.path.join(root, "sys/bus/pci/devices")
    gpus: list[dict[str, Any]] = []
    switches: list[str] = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return gpus, switches
    for name in names:
        dev = os.path.join(base, name)
        vendor = parse_id(_read(os.path.join(dev, "vendor")))
        klass = parse_id(_read(os.path.join(dev, "class")))
        if vendor is None or klass is None:
            continue
        if is_nvidia_gpu(vendor, klass):
            device = (_read(os.path.join(dev, "device")) or "").lower()
            device = device[2:] if device.startswith("0x") else device
            driver = os.path.realpath(os.path.join(dev, "driver"))
            gpus.append(
                {
                    "address": name,
                    "pci_id": f"10de:{device}",
                    "driver": os.path.basename(driver) if os.path.exists(os.path.join(dev, "driver")) else None,
                    "injected": False,
                }
            )
        elif is_nvswitch(vendor, klass):
            switches.append(name)
    return gpus, switches


def secure_boot(root: str) -> str:
    efi = os.path.join(root, "sys/firmware/efi")
    if not os.path.isdir(efi):
        return "unsupported"
    try:
        with open(os.path.join(efi, "efivars", SECURE_BOOT_VAR), "rb") as handle:
            data = handle.read()
    except OSError:
        return "disabled"  # EFI boot without the variable: firmware without Secure Boot
    # efivarfs prefixes the value with 4 bytes of attributes; the value is one byte, 1 = on.
    return "enabled" if len(data) >= 5 and data[4] == 1 else "disabled"


def _release_key(release: str) -> list[str]:
    """'6.1.0-50-amd64' sorts after '6.1.0-9-amd64': numeric parts compare as numbers."""
    return [part.zfill(8) if part.isdigit() else part for part in re.split(r"[.-]", release)]


def installed_kernels(root: str) -> list[str]:
    try:
        names = os.listdir(os.path.join(root, "boot"))
    except OSError:
        return []
    releases = [n[len("vmlinuz-") :] for n in names if n.startswith("vmlinuz-")]
    return sorted(releases, key=_release_key)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pci_ids": {"type": "list", "elements": "str", "default": []},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    injected = [p.strip().lower() for p in module.params["pci_ids"]]
    bad = [p for p in injected if not PCI_ID.match(p)]
    if bad:
        module.fail_json(msg=f"pci_ids {bad} are not NVIDIA PCI ids; write them like '10de:15f8' (vendor:device).")
    gpus, switches = pci_devices(root)
    if injected:
        gpus = [
            {"address": f"injected:{i}", "pci_id": pci, "driver": None, "injected": True}
            for i, pci in enumerate(injected)
        ]
    module.exit_json(
        changed=False,
        ansible_facts={
            "gpulab_gpus": gpus,
            "gpulab_nvswitches": switches,
            "gpulab_secure_boot": secure_boot(root),
            "gpulab_kernel": os.uname().release,
            "gpulab_kernels": installed_kernels(root),
        },
    )


if __name__ == "__main__":
    main()
