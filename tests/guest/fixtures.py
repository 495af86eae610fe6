"""pytest fixtures over the guest image (registered by tests/conftest.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from guest import boot, image, libvirtd, prereq, ssh
from guest.ssh import Guest

ROOTFS_TOOLS = ("debootstrap", "chroot", "mount", "tar", "zstd")


@pytest.fixture
def require_root_tools() -> Callable[..., None]:
    """`require_root_tools("virsh", ...)`: root plus these tools, else skip (fail under GPULAB_REQUIRE_ALL=1)."""
    return prereq.require_root_tools


@pytest.fixture(scope="session")
def guest_rootfs() -> Path:
    """The cached Debian 12 root tarball (built on first use)."""
    prereq.require_root_tools(*ROOTFS_TOOLS)
    return image.rootfs_tarball()


@pytest.fixture
def debian_root(guest_rootfs: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh Debian 12 root for this test (image.fresh_root)."""
    with image.fresh_root(tmp_path / "root") as root:
        yield root


@pytest.fixture(scope="session")
def trixie_rootfs() -> Path:
    """The cached Debian 13 root tarball (built on first use, like the Debian 12 one)."""
    prereq.require_root_tools(*ROOTFS_TOOLS)
    return image.rootfs_tarball("trixie")


@pytest.fixture
def trixie_root(trixie_rootfs: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh Debian 13 root for this test (image.fresh_root), its apt archive seeded from Debian 13's cache."""
    with image.fresh_root(tmp_path / "root", "trixie") as root:
        yield root


BOOT_TOOLS = (
    *ROOTFS_TOOLS,
    "mkfs.ext4",
    "qemu-img",
    "qemu-system-x86_64",
    "virtlogd",
    "libvirtd",
    "virsh",
    "dnsmasq",
    "xorriso",
    "ssh",
    "ssh-keygen",
)


@pytest.fixture(scope="session")
def libvirt_system() -> Iterator[Any]:
    """An open connection to qemu:///system, libvirtd started by hand when it does not run."""
    prereq.require_root_tools(*BOOT_TOOLS)
    prereq.require_module("libvirt", "vm")
    prereq.require_module("jinja2", "vm")
    from gpulab import vm

    libvirtd.ensure_running()
    conn = vm.connect(libvirtd.URI)
    boot.reap_orphans(conn)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def booted_guest(libvirt_system: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    """A Debian 12 guest booted under TCG on qemu:///system, reachable over SSH (see guest.ssh.Guest).

    `guest.ssh(cmd)`, `guest.inventory(path, group="gpu_nodes", **hostvars)` for Ansible; destroyed and undefined
    at the end of the session."""
    key = ssh.generate_key(tmp_path_factory.mktemp("guest-key"))
    name = boot.guest_name()
    try:
        guest, seconds = boot.boot(libvirt_system, name, key)
        print(f"\n{name}: SSH login {seconds:.0f} s after start ({guest.host}, kernel {guest.kernel_release})")
        yield dataclasses.replace(guest, boot_seconds=seconds)
    finally:
        boot.remove_guest(libvirt_system, name)
