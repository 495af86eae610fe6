"""The four image classifiers on tf.keras, with the PyTorch workloads' names, sizes, parameters and data formats.

mnist: the Keras-example CNN, Adadelta or SGD. cifar10: VGG19 with batch norm for 32×32 (pad 4, crop, flip).
chexnet: keras.applications DenseNet121, 14 sigmoid outputs, BCE, Adam (crop from 264/224 of the side, flip).
resnet50: keras.applications ResNet50, 285 classes, SGD with momentum. Weights are random (weights=None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads import chexnet as torch_chexnet
from gpulab.workloads import cifar10 as torch_cifar10
from gpulab.workloads import mnist as torch_mnist
from gpulab.workloads import resnet50 as torch_resnet50
from gpulab.workloads.tf.session import (
    TFClassifierSession,
    TFNumerics,
    array_dataset,
    as_numpy,
    image_folder_dataset,
    make_augment,
    nchw_to_nhwc,
    seed_everything,
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


def _session(
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


def _global(batch: int, strategy: Any) -> int:
    return batch * int(strategy.num_replicas_in_sync)


def _sparse_ce() -> Any:
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def mnist_model() -> Any:
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


def mnist_optimizer(optimizer: str, lr: float) -> Any:
    import keras

    if optimizer == "adadelta":
        return keras.optimizers.Adadelta(learning_rate=lr)
    return keras.optimizers.SGD(learning_rate=lr, momentum=0.5)


def resnet50_model(crop: int, classes: int) -> Any:
    import keras

    return keras.applications.ResNet50(
        weights=None, input_shape=(crop, crop, 3), classes=classes, classifier_activation=None
    )


def build_mnist(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import tensorflow as tf

    st = torch_mnist.settings(cfg)
    batch, steps, optimizer, lr = st.batch, st.steps, st.optimizer, st.lr

    make_model = mnist_model

    def make_optimizer() -> Any:
        return mnist_optimizer(optimizer, lr)

    def make_data() -> tuple[Any, str]:
        n = _global(batch, strategy)
        if cfg.data is None:
            gen = tf.random.Generator.from_seed(cfg.seed)
            x = gen.normal([n, 28, 28, 1])
            y = gen.uniform([n], 0, 10, dtype=tf.int64)
            return synthetic_dataset(x, y, None), "synthetic"
        from gpulab.workloads.data import read_mnist

        root = data_root(cfg)
        images, labels = read_mnist(root)
        augment = make_augment(mean=torch_mnist.MEAN, std=torch_mnist.STD, seed=cfg.seed)
        x_np, y_np = nchw_to_nhwc(as_numpy(images)), as_numpy(labels).astype("int64")
        return array_dataset(x_np, y_np, batch=n, cfg=cfg, augment=augment), f"real:{root}"

    return _session(
        cfg, strategy, batch=batch, steps=steps, make_model=make_model, make_optimizer=make_optimizer,
        loss=_sparse_ce(), make_data=make_data, info={"image_hw": [28, 28], "learning_rate": lr},
    )  # fmt: skip


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


def build_cifar10(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import keras
    import tensorflow as tf

    st = torch_cifar10.settings(cfg)
    batch, steps, lr, momentum, weight_decay = st.batch, st.steps, st.lr, st.momentum, st.weight_decay

    def make_optimizer() -> Any:
        return keras.optimizers.SGD(learning_rate=lr, momentum=momentum, weight_decay=weight_decay or None)

    def make_data() -> tuple[Any, str]:
        n = _global(batch, strategy)
        if cfg.data is None:
            gen = tf.random.Generator.from_seed(cfg.seed)
            x = gen.normal([n, 32, 32, 3])
            y = gen.uniform([n], 0, 10, dtype=tf.int64)
            return synthetic_dataset(x, y, make_augment(crop=32, pad=4, flip=True, seed=cfg.seed)), "synthetic"
        from gpulab.workloads.data import read_cifar10

        root = data_root(cfg)
        images, labels = read_cifar10(root)
        augment = make_augment(crop=32, pad=4, flip=True, mean=torch_cifar10.MEAN, std=torch_cifar10.STD, seed=cfg.seed)
        x_np, y_np = nchw_to_nhwc(as_numpy(images)), as_numpy(labels).astype("int64")
        return array_dataset(x_np, y_np, batch=n, cfg=cfg, augment=augment), f"real:{root}"

    return _session(
        cfg, strategy, batch=batch, steps=steps, make_model=vgg19_bn, make_optimizer=make_optimizer,
        loss=_sparse_ce(), make_data=make_data,
        info={"image_hw": [32, 32], "augment": "pad 4, crop 32, flip", "learning_rate": lr,
              "weight_decay": "decoupled (Keras SGD)" if weight_decay else None},
    )  # fmt: skip


def _torch_only_pretrained(cfg: RunConfig) -> None:
    """The ImageNet start loads torchvision's files: refused here before anything is fetched."""
    if cfg.params.get("pretrained") not in (None, "none"):
        raise GpulabError(
            f"{cfg.workload}: pretrained weights load in the torch version only; drop --param pretrained "
            "or run with --framework torch"
        )


