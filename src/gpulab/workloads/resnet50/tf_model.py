"""resnet50 on tf.keras: keras.applications ResNet50, 285 classes, SGD with momentum; weights are random
(weights=None). The PyTorch version's sizes, parameters and data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads.data import read_labels_csv
from gpulab.workloads.resnet50 import torch_model as torch_resnet50
from gpulab.workloads.tf.session import (
    TFClassifierSession,
    classifier_session,
    global_batch,
    image_folder_dataset,
    make_augment,
    sparse_ce,
    synthetic_dataset,
    torch_only_pretrained,
)
from gpulab.workloads.torch_session import data_root


def keras_model(crop: int, classes: int) -> Any:
    import keras

    return keras.applications.ResNet50(
        weights=None, input_shape=(crop, crop, 3), classes=classes, classifier_activation=None
    )


def build(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import keras
    import numpy as np
    import tensorflow as tf

    torch_only_pretrained(cfg)
    st = torch_resnet50.settings(cfg)
    batch, steps, crop, side = st.batch, st.steps, st.crop, st.side
    classes, lr, momentum, weight_decay = st.classes, st.lr, st.momentum, st.weight_decay

    def make_model() -> Any:
        return keras_model(crop, classes)

    def make_optimizer() -> Any:
        return keras.optimizers.SGD(learning_rate=lr, momentum=momentum, weight_decay=weight_decay or None)

    def make_data() -> tuple[Any, str]:
        n = global_batch(batch, strategy)
        if cfg.data is None:
            gen = tf.random.Generator.from_seed(cfg.seed)
            x = gen.normal([n, crop, crop, 3])
            y = gen.uniform([n], 0, classes, dtype=tf.int64)
            return synthetic_dataset(x, y, None), "synthetic"
        root = data_root(cfg)
        folder, paths, labels = read_labels_csv(root, "resnet50", 1)
        values = labels[:, 0]
        if (values != np.round(values)).any() or values.min() < 0 or values.max() >= classes:
            raise GpulabError(f"resnet50: labels in {root} must be integers 0..{classes - 1} (num_classes={classes})")
        augment = make_augment(crop=crop, flip=True, mean=torch_resnet50.MEAN, std=torch_resnet50.STD, seed=cfg.seed)
        ds = image_folder_dataset(folder, paths, values.astype(np.int64), side, batch=n, cfg=cfg, augment=augment)
        return ds, f"real:{root}"

    return classifier_session(
        cfg, strategy, batch=batch, steps=steps, make_model=make_model, make_optimizer=make_optimizer,
        loss=sparse_ce(), make_data=make_data,
        info={"image_hw": [crop, crop], "classes": classes, "learning_rate": lr},
    )  # fmt: skip


def epoch_parts(cfg: RunConfig, r: Any) -> tuple[Any, Callable[[], Any]]:
    """resnet50's keras model for the recipe's crop and classes, and its own SGD with momentum and weight decay."""
    import keras

    rs = torch_resnet50.settings(cfg)
    model = keras_model(r.task.input_shape[1], r.task.classes)
    return model, lambda: keras.optimizers.SGD(
        learning_rate=rs.lr, momentum=rs.momentum, weight_decay=rs.weight_decay or None
    )
