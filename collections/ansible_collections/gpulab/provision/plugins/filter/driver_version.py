"""`driver_version`: a driver request without its R (parsed by gpulab.names.driver_version)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: driver_version
short_description: A driver request without its R
description:
  - Parses a driver request (C(R580), C(580), C(580.95.05)) with gpulab.names, the one parser of driver branches,
    and returns it without its R (C(580), C(580.95.05)), the form apt pins and the runfile's name take. A request that
    is neither a branch nor a version fails, naming the spellings it takes.
version_added: "0.3.0"
author: gpulab
options:
  _input:
    description: The driver request (nvidia_driver_version).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: The requested driver as apt pins it
  ansible.builtin.debug:
    msg: "{{ 'R580' | gpulab.provision.driver_version }}"
"""

RETURN = r"""
_value:
  description: The branch (580) or the exact version (580.95.05).
  type: str
"""


def driver_version(value: Any) -> str:
    with gpulab_required(AnsibleFilterError):
        from gpulab.errors import GpulabError
        from gpulab.names import driver_version as plain
    try:
        return plain(value, "nvidia_driver_version")
    except GpulabError as err:
        raise AnsibleFilterError(str(err)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"driver_version": driver_version}
