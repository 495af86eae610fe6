"""Epoch training on tf.keras: `model.fit(train, validation_data=val, epochs=N)` under the worker's strategy (one
device, or MirroredStrategy), for mnist and resnet50, with the torch version's data split and the same record."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.training.epochs import EpochSpec, epoch_record
from gpulab.workloads.recipes import Recipe, recipe
from gpulab.workloads.registry import REGISTRY, load
from gpulab.workloads.torch_session import loader_workers


def check_tf_epochs(cfg: RunConfig, spec: EpochSpec) -> None:
    trained = REGISTRY.names("tf_epochs")
    if cfg.workload not in trained:
        raise GpulabError(
            f"--framework tensorflow --epochs trains {' and '.join(trained)}, not {cfg.workload}; use --framework torch"
        )
    if spec.weights is not None or spec.save_weights is not None:
        raise GpulabError("--weights and --save-weights are torch state_dicts: use them with --framework torch")


def _optimizer(cfg: RunConfig, spec: EpochSpec, own: Callable[[], Any]) -> Any:
    """The chosen optimiser (adam, sgd), else the workload's own, at the chosen or default rate."""
    import dataclasses

    from gpulab.workloads.tf.session import chosen_optimizer

    chosen = dataclasses.replace(
        cfg,
        optimizer=spec.optimizer or cfg.optimizer,
        learning_rate=spec.learning_rate if spec.learning_rate is not None else cfg.learning_rate,
    )
    return chosen_optimizer(chosen, own)()


def _parts(cfg: RunConfig, r: Recipe) -> tuple[Any, Callable[[], Any]]:
    """The workload's keras model and its own optimiser's factory, as its registry entry names them."""
    parts = load(str(REGISTRY[cfg.workload].tf_epochs), f"the TensorFlow epoch parts of {cfg.workload}")
    model, own = parts(cfg, r)
    return model, own


def _dataset(part: Any, batched: bool, *, train: bool, batch: int, r: Recipe, seed: int, workers: int) -> Any:
    """A tf.data pipeline over one side of the split: every sample once, shuffled each epoch when training."""
    import tensorflow as tf

    from gpulab.workloads.tf.session import make_augment

    if batched:  # in-memory uint8 NCHW torch tensors → NHWC
        ds = tf.data.Dataset.from_tensor_slices((part.images.numpy().transpose(0, 2, 3, 1), part.labels.numpy()))
    else:  # an image folder: decoded by tf.data, as the timed TensorFlow runs read it
        files = [str(part.folder / p) for p in part.paths]
        side = int(part.side)

        def load(path: Any, label: Any) -> tuple[Any, Any]:
            image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
            image = tf.image.resize(image, [side, side], method="bilinear")
            return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8), label

        ds = tf.data.Dataset.from_tensor_slices((files, part.labels)).map(load, num_parallel_calls=workers or 1)
    size = len(part)
    if train:
        ds = ds.shuffle(size, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch)
    aug = r.train_augment
    if train:
        augment = make_augment(crop=aug.crop, pad=aug.pad, flip=aug.flip, mean=r.mean, std=r.std, seed=seed)
        return ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    normalise = make_augment(mean=r.mean, std=r.std)
    crop = r.eval_crop

    def centre(x: Any, y: Any) -> tuple[Any, Any]:
        x, y = normalise(x, y)
        if crop is not None:
            offset = (tf.shape(x)[1] - crop) // 2
            x = x[:, offset : offset + crop, offset : offset + crop, :]
        return x, y

    return ds.map(centre, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def train_epochs_tf(cfg: RunConfig, strategy: Any, spec: EpochSpec, replicas: int = 1) -> dict[str, Any]:
    """Train cfg.workload for spec.epochs epochs with keras fit under `strategy`; cfg.batch is per replica."""
    import keras

    from gpulab.workloads.tf.session import TFNumerics, seed_everything

    check_tf_epochs(cfg, spec)
    seed_everything(cfg.seed)
    r = recipe(cfg, spec.val_fraction)
    per_replica = cfg.batch or r.batch
    batch = per_replica * replicas
    split = r.split
    numerics = TFNumerics(cfg.precision)
    workers = loader_workers(cfg.num_workers)
    try:
        train = _dataset(split.train, split.batched, train=True, batch=batch, r=r, seed=cfg.seed, workers=workers)
        val = _dataset(split.val, split.batched, train=False, batch=batch, r=r, seed=cfg.seed, workers=workers)
        with strategy.scope():
            model, own = _parts(cfg, r)
            optimizer = _optimizer(cfg, spec, own)
            model.compile(
                optimizer=optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            )
        recorder = EpochLog(len(split.train), spec.target_accuracy)
        started = time.perf_counter()
        recorder.started = started
        model.fit(train, validation_data=val, epochs=spec.epochs, callbacks=[_callback(recorder)], verbose=0)
        total = time.perf_counter() - started
        facts = numerics.facts()
    finally:
        numerics.close()
    epochs = recorder.epochs
    return epoch_record(
        r,
        epochs,
        workload=cfg.workload,
        metric="accuracy",
        total_s=total,
        time_to_target_s=recorder.time_to_target,
        target=spec.target_accuracy,
        batch=per_replica,
        steps=math.ceil(len(split.train) / batch) * len(epochs),
        world=replicas,
        optimizer=optimizer,
        learning_rate=float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
        weights=None,
        saved_weights=None,
        notes=[],
        facts=facts,
    )


class EpochLog:
    """Per-epoch training seconds (up to validation), losses and the validation accuracy, from Keras' callbacks."""

    def __init__(self, samples: int, target: float | None) -> None:
        self.samples, self.target = samples, target
        self.epochs: list[dict[str, Any]] = []
        self.time_to_target: float | None = None
        self.started = 0.0
        self._epoch_start = self._val_start = 0.0

    def epoch_begin(self) -> None:
        self._epoch_start = self._val_start = time.perf_counter()

    def test_begin(self) -> None:
        self._val_start = time.perf_counter()

    def epoch_end(self, epoch: int, logs: Any) -> None:
        now = time.perf_counter()
        logs = logs or {}
        seconds = (self._val_start if self._val_start > self._epoch_start else now) - self._epoch_start
        metric = _float(logs.get("val_accuracy"))
        elapsed = now - self.started
        self.epochs.append(
            {
                "epoch": epoch + 1,
                "seconds": seconds,
                "samples": self.samples,
                "samples_per_s": self.samples / seconds if seconds > 0 else None,
                "train_loss": _float(logs.get("loss")),
                "val_loss": _float(logs.get("val_loss")),
                "val_metric": metric,
                "val_seconds": now - self._val_start,
                "elapsed_s": elapsed,
            }
        )
        if self.time_to_target is None and self.target is not None and metric is not None and metric >= self.target:
            self.time_to_target = elapsed


def _callback(log: EpochLog) -> Any:
    import keras

    return keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: log.epoch_begin(),
        on_epoch_end=log.epoch_end,
        on_test_begin=lambda logs: log.test_begin(),
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
