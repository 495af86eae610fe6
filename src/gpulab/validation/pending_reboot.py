"""A host that waits for a reboot: new NVIDIA driver libraries over the old kernel module.

After a driver change without a reboot, every new CUDA or NVML process fails with "Driver/library version
mismatch"; measuring such a host measures nothing. The validation refuses it before the first test, in one line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib")


def loaded_module(root: Path) -> str | None:
    try:
        return (root / "sys/module/nvidia/version").read_text().strip() or None
    except OSError:
        return None


def installed_libraries(root: Path) -> str | None:
    """The driver version a new process loads: where libnvidia-ml.so.1 points (libnvidia-ml.so.<version>)."""
    for lib_dir in LIB_DIRS:
        link = root / lib_dir / "libnvidia-ml.so.1"
        if link.exists():
            match = re.match(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", Path(os.path.realpath(link)).name)
            if match:
                return match.group(1)
    return None


def pending_reboot(root: Path = Path("/")) -> str | None:
    """One line saying why the host must reboot before it is validated, or None."""
    loaded, installed = loaded_module(root), installed_libraries(root)
    if loaded is None or installed is None or loaded == installed:
        return None
    return (
        f"a reboot is pending: the loaded NVIDIA kernel module is {loaded} but the installed driver libraries are "
        f"{installed}, so every new CUDA process fails with 'Driver/library version mismatch'. Reboot this host "
        "(or unload the nvidia modules and load the new ones), then run the validation."
    )
