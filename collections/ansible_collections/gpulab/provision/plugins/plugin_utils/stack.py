"""Resolve the stack a host is to get (profile + overrides + the host's GPUs) and check it against the matrix.

`resolve()` is the whole pre-flight decision: it returns the target stack the roles install and every reason
the request cannot work, each with its fix. Nothing here touches a host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpulab.provision.plugins.plugin_utils.matrix import gpulab_module

# Stack keys a user may set in `gpulab_stack`; `kernel_modules` picks open or proprietary kernel modules.
STACK_KEYS = ("driver", "cuda", "cudnn", "torch", "tensorflow", "python", "kernel_modules")
KERNEL_MODULES = ("auto", "open", "proprietary")
# The open GPU kernel modules are the only ones that drive these architectures (NVIDIA driver README,
# "Open Linux Kernel Modules": Blackwell and newer require them).
OPEN_ONLY_ARCHITECTURES = ("Blackwell",)
SUPPORTED_OS = {"Debian": ("11", "12"), "Ubuntu": ("20.04", "22.04", "24.04")}
_PROFILE_HELP = "'auto' (newest stack for the host's GPU), 'none', or a profile from `gpulab matrix show`"


@dataclass
class Request:
    """What the inventory asks for and what the host is (facts from gpulab.provision.gpu_facts)."""

    gpus: list[dict[str, Any]]
    profile: str = "auto"
    stack: dict[str, Any] = field(default_factory=dict)
    host_python: str | None = None
    distribution: str | None = None
    distribution_version: str | None = None
    secure_boot: str = "unsupported"
    secure_boot_signing: bool = False
    nvswitches: list[str] = field(default_factory=list)


class _Problems(list[str]):
    def add(self, component: str, reason: str, fix: str) -> None:
        line = f"[{component}] {reason} Fix: {fix}"
        if line not in self:
            self.append(line)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(str(v).strip() for v in value if str(v).strip()) or None
    text = str(value).strip()
    return text or None


def _release(distribution: str | None, version: str | None) -> str | None:
    """Debian releases are named by their major version ('12'), Ubuntu's by year.month ('24.04')."""
    if version and distribution == "Debian":
        return version.split(".")[0]
    return version


def _os_name(distribution: str | None, version: str | None) -> str | None:
    if not distribution:
        return None
    return f"{distribution.lower()}{version or ''}"


def _base_stack(compat: Any, profile: str, models: list[Any], os_name: str | None, problems: _Problems) -> dict:
    name = (profile or "none").strip().lower()
    if name == "none":
        return {}
    if name == "auto":
        if not models:
            return {}
        ubuntu = os_name if os_name and os_name.startswith("ubuntu") else None
        try:
            plan = compat.plan_stack(models[0].name, ubuntu)
        except Exception as err:  # GpulabError: no coherent plan for this GPU/OS
            problems.add("profile", str(err), "set gpulab_profile to a named profile or give gpulab_stack explicitly.")
            return {}
        return {k: v for k, v in plan.to_dict().items() if v and k in STACK_KEYS}
    try:
        stack = compat.profile(name)
    except Exception as err:
        problems.add("profile", str(err), f"set gpulab_profile to {_PROFILE_HELP}.")
        return {}
    return {k: v for k, v in stack.to_dict().items() if v and k in STACK_KEYS}


def _gpu_models(compat: Any, gpus: list[dict[str, Any]], problems: _Problems) -> list[tuple[dict[str, Any], Any]]:
    found = []
    for gpu in gpus:
        spec = compat.gpu_by_pci_id(str(gpu.get("pci_id", "")))
        if spec is None:
            problems.add(
                "gpu",
                f"NVIDIA GPU {gpu.get('pci_id')} at {gpu.get('address')} is not in the compatibility matrix.",
                "add it to src/gpulab/compat/matrix.yml (gpus) with its source, so its architecture is known.",
            )
            continue
        found.append((gpu, spec))
    return found


