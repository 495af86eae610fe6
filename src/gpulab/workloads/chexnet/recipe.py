"""chexnet's epoch recipe: ChestX-ray14 (NIH's layout or a labels CSV of the 14 findings), validation held out;
random crop and flip on the device, the centre crop for validation."""

from __future__ import annotations

from gpulab.records import RunConfig
from gpulab.workloads.chexnet import torch_model as x
from gpulab.workloads.chexnet.data import read_labels
from gpulab.workloads.data import is_digits
from gpulab.workloads.recipes import Recipe, no_data, per_sample
from gpulab.workloads.torch_session import DeviceAugment, Task, digits_dataset


def recipe(cfg: RunConfig, fraction: float) -> Recipe:
    st = x.settings(cfg)
    task = Task((3, st.side, st.side), x.CLASSES, multilabel=True)
    if cfg.data is None:
        raise no_data("chexnet", f"images with labels.csv of {x.CLASSES} 0/1 columns")
    if is_digits(cfg.data):
        digits_dataset(cfg, task)  # refuses: one label per image
    split = per_sample(cfg, st.side, fraction, x.CLASSES, read_labels)
    augment = DeviceAugment(
        crop=st.crop, flip=True, mean=x.MEAN, std=x.STD, channels_last=cfg.channels_last, seed=cfg.seed
    )
    return Recipe(
        task=Task((3, st.crop, st.crop), x.CLASSES, multilabel=True),
        make_model=lambda: x.make_model(st.start),
        own_optimizer=x.own_optimizer(st),
        batch=st.batch,
        train_augment=augment,
        eval_crop=st.crop,
        mean=x.MEAN,
        std=x.STD,
        split=split,
    )
