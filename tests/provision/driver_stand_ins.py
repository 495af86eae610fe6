"""Drivers already on a host, put into a Debian root as a user's server would have them: a runfile install (NVIDIA's
`nvidia-uninstall`, a libnvidia-ml.so of its version that no package owns, its DKMS tree) and driver packages under
Debian's names at a chosen version, optionally held. No NVIDIA binary is involved: the roles only read these and
remove them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.apt_mirror import build_deb

LIB = "usr/lib/x86_64-linux-gnu"


def runfile_install(root: Path, version: str, kernels: list[str]) -> list[Path]:
    """What NVIDIA's .run leaves (the parts gpulab reads), and an uninstaller that removes them and logs its call.
    Returns the files it created (absent again once the uninstaller ran)."""
    files = [root / LIB / f"libnvidia-ml.so.{version}", root / "usr/bin/nvidia-smi"]
    for kernel in kernels:
        files.append(root / f"var/lib/dkms/nvidia/{version}/{kernel}/x86_64/module/nvidia.ko")
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"stand-in of NVIDIA {version}\n")
    (root / f"var/lib/dkms/nvidia/{version}/source").mkdir(parents=True, exist_ok=True)
    uninstaller = root / "usr/bin/nvidia-uninstall"
    removed = " ".join("/" + str(p.relative_to(root)) for p in files)
    uninstaller.write_text(
        "#!/bin/sh\n"
        "# nvidia-uninstall stand-in: removes what the runfile installed, then itself.\n"
        f'echo "nvidia-uninstall $*" >> /var/log/nvidia-uninstall.log\n'
        f"rm -f {removed}\nrm -rf /var/lib/dkms/nvidia/{version}\nrm -f /usr/bin/nvidia-uninstall\n"
    )
    uninstaller.chmod(0o755)
    return [*files, uninstaller]


def driver_packages(root: Path, work: Path, packages: dict[str, str], hold: bool = False) -> None:
    """Empty packages under these names and versions, installed with dpkg (origin: the local status file only), held
    when asked. They stand for a driver a user installed earlier; gpulab must read, keep or refuse them."""
    work.mkdir(parents=True, exist_ok=True)
    debs = []
    for name, version in packages.items():
        tree = work / name
        (tree / f"usr/share/doc/{name}").mkdir(parents=True, exist_ok=True)
        (tree / f"usr/share/doc/{name}/README").write_text(f"{name} {version} stand-in\n")
        control = {"Package": name, "Version": version, "Architecture": "amd64", "Description": f"{name} stand-in"}
        debs.append(build_deb(tree, work, control))
    inside = root / "tmp/stand-ins"
    inside.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        (inside / deb.name).write_bytes(deb.read_bytes())
    subprocess.run(
        ["chroot", str(root), "dpkg", "-i", *[f"/tmp/stand-ins/{d.name}" for d in debs]],
        check=True,
        capture_output=True,
    )
    if hold:
        selections = "".join(f"{name} hold\n" for name in packages)
        subprocess.run(
            ["chroot", str(root), "dpkg", "--set-selections"],
            input=selections,
            text=True,
            check=True,
            capture_output=True,
        )
