"""Epoch training: every sample of the training set once per epoch (shuffled with cfg.seed), then the validation
set, for `EpochSpec.epochs` epochs; throughput, losses, the validation metric and the time to a target metric.

Under torch.distributed (the DDP launcher) each rank trains on its DistributedSampler shard and the validation set
is split over the ranks and gathered, so every rank computes the metric over the whole set. A `wrapper`
(DataParallel, DistributedDataParallel) wraps the model for training; validation runs on the bare model.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulab import names
from gpulab.errors import GpulabError

if TYPE_CHECKING:
    from gpulab.workloads.recipes import Recipe

EpochListener = Callable[[dict[str, Any]], None]
_LISTENER: ContextVar[EpochListener | None] = ContextVar("gpulab_epoch_listener", default=None)


@dataclass(frozen=True)
class EpochSpec:
    """How to train in epochs. Every field is checked when the spec is made (a GpulabError naming the option)."""

    epochs: int  # ≥ 1
    val_fraction: float = 0.1  # held-out share of the training data when the data set has no test split
    optimizer: str | None = None  # names.OPTIMIZERS; None: the workload's own
    learning_rate: float | None = None
    target_accuracy: float | None = None  # time to reach this validation metric (0..1]
    weights: Path | None = None  # a torch state_dict loaded before training
    save_weights: Path | None = None  # where the trained model's state_dict goes (torch.save), written atomically

    def __post_init__(self) -> None:
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise GpulabError(f"--epochs must be a whole number of at least 1, not {self.epochs!r}")
        if not _number(self.val_fraction) or not 0 < self.val_fraction < 1:
            raise GpulabError(f"--val-fraction must be a number between 0 and 1 (exclusive), not {self.val_fraction!r}")
        if self.optimizer is not None:
            names.optimizer(self.optimizer, who="--optimizer")
        if self.learning_rate is not None and (not _number(self.learning_rate) or self.learning_rate <= 0):
            raise GpulabError(f"--lr must be a positive number, not {self.learning_rate!r}")
        if self.target_accuracy is not None and (
            not _number(self.target_accuracy) or not 0 < self.target_accuracy <= 1
        ):
            raise GpulabError(f"--target-accuracy must be a number in (0, 1], not {self.target_accuracy!r}")
        for name in ("weights", "save_weights"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))

    def to_dict(self) -> dict[str, Any]:
        return {
            "epochs": self.epochs,
            "val_fraction": self.val_fraction,
            "optimizer": self.optimizer,
            "learning_rate": self.learning_rate,
            "target_accuracy": self.target_accuracy,
            "weights": str(self.weights) if self.weights is not None else None,
            "save_weights": str(self.save_weights) if self.save_weights is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EpochSpec:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for name in ("weights", "save_weights"):
            if known.get(name) is not None:
                known[name] = Path(known[name])
        return cls(**known)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@contextlib.contextmanager
def listening(listener: EpochListener | None) -> Iterator[None]:
    """Call `listener` with each epoch's record as it finishes, in runs started inside this block."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def current_listener() -> EpochListener | None:
    return _LISTENER.get()


def epoch_record(
    r: Recipe,
    epochs: list[dict[str, Any]],
    *,
    workload: str,
    metric: str,
    total_s: float,
    time_to_target_s: float | None,
    target: float | None,
    batch: int,
    steps: int,
    world: int,
    optimizer: Any,
    learning_rate: float | None,
    weights: str | None,
    saved_weights: str | None,
    notes: list[str],
    facts: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON-able record of an epoch run, its totals drawn from `epochs`.

    The torch loop and tf.keras' fit both write it, so that reports read the two frameworks' runs alike."""
    from gpulab.report.io import jsonable

    metrics = [e["val_metric"] for e in epochs if e["val_metric"] is not None]
    split = r.split
    train_s = sum(e["seconds"] for e in epochs)
    samples = sum(e["samples"] for e in epochs)
    return jsonable(
        {
            "workload": workload,
            "metric": metric,
            "epochs": epochs,
            "total_s": total_s,
            "train_s": train_s,
            "samples_per_s": samples / train_s if train_s > 0 else None,
            "time_to_target_s": time_to_target_s,
            "target": target,
            "final_metric": epochs[-1]["val_metric"] if epochs else None,
            "best_metric": max(metrics) if metrics else None,
            "train_samples": len(split.train),
            "val_samples": len(split.val),
            "data": split.source,
            "validation": split.val_source,
            "classes": r.task.classes,
            "batch": batch,
            "steps": steps,
            "world": world,
            "optimizer": type(optimizer).__name__,
            "learning_rate": learning_rate,
            "weights": weights,
            "saved_weights": saved_weights,
            "notes": notes,
            **facts,
        }
    )
