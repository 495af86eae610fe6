"""An installed driver judged against today's software: one that runs no current CUDA or framework build on a GPU
(R418 on a Pascal board, where today's wheels need CUDA 12), or a GPU no current build supports at all (a Kepler
K80). The fix names the newest stack for the GPU as `gpulab matrix plan` plans it, from matrix.yml."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from gpulab.compat import ARCH_CC, current, driver_branch, matrix_arch, newest_stack, plan_stack
from gpulab.errors import GpulabError
from gpulab.names import Architecture, ReportedArchitecture


@dataclass(frozen=True)
class Finding:
    text: str  # why, then the newest stack, then "Fix: ..."
    facts: dict[str, object]


@dataclass(frozen=True)
class _Newest:
    text: str
    facts: dict[str, str | None]
    command: str | None  # the `gpulab matrix plan` that plans it, for a GPU the matrix lists


def judge(driver: str, model: str | None, architecture: ReportedArchitecture, cc: str | None) -> Finding | None:
    """A finding when `driver` runs no current build on a GPU (`model`: the matrix's name, None for a GPU it
    does not list); None when one runs, or when the driver or architecture is not one to judge by."""
    try:
        arch = matrix_arch(architecture)
        own_cc = cc or ARCH_CC[arch]
        age = current.driver_age(driver, own_cc)
        if age is None:
            return None
        newest = _newest(model, arch, cc)
    except (GpulabError, KeyError):
        return None
    branch = driver_branch(driver)
    runs = f"supports at most CUDA {age.max_cuda}" if age.max_cuda else "runs no CUDA toolkit the matrix lists"
    head = f"driver {driver} ({branch}) {runs}"
    if age.predates:
        head = (
            f"driver {driver} predates every branch the matrix lists ({age.predates} and later): no CUDA or "
            "framework build in use today runs on it"
        )
    profiles: list[str] = []
    if (need := age.needs) is not None:
        if not age.predates:
            head += f", so no CUDA or framework build in use today runs on {arch} with it"
        first = current.first_branch_for(arch, need.min_driver)
        why = (
            f"the newest {need.framework} for {arch} ({need.version}) needs CUDA {need.cuda}, "
            f"i.e. driver >= {need.min_driver}"
        )
        plan = f" (`{newest.command}`)" if newest.command else ""
        tail = f"the newest stack for this GPU is {newest.text}{plan}"
        any_branch = f" (any branch from {first} runs today's builds)" if first else ""
        fix = f"Fix: install driver {newest.facts['driver_branch']}{any_branch}, then that stack"
    else:
        torch, tf = current.newest_releases()
        why = (
            f"no current CUDA or framework build supports {arch} (compute capability {own_cc}): PyTorch {torch} and "
            f"TensorFlow {tf} ship no kernels for it"
        )
        profiles = current.profiles_for(arch, own_cc)
        named = "".join(f"; the matrix's profile {p} runs on it too (`gpulab matrix show {p}`)" for p in profiles)
        tail = f"the newest stack for this GPU is {newest.text}, the last that supported {arch}{named}"
        fix = "Fix: retire the GPU from current work, or keep it on that last stack for legacy work"
    facts: dict[str, object] = {
        "driver": driver,
        "driver_branch": branch,
        "max_cuda": age.max_cuda,
        "predates_matrix": age.predates,
        "architecture": arch,
        "compute_capability": own_cc,
        "supported_today": bool(age.builds),
        "needs": dataclasses.asdict(need) if need else None,
        "current_builds": [dataclasses.asdict(b) for b in age.builds],
        "newest_stack": newest.facts,
        "profiles": profiles,
    }
    return Finding(f"{head}; {why}; {tail}. {fix}", facts)


def _newest(model: str | None, arch: Architecture, cc: str | None) -> _Newest:
    """The newest stack for the GPU: `gpulab matrix plan`'s for a GPU the matrix lists, else the newest the
    architecture (and the chip's own compute capability) allows."""
    if model is not None:
        try:
            stack = plan_stack(model)
        except GpulabError:  # no plan for it: the architecture's newest stack below still names one
            pass
        else:
            branch = driver_branch(stack.driver or "")
            parts = [
                f"driver {branch} ({stack.driver})",
                f"CUDA {stack.cuda}",
                f"cuDNN {stack.cudnn}" if stack.cudnn else "no cuDNN",
                f"PyTorch {stack.torch}" if stack.torch else "no PyTorch",
                f"TensorFlow {stack.tensorflow}" if stack.tensorflow else "no TensorFlow",
            ]
            facts = {"driver_branch": branch, **{k: v for k, v in stack.to_dict().items() if k != "gpu"}}
            return _Newest(", ".join(parts), facts, f"gpulab matrix plan --gpu {shlex.quote(model)}")
    found = newest_stack(arch, cc)
    facts = {
        "driver_branch": found.driver_branch,
        "driver": found.driver,
        "cuda": found.cuda,
        "torch": found.torch,
        "tensorflow": found.tensorflow,
    }
    return _Newest(found.text(), facts, None)
