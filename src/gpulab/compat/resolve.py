"""Resolve the stack a host is to get (profile + overrides + the host's GPUs + the sources it installs from) and
check it against the matrix.

`resolve()` is the whole pre-flight decision: it returns the target stack the roles install and every reason
the request cannot work, each with its fix. With the profile `auto` the target is the newest stack the configured
sources deliver (gpulab.compat.delivery); a named profile or an override is checked against them. Nothing here
touches a host. The collection's `stack_check` action and `gpulab matrix resolve` are its two callers.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

from gpulab.compat import delivery, lifecycle, platforms, versions
from gpulab.compat.check import Stack, check_stack, selected_torch_build
from gpulab.compat.data import GpuSpec, OperatingSystem
from gpulab.compat.delivery import Delivered, Shortfall, Sources
from gpulab.compat.gpus import gpu_by_pci_id
from gpulab.compat.kernel_modules import choose_kernel_modules
from gpulab.compat.plan import plan_stack, profile
from gpulab.compat.problems import Problems
from gpulab.names import Architecture, DriverBranch

# Stack keys a user may set in `gpulab_stack`; `kernel_modules` picks open or proprietary kernel modules.
STACK_KEYS = ("driver", "cuda", "cudnn", "torch", "tensorflow", "python", "kernel_modules")
SECURE_BOOT = ("enabled", "disabled", "unsupported")
_PROFILE_HELP = "'auto' (newest stack for the host's GPU), 'none', or a profile from `gpulab matrix show`"
# The roles' variables that pick where each part comes from, and what each source is, for the fixes.
SOURCE_VARS = {"driver": "nvidia_driver_source", "cuda": "cuda_toolkit_source", "cudnn": "cudnn_source"}
SOURCE_HELP = {
    "distro": "the distribution's archive",
    "cuda_repo": "NVIDIA's repository or a mirror of it",
    "runfile": "NVIDIA's installers, given to the role as files",
    "wheel": "NVIDIA's PyPI wheels pinned in cudnn_wheels",
    "archive": "NVIDIA's archives listed in cudnn_archives",
}
# The roles' defaults (nvidia_driver, cuda_toolkit, cudnn); the pre-flight role passes the inventory's values.
# The driver's `auto`: the distribution's archive where its plan is a long-term branch still supported, NVIDIA's
# repository where the archive's is past its end of life or not long-term and the repository's is supported.
DEFAULT_SOURCES = {"driver": "auto", "cuda": "distro", "cudnn": "wheel"}
AUTO = "auto"
_CUDA_SPLIT = re.compile(r"[,+\s]+")


@dataclass
class Request:
    """What the inventory asks for and what the host is (facts from gpulab.provision.gpu_facts)."""

    gpus: list[dict[str, Any]]  # {"address": "0000:01:00.0", "pci_id": "10de:15f8"} per GPU
    profile: str = "auto"
    stack: dict[str, Any] = field(default_factory=dict)
    host_python: str | None = None
    distribution: str | None = None
    distribution_version: str | None = None
    secure_boot: str = "unsupported"
    secure_boot_signing: bool = False
    # Ubuntu's archive driver with Canonical's prebuilt, signed modules (nvidia_driver_precompiled_modules): they load
    # under Secure Boot with no key of the host's own; the role checks every kernel has them before any change.
    precompiled_modules: bool = False
    nvswitches: list[str] = field(default_factory=list)
    # Where the driver, the toolkits and cuDNN come from, and the cuDNN builds pinned for the wheel/archive sources
    # (only their keys, "9.10-cu11" / "8.9-cu12.2", matter here; the cudnn role checks the entries).
    sources: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SOURCES))
    cudnn_wheels: dict[str, Any] = field(default_factory=dict)
    cudnn_archives: dict[str, Any] = field(default_factory=dict)
    # The date support ends are compared with ("YYYY-MM-DD"; today when not given).
    today: str | None = None


class TargetGpu(TypedDict):
    address: str | None
    pci_id: str | None
    name: str
    architecture: Architecture
    compute_capability: str


class TargetStack(TypedDict):
    """The fact `gpulab_target_stack` the roles read (the action adds `summary`)."""

    profile: str
    has_gpu: bool
    gpus: list[TargetGpu]
    nvswitch: bool
    driver: str | None
    driver_branch: str | None
    kernel_modules: str | None
    cuda: list[str]
    cuda_default: str | None
    cudnn: str | None
    cudnn_by_cuda: dict[str, str | None]
    torch: str | None
    torch_index_url: str | None
    tensorflow: str | None
    python: str | None
    os: str | None
    sources: dict[str, str]
    # Why `auto` took the driver from NVIDIA's repository rather than the archive (None: it did not).
    driver_source_note: str | None


class Resolution(NamedTuple):
    """The target stack and every problem ("[component] reason Fix: fix"); the target is only meaningful when
    there are no problems."""

    target: TargetStack
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Context:
    problems: Problems
    osr: OperatingSystem | None  # the host's OS, None when unknown or unsupported
    sources: Sources


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


def _check_os(problems: Problems, req: Request, release: str | None) -> None:
    supported = platforms.supported_releases()
    if req.distribution and req.distribution not in supported:
        names = " or ".join(f"{name} {'/'.join(releases)}" for name, releases in supported.items())
        problems.add(
            "os",
            f"{req.distribution} {req.distribution_version or ''} is not supported by gpulab's provisioning roles.",
            f"use {names}.",
        )
    elif req.distribution and release not in supported[req.distribution]:
        releases = ", ".join(supported[req.distribution])
        problems.add(
            "os",
            f"{req.distribution} {release} is not a release the roles support ({releases}).",
            f"use {req.distribution} {releases.split(', ')[-1]}.",
        )


def _sources(req: Request, problems: Problems) -> Sources:
    given = {**DEFAULT_SOURCES, **{k: str(v).strip() for k, v in (req.sources or {}).items() if v is not None}}
    sources = Sources(
        driver="distro" if given["driver"] == AUTO else given["driver"],
        cuda=given["cuda"],
        cudnn=given["cudnn"],
        cudnn_wheels=frozenset(str(k) for k in (req.cudnn_wheels or {})),
        cudnn_archives=frozenset(str(k) for k in (req.cudnn_archives or {})),
    )
    for component in sources.invalid():
        options = (AUTO, *delivery.CHOICES[component]) if component == "driver" else delivery.CHOICES[component]
        problems.add(
            "sources",
            f"{SOURCE_VARS[component]} is {sources.of(component)!r}.",
            f"use one of {', '.join(options)}.",
        )
    return sources


def _switch_fix(shortfall: Shortfall, otherwise: str) -> str:
    """'set nvidia_driver_source: cuda_repo (NVIDIA's repository or a mirror of it), which delivers ...'."""
    if not shortfall.switch:
        return (shortfall.otherwise or otherwise) + "."
    settings = " and ".join(f"{SOURCE_VARS[c]}: {s}" for c, s in shortfall.switch.items())
    helps = "; ".join(SOURCE_HELP[s] for s in dict.fromkeys(shortfall.switch.values()))
    text = f"set {settings} ({helps})"
    would = shortfall.would
    if would is not None:
        parts = {"driver": f"driver {would.driver}", "cuda": f"CUDA {', '.join(would.cuda)}"}
        cudnn = ", ".join(v for v in would.cudnn_by_cuda.values() if v)
        parts["cudnn"] = f"cuDNN {cudnn}" if cudnn else "no cuDNN"
        text += ", which delivers " + ", ".join(parts[c] for c in ("driver", "cuda", "cudnn"))
    if shortfall.otherwise:
        text += f"; or {shortfall.otherwise}"
    return text + "."