def build_chexnet(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import keras
    import tensorflow as tf

    from gpulab.workloads.data import read_labels_csv

    _torch_only_pretrained(cfg)
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
        n = _global(batch, strategy)
        if cfg.data is None:
            gen = tf.random.Generator.from_seed(cfg.seed)
            x = gen.normal([n, side, side, 3])
            y = tf.cast(gen.uniform([n, classes], 0, 2, dtype=tf.int32), tf.float32)
            return synthetic_dataset(x, y, make_augment(crop=crop, flip=True, seed=cfg.seed)), "synthetic"
        root = data_root(cfg)
        folder, paths, labels = read_labels_csv(root, "chexnet", classes)
        augment = make_augment(crop=crop, flip=True, mean=torch_chexnet.MEAN, std=torch_chexnet.STD, seed=cfg.seed)
        ds = image_folder_dataset(folder, paths, labels, side, batch=n, cfg=cfg, augment=augment)
        return ds, f"real:{root}"

    return _session(
        cfg, strategy, batch=batch, steps=steps, make_model=make_model, make_optimizer=make_optimizer,
        loss=loss, make_data=make_data,
        info={"image_hw": [crop, crop], "loaded_hw": [side, side], "augment": f"crop {crop} of {side}, flip"},
    )  # fmt: skip


def build_resnet50(cfg: RunConfig, strategy: Any) -> TFClassifierSession:
    import keras
    import numpy as np
    import tensorflow as tf

    from gpulab.workloads.data import read_labels_csv

    _torch_only_pretrained(cfg)
    st = torch_resnet50.settings(cfg)
    batch, steps, crop, side = st.batch, st.steps, st.crop, st.side
    classes, lr, momentum, weight_decay = st.classes, st.lr, st.momentum, st.weight_decay

    def make_model() -> Any:
        return resnet50_model(crop, classes)

    def make_optimizer() -> Any:
        return keras.optimizers.SGD(learning_rate=lr, momentum=momentum, weight_decay=weight_decay or None)

    def make_data() -> tuple[Any, str]:
        n = _global(batch, strategy)
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

    return _session(
        cfg, strategy, batch=batch, steps=steps, make_model=make_model, make_optimizer=make_optimizer,
        loss=_sparse_ce(), make_data=make_data,
        info={"image_hw": [crop, crop], "classes": classes, "learning_rate": lr},
    )  # fmt: skip


def mnist_epoch_parts(cfg: RunConfig, r: Any) -> tuple[Any, Callable[[], Any]]:
    """mnist's keras model and its own optimiser (Adadelta, or SGD) for `--framework tensorflow --epochs`."""
    st = torch_mnist.settings(cfg)
    return mnist_model(), lambda: mnist_optimizer(st.optimizer, st.lr)


def resnet50_epoch_parts(cfg: RunConfig, r: Any) -> tuple[Any, Callable[[], Any]]:
    """resnet50's keras model for the recipe's crop and classes, and its own SGD with momentum and weight decay."""
    import keras

    rs = torch_resnet50.settings(cfg)
    model = resnet50_model(r.task.input_shape[1], r.task.classes)
    return model, lambda: keras.optimizers.SGD(
        learning_rate=rs.lr, momentum=rs.momentum, weight_decay=rs.weight_decay or None
    )
