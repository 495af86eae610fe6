"""CIFAR-10's data: its python batches (training and test split) read without running anything they hold, fetched
through torchvision's archive, and written with random images as a stand-in (a study's `data: generated`); a folder
per class is read as the other layout it takes."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.workloads.data import LABELS_CSV
from gpulab.workloads.fetch import Resource

FILES = tuple(f"data_batch_{i}" for i in range(1, 6))

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


def read(root: Path) -> tuple[Any, Any]:
    """(images uint8 N×3×32×32, labels int64 N) from data_batch_1..5."""
    import numpy as np
    import torch

    folder = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise GpulabError(
            f"cifar10: no CIFAR-10 python batches in {folder}: expected {', '.join(FILES)} "
            f"(missing {', '.join(missing)})"
        )
    images, labels = [], []
    for name in FILES:
        data, batch_labels = _cifar_batch(folder / name)
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(batch_labels)
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def read_test(root: Path) -> tuple[Any, Any] | None:
    """The test split (test_batch beside data_batch_1..5), or None when the folder has none."""
    import torch

    folder = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    if not (folder / "test_batch").is_file():
        return None
    data, labels = _cifar_batch(folder / "test_batch")
    return torch.from_numpy(data.reshape(-1, 3, 32, 32)), torch.from_numpy(labels)


def is_class_folder(root: Path) -> bool:
    """A folder read as one folder per class (torchvision's ImageFolder): sub-folders, and neither a labels CSV
    nor CIFAR-10 batches."""
    if not root.is_dir() or (root / LABELS_CSV).exists() or (root / FILES[0]).exists():
        return False
    return any(p.is_dir() and p.name != "cifar-10-batches-py" for p in root.iterdir())


def write_batches(root: Path, per_batch: int = 20, seed: int = 0) -> int:
    """Five CIFAR-10 python batches of random images (labels 0..9). Returns the number of images."""
    import numpy as np

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        entry = {
            b"batch_label": name.encode(),
            b"data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, size=per_batch)],
        }
        with (root / name).open("wb") as f:
            # Protocol 4 pickles arrays through numpy's _reconstruct, as the real batches do (protocol 5 would not).
            pickle.dump(entry, f, protocol=4)
    return per_batch * len(FILES)


def generated_data(root: Path) -> None:
    """Generated images as CIFAR-10 python batches (a study's `data: generated`)."""
    write_batches(root)


def archives() -> list[Resource]:
    """The archive torchvision.datasets downloads for CIFAR-10, with its URL and MD5 sum."""
    from gpulab.workloads.tv import import_torchvision

    c = import_torchvision().datasets.CIFAR10
    return [Resource((c.url,), c.filename, c.tgz_md5)]
