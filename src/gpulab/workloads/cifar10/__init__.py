"""CIFAR-10: VGG19 with batch norm for 32×32 inputs, declared for the registry.

torch_model.py holds the PyTorch model and session (and the settings both frameworks read), tf_model.py the Keras
model, data.py the CIFAR-10 python batches (read, fetched, generated), recipe.py its epochs.
"""

from __future__ import annotations

from typing import Any

from gpulab.workloads.registry import Workload

# size: (batch, steps); "full" is one epoch of the 50,000 training images
SIZES = {"tiny": (8, 2), "quick": (128, 20), "standard": (128, 100), "full": (128, 390)}
DEFAULTS: dict[str, Any] = {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 5e-4}

WORKLOAD = Workload(
    name="cifar10",
    sizes=SIZES,
    torch="gpulab.workloads.cifar10.torch_model:build",
    params=DEFAULTS,
    tensorflow="gpulab.workloads.cifar10.tf_model:build",
    order=2,
    recipe="gpulab.workloads.cifar10.recipe:recipe",
    data_set="CIFAR-10",
    generated_data="gpulab.workloads.cifar10.data:generated_data",
    settings="gpulab.workloads.cifar10.torch_model:settings",
)