def _cuda_items(text: str | None) -> list[str]:
    return [c for c in _CUDA_SPLIT.split(text or "") if c]


def _plan_auto(ctx: _Context, models: list[GpuSpec], overrides: dict[str, str], python: str | None) -> dict[str, Any]:
    """The newest stack the sources deliver for the host's GPUs (overrides taken as given), or a refusal."""
    if ctx.osr is None:  # an OS the roles do not provision is refused already; plan from the matrix alone
        planned = plan_stack(models[0].name)
        return {k: v for k, v in planned.to_dict().items() if v and k in STACK_KEYS}
    if ctx.sources.invalid():  # refused already, naming the variable
        return {"refused": True}
    cudas = _cuda_items(overrides.get("cuda"))
    result = delivery.plan(
        models,
        ctx.osr,
        ctx.sources,
        driver=overrides.get("driver"),
        cudas=[versions.cuda_version(c) for c in cudas] or None,
        cudnn=overrides.get("cudnn"),
        python=python,
    )
    if isinstance(result, Shortfall):
        osr = ctx.osr
        elsewhere = [o.name for o in platforms.provisioned() if o is not osr and _deliverable(ctx, models, o)]
        otherwise = f"no source gpulab installs from delivers a stack for these GPUs on {osr.name}" + (
            f"; {', '.join(elsewhere)} would" if elsewhere else ""
        )
        ctx.problems.add(result.component, result.reason, _switch_fix(result, otherwise))
        return {"refused": True}
    stack = {"driver": result.driver, "cuda": ",".join(result.cuda), "torch": result.torch}
    stack["tensorflow"] = result.tensorflow
    return {k: v for k, v in stack.items() if v}


