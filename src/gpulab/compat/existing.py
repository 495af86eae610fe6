"""What to do with the NVIDIA driver already on a host: install, keep, replace or refuse.

The host's side is read by gpulab.provision.driver_facts (packages with their origin and hold, a runfile install,
DKMS modules per kernel, the loaded module); the plan is the pre-flight's target stack. A driver that satisfies the
plan (its branch drives every GPU, at each GPU's first driver or later, in the kernel-module flavour the GPUs need,
and serves every planned CUDA) is kept unless the operator asks for `replace`; one that does not is refused with
what would be removed, package by package, unless `replace` is set. Held packages and downgrades are changed only
under `replace`. A kept driver is still managed (its packages held, out of unattended-upgrades' reach, persistence
on); on an NVSwitch host it is kept only beside Fabric Manager at its exact version, without which its GPUs cannot
run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpulab.compat import rules, versions
from gpulab.compat.gpus import gpu_for
from gpulab.compat.kernel_modules import OPEN_ONLY_FROM
from gpulab.names import Architecture

MODES = ("keep", "replace", "refuse")
# Packages whose version is the driver's (the kernel-module and userspace packages of every packaging).
_VERSIONED = re.compile(
    r"^(nvidia-driver|nvidia-tesla-\d+-driver|nvidia-kernel-dkms|nvidia-open-kernel-dkms|nvidia-tesla-\d+-kernel-dkms"
    r"|nvidia-headless-.*|nvidia-utils-.*|nvidia-dkms-.*|cuda-drivers.*|nvidia-open(-\d+)?|nvidia-driver-\d+.*"
    r"|libnvidia-compute-.*|nvidia-smi|libnvidia-ml1|libcuda1)$"
)

# Every package of a driver's packaging (what `replace` removes): its userspace, X/GL stack and firmware included.
_DRIVER_PREFIXES = ("nvidia", "libnvidia", "cuda-drivers", "libcuda", "xserver-xorg-video-nvidia", "firmware-nvidia")
# ...but not the toolkit, cuDNN and container packages that share the prefix (other roles own them).
_NOT_DRIVER = re.compile(
    r"^(nvidia-cuda-|nvidia-cudnn|nvidia-container|libnvidia-container|nvidia-profiler|"
    r"nvidia-visual-profiler|nvidia-nsight|nvidia-opencl-dev|nvidia-openjdk)"
)


@dataclass(frozen=True)
class Decision:
    action: str  # install (nothing in the way), keep, replace, refuse
    message: str
    installed_version: str | None = None
    packaging: str = "none"  # none, distro, cuda_repo, runfile, mixed
    remove_packages: list[str] = field(default_factory=list)
    runfile: bool = False
    dkms: list[str] = field(default_factory=list)  # module/version entries to remove
    held: list[str] = field(default_factory=list)
    change_held: bool = False  # the install may change held packages and downgrade
    hold: list[str] = field(default_factory=list)  # keep: the driver's packages, held where they are

    def as_fact(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "message": self.message,
            "installed_version": self.installed_version,
            "packaging": self.packaging,
            "remove_packages": self.remove_packages,
            "runfile": self.runfile,
            "dkms": self.dkms,
            "held": self.held,
            "change_held": self.change_held,
            "hold": self.hold,
        }


def _plain(version: str) -> str:
    """535.261.03-1~deb12u1 -> 535.261.03; 1:580.95.05-0ubuntu1 -> 580.95.05."""
    return version.split(":", 1)[-1].split("-", 1)[0].split("~", 1)[0]


# Names only NVIDIA's repository uses (its open-module meta packages and, from R580, its branch pinning packages; not
# nvidia-opencl-* or nvidia-openjdk-*, which Debian's CUDA toolkit brings).
_NVIDIA_ONLY = re.compile(r"^(cuda-drivers.*|nvidia-open(-\d+)?|nvidia-driver-pinning-\d+)$")


def _package_packaging(pkg: dict[str, Any]) -> str:
    origin = (pkg.get("origin") or "").lower()
    if "nvidia" in origin or _NVIDIA_ONLY.match(pkg["name"]):
        return "cuda_repo"
    return "distro"


def installed_driver(facts: dict[str, Any]) -> tuple[str | None, str]:
    """(the driver version in place, its packaging) from driver_facts' answer."""
    packages = [
        p for p in facts.get("packages", []) if _VERSIONED.match(p["name"]) and not _NOT_DRIVER.match(p["name"])
    ]
    runfile = facts.get("runfile") or None
    # NVIDIA's repository packages depend on some of the distribution's (libraries by Debian's names): one packaging,
    # NVIDIA's, where any of its packages is there. A runfile install beside packages is two drivers.
    kinds = {_package_packaging(p) for p in packages}
    from_packages = "cuda_repo" if "cuda_repo" in kinds else ("distro" if kinds else None)
    version = None
    for pkg in packages:
        plain = _plain(pkg["version"])
        if re.match(r"^\d+\.\d+", plain) and (version is None or versions.compare(plain, version) > 0):
            version = plain
    if version is None and runfile:
        version = runfile.get("version")
    if version is None:
        dkms = facts.get("dkms", [])
        version = dkms[0]["version"] if dkms else None
    if version is None and facts.get("loaded"):
        version = facts["loaded"]["version"]
    if runfile and from_packages:
        packaging = "mixed"
    else:
        packaging = "runfile" if runfile else (from_packages or ("none" if version is None else "unknown"))
    return version, packaging


