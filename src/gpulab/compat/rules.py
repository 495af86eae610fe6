"""Single-fact queries over the matrix: driver minimums, architecture support, branch lookup."""

from __future__ import annotations

from gpulab.compat import versions
from gpulab.compat.data import (
    BranchEntry,
    CudaRelease,
    CudnnRelease,
    TfRelease,
    TorchBuild,
    TorchRelease,
    load_matrix,
)
from gpulab.errors import GpulabError
from gpulab.names import ARCHITECTURES, Architecture, DriverBranch, ReportedArchitecture


def _known(items: list[str]) -> str:
    return ", ".join(items)


def cuda_release(cuda: str) -> CudaRelease:
    key = versions.cuda_version(cuda)
    for rel in load_matrix().cuda:
        if versions.compare(rel.version, key) == 0:
            return rel
    known = _known([r.version for r in load_matrix().cuda])
    raise GpulabError(f"CUDA {cuda} is unknown to the compatibility matrix (known: {known}).")


def min_driver_for_cuda(cuda: str, *, minor_compat: bool = False) -> str:
    """Oldest Linux driver for a CUDA toolkit: the toolkit's own driver (Table 3), or with `minor_compat`
    the CUDA minor-version-compatibility floor (Table 2; 11.x+ only, PTX JIT needs the toolkit driver)."""
    rel = cuda_release(cuda)
    if minor_compat and rel.min_driver_compat:
        return rel.min_driver_compat
    return rel.min_driver


def cuda_supports_cc(cuda: str, cc: str) -> bool:
    rel = cuda_release(cuda)
    return versions.in_range(versions.major_minor(cc, "compute capability"), rel.cc_min, rel.cc_max)


def driver_branch(version: str) -> str:
    """'580.95.05' -> 'R580'; 'R580' and '580' are accepted too."""
    return str(DriverBranch.parse(version, "driver version"))


def branch_record(driver: str) -> BranchEntry:
    """The branch entry for a driver; unlisted branches use the newest listed branch below them, because
    support only changes on listed branches."""
    number = DriverBranch.parse(driver, "driver version").number
    below = [b for b in load_matrix().drivers if b.number <= number]
    if not below:
        oldest = load_matrix().drivers[0].branch
        raise GpulabError(f"driver {driver} predates the compatibility matrix (oldest branch: {oldest}).")
    return max(below, key=lambda b: b.number)


def matrix_arch(architecture: ReportedArchitecture) -> Architecture:
    """The architecture as one the matrix lists, or a GpulabError for one it does not (newer than the matrix)."""
    if isinstance(architecture, Architecture):
        return architecture
    raise GpulabError(f"architecture {str(architecture)!r} is unknown; use one of {_known(list(ARCHITECTURES))}.")


def driver_supports_arch(driver: str, architecture: ReportedArchitecture) -> bool:
    return matrix_arch(architecture) in branch_record(driver).architectures


def driver_meets(driver: str, minimum: str) -> bool:
    """True when `driver` is at least `minimum`. A bare branch ('580') is taken as that branch's newest
    release, so it meets any minimum inside its own branch."""
    parts = versions.parse(driver, "driver version")
    if len(parts) == 1:
        return parts[0] >= versions.parse(minimum)[0]
    return versions.compare(driver, minimum) >= 0


def max_cuda_for_driver(driver: str) -> str:
    """Newest CUDA toolkit whose toolkit driver minimum this driver meets ('580.95.05' -> '13.0').

    A bare branch ('R565') answers with the CUDA version nvidia-smi reports for that branch (12.7 for R565,
    although no 12.7 toolkit exists)."""
    if len(versions.parse(driver, "driver version")) == 1:
        return branch_record(driver).max_cuda
    ok = [rel for rel in load_matrix().cuda if driver_meets(driver, rel.min_driver)]
    if not ok:
        oldest = load_matrix().cuda[0]
        raise GpulabError(
            f"driver {driver} is older than every CUDA in the matrix (CUDA {oldest.version} needs "
            f">= {oldest.min_driver})."
        )
    return max(ok, key=lambda r: versions.key(r.version)).version


def newest_branch_for_arch(architecture: ReportedArchitecture) -> BranchEntry:
    arch = matrix_arch(architecture)
    branches = [b for b in load_matrix().drivers if arch in b.architectures]
    if not branches:
        raise GpulabError(f"no driver branch in the matrix supports {arch}.")
    return max(branches, key=lambda b: b.number)


def cudnn_release(cudnn: str) -> CudnnRelease:
    key = versions.major_minor(cudnn, "cuDNN version")
    for rel in load_matrix().cudnn:
        if versions.compare(rel.version, key) == 0:
            return rel
    known = _known([r.version for r in load_matrix().cudnn])
    raise GpulabError(f"cuDNN {cudnn} is unknown to the compatibility matrix (known: {known}).")


def cudnn_supports(rel: CudnnRelease, cuda: str, cc: str | None) -> bool:
    key = versions.cuda_version(cuda)
    for build in rel.builds:
        if not versions.in_range(key, build.cuda_min, build.cuda_max):
            continue
        if cc is None or versions.in_range(cc, build.cc_min, build.cc_max):
            return True
    return False


def torch_release(torch: str) -> TorchRelease:
    base, _ = versions.split_local(torch)
    key = versions.major_minor(base, "torch version")
    for rel in load_matrix().torch:
        if versions.compare(rel.version, key) == 0:
            return rel
    known = _known([r.version for r in load_matrix().torch])
    raise GpulabError(f"torch {torch} is unknown to the compatibility matrix (known: {known}).")


def build_has_kernels(build: TorchBuild, cc: str) -> bool:
    """SASS built for X.a runs on X.b when b >= a (same major), so sm_86 kernels cover an sm_89 GPU."""
    gmaj, gmin = versions.parse(cc)[:2]
    return any(versions.parse(arch)[0] == gmaj and versions.parse(arch)[1] <= gmin for arch in build.arches)


def tf_release(tensorflow: str) -> TfRelease:
    key = versions.major_minor(tensorflow, "TensorFlow version")
    for rel in load_matrix().tensorflow:
        if versions.compare(rel.version, key) == 0:
            return rel
    known = _known([r.version for r in load_matrix().tensorflow])
    raise GpulabError(f"TensorFlow {tensorflow} is unknown to the compatibility matrix (known: {known}).")


def framework_driver_minimum(cuda: str) -> str:
    """Driver a framework wheel built against `cuda` needs: the minor-compat floor where CUDA has one, since
    the wheel brings its own runtime; the exact toolkit driver before CUDA 11."""
    return min_driver_for_cuda(cuda, minor_compat=True)
