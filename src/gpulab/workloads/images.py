"""Images for style transfer: scikit-learn's sample photos or a generated stand-in, read, resized, cropped and
turned into tensors."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.workloads.input_files import IMAGE_HINT, cause


def _generated_image(kind: str, height: int = 427, width: int = 640) -> Any:
    """A deterministic photo-sized RGB image (uint8 H×W×3), used when scikit-learn's sample photos are unavailable."""
    import numpy as np

    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    if kind == "content":
        r = 128 + 100 * np.sin(x / 37.0) * np.cos(y / 53.0)
        g = 255 * (y / height)
        b = 255 * ((x - width / 2) ** 2 + (y - height / 2) ** 2 < (min(height, width) / 3) ** 2)
    else:
        r = 128 + 127 * np.sin((x + y) / 9.0)
        g = 128 + 127 * np.sin((x - 2 * y) / 13.0)
        b = 128 + 127 * np.cos(np.hypot(x - width / 3, y - height / 3) / 7.0)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def default_image(kind: str, *, use_samples: bool = True) -> tuple[Any, str]:
    """(uint8 H×W×3, description): scikit-learn's sample photo (china.jpg / flower.jpg), else a generated image."""
    name = "china.jpg" if kind == "content" else "flower.jpg"
    photo = _sample_photo(name) if use_samples else None
    if photo is not None:
        return load_image(photo), f"sample:{name}"
    return _generated_image(kind), f"generated:{kind}"


def _sample_photo(name: str) -> Path | None:
    """The path of scikit-learn's bundled sample photo, found without importing scikit-learn.

    Importing it costs seconds per process, which a sweep of short runs pays once per run.
    """
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "datasets" / "images" / name
        if path.is_file():
            return path
    return None


def load_image(path: Path, name: str = "content") -> Any:
    import numpy as np
    from PIL import Image

    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except Exception as err:  # Pillow raises OSError, ValueError, DecompressionBombError, ... for bad files
        raise GpulabError(
            f"style_transfer: parameter {name}: {path} is not an image Pillow can read ({cause(err)}); {IMAGE_HINT}"
        ) from None


def readable_image(path: Path, name: str = "content") -> None:
    """`load_image`'s error when Pillow cannot read the image; each file is decoded once per process (a study's
    pre-flight checks every run's images, and a grid names the same few files many times)."""
    stat = path.stat()
    _decoded(str(path), stat.st_size, stat.st_mtime_ns, name)


@functools.lru_cache(maxsize=256)
def _decoded(path: str, size: int, mtime_ns: int, name: str) -> None:
    load_image(Path(path), name)


def resize_image(array: Any, height: int, width: int) -> Any:
    import numpy as np
    from PIL import Image

    return np.asarray(Image.fromarray(array).resize((width, height), Image.Resampling.LANCZOS))


def crop_to_aspect(array: Any, height: int, width: int) -> Any:
    h, w = array.shape[:2]
    if h * width > w * height:  # too tall
        keep = round(w * height / width)
        top = (h - keep) // 2
        return array[top : top + keep]
    keep = round(h * width / height)
    left = (w - keep) // 2
    return array[:, left : left + keep]


def to_tensor(array: Any, device: str) -> Any:
    import torch

    return torch.from_numpy(array.copy()).permute(2, 0, 1).unsqueeze(0).float().to(device)