def _kernel_modules(
    compat: Any, requested: str, driver: str | None, specs: list[Any], problems: _Problems
) -> str | None:
    if requested not in KERNEL_MODULES:
        problems.add(
            "kernel_modules",
            f"gpulab_stack.kernel_modules is {requested!r}.",
            f"use one of {', '.join(KERNEL_MODULES)}.",
        )
        return None
    if not driver or not specs:
        return None if requested == "auto" else requested
    try:
        branch = compat.rules.branch_record(driver)
    except Exception:
        return None  # the stack check reports the unknown driver
    order = compat.data.ARCHITECTURES
    oldest = branch.open_kernel_modules

    def open_ok(arch: str) -> bool:
        return oldest is not None and order.index(arch) >= order.index(oldest)

    no_open = sorted({s.name for s in specs if not open_ok(s.architecture)})
    need_open = sorted({s.name for s in specs if s.architecture in OPEN_ONLY_ARCHITECTURES})
    if need_open and no_open:
        problems.add(
            "kernel_modules",
            f"{', '.join(need_open)} need the open kernel modules, which do not drive {', '.join(no_open)}.",
            "put these GPUs in different hosts.",
        )
        return None
    if requested == "open" and no_open:
        archs = sorted({s.architecture for s in specs if not open_ok(s.architecture)})
        fix = "set gpulab_stack.kernel_modules to 'proprietary' (or 'auto', which picks it for this GPU)."
        if oldest is None:
            first = min((b for b in compat.load_matrix().drivers if b.open_kernel_modules), key=lambda b: b.number)
            reason = (
                f"driver {branch.branch} ships no open kernel modules (the first is {first.branch}, for "
                f"{first.open_kernel_modules} and newer)."
            )
        else:
            reason = (
                f"the open kernel modules of driver {branch.branch} do not drive {', '.join(no_open)} "
                f"({', '.join(archs)}); they need {oldest} or newer."
            )
        problems.add("kernel_modules", reason, fix)
        return None
    if requested == "proprietary" and need_open:
        problems.add(
            "kernel_modules",
            f"{', '.join(need_open)} are driven only by the open kernel modules.",
            "set gpulab_stack.kernel_modules to 'open' (or 'auto').",
        )
        return None
    if requested == "auto":
        return "proprietary" if no_open else "open"
    return requested


def _cudnn_by_cuda(compat: Any, cudnn: str | None, cudas: list[str], ccs: list[str]) -> dict[str, str | None]:
    """One cuDNN per toolkit: the requested one (already checked for every toolkit), else the newest the matrix
    builds for that CUDA and every GPU on the host."""
    if cudnn:
        mm = compat.versions.major_minor(cudnn, "cuDNN version")
        return {cuda: mm for cuda in cudas}
    out: dict[str, str | None] = {}
    releases = sorted(compat.load_matrix().cudnn, key=lambda r: compat.versions.key(r.version), reverse=True)
    for cuda in cudas:
        pick = next(
            (r for r in releases if all(compat.rules.cudnn_supports(r, cuda, cc) for cc in (ccs or [None]))), None
        )
        out[cuda] = pick.version if pick else None
    return out


