"""What epoch training needs from each workload: its model, its own optimiser, its augmentation, and its data split
into training and validation sets. Built from the workload modules' own settings and builders."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads.registry import REGISTRY, load
from gpulab.workloads.torch_session import DeviceAugment, OwnOptimizer, Task, data_root, digits_dataset


@dataclass
class Split:
    """Training and validation sets: in-memory (`batched`: indexed by a list) or read per sample."""

    train: Any
    val: Any
    batched: bool
    source: str  # what the data is: "digits", "real:PATH"
    val_source: str  # where the validation set comes from
    classes: int | None = None  # a class-per-folder set's count


@dataclass
class Recipe:
    task: Task
    make_model: Callable[[], Any]
    own_optimizer: OwnOptimizer
    batch: int
    train_augment: DeviceAugment
    eval_crop: int | None  # centre crop for validation (None: the image as loaded)
    mean: Sequence[float]
    std: Sequence[float]
    split: Split


def held_out(count: int, fraction: float, seed: int) -> tuple[Any, Any]:
    """(train, validation) indices: a permutation drawn with `seed`, `fraction` of it held out (at least one)."""
    import numpy as np

    if count < 2:
        raise GpulabError(f"a data set of {count} sample(s) cannot be split into training and validation")
    order = np.random.default_rng(seed).permutation(count)
    val = min(count - 1, max(1, round(count * fraction)))
    return np.sort(order[val:]), np.sort(order[:val])


def _in_memory(images: Any, labels: Any, fraction: float, seed: int, source: str) -> Split:
    from gpulab.workloads.data import InMemoryBatches

    train, val = held_out(len(labels), fraction, seed)
    return Split(
        InMemoryBatches(images[train], labels[train]),
        InMemoryBatches(images[val], labels[val]),
        True,
        source,
        f"held out {fraction:g} of the training data",
    )


def _test_or_held_out(train: tuple[Any, Any], test: tuple[Any, Any] | None, fraction: float, cfg: RunConfig) -> Split:
    from gpulab.workloads.data import InMemoryBatches

    source = f"real:{cfg.data}"
    if test is None:
        return _in_memory(*train, fraction, cfg.seed, source)
    return Split(InMemoryBatches(*train), InMemoryBatches(*test), True, source, "the data set's test split")


def _digits(cfg: RunConfig, task: Task) -> Split:
    from gpulab.workloads.data import DIGITS, digits_split

    train, val = digits_split(1797)
    return Split(
        digits_dataset(cfg, task, train), digits_dataset(cfg, task, val), True, DIGITS, "the digits' fixed split"
    )


def _per_sample(cfg: RunConfig, side: int, fraction: float, label_columns: int) -> Split:
    """An image folder: one folder per class, or labels.csv; validation held out."""
    import numpy as np

    from gpulab.workloads.data import ClassFolder, ImageFolderCSV, read_labels_csv, wants_class_folder

    root = data_root(cfg)
    held = f"held out {fraction:g} of the images"
    if label_columns == 1 and wants_class_folder(root):
        found = ClassFolder.read(root, cfg.workload)
        train, val = held_out(len(found.paths), fraction, cfg.seed)
        return Split(
            found.dataset(side, train), found.dataset(side, val), False, f"real:{root}", held, len(found.classes)
        )
    folder, paths, labels = read_labels_csv(root, cfg.workload, label_columns)
    if label_columns == 1:
        values = labels[:, 0]
        if (values != np.round(values)).any() or values.min() < 0:
            raise GpulabError(f"{cfg.workload}: labels in {root} must be class numbers 0, 1, ...")
        labels = values.astype(np.int64)
    train, val = held_out(len(paths), fraction, cfg.seed)

    def subset(keep: Any) -> ImageFolderCSV:
        return ImageFolderCSV(folder, [paths[i] for i in keep], labels[keep], side)

    return Split(subset(train), subset(val), False, f"real:{root}", held)


def _no_data(workload: str, kinds: str) -> GpulabError:
    return GpulabError(
        f"{workload}: epoch training needs real data: pass --data digits (built in) or --data PATH ({kinds})"
    )


def mnist(cfg: RunConfig, fraction: float) -> Recipe:
    from gpulab.workloads import mnist as m
    from gpulab.workloads.data import is_digits, read_mnist, read_mnist_test

    st = m.settings(cfg)
    task = Task((1, 28, 28), 10)
    if cfg.data is None:
        raise _no_data("mnist", "MNIST IDX files")
    if is_digits(cfg.data):
        split = _digits(cfg, task)
    else:
        root = data_root(cfg)
        split = _test_or_held_out(read_mnist(root), read_mnist_test(root), fraction, cfg)
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


def cifar10(cfg: RunConfig, fraction: float) -> Recipe:
    from gpulab.workloads import cifar10 as c
    from gpulab.workloads.data import is_class_folder, is_digits, read_cifar10, read_cifar10_test

    st = c.settings(cfg)
    task = Task((3, 32, 32), 10)
    if cfg.data is None:
        raise _no_data("cifar10", "CIFAR-10 python batches or a folder per class")
    if is_digits(cfg.data):
        split = _digits(cfg, task)
    elif is_class_folder(data_root(cfg)):
        split = _per_sample(cfg, 32, fraction, 1)
    else:
        root = data_root(cfg)
        split = _test_or_held_out(read_cifar10(root), read_cifar10_test(root), fraction, cfg)
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


def resnet50(cfg: RunConfig, fraction: float) -> Recipe:
    from gpulab.workloads import resnet50 as r
    from gpulab.workloads.data import is_digits

    st = r.settings(cfg)
    if cfg.data is None:
        raise _no_data("resnet50", "a folder per class, or images with labels.csv")
    classes = st.classes
    if is_digits(cfg.data):
        split = _digits(cfg, Task((3, st.side, st.side), 10))
        classes = r.folder_classes(cfg, 10)
    else:
        split = _per_sample(cfg, st.side, fraction, 1)
        if split.classes is not None:
            classes = r.folder_classes(cfg, split.classes)
        else:
            _check_labels(cfg, split, classes)
    augment = DeviceAugment(
        crop=st.crop, flip=True, mean=r.MEAN, std=r.STD, channels_last=cfg.channels_last, seed=cfg.seed
    )
    return Recipe(
        task=Task((3, st.crop, st.crop), classes),
        make_model=lambda: r.make_model(classes, st.start),
        own_optimizer=r.own_optimizer(st),
        batch=st.batch,
        train_augment=augment,
        eval_crop=st.crop,  # images load at 256/224 of the crop: validation takes the centre
        mean=r.MEAN,
        std=r.STD,
        split=split,
    )


def _check_labels(cfg: RunConfig, split: Split, classes: int) -> None:
    import numpy as np

    top = max(int(np.max(split.train.labels)), int(np.max(split.val.labels)))
    if top >= classes:
        raise GpulabError(
            f"{cfg.workload}: labels in {cfg.data} go up to {top}, beyond num_classes={classes}; "
            f"pass --param num_classes={top + 1}"
        )


def chexnet(cfg: RunConfig, fraction: float) -> Recipe:
    from gpulab.workloads import chexnet as x
    from gpulab.workloads.data import is_digits

    st = x.settings(cfg)
    task = Task((3, st.side, st.side), x.CLASSES, multilabel=True)
    if cfg.data is None:
        raise _no_data("chexnet", f"images with labels.csv of {x.CLASSES} 0/1 columns")
    if is_digits(cfg.data):
        digits_dataset(cfg, task)  # refuses: one label per image
    split = _per_sample(cfg, st.side, fraction, x.CLASSES)
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


def recipe(cfg: RunConfig, val_fraction: float) -> Recipe:
    """The epoch-training parts of cfg.workload, as its registry entry names them; a workload that optimises an
    input (style transfer's image) has none."""
    workload = REGISTRY.get(cfg.workload)
    if workload is not None and workload.optimises_input:
        raise GpulabError(
            f"{cfg.workload} optimises one image, with no data set to go through: epochs do not apply; "
            "time it with --steps instead"
        )
    if workload is None or workload.recipe is None:
        raise GpulabError(f"epoch training knows {', '.join(REGISTRY.names(epochs=True))}, not {cfg.workload!r}")
    make: Callable[[RunConfig, float], Recipe] = load(workload.recipe, f"the epoch recipe of {cfg.workload}")
    return make(cfg, val_fraction)
