"""`gpu_pods`: the pods of a `kubectl get pods -o json` listing that hold GPUs and a drain must evict."""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: gpu_pods
short_description: The pods of a kubectl listing that request GPUs and are still running
description:
  - From the output of C(kubectl get pods -o json), the pods whose containers (init containers included) request
    or limit the GPU resource, that have not ended (phase neither Succeeded nor Failed) and that a DaemonSet does
    not own (the device plugin and the GPU Operator's own agents stay, as C(kubectl drain) leaves DaemonSet pods).
  - Returns C(namespace) and C(name) of each, sorted.
version_added: "0.3.0"
author: gpulab
options:
  _input:
    description: The JSON text kubectl printed (or it parsed).
    type: raw
    required: true
  resource:
    description: The extended resource that marks a GPU.
    type: str
    default: nvidia.com/gpu
"""

EXAMPLES = r"""
- name: The GPU pods on the node
  ansible.builtin.set_fact:
    pods: "{{ listing.stdout | gpulab.provision.gpu_pods }}"
"""

RETURN = r"""
_value:
  description: "[{namespace, name}] of each GPU pod still running."
  type: list
  elements: dict
"""


def _requests_gpu(pod: dict[str, Any], resource: str) -> bool:
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            if str((resources.get(kind) or {}).get(resource, "0")) not in ("0", ""):
                return True
    return False


def gpu_pods(listing: Any, resource: str = "nvidia.com/gpu") -> list[dict[str, str]]:
    try:
        data = json.loads(listing) if isinstance(listing, (str, bytes)) else listing
        items = data["items"]
    except (ValueError, TypeError, KeyError) as exc:
        raise AnsibleFilterError(
            f"gpu_pods: not the output of `kubectl get pods -o json` ({exc}); check kubectl's configuration "
            "(KUBECONFIG) on the host named by nvidia_driver_drain_delegate."
        ) from exc
    found = []
    for pod in items:
        meta = pod.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        if any(o.get("kind") == "DaemonSet" for o in owners):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if _requests_gpu(pod, resource):
            found.append({"namespace": str(meta.get("namespace", "default")), "name": str(meta.get("name", ""))})
    return sorted(found, key=lambda p: (p["namespace"], p["name"]))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpu_pods": gpu_pods}
