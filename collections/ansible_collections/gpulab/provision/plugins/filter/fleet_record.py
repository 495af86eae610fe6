"""`fleet_record`: the fleet's driver branch written down beside the inventory (gpulab.compat.fleet_record)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: fleet_record
short_description: The fleet's driver branch an earlier pre-flight wrote down
description:
  - Reads the file on the controller with gpulab.compat.fleet_record and returns its driver_branch, chosen (the
    date) and hosts; an empty dict where the file does not exist yet. A file that is not such a record fails,
    naming what is wrong and the fix.
version_added: "0.3.0"
author: gpulab
options:
  _input:
    description: The file's path on the controller (gpulab_preflight_fleet_file).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The branch an earlier run chose
  ansible.builtin.set_fact:
    record: "{{ gpulab_preflight_fleet_file | gpulab.provision.fleet_record }}"
"""

RETURN = r"""
_value:
  description: "{driver_branch, chosen, hosts}, or {} where there is no record."
  type: dict
"""


def fleet_record(path: str) -> dict[str, Any]:
    with gpulab_required(AnsibleFilterError):
        from gpulab.compat.fleet_record import read
        from gpulab.errors import GpulabError
    try:
        record = read(path)
    except GpulabError as err:
        raise AnsibleFilterError(str(err)) from None
    if record is None:
        return {}
    return {"driver_branch": record.driver_branch, "chosen": record.chosen, "hosts": list(record.hosts)}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fleet_record": fleet_record}