def _deliverable(ctx: _Context, models: list[GpuSpec], osr: OperatingSystem) -> bool:
    """Whether some choice of sources delivers a stack for these GPUs on that OS."""
    result = delivery.plan(models, osr, ctx.sources)
    return isinstance(result, Delivered) or bool(result.switch)


def _supported_long_term(branch: int, today: datetime.date) -> bool:
    life = lifecycle.lifecycle(branch)
    return life is not None and life.long_term and not lifecycle.past_end(branch, today)


def _why_not(branch: int, today: datetime.date) -> str:
    life = lifecycle.lifecycle(branch)
    if life is None:
        return f"R{branch} is not a long-term branch"
    if lifecycle.past_end(branch, today):
        return f"R{branch}'s support ended in {life.support_end}"
    return f"R{branch} is a {life.designation} branch"


def _offers(osr: OperatingSystem, source: str, driver: str) -> bool:
    return any(b.number == versions.major(driver) for b, _ in delivery.drivers_from(osr, source))


def _auto_driver_source(
    ctx: _Context, models: list[GpuSpec], driver: str | None, cudas: list[str] | None, today: datetime.date
) -> tuple[Sources, str | None, str | None]:
    """The driver source `auto` stands for on this host: the archive unless its plan is past its end of life, not
    long-term or missing, and NVIDIA's repository delivers a supported long-term branch (then why, in one line, and
    the release to plan)."""
    osr = ctx.osr
    if osr is None:
        return ctx.sources, None, None
    archive: Delivered | Shortfall | None = None
    if driver is None or _offers(osr, "distro", driver):
        archive = delivery.pick(models, osr, ctx.sources, driver=driver, cudas=cudas)
    if isinstance(archive, Delivered) and _supported_long_term(versions.major(archive.driver), today):
        return ctx.sources, None, None
    repo_sources = ctx.sources.switched({"driver": "cuda_repo"})
    # NVIDIA's repository: the requested driver, or the release of its newest supported long-term branch that
    # delivers a stack for these GPUs (newest first).
    lts = [r for b, r in delivery.drivers_from(osr, "cuda_repo") if _supported_long_term(b.number, today)]
    repo: Delivered | Shortfall | None = None
    for candidate in [driver] if driver else lts:
        if _offers(osr, "cuda_repo", candidate):
            repo = delivery.pick(models, osr, repo_sources, driver=candidate, cudas=cudas)
            if isinstance(repo, Delivered):
                break
    if not isinstance(repo, Delivered) or not _supported_long_term(versions.major(repo.driver), today):
        return ctx.sources, None, None  # the archive's plan stands: refused, or warned about past its end
    chosen = versions.major(repo.driver)
    end = lifecycle.lifecycle(chosen).support_end  # type: ignore[union-attr]
    if isinstance(archive, Delivered):
        branch = versions.major(archive.driver)
        why = f"would give R{branch}, and {_why_not(branch, today)}; set nvidia_driver_source: distro for it"
    elif archive is None:
        why = f"has no driver {driver}"
    else:
        why = f"has no driver for this plan ({archive.reason.rstrip('.')})"
    note = (
        f"the driver comes from NVIDIA's repository (R{chosen}, long-term, supported until {end}): {osr.archive} {why}."
    )
    return repo_sources, note, repo.driver


