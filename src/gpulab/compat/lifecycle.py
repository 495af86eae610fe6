"""Driver branches over time: each branch's end of life (the matrix's driver_lifecycle, NVIDIA's published dates),
the warning for a plan past it, and the one branch a fleet runs.

An operator keeps one long-term branch that drives every host rather than each host's newest: the fleet's branch
is the newest long-term branch, still supported, not newer than any host's plan, that drives every host's GPUs
(each at its first driver or later). Where none does, the oldest planned branch is used if it drives them all;
otherwise there is no common branch and each host keeps its own plan.
"""

from __future__ import annotations

import datetime
from typing import Any

from gpulab.compat import versions
from gpulab.compat.data import DriverLifecycle, load_matrix
from gpulab.compat.gpus import gpu_for
from gpulab.names import Architecture


def lifecycle(branch: int) -> DriverLifecycle | None:
    return next((life for life in load_matrix().lifecycle if life.number == branch), None)


def past_end(branch: int, today: datetime.date) -> bool:
    life = lifecycle(branch)
    return life is not None and life.support_end < today.strftime("%Y-%m")


def eol_warning(driver: str | None, today: datetime.date) -> str | None:
    """One line when the planned driver's branch is past its end of life, naming the supported long-term branch."""
    if not driver:
        return None
    branch = versions.major(driver)
    life = lifecycle(branch)
    if life is None or not past_end(branch, today):
        return None
    current = [x for x in load_matrix().lifecycle if x.long_term and x.support_end >= today.strftime("%Y-%m")]
    instead = (
        f" {current[0].branch} is the long-term branch supported until {current[0].support_end}: set "
        "nvidia_driver_source: cuda_repo (NVIDIA's repository or a mirror) or gpulab_stack.driver to use it."
        if current
        else ""
    )
    return f"driver R{branch} reached its end of life in {life.support_end} ({life.source}).{instead}"


def _drives(branch: int, target: dict[str, Any]) -> bool:
    record = next((d for d in load_matrix().drivers if d.number == branch), None)
    if record is None:
        return False
    for gpu in target.get("gpus", []):
        spec = gpu_for(gpu["name"], gpu.get("pci_id"))
        arch = Architecture.parse(gpu["architecture"], "gpulab_target_stack gpus[].architecture")
        if arch not in record.architectures:
            return False
        if spec and spec.min_driver and versions.compare(record.recommended, spec.min_driver) < 0:
            return False
    return True


def fleet_branch(plans: dict[str, dict[str, Any]], today: datetime.date) -> int | None:
    """The one driver branch for every host (host -> gpulab_target_stack; hosts without a planned driver ignored)."""
    planned = [versions.major(str(t["driver"])) for t in plans.values() if t.get("driver")]
    if not planned:
        return None
    ceiling = min(planned)
    targets = [t for t in plans.values() if t.get("driver")]
    long_term = sorted(
        (x.number for x in load_matrix().lifecycle if x.long_term and not past_end(x.number, today)),
        reverse=True,
    )
    for branch in long_term:
        if branch <= ceiling and all(_drives(branch, t) for t in targets):
            return branch
    return ceiling if all(_drives(ceiling, t) for t in targets) else None
