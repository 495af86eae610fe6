"""resnet50's epoch recipe: a folder per class or images with labels.csv (validation held out), or the built-in
digits; random crop and flip on the device, the centre crop for validation."""

from __future__ import annotations

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads.data import is_digits
from gpulab.workloads.recipes import Recipe, Split, digits, no_data, per_sample
from gpulab.workloads.resnet50 import torch_model as r
from gpulab.workloads.torch_session import DeviceAugment, Task


def recipe(cfg: RunConfig, fraction: float) -> Recipe:
    st = r.settings(cfg)
    if cfg.data is None:
        raise no_data("resnet50", "a folder per class, or images with labels.csv")
    classes = st.classes
    if is_digits(cfg.data):
        split = digits(cfg, Task((3, st.side, st.side), 10))
        classes = r.folder_classes(cfg, 10)
    else:
        split = per_sample(cfg, st.side, fraction, 1)
        if split.classes is not None:
            classes = r.folder_classes(cfg, split.classes)
        else:
            check_labels(cfg, split, classes)
    augment = DeviceAugment(
        crop=st.crop, flip=True, mean=r.MEAN, std=r.STD, channels_last=cfg.channels_last, seed=cfg.seed
    )
    return Recipe(
        task=Task((3, st.crop, st.crop), classes),
        make_model=lambda: r.make_model(classes, st.start),
        own_optimizer=r.own_optimizer(st),
        batch=st.batch,
        train_augment=augment,
        eval_crop=st.crop,  # images load at 256/224 of the crop: validation takes the centre
        mean=r.MEAN,
        std=r.STD,
        split=split,
    )


def check_labels(cfg: RunConfig, split: Split, classes: int) -> None:
    import numpy as np

    top = max(int(np.max(split.train.labels)), int(np.max(split.val.labels)))
    if top >= classes:
        raise GpulabError(
            f"{cfg.workload}: labels in {cfg.data} go up to {top}, beyond num_classes={classes}; "
            f"pass --param num_classes={top + 1}"
        )
