"""Deterministic tar archives and content-keyed build outputs on the controller.

An archive's bytes depend only on the files' names and contents (fixed mtime, owner and modes, sorted
members), so an unchanged input gives the same archive and `copy`/`unarchive` on the node report ok. Outputs
are written to a temporary name and renamed, under a lock, so parallel forks never see half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

# 1980-01-01: the oldest time a zip (wheel) can hold; also what SOURCE_DATE_EPOCH is set to for wheel builds.
EPOCH = 315532800


def tree_files(root: Path, skip: tuple[str, ...] = ("__pycache__", ".pytest_cache")) -> list[Path]:
    """Regular files under `root` (relative, sorted), leaving out caches and compiled files."""
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in skip or part.endswith(".egg-info") for part in rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file():
            out.append(rel)
    return out


def digest(members: list[tuple[str, Path]]) -> str:
    """sha256 over (archive name, content) pairs."""
    h = hashlib.sha256()
    for name, path in sorted(members):
        h.update(name.encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _info(name: str, size: int, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if directory:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = size, 0o644
    return info


def write_tar(dest: Path, members: list[tuple[str, Path]]) -> None:
    """Write an uncompressed, reproducible tar of (archive name, file) pairs to `dest` atomically."""
    dirs = sorted({str(Path(name).parents[i]) for name, _ in members for i in range(len(Path(name).parts) - 1)})
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name in dirs:
                tar.addfile(_info(name, 0, directory=True))
            for name, path in sorted(members):
                with open(path, "rb") as handle:
                    tar.addfile(_info(name, path.stat().st_size), handle)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def keyed_tar(out_dir: Path, prefix: str, members: list[tuple[str, Path]]) -> tuple[Path, bool]:
    """`<out_dir>/<prefix>-<content hash>.tar`, built unless it exists; returns (path, built)."""
    path = out_dir / f"{prefix}-{digest(members)[:16]}.tar"
    with locked(out_dir):
        if path.is_file():
            return path, False
        write_tar(path, members)
    return path, True
