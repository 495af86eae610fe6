"""Training data several workloads read: tensors in memory, an image folder with a labels CSV, a folder per class,
scikit-learn's digits (built in) and the data sets a run names; each workload's own formats are in its folder's
data.py (MNIST's IDX files, CIFAR-10's python batches, ChestX-ray14 as NIH publishes it).

Readers return uint8 images (normalised later on the device) and raise GpulabError naming the files they expected.
The `write_*` functions make small data sets in the same formats (generated images, a folder per class), for trying
the real-data path on a machine without the data sets.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

LABELS_CSV = "labels.csv"


class InMemoryBatches:
    """Tensors in host memory; __getitem__ takes a list of indices (a BatchSampler's) and returns the whole batch."""

    def __init__(self, images: Any, labels: Any) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices: Sequence[int]) -> tuple[Any, Any]:
        import torch

        index = torch.as_tensor(indices, dtype=torch.long)
        return self.images[index], self.labels[index]


# ---------- image folder + labels CSV ----------


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_labels_csv(root: Path, workload: str, label_columns: int, *, also: str = "") -> tuple[Path, list[str], Any]:
    """(image folder, relative paths, labels) from `labels.csv` in `root` (or `root` itself if it is a CSV); `also`
    names the other layout the workload reads, for the message when there is no CSV (chexnet's NIH layout).

    label_columns 1: `path,label` (integer class); more: `path,l1..lN` (0/1 per class). A header row is skipped."""
    import numpy as np

    csv_path = root if root.is_file() else root / LABELS_CSV
    layout = "path,label" if label_columns == 1 else f"path,l1..l{label_columns}"
    if not csv_path.is_file():
        nih = f", or {also}" if also else ""
        raise GpulabError(
            f"{workload}: no {LABELS_CSV} in {root}: expected an image folder with {LABELS_CSV} (columns {layout}, "
            f"paths relative to the CSV's folder){nih}"
        )
    folder = csv_path.parent
    paths: list[str] = []
    rows: list[list[float]] = []
    try:
        with csv_path.open(newline="") as f:
            for number, row in enumerate(csv.reader(f), start=1):
                if not row or not "".join(row).strip():
                    continue
                if number == 1 and not all(_is_number(v) for v in row[1:]):
                    continue  # header
                if len(row) != 1 + label_columns or not all(_is_number(v) for v in row[1:]):
                    raise ValueError(f"line {number}: {len(row)} columns {row[:3]}..., expected {layout}")
                paths.append(row[0].strip())
                rows.append([float(v) for v in row[1:]])
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise GpulabError(f"{workload}: cannot read {csv_path}: {err}") from None
    except ValueError as err:
        raise GpulabError(f"{workload}: {csv_path} is not a labels CSV with columns {layout}: {err}") from None
    if not paths:
        raise GpulabError(f"{workload}: {csv_path} lists no images (columns {layout})")
    missing = [p for p in paths if not (folder / p).is_file()]
    if missing:
        raise GpulabError(
            f"{workload}: {len(missing)} image(s) listed in {csv_path} do not exist, e.g. {folder / missing[0]}"
        )
    labels = np.asarray(rows, dtype=np.float32)
    return folder, paths, labels


class ImageFolderCSV:
    """Images decoded with Pillow in the loader's workers, resized to side×side, returned as uint8 3×side×side."""

    def __init__(self, folder: Path, paths: list[str], labels: Any, side: int) -> None:
        self.folder, self.paths, self.labels, self.side = folder, paths, labels, side

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        import numpy as np
        import torch
        from PIL import Image

        path = self.folder / self.paths[index]
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB").resize((self.side, self.side), Image.Resampling.BILINEAR)
        except OSError as err:
            raise GpulabError(f"cannot read image {path}: {err}") from None
        x = torch.from_numpy(np.array(rgb, dtype=np.uint8)).permute(2, 0, 1).contiguous()
        return x, torch.from_numpy(np.array(self.labels[index]))


# ---------- a folder per class ----------

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
CLASS_FOLDER_LAYOUT = "ROOT/<class name>/*.jpg|*.png, one folder per class"


def wants_class_folder(root: Path) -> bool:
    """For image-folder workloads: a folder without labels.csv is a folder per class (its errors say so)."""
    return root.is_dir() and not (root / LABELS_CSV).exists()


