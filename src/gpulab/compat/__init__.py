"""GPU / driver / CUDA / cuDNN / framework compatibility matrix.

All facts live in `matrix.yml` (each with its source); this package loads them and answers questions:
which GPU is this PCI id, what driver does CUDA 12.9 need, does this stack work on a P100, what is the
newest stack for an H200.
"""

from __future__ import annotations

from gpulab.compat.check import Incompatibility, Stack, check_stack, selected_torch_build
from gpulab.compat.data import GpuSpec, cudnn_wheel_pins, load_matrix
from gpulab.compat.gpus import all_gpus, gpu_by_name, gpu_by_pci_id, normalize_pci_id, resolve_gpu
from gpulab.compat.plan import plan_stack, profile, profile_names
from gpulab.compat.rules import (
    cuda_supports_cc,
    driver_branch,
    driver_supports_arch,
    max_cuda_for_driver,
    min_driver_for_cuda,
)

__all__ = [
    "GpuSpec",
    "Incompatibility",
    "Stack",
    "all_gpus",
    "check_stack",
    "cuda_supports_cc",
    "cudnn_wheel_pins",
    "driver_branch",
    "driver_supports_arch",
    "gpu_by_name",
    "gpu_by_pci_id",
    "load_matrix",
    "max_cuda_for_driver",
    "min_driver_for_cuda",
    "normalize_pci_id",
    "plan_stack",
    "profile",
    "profile_names",
    "resolve_gpu",
    "selected_torch_build",
]
