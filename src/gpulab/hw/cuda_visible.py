"""CUDA_VISIBLE_DEVICES read one way: the entries it lists, what they mean as NVML indices, the GPUs it leaves."""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpulab.records import GpuInfo


def entries(value: str | None = None, *, from_env: bool = True) -> list[str] | None:
    """The entries of a CUDA_VISIBLE_DEVICES value (the environment's when `value` is None), or None when unset.

    Entries are GPU indices ("0"), UUIDs ("GPU-...", "MIG-...") or anything else CUDA would stop at; empty entries
    (a trailing comma) are dropped.
    """
    if value is None and from_env:
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def nvml_indices_by_number(ordinals: Sequence[int], value: str | None = None) -> list[int] | None:
    """NVML indices of CUDA ordinals through an all-numeric CUDA_VISIBLE_DEVICES; None when it cannot tell."""
    visible = entries(value)
    if visible and all(v.isdigit() for v in visible) and max(ordinals, default=0) < len(visible):
        return [int(visible[k]) for k in ordinals]
    return None


def visible_to_cuda(gpus: list[GpuInfo], env_value: str | None) -> list[GpuInfo]:
    """The GPUs a CUDA_VISIBLE_DEVICES value leaves visible (indices in PCI bus order, or UUIDs), in its order."""
    listed = entries(env_value, from_env=False)
    if listed is None:
        return list(gpus)
    out = []
    for entry in listed:
        match = next((g for g in gpus if g.uuid == entry or (entry.isdigit() and g.index == int(entry))), None)
        if match is None:  # CUDA stops at the first entry it cannot resolve
            break
        out.append(match)
    return out
