"""What one training run is asked to do: the workload, its precision, batch, steps, data and knobs. Every launcher,
study and check builds one; the workloads read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.names import Precision


@dataclass
class RunConfig:
    workload: str
    precision: Precision = Precision.FP32  # parsed at the edges (a study's "plan" is resolved to one before a run)
    channels_last: bool = False
    batch: int | None = None  # per device (weak scaling); None = the workload's default for `size`
    steps: int | None = None  # timed steps (iterations for style transfer); None = default for `size`
    warmup: int = 3
    size: str = "standard"  # one of gpulab.names.SIZES
    data: Path | None = None  # real data; None = synthetic tensors of the real shapes
    num_workers: int | None = None  # DataLoader workers for real data; None: a share of the cores (loader_workers)
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)  # workload-specific knobs (style transfer's width...)
    optimizer: str | None = None  # gpulab.names.OPTIMIZERS; None: the workload's own
    learning_rate: float | None = None  # None: the optimiser's default (the workload's for its own)
