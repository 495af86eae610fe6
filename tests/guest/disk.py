"""The boot disk of the test guest: the cached root as an ext4 qcow2, plus its kernel and initrd for direct boot.

Cached beside the root tarball under a key of both recipes; a VM gets a qcow2 overlay on it (gpulab.vm does
that), so the base is never written and many guests can share it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from guest import image

# Virtual size of the guest's root filesystem: room for a frameworks venv (torch CPU ~1 GB) and apt's cache.
DISK_GIB = 12
# The root by label (the disk's device name is the template's business); the serial console feeds console.log.
CMDLINE = f"root=LABEL={image.FS_LABEL} rw console=ttyS0,115200n8 quiet"


@dataclass(frozen=True)
class BaseDisk:
    qcow2: Path
    kernel: Path
    initrd: Path
    kernel_release: str
    cmdline: str = CMDLINE


def disk_key() -> str:
    h = hashlib.sha256(image.recipe_key().encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def _load(directory: Path) -> BaseDisk:
    release = (directory / "kernel-release").read_text().strip()
    return BaseDisk(
        qcow2=directory / "root.qcow2",
        kernel=directory / "vmlinuz",
        initrd=directory / "initrd.img",
        kernel_release=release,
    )


def _build(final: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix=".disk-", dir=final.parent))
    root = work / "root"
    try:
        image.unpack_root(root)
        release = image.kernel_release(root)
        out = work / "out"
        out.mkdir()
        shutil.copyfile(root / f"boot/vmlinuz-{release}", out / "vmlinuz")
        shutil.copyfile(root / f"boot/initrd.img-{release}", out / "initrd.img")
        (out / "kernel-release").write_text(release + "\n")
        raw = work / "root.raw"
        with open(raw, "wb") as fh:
            fh.truncate(DISK_GIB * 1024**3)
        image.run(["mkfs.ext4", "-q", "-F", "-L", image.FS_LABEL, "-d", str(root), str(raw)], timeout=900)
        image.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(out / "root.qcow2")])
        for f in out.iterdir():
            f.chmod(0o644)  # read by QEMU, which runs as libvirt-qemu under qemu:///system
        out.chmod(0o755)
        os.rename(out, final)
    finally:
        image.remove_root(root)
        shutil.rmtree(work, ignore_errors=True)


def base_disk() -> BaseDisk:
    """The cached base disk for the current recipes, built on first use (~1 min from a cached root)."""
    final = image.guest_cache() / f"disk-{disk_key()}"
    if not final.is_dir():
        with image.file_lock(image.guest_cache() / "disk.lock"):
            if not final.is_dir():
                _build(final)
                image.prune_stale(final)
    return _load(final)