def _auto_choice(
    ctx: _Context, profile_name: str, models: list[GpuSpec], overrides: dict[str, str], today: datetime.date
) -> tuple[str | None, str | None]:
    """Settle `auto` for the driver (ctx.sources switched in place); the note and the long-term release when
    NVIDIA's repository was taken."""
    name = (profile_name or "none").strip().lower()
    driver = overrides.get("driver")
    try:
        if name not in ("auto", "none"):
            driver = driver or profile(name).driver
        cudas = [versions.cuda_version(c) for c in _cuda_items(overrides.get("cuda"))] or None
        ctx.sources, note, release = _auto_driver_source(ctx, models, driver, cudas, today)
    except Exception:  # an unknown profile or malformed versions: refused below with their own reasons
        return None, None
    return note, release


def _base_stack(
    ctx: _Context, profile_name: str, models: list[GpuSpec], overrides: dict[str, str], python: str | None
) -> dict[str, Any]:
    name = (profile_name or "none").strip().lower()
    if name == "none":
        return {}
    if name == "auto":
        if not models:
            return {}
        try:
            return _plan_auto(ctx, models, overrides, python)
        except Exception as err:  # GpulabError: no coherent plan for this GPU/OS
            fix = "set gpulab_profile to a named profile or give gpulab_stack explicitly."
            ctx.problems.add("profile", str(err), fix)
            return {"refused": True}
    try:
        stack = profile(name)
    except Exception as err:  # GpulabError: an unknown profile
        ctx.problems.add("profile", str(err), f"set gpulab_profile to {_PROFILE_HELP}.")
        return {}
    out: dict[str, Any] = {k: v for k, v in stack.to_dict().items() if v and k in STACK_KEYS}
    if ctx.osr is not None and models:
        wanted = stack.override(driver=overrides.get("driver"), cuda=overrides.get("cuda"))
        missing = delivery.unavailable_on(wanted, ctx.osr)
        if missing:
            _profile_unavailable(ctx, ctx.osr, name, wanted, missing)
            out["refused"] = True
    return out


def _profile_unavailable(ctx: _Context, osr: OperatingSystem, name: str, stack: Stack, missing: list[str]) -> None:
    """One line for a named stack that no source carries on this OS, instead of one per part and source."""
    elsewhere = [o.name for o in delivery.installable_on(stack)]
    reasons = "; ".join(m.rstrip(".") for m in missing)
    where = (
        f"It installs on {', '.join(elsewhere)}."
        if elsewhere
        else f"No OS gpulab provisions ({platforms.provisioned_names()}) carries it."
    )
    fix = "use gpulab_profile: auto (the newest stack this host's sources deliver)"
    fix += (
        f", or provision {elsewhere[0]} for it."
        if elsewhere
        else f"; `gpulab matrix show {name}` says what else runs it."
    )
    ctx.problems.add("profile", f"{name} cannot be installed on {osr.name}: {reasons}. {where}", fix)


def _gpu_models(gpus: list[dict[str, Any]], problems: Problems) -> list[tuple[dict[str, Any], GpuSpec]]:
    found = []
    for gpu in gpus:
        spec = gpu_by_pci_id(str(gpu.get("pci_id", "")))
        if spec is None:
            problems.add(
                "gpu",
                f"NVIDIA GPU {gpu.get('pci_id')} at {gpu.get('address')} is not in the compatibility matrix.",
                "add it to src/gpulab/compat/matrix.yml (gpus) with its source, so its architecture is known.",
            )
            continue
        found.append((gpu, spec))
    return found


def _cudnn_by_cuda(ctx: _Context, cudnn: str | None, cudas: list[str], ccs: list[str]) -> dict[str, str | None]:
    """One cuDNN per toolkit: the requested one (already checked for every toolkit), else the newest the matrix
    builds for that CUDA and every GPU on the host that the cuDNN source delivers (the newest built at all when
    none is: the delivery check then says what is missing)."""
    if cudnn:
        mm = versions.major_minor(cudnn, "cuDNN version")
        return {cuda: mm for cuda in cudas}
    out: dict[str, str | None] = {}
    osr = ctx.osr
    for cuda in cudas:
        built = list(delivery.cudnn_candidates(cuda, ccs))
        delivered = [r for r in built if osr is None or delivery.cudnn_delivered(ctx.sources, osr, r.version, cuda)]
        pool = delivered or built
        out[cuda] = pool[0].version if pool else None
    return out