@dataclass(frozen=True)
class ClassFolder:
    """A data set laid out as ROOT/<class>/<image>: classes sorted by name, label = the class's position."""

    root: Path
    classes: list[str]
    paths: list[str]  # relative to root
    labels: list[int]

    @classmethod
    def read(cls, root: Path, workload: str) -> ClassFolder:
        """Every image under each class folder; refuses a root without classes and a class without images."""
        if not root.is_dir():
            raise GpulabError(f"{workload}: {root} is not a folder; expected {CLASS_FOLDER_LAYOUT}")
        classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not classes:
            raise GpulabError(f"{workload}: {root} has no class folders; expected {CLASS_FOLDER_LAYOUT}")
        paths: list[str] = []
        labels: list[int] = []
        for label, name in enumerate(classes):
            images = sorted(
                p.name for p in (root / name).iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
            )
            if not images:
                raise GpulabError(
                    f"{workload}: class folder {root / name} holds no images (.jpg, .jpeg, .png); "
                    f"expected {CLASS_FOLDER_LAYOUT}"
                )
            paths.extend(f"{name}/{image}" for image in images)
            labels.extend([label] * len(images))
        return cls(root, classes, paths, labels)

    def dataset(self, side: int, indices: Sequence[int] | None = None) -> ImageFolderCSV:
        """The images (all, or those at `indices`) decoded with Pillow at side×side, with their labels."""
        import numpy as np

        keep = list(range(len(self.paths))) if indices is None else list(indices)
        labels = np.asarray([self.labels[i] for i in keep], dtype=np.int64)
        return ImageFolderCSV(self.root, [self.paths[i] for i in keep], labels, side)


# ---------- scikit-learn's digits, built in ----------

DIGITS = "digits"  # `--data digits`: scikit-learn's 1797 8×8 digits, no files needed
DIGITS_VAL = 0.2  # the share its fixed split holds out for validation


FETCHED = ("mnist", "cifar10")  # `--data mnist`: torchvision's published data set, fetched into gpulab's cache
NAMED = (DIGITS, *FETCHED)


def named(data: Path | str | None) -> str | None:
    """The named data set `data` asks for (digits, mnist, cifar10), unless a file or folder of that name is where
    the run starts."""
    if data is None or str(data) not in NAMED or Path(data).exists():
        return None
    return str(data)


def is_digits(data: Path | None) -> bool:
    """`--data digits` names the built-in set, unless a file or folder of that name is where the run starts."""
    return named(data) == DIGITS


def digits_images(side: int = 28, frame: int = 20, channels: int = 1) -> tuple[Any, Any]:
    """scikit-learn's digits as uint8 N×channels×side×side (the 8×8 image upsampled to frame×frame, centred) and
    int64 labels. scikit-learn ships the images, so nothing is downloaded."""
    import numpy as np
    from PIL import Image

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise GpulabError(
            "--data digits needs scikit-learn, which is not installed here (pip install scikit-learn), "
            "or pass --data PATH to real data"
        ) from None
    digits = load_digits()
    images = np.zeros((len(digits.images), side, side), dtype=np.uint8)
    top = (side - frame) // 2
    for i, image in enumerate(digits.images):
        small = Image.fromarray((image * (255.0 / 16.0)).astype(np.uint8))
        images[i, top : top + frame, top : top + frame] = np.asarray(
            small.resize((frame, frame), Image.Resampling.BILINEAR)
        )
    stacked = np.repeat(images[:, None], channels, axis=1)
    return stacked, digits.target.astype(np.int64)


def digits_split(count: int) -> tuple[Any, Any]:
    """The digits' fixed (train, validation) indices: one permutation drawn with seed 0, the last 20 % held out."""
    import numpy as np

    order = np.random.default_rng(0).permutation(count)
    cut = count - round(count * DIGITS_VAL)
    return np.sort(order[:cut]), np.sort(order[cut:])


# ---------- small data sets in the real formats ----------


def write_class_folder(root: Path, per_class: Sequence[int], *, side: int = 24, seed: int = 0) -> list[str]:
    """Generated images in ROOT/class_K/NNN.png (alternately .jpg), class K's images of a clearly different
    brightness, so a model can learn them. Returns the class names."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    names = [f"class_{k}" for k in range(len(per_class))]
    for k, (name, count) in enumerate(zip(names, per_class, strict=True)):
        (root / name).mkdir(parents=True, exist_ok=True)
        level = 40 + 180 * k // max(1, len(per_class) - 1)
        for i in range(count):
            pixels = np.clip(rng.normal(level, 20, size=(side, side, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i:03d}.{'png' if i % 2 else 'jpg'}")
    return names


def write_image_folder(root: Path, count: int, *, label_columns: int, classes: int = 2, side: int = 48) -> int:
    """`count` generated JPEG images and labels.csv (`path,label` for label_columns 1, else `path,l1..lN`)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    header = ["path", "label"] if label_columns == 1 else ["path"] + [f"l{i}" for i in range(1, label_columns + 1)]
    rows: list[list[Any]] = []
    for i in range(count):
        rel = f"images/{i:05d}.jpg"
        pixels = rng.integers(0, 256, size=(side, side + 8, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / rel, quality=90)
        if label_columns == 1:
            rows.append([rel, int(rng.integers(0, classes))])
        else:
            rows.append([rel, *(int(v) for v in rng.integers(0, 2, size=label_columns))])
    with (root / LABELS_CSV).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return count
