"""Real training data from disk: MNIST IDX files, CIFAR-10 python batches, an image folder with a labels CSV.

Readers return uint8 images (normalised later on the device) and raise GpulabError naming the files they expected.
The `write_*` functions make small data sets in the same formats (scikit-learn's digits as MNIST, generated images),
for trying the real-data path on a machine without the data sets.
"""

from __future__ import annotations

import csv
import gzip
import os
import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
LABELS_CSV = "labels.csv"


# ---------- MNIST (IDX) ----------


def _find_mnist(root: Path) -> tuple[Path, Path]:
    for folder in (root, root / "MNIST" / "raw", root / "raw"):
        found = []
        for name in MNIST_FILES:
            plain, packed = folder / name, folder / f"{name}.gz"
            found.append(plain if plain.is_file() else packed if packed.is_file() else None)
        if all(found):
            return found[0], found[1]  # type: ignore[return-value]
    raise GpulabError(
        f"mnist: no MNIST data in {root}: expected {MNIST_FILES[0]} and {MNIST_FILES[1]} (optionally .gz) "
        "in that folder or in MNIST/raw/ under it"
    )


def _read_idx(path: Path, dims: int) -> Any:
    import numpy as np

    opener: Any = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
        zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
        if zero != 0 or dtype != 0x08 or ndim != dims:
            raise ValueError(f"header says type 0x{dtype:02x} with {ndim} dimensions, expected unsigned bytes, {dims}")
        shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
        data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
        if data.size != int(np.prod(shape)):
            raise ValueError(f"{data.size} bytes of data for shape {shape}")
        return data.reshape(shape)
    except (OSError, EOFError, ValueError, struct.error) as err:
        raise GpulabError(f"mnist: {path} is not a valid IDX file: {err}") from None


def read_mnist(root: Path) -> tuple[Any, Any]:
    """(images uint8 N×1×28×28, labels int64 N) from the training IDX files."""
    import torch

    images_path, labels_path = _find_mnist(root)
    images, labels = _read_idx(images_path, 3), _read_idx(labels_path, 1)
    if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max(initial=0) > 9:
        raise GpulabError(
            f"mnist: {images_path} and {labels_path} do not match: {images.shape} images of 28x28 expected, "
            f"{labels.shape} labels 0..9"
        )
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype("int64"))


MNIST_TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def read_mnist_test(root: Path) -> tuple[Any, Any] | None:
    """The test split (t10k files beside the training files), or None when the folder has none."""
    import torch

    images_path, _ = _find_mnist(root)
    folder = images_path.parent
    found = []
    for name in MNIST_TEST_FILES:
        plain, packed = folder / name, folder / f"{name}.gz"
        found.append(plain if plain.is_file() else packed if packed.is_file() else None)
    if not all(found):
        return None
    images, labels = _read_idx(found[0], 3), _read_idx(found[1], 1)  # type: ignore[arg-type]
    if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max(initial=0) > 9:
        raise GpulabError(f"mnist: {found[0]} and {found[1]} do not match: 28x28 images and labels 0..9 expected")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype("int64"))


# ---------- CIFAR-10 (python pickles) ----------

# Every global a CIFAR-10 python batch references: its b"data" array, pickled by Python 2 (protocol 2) with numpy
# 1.x, or the same array pickled by numpy 2.x (numpy._core). Unpickling any other global could run code.
_CIFAR_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }
)
_CIFAR_FIX = "use the python version of CIFAR-10 (cifar-10-python.tar.gz, unpacked: cifar-10-batches-py/)"


class _ForeignGlobal(Exception):
    """A batch names a global no CIFAR-10 batch uses; raised before it is imported or called."""


def _shown(text: str, limit: int = 80) -> str:
    """`text` for a one-line message: as is when short and printable, else its repr, cut."""
    if text.isprintable() and len(text) <= limit:
        return text
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _CIFAR_GLOBALS:
            raise _ForeignGlobal(_shown(f"{module}.{name}"))
        import importlib

        import numpy as np

        if name == "_reconstruct":
            # numpy 2 keeps numpy.core only as a deprecated alias; both names are the same function.
            core = "numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray"
            return importlib.import_module(core)._reconstruct
        return getattr(np, name)


