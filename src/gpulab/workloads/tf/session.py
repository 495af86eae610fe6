"""What the TensorFlow workloads share: precision for a session's lifetime, tf.data input pipelines, a supervised
training session whose step is one compiled `strategy.run` of a replica step, and what each Keras classifier
(tf_model.py in its workload's folder) builds its session with: the optimiser a run chooses, the global batch.

Every session runs under a `tf.distribute` strategy: OneDeviceStrategy for one device (its distributed dataset
prefetches batches onto that device), MirroredStrategy for several. Batches are NHWC (TensorFlow's native layout).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads.torch_session import loader_workers

TF_PRECISIONS = tuple(p.value for p in names.Precision if not p.loss_scaling)


def tf_precision(precision: names.Precision) -> names.Precision:
    """The precision, refused when it needs loss scaling (not wired into these training steps)."""
    if precision.loss_scaling:
        raise GpulabError(f"TensorFlow rows train {', '.join(TF_PRECISIONS)}; {precision} runs with --framework torch")
    return precision


class TFNumerics:
    """fp32: TF32 off; tf32: TF32 on; bf16: TF32 on and the Keras policy "mixed_bfloat16" (variables fp32,
    computation bf16). `close()` restores the previous policy and TF32 setting."""

    def __init__(self, precision: names.Precision) -> None:
        import keras
        import tensorflow as tf

        mode = tf_precision(precision)
        self.precision = precision
        self.tf32 = mode.tf32
        self.bf16 = mode.autocast == "bfloat16"
        self._tf32_before = bool(tf.config.experimental.tensor_float_32_execution_enabled())
        self._policy_before = keras.mixed_precision.global_policy().name
        tf.config.experimental.enable_tensor_float_32_execution(self.tf32)
        keras.mixed_precision.set_global_policy("mixed_bfloat16" if self.bf16 else "float32")
        self._closed = False

    def facts(self) -> dict[str, Any]:
        return {"precision": self.precision, "tf32": self.tf32, "keras_policy": "mixed_bfloat16" if self.bf16 else None}

    def close(self) -> None:
        if self._closed:
            return
        import keras
        import tensorflow as tf

        self._closed = True
        keras.mixed_precision.set_global_policy(self._policy_before)
        tf.config.experimental.enable_tensor_float_32_execution(self._tf32_before)


def seed_everything(seed: int) -> None:
    import keras

    keras.utils.set_random_seed(seed)


def default_strategy() -> Any:
    """One device: the first GPU when TensorFlow sees one, else the CPU."""
    import tensorflow as tf

    device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
    return tf.distribute.OneDeviceStrategy(device)


def strategy_devices(strategy: Any) -> list[str]:
    extended = getattr(strategy, "extended", None)
    return [str(d) for d in getattr(extended, "worker_devices", ())]


# ---------- augmentation and pipelines ----------


def make_augment(
    *,
    crop: int | None = None,
    pad: int = 0,
    flip: bool = False,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    seed: int = 0,
) -> Callable[[Any, Any], tuple[Any, Any]]:
    """A per-batch tf.data map: uint8 → normalised float, zero padding, one random crop per batch, per-sample flip."""
    import tensorflow as tf

    generator = tf.random.Generator.from_seed(seed)

    def augment(x: Any, y: Any) -> tuple[Any, Any]:
        if x.dtype == tf.uint8:
            x = tf.cast(x, tf.float32) / 255.0
            if mean is not None and std is not None:
                x = (x - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)
        if pad:
            x = tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
        if crop is not None:
            shape = tf.shape(x)
            top = generator.uniform([], 0, shape[1] - crop + 1, dtype=tf.int32)
            left = generator.uniform([], 0, shape[2] - crop + 1, dtype=tf.int32)
            x = x[:, top : top + crop, left : left + crop, :]
        if flip:
            flips = generator.uniform([tf.shape(x)[0], 1, 1, 1]) < 0.5
            x = tf.where(flips, tf.reverse(x, axis=[2]), x)
        return x, y

    return augment


def synthetic_dataset(x: Any, y: Any, augment: Callable[[Any, Any], tuple[Any, Any]] | None) -> Any:
    """One batch made once and repeated (augmented per step when asked), prefetched."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensors((x, y)).repeat()
    if augment is not None:
        ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def array_dataset(
    images: Any, labels: Any, *, batch: int, cfg: RunConfig, augment: Callable[[Any, Any], tuple[Any, Any]]
) -> Any:
    """In-memory uint8 NHWC images: shuffled every epoch, whole batches only, augmented, prefetched."""
    import tensorflow as tf

    if len(labels) < batch:
        raise GpulabError(
            f"{cfg.workload}: the data set at {cfg.data} has {len(labels)} samples, fewer than one batch of {batch}"
        )
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.shuffle(len(labels), seed=cfg.seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch, drop_remainder=True).map(augment, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def image_folder_dataset(
    folder: Path,
    paths: list[str],
    labels: Any,
    side: int,
    *,
    batch: int,
    cfg: RunConfig,
    augment: Callable[[Any, Any], tuple[Any, Any]],
) -> Any:
    """Images listed in a labels CSV, decoded and resized to side×side (uint8) by tf.data's parallel map."""
    import tensorflow as tf

    if len(paths) < batch:
        raise GpulabError(
            f"{cfg.workload}: the data set at {cfg.data} has {len(paths)} samples, fewer than one batch of {batch}"
        )
    files = [str(folder / p) for p in paths]

    def load(path: Any, label: Any) -> tuple[Any, Any]:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.image.resize(image, [side, side], method="bilinear")
        return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8), label

    workers = loader_workers(cfg.num_workers) or 1
    ds = tf.data.Dataset.from_tensor_slices((files, labels))
    ds = ds.shuffle(len(files), seed=cfg.seed, reshuffle_each_iteration=True).repeat()
    ds = ds.map(load, num_parallel_calls=workers).batch(batch, drop_remainder=True)
    return ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def as_numpy(value: Any) -> Any:
    """A reader's array (torch tensor or numpy) as numpy."""
    import numpy as np

    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def nchw_to_nhwc(images: Any) -> Any:
    return images.transpose(0, 2, 3, 1) if images.ndim == 4 else images[..., None]


