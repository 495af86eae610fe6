"""The prerequisite rule for heavy tests: skip with one line naming what is missing, fail under GPULAB_REQUIRE_ALL=1."""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

# Where each tool comes from on Debian, so the skip line names the fix.
APT_PACKAGE = {
    "debootstrap": "debootstrap",
    "chroot": "coreutils",
    "mount": "mount",
    "tar": "tar",
    "zstd": "zstd",
    "mkfs.ext4": "e2fsprogs",
    "qemu-img": "qemu-utils",
    "qemu-system-x86_64": "qemu-system-x86",
    "libvirtd": "libvirt-daemon-system",
    "virtlogd": "libvirt-daemon-system",
    "virsh": "libvirt-clients",
    "dnsmasq": "dnsmasq-base",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "lsinitramfs": "initramfs-tools-core",
}


def require_all() -> bool:
    """True when CI asks that every prerequisite be present (GPULAB_REQUIRE_ALL=1)."""
    return os.environ.get("GPULAB_REQUIRE_ALL", "") not in ("", "0")


def missing(reason: str) -> NoReturn:
    """Skip (or fail under GPULAB_REQUIRE_ALL=1) with one line saying what is missing."""
    if require_all():
        pytest.fail(f"prerequisite missing (GPULAB_REQUIRE_ALL=1): {reason}", pytrace=False)
    pytest.skip(reason)


def require_root_tools(*tools: str) -> None:
    """Require root and the given executables on PATH."""
    if os.geteuid() != 0:
        missing("needs root (debootstrap, chroot, mounts and libvirt's system daemon)")
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        packages = sorted({APT_PACKAGE.get(t, t) for t in absent})
        missing(f"needs {', '.join(absent)} (apt-get install {' '.join(packages)})")


def require_module(name: str, extra: str) -> None:
    """Require an importable Python module, naming the extra that installs it."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        missing(f"needs the Python module {name} (pip install -c constraints.txt -e '.[{extra}]')")
