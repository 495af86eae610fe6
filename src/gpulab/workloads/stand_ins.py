"""What in a run stands in for the real thing: random weights where the published setup starts from ImageNet's,
synthetic tensors, scikit-learn's 8×8 digits or generated images where a data set belongs.

A run records the list (Result.params["stand_ins"], a study row's `stand_ins`); every report that shows the run
names them, so a loss, an accuracy or an image is never read as the real experiment's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulab.workloads.registry import REGISTRY, Workload

GENERATED_FOLDER = "generated-data"  # gpulab.studies.generated.FOLDER


def _random_start(declared: Workload, facts: Mapping[str, Any]) -> bool:
    """Random weights where the run recorded them, else where its start parameter (recorded by older runs
    instead) chose none."""
    weights = facts.get("weights")
    if isinstance(weights, str):
        return weights == "random"
    if declared.start_param is None:
        return False
    params = facts.get("workload_params")
    chosen = (params if isinstance(params, Mapping) else facts).get(declared.start_param)
    return chosen in (None, "none")


def stand_ins(workload: str, facts: Mapping[str, Any]) -> list[str]:
    """The stand-ins of one run of `workload`, in words, from its recorded facts (weights, data, content, style,
    workload_params); empty when it ran on the real thing."""
    out: list[str] = []
    declared = REGISTRY.get(workload)
    if declared is None:
        return out
    if declared.imagenet_start and _random_start(declared, facts):
        out.append(f"random {declared.imagenet_start} weights")
    if declared.data_set:
        data, real = facts.get("data"), declared.data_set
        text = str(data) if data is not None else "synthetic"
        if text == "synthetic":
            out.append(f"synthetic tensors for {real}")
        elif text == "digits":
            out.append(f"scikit-learn's 8×8 digits for {real}")
        elif GENERATED_FOLDER in text:
            out.append(f"generated images for {real}")
    if declared.optimises_input:
        pictures = [facts.get("content"), *(facts.get("style") or [])]
        if any(isinstance(p, str) and p.startswith("generated:") for p in pictures):
            out.append("generated pictures for photos")
    return out
