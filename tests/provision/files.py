"""A local HTTP server for the files a host would download (PyPI's file host, NVIDIA's repository), and NVIDIA's
wheels from PyPI cached outside the clone under the path PyPI serves them at."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPI_FILES = "https://files.pythonhosted.org"


def cache_root() -> Path:
    return Path(os.environ.get("GPULAB_CI_CACHE", "/var/cache/gpulab-ci"))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pinned_wheel(key: str) -> dict[str, str]:
    """The cudnn_wheels entry ("9.10-cu11") the roles take by default (the matrix's pins)."""
    from gpulab.compat.data import cudnn_wheel_pins

    return dict(cudnn_wheel_pins()[key])


def cached_pypi_file(path: str, expected_sha256: str) -> Path:
    """PyPI's file at `path` (packages/...), downloaded once into ${GPULAB_CI_CACHE}/pypi/<path>, sha256-checked.

    The cache directory is laid out like PyPI's file host, so serving it stands in for a PyPI mirror."""
    dest = cache_root() / "pypi" / path
    if dest.is_file() and sha256(dest) == expected_sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + f".{os.getpid()}.part")
    with urllib.request.urlopen(f"{PYPI_FILES}/{path}", timeout=600) as response, part.open("wb") as out:
        while block := response.read(1 << 20):
            out.write(block)
    got = sha256(part)
    if got != expected_sha256:
        part.unlink()
        raise RuntimeError(f"{PYPI_FILES}/{path} has sha256 {got}, expected {expected_sha256}")
    part.rename(dest)
    return dest


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (a free port) while the block runs; yields the base URL.

    A chroot shares this machine's network, so hosts reached through community.general.chroot see it."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def tree_state(root: Path) -> dict[str, tuple[int, int, int]]:
    """(mode, size, mtime) of every path in a chroot root but Ansible's own temporary files (and /root, which holds
    them) and the kernel's mounts."""
    state = {}
    skip = (root / "root/.ansible", root / "tmp", root / "proc", root / "sys", root / "dev", root / "run")
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            if here / name == root / "root":
                continue
            st = (here / name).lstat()
            state[str((here / name).relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return state


def without_apt_caches(state: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
    """A root's state but for what apt and dpkg write when they only simulate: their logs and apt's binary caches."""
    return {k: v for k, v in state.items() if not k.startswith(("var/log/apt", "var/log/dpkg.log", "var/cache/apt"))}
