"""CheXNet: DenseNet121 with 14 sigmoid outputs (ChestX-ray14 findings), declared for the registry.

torch_model.py holds the PyTorch model and session (and the settings both frameworks read), tf_model.py the Keras
model, data.py ChestX-ray14 as NIH publishes it or as a labels CSV (and generated images), recipe.py its epochs.
"""

from __future__ import annotations

from typing import Any

from gpulab.workloads.registry import Workload

# size: (batch, steps); "full" is one epoch of the 78,468-image training split at batch 64
SIZES = {"tiny": (2, 2), "quick": (32, 20), "standard": (64, 100), "full": (64, 1226)}
# image: crop side (loads at side·264/224); pretrained: imagenet (CheXNet's start), a URL or a file; None: random
DEFAULTS: dict[str, Any] = {"image": None, "learning_rate": 1e-3, "pretrained": None}

WORKLOAD = Workload(
    name="chexnet",
    sizes=SIZES,
    torch="gpulab.workloads.chexnet.torch_model:build",
    params=DEFAULTS,
    tensorflow="gpulab.workloads.chexnet.tf_model:build",
    order=3,
    metric="mean AUC",
    recipe="gpulab.workloads.chexnet.recipe:recipe",
    cpu_batch=8,  # one single-thread DenseNet121 step at the size's batch takes minutes
    data_set="ChestX-ray14",
    imagenet_start="DenseNet121",
    start_param="pretrained",
    generated_data="gpulab.workloads.chexnet.data:generated_data",
    settings="gpulab.workloads.chexnet.torch_model:settings",
)
