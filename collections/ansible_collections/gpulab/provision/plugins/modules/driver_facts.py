#!/usr/bin/python
"""The NVIDIA driver already on a host, read before anything changes: its packages (version, hold, where the
installed version came from), a runfile install, DKMS modules per kernel, the loaded module and its flavour, nouveau."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: driver_facts
short_description: The NVIDIA driver in place on a host (packages, runfile, DKMS, loaded module, nouveau)
description:
  - Lists the installed packages of every NVIDIA driver packaging (Debian's, Ubuntu's, NVIDIA's repository) with
    their version, whether they are held and the origin of the installed version (C(apt-cache policy)).
  - Detects an install by NVIDIA's runfile (C(/usr/bin/nvidia-uninstall)) and its version (C(libnvidia-ml.so.<version>)
    not owned by a package), the DKMS modules per kernel (C(/var/lib/dkms)), the loaded module's version and flavour
    (C(/proc/driver/nvidia/version) says C(Open Kernel Module) for the open ones) and whether nouveau is loaded.
  - Reads only; the pre-flight decides from these facts (gpulab.compat.existing).
version_added: "0.2.0"
author: gpulab
options:
  root:
    description: Directory the host's files are read from (C(/) on a real host).
    type: path
    default: /
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Read the driver in place
  gpulab.provision.driver_facts:
"""

RETURN = r"""
ansible_facts:
  description: C(gpulab_driver_installed) with keys packages, runfile, dkms, loaded, nouveau_loaded, managed.
  returned: always
  type: dict
"""

PATTERNS = (
    "nvidia-*",
    "libnvidia-*",
    "libcuda1",
    "cuda-drivers*",
    "xserver-xorg-video-nvidia*",
    "firmware-nvidia-*",
)
# The files gpulab's nvidia_driver role writes: a driver found with them is one gpulab manages.
MANAGED_MARKERS = ("var/lib/gpulab/nvidia-driver", "etc/apt/preferences.d/gpulab-nvidia-driver")
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib")


def _packages(module: AnsibleModule) -> list[dict[str, Any]]:
    if not shutil.which("dpkg-query"):
        return []
    _rc, out, _ = module.run_command(["dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n", *PATTERNS])
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2][1:2] in ("i", "U", "F", "W", "t"):  # installed, or half-way
            found.append({"name": parts[0], "version": parts[1], "hold": parts[2][0] == "h"})
    if found:
        _origins(module, found)
    return found


def _origins(module: AnsibleModule, packages: list[dict[str, Any]]) -> None:
    """Where each installed version came from: the first source line under it in apt-cache policy."""
    _rc, out, _ = module.run_command(["apt-cache", "policy", *[p["name"] for p in packages]])
    by_name = {p["name"]: p for p in packages}
    current, in_installed = None, False
    for line in out.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current, in_installed = by_name.get(line[:-1]), False
        elif current is not None and line.startswith(" *** "):
            in_installed = True
        elif current is not None and in_installed and re.match(r"^\s+\d+ ", line):
            source = line.split(None, 1)[1].strip()
            if source != "/var/lib/dpkg/status" or "origin" not in current:
                current["origin"] = "local" if source == "/var/lib/dpkg/status" else source
            if source != "/var/lib/dpkg/status":
                in_installed = False
        elif current is not None and in_installed and re.match(r"^\s+\S+ \d+$", line):
            in_installed = False
    for pkg in packages:
        pkg.setdefault("origin", "local")


def _owned(module: AnsibleModule, path: str) -> bool:
    if not shutil.which("dpkg-query"):
        return False
    rc, _, _ = module.run_command(["dpkg-query", "-S", path])
    return rc == 0


def _runfile(module: AnsibleModule, root: str) -> dict[str, Any] | None:
    uninstaller = os.path.join(root, "usr/bin/nvidia-uninstall")
    if not os.path.exists(uninstaller):
        return None
    version = None
    for lib_dir in LIB_DIRS:
        directory = os.path.join(root, lib_dir)
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            match = re.match(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", name)
            if match and not _owned(module, "/" + os.path.join(lib_dir, name)):
                version = match.group(1)
    return {"uninstaller": "/usr/bin/nvidia-uninstall", "version": version}


def _dkms(root: str) -> list[dict[str, Any]]:
    """/var/lib/dkms/<module>/<version>/<kernel>/<arch>/: the kernels each NVIDIA module version is built for."""
    base = os.path.join(root, "var/lib/dkms")
    found = []
    if not os.path.isdir(base):
        return found
    for module_name in sorted(os.listdir(base)):
        if not module_name.startswith("nvidia"):
            continue
        for version in sorted(os.listdir(os.path.join(base, module_name))):
            path = os.path.join(base, module_name, version)
            if os.path.islink(path) or not os.path.isdir(path) or not re.match(r"^\d", version):
                continue
            kernels = [
                k
                for k in sorted(os.listdir(path))
                if k not in ("source", "build") and os.path.isdir(os.path.join(path, k))
            ]
            found.append({"module": module_name, "version": version, "kernels": kernels})
    return found


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _loaded(root: str) -> dict[str, Any] | None:
    version = _read(os.path.join(root, "sys/module/nvidia/version"))
    if not version:
        return None
    banner = _read(os.path.join(root, "proc/driver/nvidia/version")) or ""
    flavour = "open" if "Open Kernel Module" in banner else ("proprietary" if banner else None)
    return {"version": version, "flavour": flavour}


def main() -> None:
    module = AnsibleModule(argument_spec={"root": {"type": "path", "default": "/"}}, supports_check_mode=True)
    root = module.params["root"]
    facts = {
        "packages": _packages(module) if root == "/" else [],
        "runfile": _runfile(module, root),
        "dkms": _dkms(root),
        "loaded": _loaded(root),
        "nouveau_loaded": os.path.isdir(os.path.join(root, "sys/module/nouveau")),
        "managed": any(os.path.exists(os.path.join(root, m)) for m in MANAGED_MARKERS),
    }
    module.exit_json(changed=False, ansible_facts={"gpulab_driver_installed": facts})


if __name__ == "__main__":
    main()
