"""mnist's epoch recipe: MNIST's training files with their test split (or a held-out share), or the built-in
digits; no augmentation but normalising."""

from __future__ import annotations

from gpulab.records import RunConfig
from gpulab.workloads.data import is_digits
from gpulab.workloads.mnist import torch_model as m
from gpulab.workloads.mnist.data import read, read_test
from gpulab.workloads.recipes import Recipe, digits, no_data, test_or_held_out
from gpulab.workloads.torch_session import DeviceAugment, Task, data_root


def recipe(cfg: RunConfig, fraction: float) -> Recipe:
    st = m.settings(cfg)
    task = Task((1, 28, 28), 10)
    if cfg.data is None:
        raise no_data("mnist", "MNIST IDX files")
    if is_digits(cfg.data):
        split = digits(cfg, task)
    else:
        root = data_root(cfg)
        split = test_or_held_out(read(root), read_test(root), fraction, cfg)
    augment = DeviceAugment(mean=m.MEAN, std=m.STD, channels_last=cfg.channels_last, seed=cfg.seed)
    return Recipe(
        task=task,
        make_model=m.make_model,
        own_optimizer=m.own_optimizer(st),
        batch=st.batch,
        train_augment=augment,
        eval_crop=None,
        mean=m.MEAN,
        std=m.STD,
        split=split,
    )
