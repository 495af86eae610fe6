"""ResNet50 (torchvision, 285 classes) at 224×224, SGD with momentum, cross entropy.

Synthetic data is one fixed batch, as in the plain reference script; real images (folder + labels CSV) load at
256/224 of the crop side and get a random crop and flip on the device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads import pretrained
from gpulab.workloads.pretrained import Start
from gpulab.workloads.resnet50 import DEFAULTS, SIZES
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

IMAGE = {"tiny": 64}  # side; 224 for other sizes
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Settings:
    """The run's checked size and parameters, read once for the torch and the TensorFlow versions."""

    batch: int
    steps: int
    crop: int
    side: int
    classes: int
    lr: float
    momentum: float
    weight_decay: float
    start: Start


def settings(cfg: RunConfig) -> Settings:
    """Check `cfg` and its params for resnet50; every problem is a GpulabError naming the param."""
    p = Params("resnet50", cfg.params, DEFAULTS)
    batch, steps = batch_and_steps(cfg, SIZES)
    crop = p.integer("image", minimum=32) or IMAGE.get(cfg.size, 224)
    return Settings(
        batch,
        steps,
        crop,
        round(crop * 256 / 224),
        p.integer("num_classes", minimum=2) or 285,
        p.number("learning_rate", above=True),
        p.number("momentum", maximum=1.0),
        p.number("weight_decay"),
        pretrained.start("resnet50", p.raw("pretrained"), "resnet50", "fc."),
    )


def make_model(classes: int, begin: Start | None = None, described: list[str] | None = None) -> Any:
    """ResNet50 with `classes` outputs, from `begin`'s weights (the fc head too when it has 1000 classes) or random;
    the weights' description is appended to `described`."""
    from gpulab.workloads.tv import import_torchvision

    model = import_torchvision().models.resnet50(weights=None, num_classes=classes)
    what = pretrained.load(model, begin, "resnet50") if begin is not None else "random"
    if described is not None:
        described.append(what)
    return model


def own_optimizer(st: Settings) -> OwnOptimizer:
    """SGD with the settings' momentum and weight decay, at their rate or the one a run overrides it with."""

    def make(params: Any, lr: float | None) -> Any:
        import torch

        return torch.optim.SGD(params, lr=lr or st.lr, momentum=st.momentum, weight_decay=st.weight_decay)

    return make


def folder_classes(cfg: RunConfig, found: int) -> int:
    """The class count of a data set that names its classes (a folder per class, digits): a different
    --param num_classes is an error."""
    given = cfg.params.get("num_classes")
    if given is not None and int(given) != found:
        raise GpulabError(
            f"{cfg.workload}: {cfg.data} has {found} classes but num_classes={given}; "
            "drop --param num_classes (it follows the data) or fix the data"
        )
    return found


def build(cfg: RunConfig, device: str) -> ClassifierSession:
    import numpy as np

    from gpulab.workloads.data import ClassFolder, ImageFolderCSV, read_labels_csv, wants_class_folder

    st = settings(cfg)
    batch, steps, crop, side = st.batch, st.steps, st.crop, st.side
    make_optimizer = choose_optimizer(cfg, own_optimizer(st))
    classes = [st.classes]  # a class-per-folder data set sets its own count before the model is built

    def real(root: Path) -> tuple[Any, bool]:
        if wants_class_folder(root):
            found = ClassFolder.read(root, "resnet50")
            classes[0] = folder_classes(cfg, len(found.classes))
            return found.dataset(side), False
        folder, paths, labels = read_labels_csv(root, "resnet50", 1)
        values = labels[:, 0]
        if (values != np.round(values)).any() or values.min() < 0 or values.max() >= st.classes:
            raise GpulabError(
                f"resnet50: labels in {root} must be integers 0..{st.classes - 1} (num_classes={st.classes})"
            )
        return ImageFolderCSV(folder, paths, values.astype(np.int64), side), False

    described: list[str] = []
    session = build_classifier(
        cfg,
        device,
        batch=batch,
        steps=steps,
        make_model=lambda: make_model(classes[0], st.start, described),
        make_optimizer=make_optimizer,
        task=Task((3, crop, crop), st.classes),
        synthetic_augment=None,
        real=real,
        real_augment=DeviceAugment(
            crop=crop, flip=True, mean=MEAN, std=STD, channels_last=cfg.channels_last, seed=cfg.seed
        ),
        info={"image_hw": [crop, crop]},
    )
    session.info["classes"] = classes[0]
    session.info["weights"] = described[-1]
    return session