# ---------- the session ----------


class TFClassifierSession:
    """Supervised training under a strategy: per replica, a forward pass (Keras policy), fp32 loss averaged over the
    global batch, gradients, optimiser step (Keras sums the replicas' gradients); the step returns the loss summed
    over replicas (the global mean) without reading it back. `last_replicas` holds the replica ids of the last step.
    """

    def __init__(
        self,
        *,
        cfg: RunConfig,
        strategy: Any,
        make_model: Callable[[], Any],
        make_optimizer: Callable[[], Any],
        loss: Callable[[Any, Any], Any],
        dataset: Any,
        numerics: TFNumerics,
        batch: int,
        steps: int,
        info: dict[str, Any],
    ) -> None:
        import keras
        import tensorflow as tf

        replicas = int(strategy.num_replicas_in_sync)
        with strategy.scope():
            model = make_model()
            optimizer = make_optimizer()
        self.model = model
        self.strategy = strategy
        self.replicas = replicas
        self.samples_per_step = batch * replicas
        self.steps = steps
        self._numerics = numerics
        self._steps_run = 0
        self._finished = False
        self.last_replicas: list[int] = []
        global_batch = batch * replicas
        self._iterator = iter(strategy.experimental_distribute_dataset(dataset))

        def replica_step(x: Any, y: Any) -> tuple[Any, Any]:
            with tf.GradientTape() as tape:
                out = tf.cast(model(x, training=True), tf.float32)
                per_sample = loss(y, out)
                value = tf.nn.compute_average_loss(per_sample, global_batch_size=global_batch)
            grads = tape.gradient(value, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return value, tf.convert_to_tensor(replica)

        @tf.function
        def train_step(iterator: Any) -> tuple[Any, Any]:
            x, y = next(iterator)
            value, replica = strategy.run(replica_step, args=(x, y))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None), replica

        self._train_step = train_step
        self._replica: Any = None
        self.info = {
            "workload": cfg.workload,
            "devices": strategy_devices(strategy),
            "strategy": type(strategy).__name__,
            "replicas": replicas,
            **numerics.facts(),
            "data_format": "channels_last",
            "channels_last": cfg.channels_last,
            "size": cfg.size,
            "batch": batch,
            "global_batch": global_batch,
            "steps": steps,
            "parameters": int(model.count_params()),
            "optimizer": type(optimizer).__name__,
            "compiled": "tf.function",
            **info,
            "learning_rate": float(keras.ops.convert_to_numpy(optimizer.learning_rate)),  # whoever chose it
        }

    def wrap(self, wrapper: Callable[[Any], Any]) -> None:
        raise GpulabError("TensorFlow sessions distribute through tf.distribute strategies, not model wrappers")

    def step(self) -> Any:
        value, self._replica = self._train_step(self._iterator)
        self._steps_run += 1
        return value

    def finish(self) -> dict[str, Any]:
        if self._replica is not None:
            self.last_replicas = [int(r) for r in self.strategy.experimental_local_results(self._replica)]
        if not self._finished:
            self._finished = True
            self._numerics.close()
        return {"steps_run": self._steps_run, "replicas_ran": self.last_replicas}


