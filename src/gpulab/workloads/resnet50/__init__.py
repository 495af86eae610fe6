"""ResNet50 (285 classes) at 224×224, declared for the registry.

torch_model.py holds the PyTorch model and session (and the settings both frameworks read), tf_model.py the Keras
model, data.py its generated images, recipe.py its epochs; it reads the image folders of gpulab.workloads.data.
"""

from __future__ import annotations

from typing import Any

from gpulab.workloads.registry import Workload

# size: (batch per device, steps)
SIZES = {"tiny": (2, 2), "quick": (64, 20), "standard": (128, 100), "full": (256, 500)}
DEFAULTS: dict[str, Any] = {
    "image": None,
    "num_classes": 285,
    "learning_rate": 0.1,
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "pretrained": None,  # imagenet (torchvision's weights, all but the fc head), a URL or a file; None: random
}

WORKLOAD = Workload(
    name="resnet50",
    sizes=SIZES,
    torch="gpulab.workloads.resnet50.torch_model:build",
    params=DEFAULTS,
    tensorflow="gpulab.workloads.resnet50.tf_model:build",
    order=4,
    recipe="gpulab.workloads.resnet50.recipe:recipe",
    tf_epochs="gpulab.workloads.resnet50.tf_model:epoch_parts",
    cpu_batch=8,  # one single-thread ResNet50 step at batch 128 takes over a minute
    data_set="ImageNet",
    generated_data="gpulab.workloads.resnet50.data:generated_data",
    settings="gpulab.workloads.resnet50.torch_model:settings",
)
