"""Today's builds: the newest PyTorch and TensorFlow releases matrix.yml lists, and whether an installed driver
runs any of them on a GPU. A driver that runs none (R418 on a Pascal board: CUDA 10.1 at most, where today's
wheels need CUDA 12) leaves that GPU with no CUDA or framework build in use today, whatever branch it is on."""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.compat import advice, rules, versions
from gpulab.compat.data import Profile, load_matrix
from gpulab.errors import GpulabError
from gpulab.names import Architecture


@dataclass(frozen=True)
class CurrentBuild:
    framework: str  # "PyTorch" or "TensorFlow"
    version: str  # "2.13+cu126", "2.21"
    cuda: str  # the CUDA it is built against
    min_driver: str  # the oldest driver that runs it (CUDA minor-version compatibility where CUDA has it)


@dataclass(frozen=True)
class DriverAge:
    """Why a driver runs no current build on a GPU of compute capability `cc`."""

    driver: str
    cc: str
    max_cuda: str | None  # the newest CUDA toolkit the driver runs; None where it predates every one listed
    predates: str | None  # the matrix's oldest branch when the driver is older than it
    builds: tuple[CurrentBuild, ...]  # today's builds with kernels for the GPU, oldest driver first; () for none

    @property
    def needs(self) -> CurrentBuild | None:
        """The current build with the oldest driver minimum; None where no current build supports the GPU."""
        return self.builds[0] if self.builds else None


def newest_releases() -> tuple[str, str]:
    """The newest PyTorch and TensorFlow release the matrix lists: ("2.13", "2.21")."""
    matrix = load_matrix()
    torch = max(matrix.torch, key=lambda r: versions.key(r.version))
    tf = max(matrix.tensorflow, key=lambda r: versions.key(r.version))
    return torch.version, tf.version


def current_builds(cc: str) -> tuple[CurrentBuild, ...]:
    """The builds of the newest PyTorch and TensorFlow releases with kernels for compute capability `cc`, the one
    that needs the oldest driver first (PyTorch before TensorFlow where they need the same)."""
    torch_version, tf_version = newest_releases()
    torch = rules.torch_release(torch_version)
    out = [
        CurrentBuild("PyTorch", f"{torch.version}+{b.tag}", b.cuda, rules.framework_driver_minimum(b.cuda))
        for b in torch.builds
        if rules.build_has_kernels(b, cc)
    ]
    tf = rules.tf_release(tf_version)
    if advice.tf_gpu_ok(tf, cc):
        out.append(CurrentBuild("TensorFlow", tf.version, tf.cuda, rules.framework_driver_minimum(tf.cuda)))
    return tuple(sorted(out, key=lambda b: (versions.key(b.min_driver), b.framework != "PyTorch")))


def driver_age(driver: str, cc: str) -> DriverAge | None:
    """Why `driver` runs no current build on a GPU of compute capability `cc`: too old for all of them, or none
    has kernels for the GPU. None when one of them runs. Raises GpulabError for a malformed driver version."""
    builds = current_builds(cc)
    if builds and rules.driver_meets(driver, builds[0].min_driver):
        return None
    oldest = min(load_matrix().drivers, key=lambda b: b.number)
    predates = oldest.branch if versions.parse(driver, "driver version")[0] < oldest.number else None
    try:
        max_cuda: str | None = rules.max_cuda_for_driver(driver)
    except GpulabError:  # older than every CUDA the matrix lists
        max_cuda = None
    return DriverAge(driver, cc, max_cuda, predates, builds)


def first_branch_for(architecture: Architecture, minimum: str) -> str | None:
    """The oldest branch the matrix lists that drives `architecture` and whose release meets `minimum`."""
    fits = [
        b
        for b in load_matrix().drivers
        if architecture in b.architectures and rules.driver_meets(b.recommended, minimum)
    ]
    return min(fits, key=lambda b: b.number).branch if fits else None


def profiles_for(architecture: Architecture, cc: str) -> list[str]:
    """The matrix's named stacks whose every component runs on a GPU of this architecture and compute capability
    (legacy-2018 runs on a Kepler K80): what is left to run on a GPU no current build supports."""
    return [p.name for p in load_matrix().profiles if _runs_on(p, architecture, cc)]


def _runs_on(profile: Profile, architecture: Architecture, cc: str) -> bool:
    stack = profile.stack
    cudas = [c for c in (stack.get("cuda") or "").split(",") if c]
    try:
        if stack.get("driver") and not rules.driver_supports_arch(stack["driver"], architecture):
            return False
        if not cudas or not all(rules.cuda_supports_cc(c, cc) for c in cudas):
            return False
        if stack.get("cudnn"):
            cudnn = rules.cudnn_release(stack["cudnn"])
            if not any(rules.cudnn_supports(cudnn, c, cc) for c in cudas):
                return False
        if stack.get("torch"):
            rel = rules.torch_release(stack["torch"])
            tag = versions.split_local(stack["torch"])[1]
            builds = [b for b in rel.builds if tag in (None, b.tag)]
            if not any(rules.build_has_kernels(b, cc) for b in builds):
                return False
        return not stack.get("tensorflow") or advice.tf_gpu_ok(rules.tf_release(stack["tensorflow"]), cc)
    except GpulabError:  # a profile naming what the matrix does not list is no answer either way
        return False
