"""What a workload is, for the launchers: a configuration in, a `Session` on one device out.

A launcher (cpu, gpu, ddp, dataparallel, sweep) builds a Session per process, optionally wraps its model
(DistributedDataParallel, DataParallel), runs `step()` in a timed loop and turns the count of samples into
a `Result`. Workloads never time themselves and never know how they were launched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class RunConfig:
    workload: str
    precision: str = "fp32"  # fp32 (TF32 off) | tf32 | bf16 (autocast)
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


class Session(Protocol):
    """A workload instantiated on one device, ready to train."""

    model: Any  # torch.nn.Module; None for workloads that optimise an input (style transfer)
    samples_per_step: int  # samples one step() consumes in this process
    steps: int  # timed steps the config asks for
    info: dict[str, Any]  # what ran: data source, weights, image size... (goes to Result.params)

    def wrap(self, wrapper: Callable[[Any], Any]) -> None:
        """Replace the model by wrapper(model) (DDP, DataParallel); the optimiser keeps the same parameters."""

    def step(self) -> Any:
        """One training step (data fetch included); returns the loss tensor without synchronising."""

    def finish(self) -> dict[str, Any]:
        """After the timed loop: write outputs (style transfer's image), return extra facts for the report."""


Builder = Callable[[RunConfig, str], Session]  # (config, device "cpu" | "cuda:K") -> Session
