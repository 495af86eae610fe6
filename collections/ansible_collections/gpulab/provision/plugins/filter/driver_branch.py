"""`driver_branch`: the branch a driver request names, as a number (parsed by gpulab.names.DriverBranch)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: driver_branch
short_description: The driver branch a driver request names, as a number
description:
  - Parses a driver request (C(R580), C(580), C(580.95.05)) with gpulab.names.DriverBranch, the one parser of driver
    branches, and returns the branch number (580). A request that is neither a branch nor a version fails, naming
    the spellings it takes.
version_added: "0.3.0"
author: gpulab
options:
  _input:
    description: The driver request (nvidia_driver_version).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: The branch of the requested driver
  ansible.builtin.debug:
    msg: "{{ 'R580' | gpulab.provision.driver_branch }}"
"""

RETURN = r"""
_value:
  description: The branch number (580).
  type: int
"""


def driver_branch(value: Any) -> int:
    with gpulab_required(AnsibleFilterError):
        from gpulab.errors import GpulabError
        from gpulab.names import DriverBranch
    try:
        return DriverBranch.parse(value, "nvidia_driver_version").number
    except GpulabError as err:
        raise AnsibleFilterError(str(err)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"driver_branch": driver_branch}