def _reason(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return _shown(lines[0], 200) if lines else type(err).__name__


def _cifar_batch(path: Path) -> tuple[Any, Any]:
    """(data uint8 N×3072, labels int64 N) of one python batch; nothing in the file but numpy arrays is built."""
    import numpy as np

    def refuse(why: str) -> GpulabError:
        return GpulabError(
            f"cifar10: {path} is not a CIFAR-10 batch (a pickled dict of b'data' N×3072 uint8 and b'labels'): "
            f"{why}; {_CIFAR_FIX}"
        )

    try:
        with path.open("rb") as f:
            # encoding="bytes": the batches were pickled by Python 2, whose str keys and data read back as bytes.
            entry = _CifarUnpickler(f, encoding="bytes").load()
    except _ForeignGlobal as err:
        raise GpulabError(
            f"cifar10: {path} is not a CIFAR-10 batch: it references {err}, which a CIFAR-10 batch never does "
            f"(nothing in it was run); {_CIFAR_FIX}"
        ) from None
    except OSError as err:
        raise GpulabError(f"cifar10: cannot read {path}: {_reason(err)}") from None
    except Exception as err:  # anything a damaged or foreign pickle raises while loading
        raise refuse(f"{_reason(err)} ({type(err).__name__})") from None
    if not isinstance(entry, dict):
        raise refuse(f"it holds a {type(entry).__name__}, not a dict")
    if b"data" not in entry:
        keys = ", ".join(_shown(repr(k), 40) for k in list(entry)[:6])
        raise refuse(f"no b'data' entry (it has {keys or 'no keys'})")
    raw_labels = entry.get(b"labels", entry.get(b"fine_labels"))
    if raw_labels is None:
        raise refuse("no b'labels' entry")
    try:
        data = np.asarray(entry[b"data"])
        labels = np.asarray(raw_labels)
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise ValueError(f"b'data' is {data.dtype} {data.shape}, not uint8 N×3072")
        if labels.ndim != 1 or len(labels) != len(data) or (len(labels) and labels.dtype.kind not in "iu"):
            raise ValueError(f"b'labels' is {labels.dtype} {labels.shape} for {len(data)} images, not N integers")
        if len(labels) and (labels.min() < 0 or labels.max() > 9):
            raise ValueError("labels outside 0..9")
    except (TypeError, ValueError) as err:
        raise refuse(_reason(err)) from None
    return data, labels.astype(np.int64)


def read_cifar10(root: Path) -> tuple[Any, Any]:
    """(images uint8 N×3×32×32, labels int64 N) from data_batch_1..5."""
    import numpy as np
    import torch

    folder = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    missing = [name for name in CIFAR_FILES if not (folder / name).is_file()]
    if missing:
        raise GpulabError(
            f"cifar10: no CIFAR-10 python batches in {folder}: expected {', '.join(CIFAR_FILES)} "
            f"(missing {', '.join(missing)})"
        )
    images, labels = [], []
    for name in CIFAR_FILES:
        data, batch_labels = _cifar_batch(folder / name)
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(batch_labels)
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def read_cifar10_test(root: Path) -> tuple[Any, Any] | None:
    """The test split (test_batch beside data_batch_1..5), or None when the folder has none."""
    import torch

    folder = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    if not (folder / "test_batch").is_file():
        return None
    data, labels = _cifar_batch(folder / "test_batch")
    return torch.from_numpy(data.reshape(-1, 3, 32, 32)), torch.from_numpy(labels)


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


# ---------- ChestX-ray14 as NIH publishes it ----------

CHESTXRAY14_CSVS = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv")
# The 14 findings in CheXNet's order (its output columns); "No Finding" is none of them.
CHESTXRAY14_FINDINGS = (
    "Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
    "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia",
)  # fmt: skip
CHESTXRAY14_LAYOUT = (
    "ChestX-ray14 as NIH publishes it: Data_Entry_2017.csv (columns Image Index, Finding Labels) beside images/ or "
    "the unpacked images_001..012/images/ folders (train_val_list.txt, if present, picks the training images)"
)


def is_chestxray14(root: Path) -> bool:
    """`root` holds NIH's ChestX-ray14 index (Data_Entry_2017*.csv)."""
    return root.is_dir() and any((root / name).is_file() for name in CHESTXRAY14_CSVS)


def _chestxray14_images(root: Path) -> dict[str, str]:
    """Image file name -> path relative to root, over images/ and images_NNN/images/ (or images_NNN/)."""
    folders = [root / "images"]
    for batch in sorted(root.glob("images_*")):
        folders.append(batch / "images" if (batch / "images").is_dir() else batch)
    found: dict[str, str] = {}
    for folder in folders:
        if folder.is_dir():
            for entry in os.scandir(folder):
                if entry.name.endswith(".png"):
                    found.setdefault(entry.name, str(Path(entry.path).relative_to(root)))
    return found


def read_chestxray14(root: Path, workload: str = "chexnet") -> tuple[Path, list[str], Any]:
    """(root, relative image paths, labels N×14 float32) from NIH's layout, checked: the index's columns, every
    finding one of the 14 (or No Finding), every listed image present."""
    import numpy as np

    csv_path = next(root / name for name in CHESTXRAY14_CSVS if (root / name).is_file())
    problem = f"{workload}: {root} is not {CHESTXRAY14_LAYOUT}"
    try:
        with csv_path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise GpulabError(f"{workload}: cannot read {csv_path}: {err}") from None
    if not rows or not {"Image Index", "Finding Labels"} <= set(rows[0]):
        raise GpulabError(f"{problem}: {csv_path.name} has no Image Index and Finding Labels columns")
    keep: set[str] | None = None
    if (root / "train_val_list.txt").is_file():
        keep = {line.strip() for line in (root / "train_val_list.txt").read_text().splitlines() if line.strip()}
    images = _chestxray14_images(root)
    if not images:
        raise GpulabError(f"{problem}: no .png images under images/ or images_NNN/images/")
    index = {name: k for k, name in enumerate(CHESTXRAY14_FINDINGS)}
    paths: list[str] = []
    labels: list[list[float]] = []
    missing: list[str] = []
    for number, row in enumerate(rows, start=2):
        name = (row.get("Image Index") or "").strip()
        if keep is not None and name not in keep:
            continue
        findings = [f.strip() for f in (row.get("Finding Labels") or "").split("|") if f.strip()]
        unknown = [f for f in findings if f not in index and f != "No Finding"]
        if unknown:
            raise GpulabError(
                f"{problem}: {csv_path.name} line {number} names finding {unknown[0]!r}, not one of the 14 "
                f"({', '.join(CHESTXRAY14_FINDINGS)}) or No Finding"
            )
        if name not in images:
            missing.append(name)
            continue
        vector = [0.0] * len(CHESTXRAY14_FINDINGS)
        for finding in findings:
            if finding in index:
                vector[index[finding]] = 1.0
        paths.append(images[name])
        labels.append(vector)
    if missing:
        raise GpulabError(
            f"{problem}: {len(missing)} of {len(missing) + len(paths)} listed images are missing (e.g. {missing[0]}); "
            "unpack every images_NNN.tar.gz there"
        )
    return root, paths, np.asarray(labels, dtype=np.float32)


def read_labels_csv(root: Path, workload: str, label_columns: int) -> tuple[Path, list[str], Any]:
    """(image folder, relative paths, labels) from `labels.csv` in `root` (or `root` itself if it is a CSV); for
    chexnet's 14 columns also NIH's own ChestX-ray14 layout (read_chestxray14).

    label_columns 1: `path,label` (integer class); more: `path,l1..lN` (0/1 per class). A header row is skipped."""
    import numpy as np

    if label_columns == len(CHESTXRAY14_FINDINGS) and is_chestxray14(root):
        return read_chestxray14(root, workload)
    csv_path = root if root.is_file() else root / LABELS_CSV
    layout = "path,label" if label_columns == 1 else f"path,l1..l{label_columns}"
    if not csv_path.is_file():
        nih = f", or {CHESTXRAY14_LAYOUT}" if label_columns == len(CHESTXRAY14_FINDINGS) else ""
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


def is_class_folder(root: Path) -> bool:
    """A folder read as one folder per class (torchvision's ImageFolder): sub-folders, and neither a labels CSV
    nor CIFAR-10 batches."""
    if not root.is_dir() or (root / LABELS_CSV).exists() or (root / CIFAR_FILES[0]).exists():
        return False
    return any(p.is_dir() and p.name != "cifar-10-batches-py" for p in root.iterdir())


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


def _write_idx(path: Path, array: Any) -> None:
    import numpy as np

    data = np.ascontiguousarray(array, dtype=np.uint8)
    with path.open("wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, data.ndim))
        f.write(struct.pack(f">{data.ndim}I", *data.shape))
        f.write(data.tobytes())


def write_digits_mnist(root: Path) -> int:
    """scikit-learn's 1797 8×8 digits, upsampled to 20×20 in a 28×28 frame like MNIST, as training IDX files.
    Returns the number of images."""
    import numpy as np

    images, labels = digits_images(28, 20, 1)
    root.mkdir(parents=True, exist_ok=True)
    _write_idx(root / MNIST_FILES[0], images[:, 0])
    _write_idx(root / MNIST_FILES[1], labels.astype(np.uint8))
    return len(images)


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


def write_cifar10_batches(root: Path, per_batch: int = 20, seed: int = 0) -> int:
    """Five CIFAR-10 python batches of random images (labels 0..9). Returns the number of images."""
    import numpy as np

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name in CIFAR_FILES:
        entry = {
            b"batch_label": name.encode(),
            b"data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, size=per_batch)],
        }
        with (root / name).open("wb") as f:
            # Protocol 4 pickles arrays through numpy's _reconstruct, as the real batches do (protocol 5 would not).
            pickle.dump(entry, f, protocol=4)
    return per_batch * len(CIFAR_FILES)


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
