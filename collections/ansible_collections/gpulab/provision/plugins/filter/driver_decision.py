"""`driver_decision`: what to do with the NVIDIA driver in place (gpulab.compat.existing), on the controller."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: driver_decision
short_description: Install, keep, replace or refuse, for the NVIDIA driver already on a host
description:
  - Decides from M(gpulab.provision.driver_facts)' C(gpulab_driver_installed), the pre-flight's
    C(gpulab_target_stack) and C(nvidia_driver_existing) (keep, replace, refuse), with gpulab.compat.existing.
version_added: "0.2.0"
author: gpulab
options:
  _input:
    description: C(gpulab_driver_installed).
    type: dict
    required: true
  target:
    description: C(gpulab_target_stack).
    type: dict
    required: true
  mode:
    description: keep, replace or refuse.
    type: str
    required: true
  host:
    description: The host's name, for the message.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    gpulab_preflight_driver_decision: >-
      {{ gpulab_driver_installed | gpulab.provision.driver_decision(gpulab_target_stack, 'keep', inventory_hostname) }}
"""

RETURN = r"""
_value:
  description: action (install, keep, replace, refuse), message, installed_version, packaging, remove_packages,
    runfile, dkms, held, change_held.
  type: dict
"""


def driver_decision(facts: dict[str, Any], target: dict[str, Any], mode: str, host: str) -> dict[str, Any]:
    with gpulab_required(AnsibleFilterError):
        from gpulab.compat.existing import decide
    try:
        return decide(dict(facts), dict(target), str(mode), str(host)).as_fact()
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"driver_decision": driver_decision}
