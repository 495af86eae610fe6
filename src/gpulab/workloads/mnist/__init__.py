"""MNIST: the classic two-convolution CNN of the Keras and PyTorch MNIST examples, declared for the registry.

torch_model.py holds the PyTorch model and session (and the settings both frameworks read), tf_model.py the Keras
model, data.py the MNIST IDX files (read, fetched, written from scikit-learn's digits), recipe.py its epochs.
"""

from __future__ import annotations

from typing import Any

from gpulab.workloads.registry import Workload

# size: (batch, steps); "full" is one epoch of the 60,000 training images
SIZES = {"tiny": (16, 2), "quick": (128, 20), "standard": (128, 100), "full": (128, 468)}
DEFAULTS: dict[str, Any] = {"optimizer": "adadelta", "learning_rate": None}  # lr None: 1.0 Adadelta, 0.01 SGD

WORKLOAD = Workload(
    name="mnist",
    sizes=SIZES,
    torch="gpulab.workloads.mnist.torch_model:build",
    params=DEFAULTS,
    tensorflow="gpulab.workloads.mnist.tf_model:build",
    order=1,
    recipe="gpulab.workloads.mnist.recipe:recipe",
    tf_epochs="gpulab.workloads.mnist.tf_model:epoch_parts",
    channels_last_gains=False,  # 28×28, one channel
    data_set="MNIST",
    generated_data="gpulab.workloads.mnist.data:generated_data",
    settings="gpulab.workloads.mnist.torch_model:settings",
)
