"""Training in epochs over real data, with validation: `train_epochs(cfg, device, EpochSpec(...))`.

Importing this package does not import torch; training does.
"""

from __future__ import annotations

from gpulab.training.epochs import EpochSpec
from gpulab.training.loop import train_epochs

__all__ = ["EpochSpec", "train_epochs"]
