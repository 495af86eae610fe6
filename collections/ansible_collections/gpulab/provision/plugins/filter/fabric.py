"""`fabric_states`: each GPU's NVLink fabric state from `nvidia-smi -q -x`, and what is wrong with it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

DOCUMENTATION = r"""
name: fabric_states
short_description: Each GPU's NVLink fabric state and status, from C(nvidia-smi -q -x) output
description:
  - One entry per C(<gpu>) with C(bus_id), C(name), C(state) and C(status) from its C(<fabric>) element (C(N/A)
    where the driver reports none - GPUs before Hopper, or a driver older than R525).
  - C(problem) is empty when the GPU is ready - state C(Completed) with status C(Success), or C(N/A) - and says
    what is wrong otherwise (C(In Progress) while Fabric Manager trains the links, C(Not Started) when it does not
    run).
version_added: "0.1.0"
author: gpulab
options:
  _input:
    description: The output of C(nvidia-smi -q -x).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: GPUs whose fabric is not ready
  ansible.builtin.debug:
    msg: "{{ smi_xml.stdout | gpulab.provision.fabric_states | selectattr('problem') | list }}"
"""

RETURN = r"""
_value:
  description: One dict per GPU (bus_id, name, state, status, problem), in nvidia-smi's order.
  type: list
  elements: dict
"""

READY = ("Completed", "Success")


def _text(node: ET.Element | None, path: str) -> str:
    found = node.find(path) if node is not None else None
    return (found.text or "").strip() if found is not None and found.text else "N/A"


def fabric_states(smi_xml: str) -> list[dict[str, str]]:
    try:
        root = ET.fromstring(smi_xml)
    except ET.ParseError as err:
        raise ValueError(f"nvidia-smi -q -x output is not XML ({err})") from err
    states = []
    for gpu in root.iter("gpu"):
        fabric = gpu.find("fabric")
        state, status = _text(fabric, "state"), _text(fabric, "status")
        if state == "N/A" or (state, status) == READY:
            problem = ""
        elif state == "Completed":
            problem = f"fabric training completed with status {status}"
        else:
            problem = f"fabric state {state} (status {status})"
        states.append(
            {
                "bus_id": gpu.get("id", "?"),
                "name": _text(gpu, "product_name"),
                "state": state,
                "status": status,
                "problem": problem,
            }
        )
    return states


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fabric_states": fabric_states}
