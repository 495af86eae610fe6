"""'Newest X that works with Y' searches, shared by check_stack's fix sentences and plan_stack."""

from __future__ import annotations

from gpulab.compat import rules, versions
from gpulab.compat.data import CudaRelease, CudnnRelease, TfRelease, TorchBuild, TorchRelease, load_matrix


def cuda_for_cc(cc: str, ubuntu: str | None = None, driver: str | None = None) -> list[CudaRelease]:
    """CUDA releases (oldest first) that support compute capability `cc`, optionally on an Ubuntu release
    and within what a driver can run."""
    out = []
    for rel in load_matrix().cuda:
        if not versions.in_range(cc, rel.cc_min, rel.cc_max):
            continue
        if ubuntu is not None and ubuntu not in rel.ubuntu:
            continue
        if driver is not None and not rules.driver_meets(driver, rel.min_driver):
            continue
        out.append(rel)
    return out


def newest_cudnn(cuda: str, cc: str | None) -> CudnnRelease | None:
    ok = [rel for rel in load_matrix().cudnn if rules.cudnn_supports(rel, cuda, cc)]
    return max(ok, key=lambda r: versions.key(r.version)) if ok else None


def pick_build(builds: list[TorchBuild] | tuple[TorchBuild, ...], cuda: str | None = None) -> TorchBuild | None:
    """Among usable builds prefer stable over experimental ones, then the newest CUDA not above the installed
    toolkit, else the oldest above it."""
    if not builds:
        return None
    stable = [b for b in builds if not b.experimental]
    builds = stable or list(builds)
    ordered = sorted(builds, key=lambda b: versions.key(b.cuda))
    if cuda is None:
        return ordered[-1]
    below = [b for b in ordered if versions.compare(b.cuda, cuda) <= 0]
    return below[-1] if below else ordered[0]


def usable_builds(rel: TorchRelease, cc: str | None, cuda_major: int | None, driver: str | None) -> list[TorchBuild]:
    out = []
    for build in rel.builds:
        if cc is not None and not rules.build_has_kernels(build, cc):
            continue
        if cuda_major is not None and versions.major(build.cuda) != cuda_major:
            continue
        if driver is not None and not rules.driver_meets(driver, rules.framework_driver_minimum(build.cuda)):
            continue
        out.append(build)
    return out


def newest_torch(
    cc: str | None, cuda: str | None = None, driver: str | None = None, python: str | None = None
) -> tuple[TorchRelease, TorchBuild] | None:
    """Newest torch release (and its best build) with kernels for `cc`, built for `cuda`'s major."""
    cuda_major = versions.major(cuda) if cuda else None
    for rel in sorted(load_matrix().torch, key=lambda r: versions.key(r.version), reverse=True):
        if python is not None and python not in rel.python:
            continue
        build = pick_build(usable_builds(rel, cc, cuda_major, driver), cuda)
        if build is not None:
            return rel, build
    return None


def tf_gpu_ok(rel: TfRelease, cc: str) -> bool:
    """TF wheels ship kernels from rel.cc_min up to what their CUDA can target."""
    return versions.in_range(cc, rel.cc_min, rules.cuda_release(rel.cuda).cc_max)


def newest_tf(
    cc: str | None,
    cudas: list[str] | None = None,
    driver: str | None = None,
    python: str | None = None,
) -> TfRelease | None:
    """Newest TensorFlow usable on this GPU/driver; releases without [and-cuda] need a matching CUDA."""
    for rel in sorted(load_matrix().tensorflow, key=lambda r: versions.key(r.version), reverse=True):
        if cc is not None and not tf_gpu_ok(rel, cc):
            continue
        if python is not None and python not in rel.python:
            continue
        if driver is not None and not rules.driver_meets(driver, rules.framework_driver_minimum(rel.cuda)):
            continue
        if cudas is not None and not rel.and_cuda and not any(tf_cuda_matches(rel, c) for c in cudas):
            continue
        return rel
    return None


def tf_cuda_matches(rel: TfRelease, cuda: str) -> bool:
    """Before CUDA 11 the libraries carry major.minor in their soname, so the toolkit must match exactly;
    from 11 on, any same-major toolkit at least as new works (minor-version compatibility)."""
    if versions.major(rel.cuda) < 11:
        return versions.compare(rel.cuda, cuda) == 0
    return versions.major(cuda) == versions.major(rel.cuda) and versions.compare(cuda, rel.cuda) >= 0
