"""cifar10's epoch recipe: CIFAR-10's batches with their test split (or a held-out share), a folder per class, or
the built-in digits; pad-and-crop and flip on the device."""

from __future__ import annotations

from gpulab.records import RunConfig
from gpulab.workloads.cifar10 import torch_model as c
from gpulab.workloads.cifar10.data import is_class_folder, read, read_test
from gpulab.workloads.data import is_digits
from gpulab.workloads.recipes import Recipe, digits, no_data, per_sample, test_or_held_out
from gpulab.workloads.torch_session import DeviceAugment, Task, data_root


def recipe(cfg: RunConfig, fraction: float) -> Recipe:
    st = c.settings(cfg)
    task = Task((3, 32, 32), 10)
    if cfg.data is None:
        raise no_data("cifar10", "CIFAR-10 python batches or a folder per class")
    if is_digits(cfg.data):
        split = digits(cfg, task)
    elif is_class_folder(data_root(cfg)):
        split = per_sample(cfg, 32, fraction, 1)
    else:
        root = data_root(cfg)
        split = test_or_held_out(read(root), read_test(root), fraction, cfg)
    classes = split.classes or 10
    augment = DeviceAugment(
        crop=32, pad=4, flip=True, mean=c.MEAN, std=c.STD, channels_last=cfg.channels_last, seed=cfg.seed
    )
    return Recipe(
        task=Task((3, 32, 32), classes),
        make_model=lambda: c.make_model(classes),
        own_optimizer=c.own_optimizer(st),
        batch=st.batch,
        train_augment=augment,
        eval_crop=None,  # pad-and-crop training keeps 32×32: validation sees the whole image
        mean=c.MEAN,
        std=c.STD,
        split=split,
    )
