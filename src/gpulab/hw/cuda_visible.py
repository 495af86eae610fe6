"""CUDA_VISIBLE_DEVICES read one way: the entries it lists, and what they mean as NVML indices."""

from __future__ import annotations

import os
from collections.abc import Sequence


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