def _shortfalls(
    ctx: _Context, osr: OperatingSystem, driver: str | None, cudas: list[str], cudnn_by_cuda: dict[str, str | None]
) -> None:
    try:
        found = delivery.shortfalls(osr, ctx.sources, driver, cudas, cudnn_by_cuda)
    except Exception:
        return  # malformed versions are already problems
    for short in found:
        where = delivery.label(short.component, ctx.sources.of(short.component), osr)
        otherwise = (
            f"no source gpulab installs from on {osr.name} has it: request what {where} has "
            f"(gpulab_stack.{short.component}), or set gpulab_profile: auto"
        )
        ctx.problems.add(short.component, short.reason, _switch_fix(short, otherwise))


def _check_stack_keys(req: Request, problems: Problems) -> None:
    unknown = sorted(set(req.stack) - set(STACK_KEYS))
    if unknown:
        problems.add("stack", f"gpulab_stack has unknown keys {unknown}.", f"use only {', '.join(STACK_KEYS)}.")


def _cudnn_by_cuda_or_none(ctx: _Context, cudnn: str | None, cudas: list[str], ccs: list[str]) -> dict[str, str | None]:
    """`_cudnn_by_cuda`, or {} when a version is malformed (that is already a problem)."""
    try:
        return _cudnn_by_cuda(ctx, cudnn, cudas, ccs)
    except Exception:
        return {}


def _check_on_each_gpu(base: Stack, models: list[GpuSpec], problems: Problems) -> None:
    """The stack's compatibility problems on every GPU model of the host (or with no GPU)."""
    gpu_names: list[str | None] = [spec.name for spec in models] or [None]
    for gpu_name in gpu_names:
        for problem in check_stack(base.override(gpu=gpu_name)):
            problems.add(problem.component, problem.reason, problem.fix)


def signed_by_the_distribution(req: Request, driver_source: str) -> bool:
    """Whether the driver's modules come signed by the distribution: Ubuntu's archive driver with Canonical's
    prebuilt modules (linux-modules-nvidia-<branch>-server-*), which the kernel loads under Secure Boot."""
    return req.precompiled_modules and req.distribution == "Ubuntu" and driver_source == "distro"


def _check_secure_boot(req: Request, problems: Problems, driver_source: str) -> None:
    """A driver on a host with Secure Boot on needs its modules signed: by the distribution (Ubuntu's prebuilt
    modules) or by DKMS with a Machine Owner Key enrolled."""
    if req.secure_boot != "enabled" or req.secure_boot_signing or signed_by_the_distribution(req, driver_source):
        return
    ubuntu = (
        "; on Ubuntu with its archive's driver, set nvidia_driver_precompiled_modules: true for Canonical's "
        "signed modules"
        if req.distribution == "Ubuntu"
        else ""
    )
    problems.add(
        "secure_boot",
        "Secure Boot is enabled: the kernel refuses unsigned modules, so the NVIDIA driver would install and "
        "never load.",
        "disable Secure Boot in the firmware, or enroll DKMS's Machine Owner Key (mokutil --import "
        f"/var/lib/dkms/mok.pub, reboot, confirm) and set gpulab_secure_boot_signing: true{ubuntu}.",
    )


def _gpu_entry(gpu: dict[str, Any], spec: GpuSpec) -> TargetGpu:
    """One GPU of the target stack: where it sits and what it is."""
    return {
        "address": gpu.get("address"),
        "pci_id": gpu.get("pci_id"),
        "name": spec.name,
        "architecture": spec.architecture,
        "compute_capability": spec.compute_capability,
    }


