"""`fleet_branch`: the one driver branch for every node of the play (gpulab.compat.lifecycle), on the controller."""

from __future__ import annotations

import datetime
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: fleet_branch
short_description: The newest supported long-term driver branch that drives every node's GPUs
description:
  - From each node's C(gpulab_target_stack) (nodes without one, or without a planned driver, are left out), with
    gpulab.compat.lifecycle.fleet_branch. Returns the branch number as a string, or an empty string where no one
    branch drives every node.
version_added: "0.2.0"
author: gpulab
options:
  _input:
    description: C(hostvars).
    type: raw
    required: true
  hosts:
    description: The nodes (C(ansible_play_hosts)).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: One branch for the fleet
  ansible.builtin.set_fact:
    gpulab_preflight_fleet_driver: "{{ hostvars | gpulab.provision.fleet_branch(ansible_play_hosts) }}"
"""

RETURN = r"""
_value:
  description: The branch ("580"), or "" when none drives every node.
  type: str
"""


def fleet_branch(hostvars: Any, hosts: list[str]) -> str:
    with gpulab_required(AnsibleFilterError):
        from gpulab.compat.lifecycle import fleet_branch as choose
    plans = {}
    for host in hosts:
        target = hostvars[host].get("gpulab_target_stack")
        if isinstance(target, dict) and target.get("driver"):
            plans[host] = dict(target)
    branch = choose(plans, datetime.date.today())
    return "" if branch is None else str(branch)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fleet_branch": fleet_branch}
