"""`target_kernels`: the kernels the NVIDIA module is built for - the running one and the newest installed."""

from __future__ import annotations

import re
from typing import Any

DOCUMENTATION = r"""
name: target_kernels
short_description: The running and the newest installed kernel, the ones the NVIDIA module must be built for
description:
  - The input is C(gpulab_kernels) (the releases under C(/boot)). The result is the running kernel, where it is
    installed and the host is not an image (in a chroot the running kernel is the build host's), and the newest
    installed one. Older kernels are left out, as their headers may have left the archive.
version_added: "0.2.0"
author: gpulab
options:
  _input:
    description: Installed kernel releases.
    type: list
    elements: str
    required: true
  running:
    description: The running kernel release.
    type: str
    required: true
  image:
    description: True for a chroot or image, where the running kernel is not the target's.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Kernels to build for
  ansible.builtin.set_fact:
    kernels: "{{ gpulab_kernels | gpulab.provision.target_kernels(gpulab_kernel) }}"
"""

RETURN = r"""
_value:
  description: Kernel releases, the running one first.
  type: list
  elements: str
"""


def _key(release: str) -> list[str]:
    """'6.1.0-50-amd64' sorts after '6.1.0-9-amd64': numeric parts compare as numbers."""
    return [part.zfill(8) if part.isdigit() else part for part in re.split(r"[.-]", release)]


def target_kernels(installed: list[str], running: str, image: bool = False) -> list[str]:
    releases = sorted({str(k) for k in installed or []}, key=_key)
    targets = []
    if running and not image and (running in releases or not releases):
        targets.append(running)
    if releases and releases[-1] not in targets:
        targets.append(releases[-1])
    return targets


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"target_kernels": target_kernels}