def resolve(req: Request) -> tuple[dict[str, Any], list[str]]:
    """(target stack, problems). The target is only meaningful when problems is empty."""
    compat = gpulab_module("compat")  # its submodules rules, data and versions come with it
    problems = _Problems()
    release = _release(req.distribution, req.distribution_version)
    os_name = _os_name(req.distribution, release)
    if req.distribution and req.distribution not in SUPPORTED_OS:
        supported = " or ".join(f"{name} {'/'.join(releases)}" for name, releases in SUPPORTED_OS.items())
        problems.add(
            "os",
            f"{req.distribution} {req.distribution_version or ''} is not supported by gpulab's provisioning roles.",
            f"use {supported}.",
        )
    elif req.distribution and release not in SUPPORTED_OS[req.distribution]:
        versions = ", ".join(SUPPORTED_OS[req.distribution])
        problems.add(
            "os",
            f"{req.distribution} {release} is not a release the roles support ({versions}).",
            f"use {req.distribution} {versions.split(', ')[-1]}.",
        )

    unknown = sorted(set(req.stack) - set(STACK_KEYS))
    if unknown:
        problems.add("stack", f"gpulab_stack has unknown keys {unknown}.", f"use only {', '.join(STACK_KEYS)}.")
    pairs = _gpu_models(compat, req.gpus, problems)
    models = list({spec.name: spec for _, spec in pairs}.values())

    stack: dict[str, Any] = _base_stack(compat, req.profile, models, os_name, problems)
    for key in STACK_KEYS:
        value = _text(req.stack.get(key))
        if value is not None:
            stack[key] = value
    # The frameworks' venv is built from the host's Python unless the inventory names another one.
    stack["python"] = _text(req.stack.get("python")) or req.host_python
    requested_modules = str(stack.pop("kernel_modules", None) or "auto").strip().lower()

    check_keys = ("driver", "cuda", "cudnn", "torch", "tensorflow", "python")
    base = compat.Stack(**{k: stack.get(k) for k in check_keys}, os=os_name)
    for spec in models or [None]:
        for problem in compat.check_stack(base.override(gpu=spec.name if spec else None)):
            problems.add(problem.component, problem.reason, problem.fix)

    driver = stack.get("driver")
    if pairs and not driver:
        problems.add(
            "driver",
            f"this host has {len(pairs)} NVIDIA GPU(s) but no driver version was requested.",
            f"set gpulab_profile to {_PROFILE_HELP}, or set gpulab_stack.driver.",
        )
    kernel_modules = _kernel_modules(compat, requested_modules, driver, models, problems)
    if pairs and driver and req.secure_boot == "enabled" and not req.secure_boot_signing:
        problems.add(
            "secure_boot",
            "Secure Boot is enabled: the kernel refuses unsigned modules, so the NVIDIA driver would install and "
            "never load.",
            "disable Secure Boot in the firmware, or enroll DKMS's Machine Owner Key (mokutil --import "
            "/var/lib/dkms/mok.pub, reboot, confirm) and set gpulab_secure_boot_signing: true.",
        )

    cudas = [compat.versions.cuda_version(c) for c in re.split(r"[,+\s]+", stack.get("cuda") or "") if c]
    ccs = [s.compute_capability for s in models]
    try:
        cudnn_by_cuda = _cudnn_by_cuda(compat, stack.get("cudnn"), cudas, ccs)
    except Exception:
        cudnn_by_cuda = {}  # malformed versions are already problems
    torch_build = None
    if not problems and stack.get("torch"):
        torch_build = compat.selected_torch_build(base.override(gpu=models[0].name if models else None))
    target = {
        "profile": (req.profile or "none").strip().lower(),
        "has_gpu": bool(req.gpus),
        "gpus": [
            {
                "address": gpu.get("address"),
                "pci_id": gpu.get("pci_id"),
                "name": spec.name,
                "architecture": spec.architecture,
                "compute_capability": spec.compute_capability,
            }
            for gpu, spec in pairs
        ],
        "nvswitch": bool(req.nvswitches),
        "driver": driver,
        "driver_branch": str(compat.versions.parse(driver)[0]) if driver and not problems else None,
        "kernel_modules": kernel_modules,
        "cuda": cudas,
        "cuda_default": max(cudas, key=compat.versions.key) if cudas and not problems else None,
        "cudnn": stack.get("cudnn") or next((v for v in cudnn_by_cuda.values() if v), None),
        "cudnn_by_cuda": cudnn_by_cuda,
        "torch": stack.get("torch"),
        "torch_index_url": torch_build.index_url if torch_build else None,
        "tensorflow": stack.get("tensorflow"),
        "python": stack.get("python"),
        "os": os_name,
    }
    return target, list(problems)


def summary(target: dict[str, Any]) -> str:
    """One line naming what the host gets."""
    gpus = target["gpus"]
    if gpus:
        names: dict[str, int] = {}
        for gpu in gpus:
            names[gpu["name"]] = names.get(gpu["name"], 0) + 1
        what = ", ".join(f"{n}x {name}" for name, n in names.items())
    else:
        what = "no NVIDIA GPU"
    parts = [f"{k}={target[k]}" for k in ("driver", "kernel_modules") if target.get(k)]
    if target["cuda"]:
        parts.append(f"cuda={','.join(target['cuda'])}")
    parts += [f"{k}={target[k]}" for k in ("cudnn", "torch", "tensorflow", "python") if target.get(k)]
    return f"{what}; profile {target['profile']}: {', '.join(parts) or 'nothing to install'}"
