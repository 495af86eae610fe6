"""GPU / driver / CUDA / cuDNN / framework compatibility matrix.

All facts live in `matrix.yml` (each with its source); this package loads them and answers questions:
which GPU is this PCI id, what driver does CUDA 12.9 need, does this stack work on a P100, what is the
newest stack for an H200.
"""

from __future__ import annotations

from gpulab.compat import current
from gpulab.compat.check import Incompatibility, Stack, check_stack, selected_torch_build
from gpulab.compat.data import GpuSpec, cudnn_wheel_pins, load_matrix
from gpulab.compat.gpu_names import CONSUMER, DATA_CENTRE, product_class
from gpulab.compat.gpus import all_gpus, gpu_by_name, gpu_by_pci_id, gpu_for, normalize_pci_id, resolve_gpu
from gpulab.compat.legacy import (
    ARCH_CC,
    architecture_for_pci_id,
    compute_capability_for_pci_id,
    newest_stack,
    sole_compute_capability,
)
from gpulab.compat.plan import plan_stack, profile, profile_names
from gpulab.compat.rules import (
    cuda_supports_cc,
    driver_branch,
    driver_supports_arch,
    matrix_arch,
    max_cuda_for_driver,
    min_driver_for_cuda,
    newest_branch_for_arch,
)

__all__ = [
    "ARCH_CC",
    "CONSUMER",
    "DATA_CENTRE",
    "GpuSpec",
    "Incompatibility",
    "Stack",
    "all_gpus",
    "architecture_for_pci_id",
    "check_stack",
    "compute_capability_for_pci_id",
    "cuda_supports_cc",
    "cudnn_wheel_pins",
    "current",
    "driver_branch",
    "driver_supports_arch",
    "gpu_by_name",
    "gpu_by_pci_id",
    "gpu_for",
    "load_matrix",
    "matrix_arch",
    "max_cuda_for_driver",
    "min_driver_for_cuda",
    "newest_branch_for_arch",
    "newest_stack",
    "normalize_pci_id",
    "plan_stack",
    "product_class",
    "profile",
    "profile_names",
    "resolve_gpu",
    "selected_torch_build",
    "sole_compute_capability",
]

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ("current", "gpus")