def resolve(req: Request) -> Resolution:
    """(target stack, problems). The target is only meaningful when problems is empty."""
    problems = Problems()
    release = _release(req.distribution, req.distribution_version)
    os_name = _os_name(req.distribution, release)
    _check_os(problems, req, release)
    osr = None if problems else platforms.operating_system(os_name)
    ctx = _Context(problems, osr, _sources(req, problems))
    auto_driver = str((req.sources or {}).get("driver") or DEFAULT_SOURCES["driver"]).strip() == AUTO
    today = datetime.date.fromisoformat(req.today) if req.today else datetime.date.today()

    _check_stack_keys(req, problems)
    pairs = _gpu_models(req.gpus, problems)
    models = list({spec.name: spec for _, spec in pairs}.values())

    overrides = {k: v for k in STACK_KEYS if (v := _text(req.stack.get(k))) is not None}
    # The frameworks' venv is built from the host's Python unless the inventory names another one.
    python = overrides.get("python") or req.host_python
    driver_source_note = None
    planned = overrides
    if auto_driver and models and not ctx.sources.invalid():
        driver_source_note, release = _auto_choice(ctx, req.profile, models, overrides, today)
        if release and "driver" not in overrides and (req.profile or "").strip().lower() == "auto":
            # NVIDIA's repository was taken for its long-term branch: the plan is that branch, not its newest.
            planned = {**overrides, "driver": release}
    stack: dict[str, Any] = _base_stack(ctx, req.profile, models, planned, python)
    refused = bool(stack.pop("refused", False))  # the plan or the profile is refused already, with its reason
    stack.update(overrides)
    stack["python"] = python
    requested_modules = str(stack.pop("kernel_modules", None) or "auto").strip().lower()

    check_keys = ("driver", "cuda", "cudnn", "torch", "tensorflow", "python")
    # On an OS the roles provision, what its sources carry is checked below against the configured ones.
    base = Stack(**{k: stack.get(k) for k in check_keys}, os=None if osr else os_name)
    _check_on_each_gpu(base, models, problems)

    driver: str | None = stack.get("driver")
    if pairs and not driver and not refused:
        problems.add(
            "driver",
            f"this host has {len(pairs)} NVIDIA GPU(s) but no driver version was requested.",
            f"set gpulab_profile to {_PROFILE_HELP}, or set gpulab_stack.driver.",
        )
    kernel_modules = choose_kernel_modules(requested_modules, driver, models, problems)
    if pairs and driver:
        _check_secure_boot(req, problems, ctx.sources.driver)

    cudas = [versions.cuda_version(c) for c in _cuda_items(stack.get("cuda"))]
    ccs = [s.compute_capability for s in models]
    cudnn_by_cuda = _cudnn_by_cuda_or_none(ctx, stack.get("cudnn"), cudas, ccs)
    if osr is not None and pairs and not refused and not ctx.sources.invalid():
        _shortfalls(ctx, osr, driver, cudas, cudnn_by_cuda)
    torch_build = None
    if not problems and stack.get("torch"):
        torch_build = selected_torch_build(base.override(gpu=models[0].name if models else None))
    target: TargetStack = {
        "profile": (req.profile or "none").strip().lower(),
        "has_gpu": bool(req.gpus),
        "gpus": [_gpu_entry(gpu, spec) for gpu, spec in pairs],
        "nvswitch": bool(req.nvswitches),
        "driver": driver,
        "driver_branch": str(DriverBranch.parse(driver).number) if driver and not problems else None,
        "kernel_modules": kernel_modules,
        "cuda": cudas,
        "cuda_default": max(cudas, key=versions.key) if cudas and not problems else None,
        "cudnn": stack.get("cudnn") or next((v for v in cudnn_by_cuda.values() if v), None),
        "cudnn_by_cuda": cudnn_by_cuda,
        "torch": stack.get("torch"),
        "torch_index_url": torch_build.index_url if torch_build else None,
        "tensorflow": stack.get("tensorflow"),
        "python": stack.get("python"),
        "os": os_name,
        "sources": {c: ctx.sources.of(c) for c in SOURCE_VARS},
        "driver_source_note": driver_source_note if not problems else None,
    }
    return Resolution(target, list(problems))


def summary(target: TargetStack) -> str:
    """One line naming what the host gets, and from where."""
    fields: dict[str, Any] = dict(target)
    gpus = target["gpus"]
    if gpus:
        names: dict[str, int] = {}
        for gpu in gpus:
            names[gpu["name"]] = names.get(gpu["name"], 0) + 1
        what = ", ".join(f"{n}x {name}" for name, n in names.items())
    else:
        what = "no NVIDIA GPU"
    parts = [f"{k}={fields[k]}" for k in ("driver", "kernel_modules") if fields.get(k)]
    if target["cuda"]:
        parts.append(f"cuda={','.join(target['cuda'])}")
    parts += [f"{k}={fields[k]}" for k in ("cudnn", "torch", "tensorflow", "python") if fields.get(k)]
    line = f"{what}; profile {target['profile']}: {', '.join(parts) or 'nothing to install'}"
    if gpus and target.get("sources"):
        line += "; from " + ", ".join(f"{c} {s}" for c, s in target["sources"].items())
    return line
