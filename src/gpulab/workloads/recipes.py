"""What epoch training needs from each workload: its model, its own optimiser, its augmentation, and its data split
into training and validation sets. Each workload's recipe (recipe.py in its folder) builds one from its own settings
and builders with the splits here; `recipe` finds it through the registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
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


def in_memory(images: Any, labels: Any, fraction: float, seed: int, source: str) -> Split:
    from gpulab.workloads.data import InMemoryBatches

    train, val = held_out(len(labels), fraction, seed)
    return Split(
        InMemoryBatches(images[train], labels[train]),
        InMemoryBatches(images[val], labels[val]),
        True,
        source,
        f"held out {fraction:g} of the training data",
    )


def test_or_held_out(train: tuple[Any, Any], test: tuple[Any, Any] | None, fraction: float, cfg: RunConfig) -> Split:
    from gpulab.workloads.data import InMemoryBatches

    source = f"real:{cfg.data}"
    if test is None:
        return in_memory(*train, fraction, cfg.seed, source)
    return Split(InMemoryBatches(*train), InMemoryBatches(*test), True, source, "the data set's test split")


def digits(cfg: RunConfig, task: Task) -> Split:
    from gpulab.workloads.data import DIGITS, digits_split

    train, val = digits_split(1797)
    return Split(
        digits_dataset(cfg, task, train), digits_dataset(cfg, task, val), True, DIGITS, "the digits' fixed split"
    )


def per_sample(
    cfg: RunConfig,
    side: int,
    fraction: float,
    label_columns: int,
    read_labels: Callable[[Path, str], tuple[Path, list[str], Any]] | None = None,
) -> Split:
    """An image folder: one folder per class, or labels.csv (or the layouts the workload's `read_labels` reads);
    validation held out."""
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
    if read_labels is not None:
        folder, paths, labels = read_labels(root, cfg.workload)
    else:
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


def no_data(workload: str, kinds: str) -> GpulabError:
    return GpulabError(
        f"{workload}: epoch training needs real data: pass --data digits (built in) or --data PATH ({kinds})"
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
