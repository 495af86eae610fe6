"""MNIST's data: its IDX files (training and test split) read, fetched through torchvision's archives, and written
from scikit-learn's digits as a stand-in (a study's `data: generated`)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.workloads.data import digits_images
from gpulab.workloads.fetch import Resource

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _find(root: Path) -> tuple[Path, Path]:
    for folder in (root, root / "MNIST" / "raw", root / "raw"):
        found = []
        for name in FILES:
            plain, packed = folder / name, folder / f"{name}.gz"
            found.append(plain if plain.is_file() else packed if packed.is_file() else None)
        if all(found):
            return found[0], found[1]  # type: ignore[return-value]
    raise GpulabError(
        f"mnist: no MNIST data in {root}: expected {FILES[0]} and {FILES[1]} (optionally .gz) "
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


def read(root: Path) -> tuple[Any, Any]:
    """(images uint8 N×1×28×28, labels int64 N) from the training IDX files."""
    import torch

    images_path, labels_path = _find(root)
    images, labels = _read_idx(images_path, 3), _read_idx(labels_path, 1)
    if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max(initial=0) > 9:
        raise GpulabError(
            f"mnist: {images_path} and {labels_path} do not match: {images.shape} images of 28x28 expected, "
            f"{labels.shape} labels 0..9"
        )
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype("int64"))


def read_test(root: Path) -> tuple[Any, Any] | None:
    """The test split (t10k files beside the training files), or None when the folder has none."""
    import torch

    images_path, _ = _find(root)
    folder = images_path.parent
    found = []
    for name in TEST_FILES:
        plain, packed = folder / name, folder / f"{name}.gz"
        found.append(plain if plain.is_file() else packed if packed.is_file() else None)
    if not all(found):
        return None
    images, labels = _read_idx(found[0], 3), _read_idx(found[1], 1)  # type: ignore[arg-type]
    if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max(initial=0) > 9:
        raise GpulabError(f"mnist: {found[0]} and {found[1]} do not match: 28x28 images and labels 0..9 expected")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype("int64"))


def _write_idx(path: Path, array: Any) -> None:
    import numpy as np

    data = np.ascontiguousarray(array, dtype=np.uint8)
    with path.open("wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, data.ndim))
        f.write(struct.pack(f">{data.ndim}I", *data.shape))
        f.write(data.tobytes())


def write_digits(root: Path) -> int:
    """scikit-learn's 1797 8×8 digits, upsampled to 20×20 in a 28×28 frame like MNIST, as training IDX files.
    Returns the number of images."""
    import numpy as np

    images, labels = digits_images(28, 20, 1)
    root.mkdir(parents=True, exist_ok=True)
    _write_idx(root / FILES[0], images[:, 0])
    _write_idx(root / FILES[1], labels.astype(np.uint8))
    return len(images)


def generated_data(root: Path) -> None:
    """Scikit-learn's digits as MNIST IDX files (a study's `data: generated`)."""
    write_digits(root)


def archives() -> list[Resource]:
    """The archives torchvision.datasets downloads for MNIST, with its mirrors and MD5 sums."""
    from gpulab.workloads.tv import import_torchvision

    mnist = import_torchvision().datasets.MNIST
    return [Resource(tuple(m + f for m in mnist.mirrors), f, md5) for f, md5 in mnist.resources]
