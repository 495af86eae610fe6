"""`fleet_record_text`: the text of the fleet record the pre-flight writes (gpulab.compat.fleet_record)."""

from __future__ import annotations

import datetime
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: fleet_record_text
short_description: The fleet record's text for a driver branch
description:
  - What gpulab.compat.fleet_record.render writes for the branch, today's date and the nodes that chose it; the
    fleet_record filter reads it back.
version_added: "0.3.0"
author: gpulab
options:
  _input:
    description: The branch ("580").
    type: str
    required: true
  hosts:
    description: The nodes of the play that chose it.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Write the branch down
  ansible.builtin.copy:
    content: "{{ gpulab_preflight_fleet_driver | gpulab.provision.fleet_record_text(ansible_play_hosts) }}"
    dest: "{{ gpulab_preflight_fleet_file }}"
    mode: "0644"
  delegate_to: localhost
"""

RETURN = r"""
_value:
  description: The file's text.
  type: str
"""


def fleet_record_text(branch: str, hosts: list[str]) -> str:
    with gpulab_required(AnsibleFilterError):
        from gpulab.compat.fleet_record import FleetRecord, render
    return render(FleetRecord(str(branch), datetime.date.today().isoformat(), tuple(hosts)))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fleet_record_text": fleet_record_text}
