"""`lookup('gpulab.provision.matrix', QUERY, ARG)`: single answers from gpulab's compatibility matrix."""

from __future__ import annotations

import dataclasses
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required

DOCUMENTATION = r"""
name: matrix
short_description: Read versions and facts from gpulab's compatibility matrix (src/gpulab/compat/matrix.yml)
description:
  - The matrix is the single source of versions; roles and inventories read it through this lookup instead of
    writing versions down.
  - "Queries: C(profile NAME) (a named stack), C(plan GPU) (newest coherent stack for a GPU name or PCI id),
    C(gpu GPU) (the GPU's record), C(min_driver CUDA) (oldest driver for a toolkit), C(driver_branch DRIVER)
    (the branch record), C(profiles) (all profile names), C(cudnn_wheels) (the pinned cuDNN wheels, the roles'
    default for cudnn_wheels)."
version_added: "0.1.0"
author: gpulab
options:
  _terms:
    description: The query name, then its argument.
    required: true
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Show the legacy profile
  ansible.builtin.debug:
    msg: "{{ lookup('gpulab.provision.matrix', 'profile', 'legacy-2018') }}"

- name: Oldest driver for CUDA 12.9
  ansible.builtin.debug:
    msg: "{{ lookup('gpulab.provision.matrix', 'min_driver', '12.9') }}"
"""

RETURN = r"""
_raw:
  description: The answer; a mapping for profile, plan, gpu, driver_branch and cudnn_wheels, a string for
    min_driver, a list for profiles.
  type: raw
"""


def _record(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


def _stack(stack: Any) -> dict[str, str]:
    return {k: v for k, v in stack.to_dict().items() if v}


QUERIES = {
    "profile": lambda c, arg: _stack(c.profile(arg)),
    "plan": lambda c, arg: _stack(c.plan_stack(arg)),
    "gpu": lambda c, arg: _record(c.resolve_gpu(arg)),
    "min_driver": lambda c, arg: c.min_driver_for_cuda(arg),
    "driver_branch": lambda c, arg: _record(c.rules.branch_record(arg)),
    "profiles": lambda c, arg: c.profile_names(),
    "cudnn_wheels": lambda c, arg: c.cudnn_wheel_pins(),
}
_NO_ARGUMENT = ("profiles", "cudnn_wheels")


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        if not terms or terms[0] not in QUERIES:
            raise AnsibleLookupError(
                f"gpulab.provision.matrix: unknown query {terms[:1]}; use one of {', '.join(QUERIES)}."
            )
        query, args = terms[0], [str(t) for t in terms[1:]]
        if query not in _NO_ARGUMENT and len(args) != 1:
            raise AnsibleLookupError(f"gpulab.provision.matrix: '{query}' takes one argument, got {args}.")
        with gpulab_required(AnsibleLookupError):
            import gpulab.compat as compat
        try:
            return [QUERIES[query](compat, args[0] if args else "")]
        except Exception as err:  # GpulabError: the message names the problem and the fix
            raise AnsibleLookupError(f"gpulab.provision.matrix: {err}") from err
