#!/usr/bin/python
"""Documentation of the framework_bundle action (it runs on the controller: plugins/action/framework_bundle.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: framework_bundle
short_description: Plan a node's framework wheels from gpulab's matrix and pack them with gpulab's wheel
description:
  - Runs on the controller. Picks (gpulab.compat.wheels) the torch build and TensorFlow package for the host's GPUs,
    driver and Python from gpulab's compatibility matrix (CPU builds on a host without NVIDIA GPUs), pins their exact
    releases from the constraints file when it pins the same release, builds gpulab's wheel from the checkout (version
    labelled with a hash of the source), and writes a reproducible tar holding C(requirements.txt), C(constraints.txt)
    and C(wheels/) (gpulab's wheel plus the wheelhouse, when one is given).
  - The archive is named by a hash of its content, so an unchanged plan reuses it and C(changed) is false.
version_added: "0.1.0"
author: gpulab
options:
  frameworks:
    description: Frameworks to install, any of C(torch), C(tensorflow); empty for gpulab and its base dependencies.
    type: list
    elements: str
    required: true
  extras:
    description: More gpulab extras to install with it (C(vm) for C(gpulab vm)); the frameworks bring their own.
    type: list
    elements: str
    default: []
  gpu_pci_ids:
    description: PCI ids of the host's NVIDIA GPUs (C(10de:15f8)); empty for a host without GPUs (CPU builds).
    type: list
    elements: str
    default: []
  driver:
    description: NVIDIA driver version on the host (or about to be installed); empty when unknown.
    type: str
    default: ""
  python:
    description: Python version of the node's venv (C(3.11)).
    type: str
    required: true
  torch:
    description: Requested torch release (C(2.13), C(2.13+cu126)); empty for the newest the matrix allows.
    type: str
    default: ""
  tensorflow:
    description: Requested TensorFlow release (C(2.21)); empty for the newest the matrix allows.
    type: str
    default: ""
  gpulab_source:
    description: gpulab checkout to build the wheel from.
    type: path
  gpulab_wheel:
    description: A built gpulab wheel to use instead of building one.
    type: path
  constraints:
    description: Constraints file (pip C(-c)); empty for none.
    type: str
    default: ""
  wheelhouse:
    description: Directory of wheels for an offline install (C(--no-index)); empty to use the indexes.
    type: str
    default: ""
  index_url:
    description: PyPI mirror (pip C(--index-url)); empty for pip's default. Not used with a wheelhouse.
    type: str
    default: ""
  torch_index_base:
    description: Base URL of torch's per-build indexes (C(<base>/cu126)); empty for the matrix's.
    type: str
    default: ""
  stage:
    description: Directory on the node the archive is unpacked to (paths in the requirements point there). Required
      unless I(plan_only).
    type: str
  cache_dir:
    description: Controller directory for built wheels and archives. Required unless I(plan_only).
    type: path
  plan_only:
    description: Check the request (the matrix's choice, the wheelhouse, constraints and gpulab source) and return
      the plan's summary without building or packing anything.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Plan and pack torch for this host
  gpulab.provision.framework_bundle:
    frameworks: [torch]
    gpu_pci_ids: "{{ gpulab_gpus | map(attribute='pci_id') }}"
    python: "3.11"
    gpulab_source: "{{ playbook_dir }}"
    constraints: "{{ playbook_dir }}/constraints.txt"
    stage: /opt/gpulab/stage/default
    cache_dir: "{{ playbook_dir }}/build/gpulab-bundles"
"""

RETURN = r"""
bundle:
  description: Controller path of the archive.
  type: str
  returned: unless plan_only
summary:
  description: One line saying what was chosen and why.
  type: str
  returned: always
requirements:
  description: The requirements file written into the archive.
  type: str
  returned: unless plan_only
gpulab_version:
  description: Version of the gpulab wheel in the archive.
  type: str
  returned: unless plan_only
dropped_pins:
  description: Constraint pins left out because the matrix picked another release of their framework.
  type: list
  elements: str
  returned: always
"""
