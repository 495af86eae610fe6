"""mnist on tf.keras: the Keras-example CNN, Adadelta or SGD, with the PyTorch version's sizes, parameters and
data (gpulab.workloads.mnist.torch_model's settings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads.mnist import torch_model as torch_mnist
from gpulab.workloads.mnist.data import read
from gpulab.workloads.tf.session import (
    TFClassifierSession,
    array_dataset,
    as_numpy,
    classifier_session,
    global_batch,
    make_augment,
    nchw_to_nhwc,
    sparse_ce,
    synthetic_dataset,
)
from gpulab.workloads.torch_session import data_root


def keras_model() -> Any:
    """The Keras-example CNN on 28×28×1 (logits, fp32 output under a mixed policy)."""
    import keras

    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(32, 3, activation="relu"),
            layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Dropout(0.25),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(10, dtype="float32"),
        ]
    )


def keras_optimizer(optimizer: str, lr: float) -> Any:
    import keras

    if optimizer == "adadelta":
        return keras.optimizers.Adadelta(learning_rate=lr)
    return keras.optimizers.SGD(learning_rate=lr, momentum=0.5)


def build(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import tensorflow as tf

    st = torch_mnist.settings(cfg)
    batch, steps, optimizer, lr = st.batch, st.steps, st.optimizer, st.lr

    make_model = keras_model

    def make_optimizer() -> Any:
        return keras_optimizer(optimizer, lr)

    def make_data() -> tuple[Any, str]:
        n = global_batch(batch, strategy)
        if cfg.data is None:
            gen = tf.random.Generator.from_seed(cfg.seed)
            x = gen.normal([n, 28, 28, 1])
            y = gen.uniform([n], 0, 10, dtype=tf.int64)
            return synthetic_dataset(x, y, None), "synthetic"
        root = data_root(cfg)
        images, labels = read(root)
        augment = make_augment(mean=torch_mnist.MEAN, std=torch_mnist.STD, seed=cfg.seed)
        x_np, y_np = nchw_to_nhwc(as_numpy(images)), as_numpy(labels).astype("int64")
        return array_dataset(x_np, y_np, batch=n, cfg=cfg, augment=augment), f"real:{root}"

    return classifier_session(
        cfg, strategy, batch=batch, steps=steps, make_model=make_model, make_optimizer=make_optimizer,
        loss=sparse_ce(), make_data=make_data, info={"image_hw": [28, 28], "learning_rate": lr},
    )  # fmt: skip


def epoch_parts(cfg: RunConfig, r: Any) -> tuple[Any, Callable[[], Any]]:
    """mnist's keras model and its own optimiser (Adadelta, or SGD) for `--framework tensorflow --epochs`."""
    st = torch_mnist.settings(cfg)
    return keras_model(), lambda: keras_optimizer(st.optimizer, st.lr)
