#!/usr/bin/python
"""Documentation of the stack_check action, which runs on the controller (plugins/action/stack_check.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: stack_check
short_description: Resolve a host's driver/CUDA/cuDNN/framework stack from gpulab's matrix and refuse incoherent ones
description:
  - Runs on the controller; the decision is gpulab.compat.resolve's (C(gpulab matrix resolve) shows it for a host
    described on the command line). Starts from a profile of src/gpulab/compat/matrix.yml (or, with C(auto), the newest
    stack the configured I(sources) deliver for the host's GPUs on its OS), applies the inventory's overrides, and
    checks the result for every GPU model on the host with gpulab.compat.check_stack, against what the sources
    deliver, plus the kernel-module flavour, Secure Boot and the OS release.
  - Fails listing every problem with its fix (for a source that cannot deliver, the source to switch to); on
    success sets the fact C(gpulab_target_stack) the roles read.
version_added: "0.1.0"
author: gpulab
options:
  gpus:
    description: The host's GPUs, as C(gpulab_gpus) from M(gpulab.provision.gpu_facts).
    type: list
    elements: dict
    required: true
  nvswitches:
    description: NVSwitch PCI addresses (C(gpulab_nvswitches)).
    type: list
    elements: str
    default: []
  profile:
    description: C(auto), C(none) or a profile name from the matrix (C(modern)).
    type: str
    default: auto
  stack:
    description:
      - Overrides of the profile, keys C(driver), C(cuda) (string C(9.0,10.0) or list), C(cudnn), C(torch),
        C(tensorflow), C(python), C(kernel_modules) (C(auto), C(open), C(proprietary)).
    type: dict
    default: {}
  host_python:
    description: The host's Python major.minor, used unless I(stack.python) is set.
    type: str
  distribution:
    description: The host's distribution (C(Debian), C(Ubuntu)).
    type: str
  distribution_version:
    description: Its release (C(12), C(24.04)).
    type: str
  secure_boot:
    description: C(gpulab_secure_boot) from M(gpulab.provision.gpu_facts).
    type: str
    choices: [enabled, disabled, unsupported]
    default: unsupported
  secure_boot_signing:
    description: DKMS signs modules with a Machine Owner Key enrolled on the host, so Secure Boot may stay on.
    type: bool
    default: false
  precompiled_modules:
    description:
      - Ubuntu's archive driver with Canonical's prebuilt, signed modules (the nvidia_driver role's
        C(nvidia_driver_precompiled_modules)), which load under Secure Boot with no key of the host's own.
    type: bool
    default: false
  sources:
    description:
      - Where each part comes from (the roles' C(nvidia_driver_source), C(cuda_toolkit_source), C(cudnn_source)).
    type: dict
    default: {}
    suboptions:
      driver:
        description: C(distro), C(cuda_repo) or C(runfile).
        type: str
        default: distro
      cuda:
        description: C(distro), C(cuda_repo) or C(runfile).
        type: str
        default: distro
      cudnn:
        description: C(wheel), C(cuda_repo) or C(archive).
        type: str
        default: wheel
  cudnn_wheels:
    description: The cuDNN wheels pinned for the C(wheel) source, keyed C(<cuDNN>-cu<CUDA major>); keys are read.
    type: dict
    default: {}
  cudnn_archives:
    description: The cuDNN archives for the C(archive) source, keyed C(<cuDNN>-cu<CUDA major.minor>); keys are read.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Check the requested stack
  gpulab.provision.stack_check:
    gpus: "{{ gpulab_gpus }}"
    profile: modern
    sources: {driver: cuda_repo, cuda: cuda_repo, cudnn: wheel}
    cudnn_wheels: "{{ cudnn_wheels }}"
"""

RETURN = r"""
ansible_facts:
  description: C(gpulab_target_stack) with driver, driver_branch, kernel_modules, cuda (list), cuda_default,
    cudnn, cudnn_by_cuda, torch, torch_index_url, tensorflow, python, gpus, has_gpu, nvswitch, os, profile,
    sources.
  returned: success
  type: dict
msg:
  description: The decision in one line, or every reason the stack cannot work, each with its fix.
  returned: always
  type: str
"""
