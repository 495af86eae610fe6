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


# NVIDIA's Debian 12 repository (developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64), the stanzas
# gpulab's driver names must resolve against, in the repository's Packages format (fields the resolver reads).
# Structure: the driver meta packages depend on Debian-style names with a lower bound only, as the captured
# cuda-drivers-580 580.105.08-1 stanza shows ("Depends: nvidia-driver (>= 580.65.06), nvidia-driver-cuda
# (>= 580.65.06), nvidia-kernel-dkms (>= 580.65.06), ...", NVIDIA developer forum thread 353805): unpinned, they pull
# the next branch. From R580 Fabric Manager is the unversioned nvidia-fabricmanager, which Provides
# nvidia-fabricmanager-<branch>, and nvidia-driver-pinning-<branch> locks a branch (NVIDIA Driver Installation Guide
# r590, "Recent Updates"); from R590 no cuda-drivers-<branch> / nvidia-open-<branch> is published (Table 4:
# "cuda-drivers-580: will be removed"). The X tools (nvidia-settings, nvidia-xconfig) are left out of the stand-ins.
def _stanzas() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    releases = {"535": "535.261.03", "580": "580.95.05", "590": "590.48.01"}
    for branch, version in releases.items():
        deb = f"{version}-1"
        floor = f"(>= {version})"
        for name in ("nvidia-driver", "nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms"):
            out.append({"Package": name, "Version": deb})
        out.append({"Package": "nvidia-persistenced", "Version": deb})
        proprietary = f"nvidia-driver {floor}, nvidia-driver-cuda {floor}, nvidia-kernel-dkms {floor}"
        open_modules = f"nvidia-driver {floor}, nvidia-driver-cuda {floor}, nvidia-kernel-open-dkms {floor}"
        if int(branch) < 590:  # the branch-suffixed meta packages end with R580
            out.append({"Package": f"cuda-drivers-{branch}", "Version": deb, "Depends": proprietary})
            out.append({"Package": f"nvidia-open-{branch}", "Version": deb, "Depends": open_modules})
        if int(branch) >= 580:
            out.append({"Package": "cuda-drivers", "Version": deb, "Depends": proprietary})
            out.append({"Package": "nvidia-open", "Version": deb, "Depends": open_modules})
            out.append(
                {"Package": "nvidia-fabricmanager", "Version": deb, "Provides": f"nvidia-fabricmanager-{branch}"}
            )
            out.append({"Package": f"nvidia-driver-pinning-{branch}", "Version": deb, "Architecture": "all"})
        else:
            out.append({"Package": f"nvidia-fabricmanager-{branch}", "Version": deb})
    return [{"Architecture": "amd64", **s} for s in out]


NVIDIA_REPO_STANZAS: list[dict[str, str]] = _stanzas()


def packages_text(stanzas: list[dict[str, str]]) -> str:
    """The stanzas as a Packages file's text."""
    return "\n".join("".join(f"{k}: {v}\n" for k, v in s.items()) for s in stanzas)


# The files of NVIDIA's packages that the roles read or enable, at the paths NVIDIA's packages install them: the
# units of the persistence daemon (started with --no-persistence-mode, which gpulab's drop-in turns around) and of
# Fabric Manager. The daemons themselves cannot run in a root.
UNIT_FILES: dict[str, dict[str, str]] = {
    "nvidia-persistenced": {
        "lib/systemd/system/nvidia-persistenced.service": (
            "[Unit]\nDescription=NVIDIA Persistence Daemon (stand-in)\nWants=syslog.target\n\n"
            "[Service]\nType=forking\n"
            "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n"
            "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n"
            "[Install]\nWantedBy=multi-user.target\n"
        )
    },
    "nvidia-fabricmanager": {
        "lib/systemd/system/nvidia-fabricmanager.service": (
            "[Unit]\nDescription=NVIDIA fabric manager service (stand-in)\n\n[Service]\nType=forking\n"
            "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n\n"
            "[Install]\nWantedBy=multi-user.target\n"
        )
    },
}


def nvidia_repo_stand_ins(
    work: Path,
    out_dir: Path,
    stanzas: list[dict[str, str]] | None = None,
    files: dict[str, dict[str, str]] | None = None,
) -> list[Path]:
    """Empty packages carrying NVIDIA's names, versions, Depends and Provides (the stanzas above), for the test
    mirror: a name gpulab gets wrong is not there, or is only a virtual package apt will not install by version.
    `files` (package -> path -> text, e.g. UNIT_FILES) puts files into the packages so named."""
    debs = []
    for stanza in stanzas if stanzas is not None else NVIDIA_REPO_STANZAS:
        tree = work / f"{stanza['Package']}_{stanza['Version']}"
        (tree / f"usr/share/doc/{stanza['Package']}").mkdir(parents=True, exist_ok=True)
        for rel, text in (files or {}).get(stanza["Package"], {}).items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_text(text)
        control = {**stanza, "Description": f"{stanza['Package']} stand-in (NVIDIA's name and dependencies)"}
        debs.append(build_deb(tree, out_dir, control))
    return debs
