"""TensorFlow (tf.keras, Keras 3) versions of the training workloads: `build(cfg, strategy)` -> a Session.

The same names, sizes, parameters and data formats as the PyTorch workloads (their tables are imported from
gpulab.workloads.*). Importing this package does not import TensorFlow; building a session does. Launch them with
gpulab.launch.tf_launch, which runs every TensorFlow run in a fresh process.
"""

from __future__ import annotations

from typing import Any

from gpulab.errors import GpulabError
from gpulab.workloads.base import RunConfig

WORKLOADS = ("style_transfer", "mnist", "cifar10", "chexnet", "resnet50")


def build(cfg: RunConfig, strategy: Any = None) -> Any:
    """A session for `cfg.workload` under `strategy` (default: one device, the first GPU TensorFlow sees, else the
    CPU). The session has step(), samples_per_step (all replicas), steps, info and finish()."""
    if cfg.workload not in WORKLOADS:
        raise GpulabError(f"unknown workload {cfg.workload!r}; choose one of {', '.join(WORKLOADS)}")
    if cfg.workload == "style_transfer":
        from gpulab.workloads.tf.style_transfer import build as build_style

        return build_style(cfg, strategy)
    from gpulab.workloads.tf import classifiers
    from gpulab.workloads.tf.common import default_strategy

    builder = getattr(classifiers, f"build_{cfg.workload}")
    return builder(cfg, strategy if strategy is not None else default_strategy())


__all__ = ["WORKLOADS", "build"]
