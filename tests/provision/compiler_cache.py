"""A compiler cache for the kernel module builds in a Debian root: Debian's ccache, called in place of gcc through
its masquerade directory, its objects kept outside the clone under ${GPULAB_CI_CACHE}/ccache (ccache-<suite> for
another suite).

ccache keys each object by a hash of the compiler, its arguments, the source and every header it reads, and runs
the compiler on a miss (a failed compile is never cached). A cold cache still serves a build's repeated compiles
(Kbuild's and NVIDIA's conftest.sh checks, most of its compiler calls); a warm one also turns the compile steps of an
unchanged driver against an unchanged kernel into copies. DKMS, make, the link and the module's install run for real.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from guest.image import SUITE, by_suite, in_chroot
from provision.files import cache_root

MASQUERADE = "/usr/lib/ccache"
# Under /tmp: tests/provision/files.py's tree_state leaves it out, so a compile never reads as a change to the root.
IN_ROOT = "/tmp/gpulab-ccache"
# The names Kbuild and NVIDIA's conftest.sh call the compiler by (Debian's kernel headers set CC=gcc-12).
COMPILERS = ("gcc", "gcc-12", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-gcc-12", "cc")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # apt's default DPkg::Path, which it sets for dpkg's scripts


def cache_dir(suite: str = SUITE) -> Path:
    return cache_root() / by_suite("ccache", suite)


@contextlib.contextmanager
def compiler_cache(root: Path, suite: str = SUITE) -> Iterator[None]:
    """Install ccache into root, mount the suite's cache at IN_ROOT and put the masquerade directory first on the PATH
    apt gives dpkg's scripts (DKMS builds from them); commands run otherwise take it from with_masquerade."""
    in_chroot(root, "apt-get", "install", "-y", "-q", "--no-install-recommends", "ccache")
    for name in COMPILERS:
        link = root / MASQUERADE.lstrip("/") / name
        if not link.is_symlink():
            link.symlink_to("../../bin/ccache")
    (root / "etc/ccache.conf").write_text(f"cache_dir = {IN_ROOT}\nmax_size = 2G\n")
    (root / "etc/apt/apt.conf.d/00gpulab-tests-ccache").write_text(f'DPkg::Path "{MASQUERADE}:{SYSTEM_PATH}";\n')
    shared = cache_dir(suite)
    shared.mkdir(parents=True, exist_ok=True)
    mount_point = root / IN_ROOT.lstrip("/")
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(shared), str(mount_point)], check=True, capture_output=True)
    try:
        yield
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def with_masquerade(env: dict[str, str]) -> dict[str, str]:
    """`env` with the masquerade directory first on PATH (a directory absent outside the root: no effect there)."""
    return {**env, "PATH": f"{MASQUERADE}:{env.get('PATH', SYSTEM_PATH)}"}


def stats(root: Path) -> str:
    """ccache's counters for the shared cache, as the root's ccache reads them (printed by the tests)."""
    proc = subprocess.run(["chroot", str(root), "ccache", "--show-stats"], capture_output=True, text=True, check=False)
    return proc.stdout or proc.stderr
