"""`nvidia_repo_packages`: the package names NVIDIA's apt repositories give a driver branch (gpulab.compat)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: nvidia_repo_packages
short_description: NVIDIA's repository package names for a driver branch
description:
  - The names come from the compatibility matrix (nvidia_repository_packages), taken from NVIDIA's Driver
    Installation Guide. From R580 a branch is locked with C(nvidia-driver-pinning-<branch>), installed first, and the
    driver and Fabric Manager are the unversioned C(cuda-drivers) / C(nvidia-open) and C(nvidia-fabricmanager).
version_added: "0.2.0"
author: gpulab
options:
  _input:
    description: The driver branch (580) or version (580.95.05).
    type: str
    required: true
  modules:
    description: open or proprietary kernel modules.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Names for R580 with the open modules
  ansible.builtin.debug:
    msg: "{{ '580' | gpulab.provision.nvidia_repo_packages('open') }}"
"""

RETURN = r"""
_value:
  description: pinning (a list, empty before R580), driver, persistenced and fabricmanager package name lists.
  type: dict
"""


def nvidia_repo_packages(branch: Any, modules: str) -> dict[str, list[str]]:
    with gpulab_required(AnsibleFilterError):
        from gpulab.compat.repo_packages import nvidia_repo_packages as names
    try:
        return names(str(branch), str(modules))
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_repo_packages": nvidia_repo_packages}
