"""What a workload is, for the launchers: a configuration in, a `Session` on one device out.

A launcher (cpu, gpu, ddp, dataparallel, sweep) builds a Session per process, optionally wraps its model
(DistributedDataParallel, DataParallel), runs `step()` in a timed loop and turns the count of samples into
a `Result`. Workloads never time themselves and never know how they were launched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gpulab.records import RunConfig


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
