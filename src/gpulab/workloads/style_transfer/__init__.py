"""Neural style transfer (Gatys et al.) on VGG19, declared for the registry: Adam optimises the image itself.

session.py holds the PyTorch session (and the settings and images both frameworks read), batch.py the runs of a
study optimised as one batch, loops.py the loss and the loops it runs in (eager, torch.compile, CUDA graphs), vgg.py
VGG19's features and weights, tf_session.py the tf.keras version.
"""

from __future__ import annotations

from typing import Any

from gpulab.workloads.registry import Workload

# size: (width in pixels, iterations); "full" is the classic run: 1000 iterations at 512 px (532×512 by default)
SIZES = {"tiny": (64, 10), "quick": (512, 100), "standard": (512, 300), "full": (512, 1000)}

DEFAULTS: dict[str, Any] = {
    "width": None,  # output width in pixels; None: the size's default
    "height": None,  # None: keep the content image's aspect ratio
    "iterations": None,  # None: cfg.steps or the size's default
    "learning_rate": 1e1,
    "beta1": 0.9,
    "beta2": 0.999,
    "epsilon": 1e-8,
    "style_scales": 1.0,  # one per style image, or one for all
    "content_weight": 5e0,
    "content_weight_blend": 1.0,  # relu4_2 gets blend, relu5_2 gets 1 - blend
    "style_weight": 5e2,
    "tv_weight": 1e2,
    "style_layer_weight_exp": 1.0,
    "pooling": "max",
    "initial": "noise",
    "content": None,  # image path; default: scikit-learn's china.jpg, else a generated image
    "style": None,  # image path or list of paths; default: scikit-learn's flower.jpg, else a generated image
    "output": None,  # where finish() writes the result image
    "vgg_weights": None,  # torchvision VGG19 state_dict (full model or features only): a path, imagenet or a URL
    "loop": "eager",  # eager | compile | compile-graphs | auto (torch only; see loops.LOOPS)
}

# The parameters whose values may differ between the runs of one batch (batch.py): numbers of
# the loss and the optimiser, each run's own; every other parameter and run field gives a batch of its own.
BATCH_SHARED = frozenset(
    {"content_weight", "content_weight_blend", "style_weight", "tv_weight", "style_layer_weight_exp", "learning_rate",
     "style_scales", "output"}
)  # fmt: skip

WORKLOAD = Workload(
    name="style_transfer",
    sizes=SIZES,
    torch="gpulab.workloads.style_transfer.session:build",
    params=DEFAULTS,
    tensorflow="gpulab.workloads.style_transfer.tf_session:build",
    order=0,
    optimises_input=True,
    autocast=False,  # its Gram matrices and losses stay fp32: bf16 autocast would only add casts (TF32 instead)
    imagenet_start="VGG19",
    references="gpulab.workloads.style_transfer.session:study_references",
    settings="gpulab.workloads.style_transfer.session:checked_settings",
    batch="gpulab.workloads.style_transfer.batch:build_batch",
    batch_shared=BATCH_SHARED,
)
