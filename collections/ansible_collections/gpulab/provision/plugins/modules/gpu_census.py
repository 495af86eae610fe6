#!/usr/bin/python
"""What runs on a host's GPUs before its driver changes or it reboots: compute and graphics processes, memory no
process explains, and running libvirt domains with a PCI device passed through (gpulab.hw.gpu_census)."""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.provision.plugins.module_utils import gpu_census

DOCUMENTATION = r"""
module: gpu_census
short_description: The work running on a host's GPUs (processes, unexplained memory, libvirt guests)
description:
  - Runs C(nvidia-smi -q -x) and lists, per GPU, the compute and MPS processes, graphics processes above the memory
    bound, and memory in use that no listed process explains (gpulab's process census, the bounds of its
    validation's C(occupancy.gpus_free)).
  - Where nvidia-smi fails although an NVIDIA module is loaded (a driver/library version mismatch), the processes
    holding C(/dev/nvidia*) open are listed instead; where no NVIDIA module is loaded nothing can run on a GPU.
  - On a host with C(virsh), the running libvirt domains that pass a PCI device through.
  - Reads only.
version_added: "0.3.0"
author: gpulab
options:
  gpus:
    description: Look at the GPUs' processes with nvidia-smi.
    type: bool
    default: true
  libvirt:
    description: Look for running libvirt domains with PCI devices passed through; C(auto) where C(virsh) exists.
    type: str
    choices: [auto, "yes", "no"]
    default: auto
  libvirt_uri:
    description: The libvirt connection to list domains on.
    type: str
    default: qemu:///system
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Look for work on the GPUs
  gpulab.provision.gpu_census:
  register: census
"""

RETURN = r"""
busy:
  description: Whether any work was found.
  returned: always
  type: bool
reasons:
  description:
    - "What was found, one entry per process, hidden memory or domain, e.g.
      C(pid 37305 python (compute) on GPUs 0, 1: 59.7 GiB)."
  returned: always
  type: list
  elements: str
source:
  description: Where the GPU census came from (nvidia-smi, the device files, or why nothing could run).
  returned: always
  type: str
domains:
  description: Running libvirt domains that pass PCI devices through, each with its addresses.
  returned: always
  type: list
  elements: dict
"""

LIBVIRT_SOCKETS = ("/run/libvirt/libvirt-sock", "/var/run/libvirt/libvirt-sock", "/run/libvirt/virtqemud-sock")


def _gpus(module: AnsibleModule) -> tuple[list[str], str]:
    smi = module.get_bin_path("nvidia-smi")
    loaded = os.path.isdir("/sys/module/nvidia")
    if smi:
        rc, out, err = module.run_command([smi, "-q", "-x"])
        if rc == 0:
            try:
                gpus = gpu_census.smi_gpus(out)
            except Exception as exc:  # any parse failure: fall back to the device files
                err = f"unreadable XML ({exc})"
            else:
                return gpu_census.busy_reasons(gpus), f"{smi} -q -x"
        why = (err or out).strip().splitlines()[-1:] or [f"exit {rc}"]
        if not loaded:
            return [], f"no NVIDIA module loaded ({smi} failed: {why[0]})"
        holders = gpu_census.device_holders()
        return holders, f"the processes holding /dev/nvidia* ({smi} failed: {why[0]})"
    if not loaded:
        return [], "no nvidia-smi and no NVIDIA module loaded"
    return gpu_census.device_holders(), "the processes holding /dev/nvidia* (no nvidia-smi)"


def _domains(module: AnsibleModule, uri: str) -> tuple[list[dict[str, Any]], list[str]]:
    virsh = module.get_bin_path("virsh")
    if not virsh:
        return [], []
    rc, out, err = module.run_command([virsh, "-c", uri, "list", "--name", "--state-running"])
    if rc != 0:
        if not any(os.path.exists(s) for s in LIBVIRT_SOCKETS):
            return [], []  # libvirt does not run: no domain it manages does either
        line = (err or out).strip().splitlines()[-1:] or [f"exit {rc}"]
        return [], [f"libvirt domains could not be listed ({virsh} -c {uri} list: {line[0]})"]
    domains, reasons = [], []
    for name in [n.strip() for n in out.splitlines() if n.strip()]:
        rc, xml, err = module.run_command([virsh, "-c", uri, "dumpxml", name])
        if rc != 0:
            reasons.append(f"domain {name}: its XML could not be read ({err.strip() or rc})")
            continue
        try:
            addresses = gpu_census.pci_hostdevs(xml)
        except Exception as exc:
            reasons.append(f"domain {name}: unreadable XML ({exc})")
            continue
        if addresses:
            domains.append({"name": name, "pci": addresses})
            reasons.append(f"libvirt domain {name} runs with {', '.join(addresses)} passed through")
    return domains, reasons


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "bool", "default": True},
            "libvirt": {"type": "str", "choices": ["auto", "yes", "no"], "default": "auto"},
            "libvirt_uri": {"type": "str", "default": "qemu:///system"},
        },
        supports_check_mode=True,
    )
    reasons, source = _gpus(module) if module.params["gpus"] else ([], "GPUs not looked at")
    domains: list[dict[str, Any]] = []
    if module.params["libvirt"] != "no":
        if module.params["libvirt"] == "yes" and not module.get_bin_path("virsh"):
            module.fail_json(msg="gpu_census: libvirt=yes but virsh is not installed; install libvirt-clients.")
        domains, found = _domains(module, module.params["libvirt_uri"])
        reasons += found
    module.exit_json(changed=False, busy=bool(reasons), reasons=reasons, source=source, domains=domains)


if __name__ == "__main__":
    main()
