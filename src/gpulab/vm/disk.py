"""The VM's disk: a per-VM qcow2 overlay on a shared base image (the base is never written), or a given disk."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

INSTALL_HINT = "apt-get install qemu-utils"


def _qemu_img(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("qemu-img")
    if tool is None:
        raise GpulabError(f"qemu-img is needed to create the VM's disk overlay: {INSTALL_HINT}.")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=300, check=False)


def image_info(path: Path) -> dict[str, Any]:
    proc = _qemu_img("info", "--output=json", "-U", str(path))
    if proc.returncode != 0:
        raise GpulabError(f"qemu-img cannot read {path}: {proc.stderr.strip()}")
    info: dict[str, Any] = json.loads(proc.stdout)
    return info


def image_format(path: Path) -> str:
    return str(image_info(path).get("format", "raw"))


def ensure_overlay(base: Path, overlay: Path, size_gib: int | None) -> bool:
    """Create `overlay` on `base` unless it exists with that backing file; True when created.

    An existing overlay on another base is refused rather than replaced: it holds a VM's data.
    """
    if overlay.exists():
        info = image_info(overlay)
        backing = info.get("full-backing-filename") or info.get("backing-filename")
        if backing is None or Path(backing).resolve() != base.resolve():
            raise GpulabError(
                f"{overlay} exists but is not an overlay on {base} (backing file: {backing}); it may hold another "
                "VM's data. Remove it, or point disk.path at it to use it as it is."
            )
        return False
    if not base.is_file():
        raise GpulabError(f"base image {base} does not exist; build or download it first, or fix disk.base.")
    overlay.parent.mkdir(parents=True, exist_ok=True)
    staged = overlay.with_name(f".{overlay.name}.tmp")
    args = ["create", "-q", "-f", "qcow2", "-F", image_format(base), "-b", str(base.resolve()), str(staged)]
    if size_gib is not None:
        args.append(f"{size_gib}G")
    proc = _qemu_img(*args)
    if proc.returncode != 0:
        staged.unlink(missing_ok=True)
        raise GpulabError(f"qemu-img could not create the overlay {overlay}: {proc.stderr.strip()}")
    staged.replace(overlay)
    return True
