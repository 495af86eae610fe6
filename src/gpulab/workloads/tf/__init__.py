"""TensorFlow (tf.keras, Keras 3) versions of the training workloads: `build(cfg, strategy)` -> a Session.

The same names, sizes, parameters and data formats as the PyTorch workloads (their tables are imported from
gpulab.workloads.*). Importing this package does not import TensorFlow; building a session does. Launch them with
gpulab.launch.tf_launch, which runs every TensorFlow run in a fresh process.
"""

from __future__ import annotations

from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads.registry import REGISTRY


def build(cfg: RunConfig, strategy: Any = None) -> Any:
    """A session for `cfg.workload` under `strategy` (default: one device, the first GPU TensorFlow sees, else the
    CPU). The session has step(), samples_per_step (all replicas), steps, info and finish()."""
    workload = REGISTRY[cfg.workload]
    builder = workload.builder("tensorflow")
    if strategy is None and not workload.optimises_input:  # an optimised input runs on one device, unwrapped
        from gpulab.workloads.tf.session import default_strategy

        strategy = default_strategy()
    return builder(cfg, strategy)


__all__ = ["build"]
