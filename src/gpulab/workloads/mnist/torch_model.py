"""MNIST: the classic two-convolution CNN of the Keras and PyTorch MNIST examples, Adadelta (or SGD)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads.mnist import DEFAULTS, SIZES
from gpulab.workloads.torch_session import (
    ClassifierSession,
    DeviceAugment,
    OwnOptimizer,
    Params,
    Task,
    batch_and_steps,
    build_classifier,
    choose_optimizer,
)

MEAN, STD = (0.1307,), (0.3081,)


def make_model() -> Any:
    """conv32-conv64-maxpool-dropout-fc128-dropout-fc10 on 28×28×1 (logits; the loss applies log-softmax)."""
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(9216, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, 10),
    )


@dataclass(frozen=True)
class Settings:
    """The run's checked size and parameters, read once for the torch and the TensorFlow versions."""

    batch: int
    steps: int
    optimizer: str
    lr: float


def settings(cfg: RunConfig) -> Settings:
    """Check `cfg` and its params for mnist; every problem is a GpulabError naming the param."""
    p = Params("mnist", cfg.params, DEFAULTS)
    batch, steps = batch_and_steps(cfg, SIZES)
    optimizer = p.choice("optimizer", ("adadelta", "sgd"))
    lr = p.number("learning_rate", above=True) if p.raw("learning_rate") is not None else None
    return Settings(batch, steps, optimizer, lr or (1.0 if optimizer == "adadelta" else 0.01))


def own_optimizer(st: Settings) -> OwnOptimizer:
    """Adadelta (or SGD with momentum 0.5) at the settings' rate, or at the rate a run overrides it with."""

    def make(params: Any, lr: float | None) -> Any:
        import torch

        if st.optimizer == "adadelta":
            return torch.optim.Adadelta(params, lr=lr or st.lr)
        return torch.optim.SGD(params, lr=lr or st.lr, momentum=0.5)

    return make


def build(cfg: RunConfig, device: str) -> ClassifierSession:
    from gpulab.workloads.data import InMemoryBatches
    from gpulab.workloads.mnist.data import read

    st = settings(cfg)
    batch, steps = st.batch, st.steps
    make_optimizer = choose_optimizer(cfg, own_optimizer(st))

    def real(root: Path) -> tuple[Any, bool]:
        return InMemoryBatches(*read(root)), True

    return build_classifier(
        cfg,
        device,
        batch=batch,
        steps=steps,
        make_model=make_model,
        make_optimizer=make_optimizer,
        task=Task((1, 28, 28), 10),
        synthetic_augment=None,
        real=real,
        real_augment=DeviceAugment(mean=MEAN, std=STD, channels_last=cfg.channels_last, seed=cfg.seed),
        info={"image_hw": [28, 28]},
    )
