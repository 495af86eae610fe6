"""CIFAR-10: VGG19 with batch norm for 32×32 inputs (torchvision's VGG19-bn features, a 512→10 classifier),
SGD with momentum; random crop (4-pixel zero padding) and horizontal flip on the device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads.cifar10 import DEFAULTS, SIZES
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

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def make_model(classes: int = 10) -> Any:
    """The standard CIFAR VGG19: torchvision's VGG19-bn feature layers (32×32 → 512×1×1), then Linear(512, classes)."""
    import torch.nn as nn

    from gpulab.workloads.tv import import_torchvision

    vgg = import_torchvision().models.vgg
    features = vgg.make_layers(vgg.cfgs["E"], batch_norm=True)
    model = nn.Sequential(features, nn.Flatten(), nn.Linear(512, classes))
    for m in model.modules():  # torchvision's VGG initialisation
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    return model


@dataclass(frozen=True)
class Settings:
    """The run's checked size and parameters, read once for the torch and the TensorFlow versions."""

    batch: int
    steps: int
    lr: float
    momentum: float
    weight_decay: float


def settings(cfg: RunConfig) -> Settings:
    """Check `cfg` and its params for cifar10; every problem is a GpulabError naming the param."""
    p = Params("cifar10", cfg.params, DEFAULTS)
    batch, steps = batch_and_steps(cfg, SIZES)
    return Settings(
        batch, steps, p.number("learning_rate", above=True), p.number("momentum", maximum=1.0), p.number("weight_decay")
    )


def own_optimizer(st: Settings) -> OwnOptimizer:
    """SGD with the settings' momentum and weight decay, at their rate or the one a run overrides it with."""

    def make(params: Any, lr: float | None) -> Any:
        import torch

        return torch.optim.SGD(params, lr=lr or st.lr, momentum=st.momentum, weight_decay=st.weight_decay)

    return make


def build(cfg: RunConfig, device: str) -> ClassifierSession:
    from gpulab.workloads.cifar10.data import is_class_folder, read
    from gpulab.workloads.data import ClassFolder, InMemoryBatches

    st = settings(cfg)
    batch, steps = st.batch, st.steps
    make_optimizer = choose_optimizer(cfg, own_optimizer(st))
    classes = [10]  # a class-per-folder data set sets its own count before the model is built

    def real(root: Path) -> tuple[Any, bool]:
        if is_class_folder(root):
            found = ClassFolder.read(root, "cifar10")
            classes[0] = len(found.classes)
            return found.dataset(32), False
        return InMemoryBatches(*read(root)), True

    def augment(mean: Any = None, std: Any = None) -> DeviceAugment:
        return DeviceAugment(
            crop=32, pad=4, flip=True, mean=mean, std=std, channels_last=cfg.channels_last, seed=cfg.seed
        )

    return build_classifier(
        cfg,
        device,
        batch=batch,
        steps=steps,
        make_model=lambda: make_model(classes[0]),
        make_optimizer=make_optimizer,
        task=Task((3, 32, 32), 10),
        synthetic_augment=augment(),
        real=real,
        real_augment=augment(MEAN, STD),
        info={"image_hw": [32, 32], "augment": "pad 4, crop 32, flip"},
    )
