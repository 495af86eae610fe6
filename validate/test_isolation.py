"""Isolation: a process pinned with CUDA_VISIBLE_DEVICES sees and allocates on its own GPU only.

The seeds' trouble: a framework pinned to one card took memory on all four. Checked for each installed framework.
"""

import importlib.util

import pytest

from gpulab.validation import verdicts
from gpulab.validation.live import pinned_allocations


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_pinned_process_allocates_on_its_gpu_only(lab, verdict, framework):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    verdict(verdicts.isolation(pinned_allocations(lab.gpus, lab.fingerprint.gpus, framework), framework))
