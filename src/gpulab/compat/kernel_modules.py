"""Open or proprietary NVIDIA kernel modules: the one a host's GPUs and driver branch need, or why neither fits."""

from __future__ import annotations

from gpulab.compat import rules
from gpulab.compat.data import GpuSpec, load_matrix
from gpulab.compat.problems import Problems
from gpulab.names import Architecture

KERNEL_MODULES = ("auto", "open", "proprietary")
# The open GPU kernel modules are the only ones that drive this architecture and newer ones (NVIDIA driver README,
# "Open Linux Kernel Modules": Blackwell and newer require them).
OPEN_ONLY_FROM = Architecture.BLACKWELL


def choose_kernel_modules(requested: str, driver: str | None, specs: list[GpuSpec], problems: Problems) -> str | None:
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
        branch = rules.branch_record(driver)
    except Exception:
        return None  # the stack check reports the unknown driver
    oldest = branch.open_kernel_modules

    def open_ok(arch: Architecture) -> bool:
        return oldest is not None and arch >= oldest

    no_open = sorted({s.name for s in specs if not open_ok(s.architecture)})
    need_open = sorted({s.name for s in specs if s.architecture >= OPEN_ONLY_FROM})
    if need_open and no_open:
        problems.add(
            "kernel_modules",
            f"{', '.join(need_open)} need the open kernel modules, which do not drive {', '.join(no_open)}.",
            "put these GPUs in different hosts.",
        )
        return None
    if requested == "open" and no_open:
        archs = sorted({str(s.architecture) for s in specs if not open_ok(s.architecture)})
        fix = "set gpulab_stack.kernel_modules to 'proprietary' (or 'auto', which picks it for this GPU)."
        if oldest is None:
            first = min((b for b in load_matrix().drivers if b.open_kernel_modules), key=lambda b: b.number)
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
        # The branch's own default (open from R560) where the open modules drive every GPU on the host.
        return "open" if need_open or (branch.open_default and not no_open) else "proprietary"
    return requested