# ---------- the classifiers' sessions, parts every Keras classifier shares ----------


def classifier_session(
    cfg: RunConfig,
    strategy: Any,
    *,
    batch: int,
    steps: int,
    make_model: Callable[[], Any],
    make_optimizer: Callable[[], Any],
    loss: Callable[[Any, Any], Any],
    make_data: Callable[[], tuple[Any, str]],
    info: dict[str, Any],
) -> TFClassifierSession:
    seed_everything(cfg.seed)
    make_optimizer = chosen_optimizer(cfg, make_optimizer)
    numerics = TFNumerics(cfg.precision)
    try:
        dataset, source = make_data()
        return TFClassifierSession(
            cfg=cfg,
            strategy=strategy,
            make_model=make_model,
            make_optimizer=make_optimizer,
            loss=loss,
            dataset=dataset,
            numerics=numerics,
            batch=batch,
            steps=steps,
            info={"data": source, **info},
        )
    except BaseException:
        numerics.close()
        raise


def chosen_optimizer(cfg: RunConfig, own: Callable[[], Any]) -> Callable[[], Any]:
    """cfg.optimizer (adam, sgd with momentum 0.9) at cfg.learning_rate or its default; else the workload's own,
    at cfg.learning_rate when one is given."""

    def make() -> Any:
        import keras

        lr = cfg.learning_rate
        if cfg.optimizer == "adam":
            return keras.optimizers.Adam(learning_rate=lr or names.OPTIMIZER_LR["adam"])
        if cfg.optimizer == "sgd":
            return keras.optimizers.SGD(learning_rate=lr or names.OPTIMIZER_LR["sgd"], momentum=0.9)
        optimizer = own()
        if lr is not None:
            optimizer.learning_rate = lr
        return optimizer

    return make


def global_batch(batch: int, strategy: Any) -> int:
    return batch * int(strategy.num_replicas_in_sync)


def sparse_ce() -> Any:
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def torch_only_pretrained(cfg: RunConfig) -> None:
    """The ImageNet start loads torchvision's files: refused here before anything is fetched."""
    if cfg.params.get("pretrained") not in (None, "none"):
        raise GpulabError(
            f"{cfg.workload}: pretrained weights load in the torch version only; drop --param pretrained "
            "or run with --framework torch"
        )