def _shortfalls(version: str, flavour: str | None, target: dict[str, Any]) -> list[str]:
    """Why the driver in place does not serve the plan (empty: it does)."""
    try:
        branch = rules.branch_record(version)
    except Exception:
        return [f"driver {version} is no branch gpulab's matrix knows"]
    why = []
    for gpu in target.get("gpus", []):
        arch = Architecture.parse(gpu["architecture"], "gpulab_target_stack gpus[].architecture")
        if arch not in branch.architectures:
            why.append(f"{branch.branch} does not drive {gpu['name']} ({arch})")
        spec = gpu_for(gpu["name"], gpu.get("pci_id"))
        minimum = spec.min_driver if spec else None
        if minimum and versions.compare(version, minimum) < 0:
            why.append(f"{gpu['name']} needs driver >= {minimum}")
        if flavour == "proprietary" and arch >= OPEN_ONLY_FROM:
            why.append(f"{gpu['name']} is driven only by the open kernel modules; the proprietary ones are in place")
        if flavour == "open" and (branch.open_kernel_modules is None or arch < branch.open_kernel_modules):
            why.append(f"the open kernel modules in place do not drive {gpu['name']} ({arch})")
    for cuda in target.get("cuda", []):
        if versions.compare(cuda, branch.max_cuda) > 0:
            why.append(f"CUDA {cuda} needs a newer driver than {branch.branch} (CUDA <= {branch.max_cuda})")
    return list(dict.fromkeys(why))


_FABRIC_MANAGER = re.compile(r"^(nvidia-fabricmanager(-\d+)?|cuda-drivers-fabricmanager(-\d+)?)$")


def _fabric_shortfall(version: str, facts: dict[str, Any], target: dict[str, Any]) -> list[str]:
    """On an NVSwitch host the GPUs run only beside Fabric Manager at the driver's exact version."""
    if not target.get("nvswitch"):
        return []
    found = sorted({_plain(p["version"]) for p in facts.get("packages", []) if _FABRIC_MANAGER.match(p["name"])})
    if version in found:
        return []
    have = f"Fabric Manager {', '.join(found)} is installed" if found else "no Fabric Manager is installed"
    return [f"this NVSwitch host needs Fabric Manager {version} beside driver {version} and {have}"]


def _planned_in_place(version: str, packaging: str, target: dict[str, Any], managed: bool) -> bool:
    """gpulab put this driver here for this plan: re-applying the role converges it (and changes nothing)."""
    planned = str(target.get("driver") or "")
    same_branch = planned and versions.major(planned) == versions.major(version)
    return bool(managed and same_branch and packaging == (target.get("sources") or {}).get("driver", "distro"))


