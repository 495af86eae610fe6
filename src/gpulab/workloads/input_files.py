"""Input files a workload parameter names (images, weights): checked before anything opens them, digested, and a
loader's exception cut to one informative line."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from gpulab import paths
from gpulab.errors import GpulabError
from gpulab.workloads import checking

MAX_INPUT_BYTES = 4 * 1024**3  # VGG19's weights are 548 MB; an image is far less
# What to pass instead, in the one-line error a bad input file gets.
IMAGE_HINT = "pass an image file Pillow reads (JPEG, PNG, ...)"


def cause(err: BaseException) -> str:
    """The first informative line of an exception from a loader, for a one-line message."""
    text = str(err)
    # torch's weights-only refusal starts with a paragraph about torch.load; what was wrong comes after this.
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(err).__name__
    if first.endswith(":") and len(lines) > 1:  # "...error for object X:" announces the detail on the next line
        first = f"{first} {lines[1]}"
    return first if len(first) <= 200 else first[:200] + "…"


def input_file(name: str, value: Any, hint: str, workload: str = "style_transfer") -> Path | None:
    """The regular, non-empty file parameter `name` names (None when unset); anything else is one GpulabError.

    Checked before anything opens it (gpulab.paths): a directory, a device such as /dev/zero or a pipe would
    otherwise fail deep inside a loader, or be read without end.
    """
    if value is None:
        return None
    what = f"{workload}: parameter {name}:"
    if not isinstance(value, (str, os.PathLike)):  # --param values parse as JSON: 3, [..], true are not paths
        raise GpulabError(f"{what} {value!r} is not a file path; {hint}")
    if not str(value).strip():
        raise GpulabError(f"{what} the path is empty; {hint}")
    if not checking.files_here():  # a study's pre-flight for another host's workers: the file is theirs
        return Path(value).expanduser()
    path = paths.input_file(Path(value).expanduser(), what, hint, limit=MAX_INPUT_BYTES)
    if path.stat().st_size == 0:
        raise GpulabError(f"{what} file {path} is empty; {hint}")
    return path


def file_digest(path: Path) -> str:
    """The first 12 hex digits of the file's SHA-256, read in chunks (weights files are hundreds of MB)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                digest.update(chunk)
    except OSError as err:
        raise GpulabError(f"style_transfer: cannot read {path}: {err.strerror or cause(err)}") from None
    return digest.hexdigest()[:12]
