"""chexnet on tf.keras: keras.applications DenseNet121, 14 sigmoid outputs, BCE, Adam (crop from 264/224 of the
side, flip); weights are random (weights=None). The PyTorch version's sizes, parameters and data."""

from __future__ import annotations

from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads.chexnet import torch_model as torch_chexnet
from gpulab.workloads.chexnet.data import read_labels
from gpulab.workloads.tf.session import (
    TFClassifierSession,
    classifier_session,
    global_batch,
    image_folder_dataset,
    make_augment,
    synthetic_dataset,
    torch_only_pretrained,
)
from gpulab.workloads.torch_session import data_root


def build(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import keras
    import tensorflow as tf

    torch_only_pretrained(cfg)
    st = torch_chexnet.settings(cfg)
    batch, steps, crop, side, lr = st.batch, st.steps, st.crop, st.side, st.lr
    classes = torch_chexnet.CLASSES

    def make_model() -> Any:
        return keras.applications.DenseNet121(
            weights=None, input_shape=(crop, crop, 3), classes=classes, classifier_activation=None
        )

    def make_optimizer() -> Any:
        return keras.optimizers.Adam(learning_rate=lr, beta_1=0.9, beta_2=0.999)

    def loss(y: Any, logits: Any) -> Any:
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits), axis=-1)

    def make_data() -> tuple[Any, str]:
        n = global_batch(batch, strategy)
        if cfg.data is None:
            gen = tf.random.Generator.from_seed(cfg.seed)
            x = gen.normal([n, side, side, 3])
            y = tf.cast(gen.uniform([n, classes], 0, 2, dtype=tf.int32), tf.float32)
            return synthetic_dataset(x, y, make_augment(crop=crop, flip=True, seed=cfg.seed)), "synthetic"
        root = data_root(cfg)
        folder, paths, labels = read_labels(root, "chexnet")
        augment = make_augment(crop=crop, flip=True, mean=torch_chexnet.MEAN, std=torch_chexnet.STD, seed=cfg.seed)
        ds = image_folder_dataset(folder, paths, labels, side, batch=n, cfg=cfg, augment=augment)
        return ds, f"real:{root}"

    return classifier_session(
        cfg, strategy, batch=batch, steps=steps, make_model=make_model, make_optimizer=make_optimizer,
        loss=loss, make_data=make_data,
        info={"image_hw": [crop, crop], "loaded_hw": [side, side], "augment": f"crop {crop} of {side}, flip"},
    )  # fmt: skip