def decide(facts: dict[str, Any], target: dict[str, Any], mode: str, host: str = "this host") -> Decision:
    """The decision for one host; `facts` as gpulab.provision.driver_facts returns them, `target` the pre-flight's
    gpulab_target_stack, `mode` nvidia_driver_existing."""
    if mode not in MODES:
        raise ValueError(f"nvidia_driver_existing is {mode!r}: use one of {', '.join(MODES)}")
    version, packaging = installed_driver(facts)
    driver_packages = [
        p
        for p in facts.get("packages", [])
        if p["name"].startswith(_DRIVER_PREFIXES) and not _NOT_DRIVER.match(p["name"])
    ]
    held = sorted(p["name"] for p in driver_packages if p.get("hold"))
    runfile = bool(facts.get("runfile"))
    dkms = sorted({f"{d['module']}/{d['version']}" for d in facts.get("dkms", [])})
    planned = str(target.get("driver") or "?")
    if version is None:
        return Decision("install", f"No NVIDIA driver on {host}: installing {planned}.")
    loaded = facts.get("loaded") or {}
    flavour = loaded.get("flavour") or facts.get("flavour")
    if _planned_in_place(version, packaging, target, bool(facts.get("managed"))):
        return Decision(
            "install",
            f"NVIDIA driver {version} on {host} is the one gpulab planned ({planned}, {packaging}): checked in place.",
            installed_version=version,
            packaging=packaging,
            held=held,
        )
    shortfalls = _shortfalls(version, flavour, target) + _fabric_shortfall(version, facts, target)
    what = f"NVIDIA driver {version} ({_packaging_words(packaging)}{', held: ' + ', '.join(held) if held else ''})"
    removal = [p["name"] for p in driver_packages]
    if not shortfalls and packaging != "mixed" and mode == "keep":
        return Decision(
            "keep",
            f"{what} is kept on {host}: it drives every GPU and serves CUDA "
            f"{', '.join(target.get('cuda', [])) or '-'}; its packages stay as they are, held "
            f"(nvidia_driver_existing: replace installs {planned} instead).",
            installed_version=version,
            packaging=packaging,
            held=held,
            hold=sorted(p["name"] for p in driver_packages),
        )
    gone = _removal_words(removal, runfile, dkms)
    if mode == "replace":
        return Decision(
            "replace",
            f"{what} on {host} is replaced by {planned}: removing {gone}.",
            installed_version=version,
            packaging=packaging,
            remove_packages=removal,
            runfile=runfile,
            dkms=dkms,
            held=held,
            change_held=True,
        )
    reasons = shortfalls or (["a runfile install and packages are both in place"] if packaging == "mixed" else [])
    why = "; ".join(reasons) if reasons else "nvidia_driver_existing is refuse"
    return Decision(
        "refuse",
        f"{what} is in place on {host} and the plan is {planned} ({why}); nothing was changed. Replacing it would "
        f"remove {gone}. Fix: set nvidia_driver_existing: replace to do that, or request a stack this driver serves "
        f"(gpulab_stack).",
        installed_version=version,
        packaging=packaging,
        remove_packages=removal,
        runfile=runfile,
        dkms=dkms,
        held=held,
    )


def _packaging_words(packaging: str) -> str:
    return {
        "distro": "the distribution's packages",
        "cuda_repo": "NVIDIA's repository packages",
        "runfile": "NVIDIA's runfile installer",
        "mixed": "a runfile install and packages",
        "unknown": "no package or installer record",
    }.get(packaging, packaging)


def _removal_words(packages: list[str], runfile: bool, dkms: list[str]) -> str:
    parts = []
    if runfile:
        parts.append("the runfile install (nvidia-uninstall)")
    if dkms:
        parts.append("DKMS " + ", ".join(dkms))
    if packages:
        parts.append("packages " + ", ".join(packages))
    return "; ".join(parts) or "nothing"
