"""What the configured install sources deliver, and the newest stack they deliver for a host's GPUs.

The matrix says which stacks work on a GPU; this says which of them a host can get from the sources it is set up
with (the OS's archive, NVIDIA's repository or runfiles, pinned cuDNN wheels or archives). `plan` picks the newest
deliverable stack or says what is missing and which source switch would deliver it; `shortfalls` checks a stack
someone asked for. Nothing here touches a host.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

from gpulab.compat import advice, platforms, rules, versions
from gpulab.compat.check import Stack, check_stack
from gpulab.compat.data import BranchEntry, CudaRelease, CudnnRelease, GpuSpec, OperatingSystem, load_matrix
from gpulab.compat.plan import profile
from gpulab.errors import GpulabError

DRIVER_SOURCES = ("distro", "cuda_repo", "runfile")
CUDA_SOURCES = ("distro", "cuda_repo", "runfile")
CUDNN_SOURCES = ("wheel", "cuda_repo", "archive")
CHOICES = {"driver": DRIVER_SOURCES, "cuda": CUDA_SOURCES, "cudnn": CUDNN_SOURCES}
# Which switch to suggest first: a repository (or its mirror) needs no files from the user; runfiles and archives do.
_PREFERENCE = ("cuda_repo", "wheel", "distro", "runfile", "archive")


@dataclass(frozen=True)
class Sources:
    """Where each part comes from (the roles' nvidia_driver_source, cuda_toolkit_source, cudnn_source), and the
    cuDNN builds pinned for the wheel and archive sources."""

    driver: str = "distro"
    cuda: str = "distro"
    cudnn: str = "wheel"
    cudnn_wheels: frozenset[str] = frozenset()  # "<cuDNN major.minor>-cu<CUDA major>", e.g. "9.10-cu11"
    cudnn_archives: frozenset[str] = frozenset()  # "<cuDNN major.minor>-cu<CUDA major.minor>", e.g. "8.9-cu12.2"

    def of(self, component: str) -> str:
        return str(getattr(self, component))

    def switched(self, changes: dict[str, str]) -> Sources:
        return Sources(
            driver=changes.get("driver", self.driver),
            cuda=changes.get("cuda", self.cuda),
            cudnn=changes.get("cudnn", self.cudnn),
            cudnn_wheels=self.cudnn_wheels,
            cudnn_archives=self.cudnn_archives,
        )

    def invalid(self) -> list[str]:
        """Components whose source is not one gpulab knows."""
        return [c for c, options in CHOICES.items() if self.of(c) not in options]


@dataclass
class Delivered:
    """A stack the sources deliver: the driver as the roles install it (a branch from a distribution's archive,
    whose point releases move; an exact release from NVIDIA), toolkits, and one cuDNN per toolkit."""

    driver: str
    cuda: list[str]
    cudnn_by_cuda: dict[str, str | None]
    torch: str | None = None
    tensorflow: str | None = None


@dataclass
class Shortfall:
    """Why the sources cannot deliver a component; `switch` names the source changes that would (empty: none)."""

    component: str  # driver | cuda | cudnn
    reason: str
    switch: dict[str, str] = field(default_factory=dict)
    otherwise: str | None = None  # what else would do, e.g. pinning a wheel
    would: Delivered | None = None  # what the switched sources deliver


# -- what each source carries ------------------------------------------------------------------------------------
def label(component: str, source: str, osr: OperatingSystem) -> str:
    """The source as a user knows it: "Debian 12's archive", "NVIDIA's repository for Debian 12"."""
    if source == "distro":
        return osr.archive
    if source == "cuda_repo":
        return f"NVIDIA's repository for {osr.name}"
    if source == "runfile":
        return f"the runfile source for {osr.name} (NVIDIA's installers)"
    if source == "wheel":
        return "cudnn_wheels (the pinned cuDNN wheels)"
    if source == "archive":
        return "cudnn_archives (the cuDNN archives)"
    return f"{component} source {source!r}"


def drivers_from(osr: OperatingSystem, source: str) -> list[tuple[BranchEntry, str]]:
    """(branch, version the roles install), newest first. An archive's current release of a branch moves with its
    point releases and security updates, so it is named by the branch; NVIDIA's by the matrix's release."""
    if source == "distro":
        return [(b, str(b.number)) for b in reversed(platforms.archive_branches(osr))]
    if source in ("cuda_repo", "runfile"):
        return [(b, b.recommended) for b in reversed(platforms.nvidia_branches(osr))]
    return []


def cuda_from(osr: OperatingSystem, source: str) -> list[CudaRelease]:
    """Toolkits, newest first."""
    if source == "distro":
        return list(reversed(platforms.archive_cuda(osr)))
    if source in ("cuda_repo", "runfile"):
        return list(reversed(platforms.nvidia_cuda(osr)))
    return []


def wheel_key(cudnn: str, cuda: str) -> str:
    return f"{versions.major_minor(cudnn)}-cu{versions.major(cuda)}"


def archive_key(cudnn: str, cuda: str) -> str:
    return f"{versions.major_minor(cudnn)}-cu{versions.cuda_version(cuda)}"


def cudnn_delivered(sources: Sources, osr: OperatingSystem, cudnn: str, cuda: str) -> bool:
    """Whether the cuDNN source has this cuDNN for this toolkit. NVIDIA's repository carries cuDNN packages for the
    toolkits it publishes for the OS."""
    if sources.cudnn == "wheel":
        return wheel_key(cudnn, cuda) in sources.cudnn_wheels
    if sources.cudnn == "archive":
        return archive_key(cudnn, cuda) in sources.cudnn_archives
    if sources.cudnn == "cuda_repo":
        return any(versions.compare(c.version, cuda) == 0 for c in platforms.nvidia_cuda(osr))
    return False


def cudnn_candidates(cuda: str, ccs: list[str]) -> tuple[CudnnRelease, ...]:
    """cuDNN releases (newest first) built for this toolkit and every GPU's compute capability."""
    return _cudnn_built(cuda, tuple(sorted(set(ccs))))


@functools.lru_cache(maxsize=1024)
def _cudnn_built(cuda: str, ccs: tuple[str, ...]) -> tuple[CudnnRelease, ...]:
    wanted: tuple[str | None, ...] = ccs or (None,)
    ok = [r for r in load_matrix().cudnn if all(rules.cudnn_supports(r, cuda, cc) for cc in wanted)]
    return tuple(sorted(ok, key=lambda r: versions.key(r.version), reverse=True))


# -- what the GPUs need --------------------------------------------------------------------------------------------
def driver_need(spec: GpuSpec) -> str:
    """'driver >= 550.54.14', 'a driver of R384–R580' - what a GPU needs, for messages."""
    branches = [b for b in load_matrix().drivers if spec.architecture in b.architectures]
    first, last = min(branches, key=lambda b: b.number), max(branches, key=lambda b: b.number)
    low = spec.min_driver or first.branch
    ends = last.number < max(b.number for b in load_matrix().drivers)
    return f"a driver of {low}–{last.branch}" if ends else f"driver >= {low}"


def driver_fits(driver: str, spec: GpuSpec) -> bool:
    if not rules.driver_supports_arch(driver, spec.architecture):
        return False
    return spec.min_driver is None or rules.driver_meets(driver, spec.min_driver)


def _cuda_fits(rel: CudaRelease, ccs: list[str], driver: str) -> bool:
    in_range = all(versions.in_range(cc, rel.cc_min, rel.cc_max) for cc in ccs)
    return in_range and rules.driver_meets(driver, rel.min_driver)


def _cuda_misfit(rel: CudaRelease, specs: list[GpuSpec], driver: str) -> str:
    outside = [s for s in specs if not versions.in_range(s.compute_capability, rel.cc_min, rel.cc_max)]
    if outside:
        gpus = ", ".join(f"{s.name} is {s.compute_capability}" for s in outside)
        return f"CUDA {rel.version} supports compute capability {rel.cc_min}–{rel.cc_max} ({gpus})"
    return f"CUDA {rel.version} needs driver >= {rel.min_driver}"


def _names(specs: list[GpuSpec]) -> str:
    return ", ".join(s.name for s in specs)


# -- planning ------------------------------------------------------------------------------------------------------
def pick(
    specs: list[GpuSpec],
    osr: OperatingSystem,
    sources: Sources,
    *,
    driver: str | None = None,
    cudas: list[str] | None = None,
    cudnn: str | None = None,
) -> Delivered | Shortfall:
    """The newest driver, then the newest toolkit, then the newest cuDNN the sources deliver for these GPUs.
    A value given here (an override) is taken as it is; `shortfalls` and check_stack judge it."""
    ccs = [s.compute_capability for s in specs]
    if driver:
        driver_options = [driver]
    else:
        offered = drivers_from(osr, sources.driver)
        driver_options = [v for _, v in offered if all(driver_fits(v, s) for s in specs)]
        if not driver_options:
            return _driver_shortfall(specs, osr, sources, offered)
    no_cuda: tuple[str, list[CudaRelease]] | None = None
    no_cudnn: tuple[str, str, CudnnRelease] | None = None
    # The cuDNN a toolkit gets does not depend on the driver: found once per toolkit.
    per_cuda: dict[str, tuple[bool, str | None]] = {}

    def cudnn_for(cuda: str) -> tuple[bool, str | None]:
        if cuda not in per_cuda:
            candidates = cudnn_candidates(cuda, ccs)
            found = next((r for r in candidates if cudnn_delivered(sources, osr, r.version, cuda)), None)
            per_cuda[cuda] = (not candidates or found is not None, found.version if found else None)
        return per_cuda[cuda]

    for drv in driver_options:
        if cudas:
            cuda_options = [cudas]
        else:
            offered_cuda = cuda_from(osr, sources.cuda)
            cuda_options = [[c.version] for c in offered_cuda if _cuda_fits(c, ccs, drv)]
            if not cuda_options:
                no_cuda = no_cuda or (drv, offered_cuda)
                continue
        for option in cuda_options:
            chosen: dict[str, str | None] = {}
            for cuda in option:
                if cudnn:
                    chosen[cuda] = versions.major_minor(cudnn)
                    continue
                ok, found = cudnn_for(cuda)
                if not ok:
                    no_cudnn = no_cudnn or (drv, cuda, cudnn_candidates(cuda, ccs)[0])
                    break
                chosen[cuda] = found
            else:
                return Delivered(driver=drv, cuda=list(option), cudnn_by_cuda=chosen)
    if no_cudnn:
        return _cudnn_shortfall(specs, osr, sources, *no_cudnn)
    assert no_cuda is not None
    return _cuda_shortfall(specs, osr, sources, *no_cuda)


def _driver_shortfall(
    specs: list[GpuSpec], osr: OperatingSystem, sources: Sources, offered: list[tuple[BranchEntry, str]]
) -> Shortfall:
    where = label("driver", sources.driver, osr)
    has = platforms.branch_span([b for b, _ in offered])
    needs = "; ".join(
        f"{s.name} needs {driver_need(s)}" for s in specs if not any(driver_fits(v, s) for _, v in offered)
    )
    if not needs:  # each GPU has a branch, but no branch drives them all
        needs = "no one branch drives " + " and ".join(f"{s.name} ({driver_need(s)})" for s in specs)
    verb = "packages" if sources.driver == "distro" else "has"
    return Shortfall("driver", f"{where} has no driver for {_names(specs)}: it {verb} {has}, and {needs}.")


def _cuda_shortfall(
    specs: list[GpuSpec], osr: OperatingSystem, sources: Sources, driver: str, offered: list[CudaRelease]
) -> Shortfall:
    where = label("cuda", sources.cuda, osr)
    if not offered:
        return Shortfall("cuda", f"{where} has no CUDA toolkit.")
    why = "; ".join(_cuda_misfit(c, specs, driver) for c in offered[:3])
    has = platforms.cuda_span(list(reversed(offered)))
    return Shortfall(
        "cuda", f"{where} has no CUDA for {_names(specs)} with driver {driver}: it has CUDA {has}, and {why}."
    )


def _cudnn_shortfall(
    specs: list[GpuSpec], osr: OperatingSystem, sources: Sources, driver: str, cuda: str, newest: CudnnRelease
) -> Shortfall:
    where = label("cudnn", sources.cudnn, osr)
    ccs = ", ".join(sorted({s.compute_capability for s in specs}))
    reason = (
        f"{where} has no cuDNN for CUDA {cuda} on compute capability {ccs} (driver {driver}); the newest the "
        f"matrix lists for it is cuDNN {newest.version}"
    )
    otherwise = None
    if sources.cudnn == "wheel":
        pinned = ", ".join(sorted(sources.cudnn_wheels, key=_key_order)) or "none"
        reason += f" ('{wheel_key(newest.version, cuda)}' is not pinned; pinned: {pinned})."
        if versions.major(cuda) >= 11:  # NVIDIA publishes cuDNN wheels for CUDA 11 and newer
            otherwise = (
                f"pin nvidia-cudnn-cu{versions.major(cuda)} {newest.version}.x in cudnn_wheels as "
                f"'{wheel_key(newest.version, cuda)}' (version, sha256 and path from "
                f"https://pypi.org/project/nvidia-cudnn-cu{versions.major(cuda)}/#files)"
            )
    elif sources.cudnn == "archive":
        reason += f" (cudnn_archives has no '{archive_key(newest.version, cuda)}')."
        otherwise = f"add cudnn_archives['{archive_key(newest.version, cuda)}'] with the archive and its sha256"
    else:
        reason += f" (NVIDIA's repository for {osr.name} has no CUDA {cuda} packages)."
    return Shortfall("cudnn", reason, otherwise=otherwise)


def _key_order(key: str) -> tuple[tuple[int, ...], str]:
    version, _, cuda = key.partition("-")
    try:
        return versions.key(version), cuda
    except GpulabError:  # a malformed key still lists; the cudnn role refuses it
        return (0,), key


def plan(
    specs: list[GpuSpec],
    osr: OperatingSystem,
    sources: Sources,
    *,
    driver: str | None = None,
    cudas: list[str] | None = None,
    cudnn: str | None = None,
    python: str | None = None,
) -> Delivered | Shortfall:
    """`pick`, then the newest torch and TensorFlow for that driver and toolkit (and `python`); a shortfall comes
    with the fewest source switches that would deliver a stack."""
    result = pick(specs, osr, sources, driver=driver, cudas=cudas, cudnn=cudnn)
    if isinstance(result, Shortfall):
        switched = _switches(specs, osr, sources, result.component, driver=driver, cudas=cudas, cudnn=cudnn)
        if switched:
            result.switch, result.would = switched
        return result
    result.torch, result.tensorflow = frameworks(specs, result.driver, result.cuda, python)
    return result


def _switches(
    specs: list[GpuSpec],
    osr: OperatingSystem,
    sources: Sources,
    failing: str,
    driver: str | None,
    cudas: list[str] | None,
    cudnn: str | None,
) -> tuple[dict[str, str], Delivered] | None:
    """The fewest source changes that make `pick` deliver, and what it then delivers; changes of the failing
    component first, then sources that need no files from the user."""
    for size in (1, 2, 3):
        found: list[tuple[bool, int, dict[str, str], Delivered]] = []
        for components in itertools.combinations(CHOICES, size):
            options = [[s for s in CHOICES[c] if s != sources.of(c)] for c in components]
            for choice in itertools.product(*options):
                change = dict(zip(components, choice, strict=True))
                got = pick(specs, osr, sources.switched(change), driver=driver, cudas=cudas, cudnn=cudnn)
                if isinstance(got, Delivered):
                    found.append((failing not in change, sum(_PREFERENCE.index(s) for s in choice), change, got))
        if found:
            best = min(found, key=lambda f: (f[0], f[1]))
            return best[2], best[3]
    return None


def frameworks(
    specs: list[GpuSpec], driver: str, cudas: list[str], python: str | None
) -> tuple[str | None, str | None]:
    """Newest torch build and TensorFlow release for every GPU on the host, this driver, the newest toolkit's CUDA
    major (CUDA extensions build against it) and the host's Python."""
    cuda = max(cudas, key=versions.key) if cudas else None
    ccs = [s.compute_capability for s in specs]
    torch = None
    for rel in sorted(load_matrix().torch, key=lambda r: versions.key(r.version), reverse=True):
        if python is not None and python not in rel.python:
            continue
        usable = [advice.usable_builds(rel, cc, versions.major(cuda) if cuda else None, driver) for cc in ccs]
        common = [b for b in usable[0] if all(b in other for other in usable[1:])] if usable else []
        build = advice.pick_build(common, cuda)
        if build is not None:
            torch = f"{rel.version}+{build.tag}"
            break
    tf = None
    for tf_rel in sorted(load_matrix().tensorflow, key=lambda r: versions.key(r.version), reverse=True):
        if python is not None and python not in tf_rel.python:
            continue
        if not all(advice.tf_gpu_ok(tf_rel, cc) for cc in ccs):
            continue
        if not rules.driver_meets(driver, rules.framework_driver_minimum(tf_rel.cuda)):
            continue
        if not tf_rel.and_cuda and not any(advice.tf_cuda_matches(tf_rel, c) for c in cudas):
            continue
        tf = tf_rel.version
        break
    return torch, tf


# -- checking a requested stack ------------------------------------------------------------------------------------
def shortfalls(
    osr: OperatingSystem,
    sources: Sources,
    driver: str | None,
    cudas: list[str],
    cudnn_by_cuda: dict[str, str | None],
) -> list[Shortfall]:
    """Each part of a requested stack that its source does not deliver, with the sources that would."""
    out = []
    if driver:
        number = versions.parse(driver)[0]
        offered = drivers_from(osr, sources.driver)
        if not any(b.number == number for b, _ in offered):
            where, has = label("driver", sources.driver, osr), platforms.branch_span([b for b, _ in offered])
            others = [s for s in DRIVER_SOURCES if any(b.number == number for b, _ in drivers_from(osr, s))]
            out.append(
                Shortfall(
                    "driver", f"{where} has no driver {driver} (R{number}); it has {has}.", _first(others, "driver")
                )
            )
    if cudas:
        missing = [c for c in cudas if not _offers_cuda(osr, sources.cuda, c)]
        where = label("cuda", sources.cuda, osr)
        if missing:
            has = platforms.cuda_span(list(reversed(cuda_from(osr, sources.cuda))))
            others = [s for s in CUDA_SOURCES if all(_offers_cuda(osr, s, c) for c in cudas)]
            out.append(
                Shortfall("cuda", f"{where} has no CUDA {', '.join(missing)}; it has {has}.", _first(others, "cuda"))
            )
        elif sources.cuda == "distro" and len(cudas) > 1:
            out.append(
                Shortfall(
                    "cuda",
                    f"{where} installs one toolkit, not {len(cudas)} side by side ({', '.join(cudas)}).",
                    _first(
                        [s for s in CUDA_SOURCES if s != "distro" and all(_offers_cuda(osr, s, c) for c in cudas)],
                        "cuda",
                    ),
                )
            )
    for cuda, cudnn in cudnn_by_cuda.items():
        if cudnn and not cudnn_delivered(sources, osr, cudnn, cuda):
            where = label("cudnn", sources.cudnn, osr)
            others = [s for s in CUDNN_SOURCES if cudnn_delivered(sources.switched({"cudnn": s}), osr, cudnn, cuda)]
            key = wheel_key(cudnn, cuda) if sources.cudnn == "wheel" else archive_key(cudnn, cuda)
            detail = f" (no '{key}')" if sources.cudnn in ("wheel", "archive") else ""
            out.append(
                Shortfall("cudnn", f"{where} has no cuDNN {cudnn} for CUDA {cuda}{detail}.", _first(others, "cudnn"))
            )
    return out


def _offers_cuda(osr: OperatingSystem, source: str, cuda: str) -> bool:
    return any(versions.compare(c.version, cuda) == 0 for c in cuda_from(osr, source))


def _first(options: list[str], component: str) -> dict[str, str]:
    ranked = sorted(options, key=_PREFERENCE.index)
    return {component: ranked[0]} if ranked else {}


# -- where a named stack can be installed --------------------------------------------------------------------------
def installable_on(stack: Stack) -> list[OperatingSystem]:
    """The operating systems gpulab provisions where some source carries the stack's driver and every toolkit."""
    probe = Stack(driver=stack.driver, cuda=stack.cuda)
    return [o for o in platforms.provisioned() if not _os_problems(probe.override(os=o.os))]


def unavailable_on(stack: Stack, osr: OperatingSystem) -> list[str]:
    """The stack's parts no source carries on this OS, each as its check_stack reason."""
    return _os_problems(Stack(driver=stack.driver, cuda=stack.cuda, os=osr.os))


def _os_problems(stack: Stack) -> list[str]:
    return [p.reason for p in check_stack(stack) if p.component == "os"]


def profile_installable_on(name: str) -> list[OperatingSystem]:
    return installable_on(profile(name))
