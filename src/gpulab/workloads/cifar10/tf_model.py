"""cifar10 on tf.keras: VGG19 with batch norm for 32×32 (pad 4, crop, flip), SGD with momentum, with the PyTorch
version's sizes, parameters and data (gpulab.workloads.cifar10.torch_model's settings)."""

from __future__ import annotations

from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads.cifar10 import torch_model as torch_cifar10
from gpulab.workloads.cifar10.data import read
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

VGG19_CFG: list[int | str] = [
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    512,
    "M",
]


def vgg19_bn(classes: int = 10) -> Any:
    """The CIFAR VGG19: VGG19-bn feature layers (32×32 → 1×1×512), then Dense(classes); He-normal convolutions."""
    import keras

    layers = keras.layers
    model = keras.Sequential([keras.Input((32, 32, 3))])
    for item in VGG19_CFG:
        if item == "M":
            model.add(layers.MaxPooling2D(2))
        else:
            model.add(layers.Conv2D(int(item), 3, padding="same", kernel_initializer=keras.initializers.HeNormal()))
            model.add(layers.BatchNormalization(epsilon=1e-5, momentum=0.9))
            model.add(layers.ReLU())
    model.add(layers.Flatten())
    model.add(layers.Dense(classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01), dtype="float32"))
    return model


def build(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import keras
    import tensorflow as tf

    st = torch_cifar10.settings(cfg)
    batch, steps, lr, momentum, weight_decay = st.batch, st.steps, st.lr, st.momentum, st.weight_decay

    def make_optimizer() -> Any:
        return keras.optimizers.SGD(learning_rate=lr, momentum=momentum, weight_decay=weight_decay or None)

    def make_data() -> tuple[Any, str]:
        n = global_batch(batch, strategy)
        if cfg.data is None:
            gen = tf.random.Generator.from_seed(cfg.seed)
            x = gen.normal([n, 32, 32, 3])
            y = gen.uniform([n], 0, 10, dtype=tf.int64)
            return synthetic_dataset(x, y, make_augment(crop=32, pad=4, flip=True, seed=cfg.seed)), "synthetic"
        root = data_root(cfg)
        images, labels = read(root)
        augment = make_augment(crop=32, pad=4, flip=True, mean=torch_cifar10.MEAN, std=torch_cifar10.STD, seed=cfg.seed)
        x_np, y_np = nchw_to_nhwc(as_numpy(images)), as_numpy(labels).astype("int64")
        return array_dataset(x_np, y_np, batch=n, cfg=cfg, augment=augment), f"real:{root}"

    return classifier_session(
        cfg, strategy, batch=batch, steps=steps, make_model=vgg19_bn, make_optimizer=make_optimizer,
        loss=sparse_ce(), make_data=make_data,
        info={"image_hw": [32, 32], "augment": "pad 4, crop 32, flip", "learning_rate": lr,
              "weight_decay": "decoupled (Keras SGD)" if weight_decay else None},
    )  # fmt: skip
