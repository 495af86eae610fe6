"""Training in epochs over real data, with validation: `train_epochs(cfg, device, EpochSpec(...))`.

Importing this package does not import torch; training does.
"""

from __future__ import annotations

from gpulab.training.epochs import EpochSpec
from gpulab.training.loop import train_epochs

__all__ = ["EpochSpec", "train_epochs"]

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ("epochs", "loop", "tf_epochs")
