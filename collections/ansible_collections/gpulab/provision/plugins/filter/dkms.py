"""`dkms_kernels`: the kernels for which `dkms status` reports an installed NVIDIA module of a version."""

from __future__ import annotations

import re
from typing import Any

DOCUMENTATION = r"""
name: dkms_kernels
short_description: Kernels with an installed NVIDIA DKMS module, from C(dkms status) output
description:
  - Reads DKMS 3 lines (C(nvidia-current/535.261.03, 6.1.0-50-amd64, x86_64: installed)) and DKMS 2 lines
    (C(nvidia, 535.261.03, 5.15.0-91-generic, x86_64: installed)); modules named C(nvidia*) only.
version_added: "0.1.0"
author: gpulab
options:
  _input:
    description: The output of C(dkms status).
    type: str
    required: true
  version_regex:
    description: Regular expression the module version must match from its start.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Kernels that have NVIDIA 535.261.03
  ansible.builtin.debug:
    msg: "{{ dkms_status.stdout | gpulab.provision.dkms_kernels('^535\\.261\\.03') }}"
"""

RETURN = r"""
_value:
  description: Kernel releases, in the order dkms lists them.
  type: list
  elements: str
"""

_LINE = re.compile(r"^(nvidia[\w-]*)(?:/|,\s*)([^,\s]+),\s*([^,\s]+),\s*[^:]+:\s*installed\b", re.MULTILINE)


def dkms_kernels(status: str, version_regex: str) -> list[str]:
    version = re.compile(version_regex)
    kernels = []
    for _module, module_version, kernel in _LINE.findall(status or ""):
        if version.match(module_version) and kernel not in kernels:
            kernels.append(kernel)
    return kernels


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"dkms_kernels": dkms_kernels}
