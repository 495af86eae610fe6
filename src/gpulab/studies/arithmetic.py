"""How close a study's GPU runs came to their GPU's arithmetic limit: one line for the study's report.

A run's work is its iterations times the operations of one iteration, which torch's FlopCounterMode counted from
the network's shapes on the worker (flops_per_iteration); its rate is that work over its timed loop (a batched
run's share of its batch's loop). The median run's rate is set against the datasheet's dense rate of its GPU at the
precision it ran in (gpulab.compat's matrix), with the time per run batched and one at a time beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from gpulab import names


def _rates(runs: Sequence[Any]) -> list[tuple[Any, float, float]]:
    """(run, work in FLOP, rate in FLOP/s) of the successful GPU runs that recorded their work."""
    out = []
    for r in runs:
        if r.status != "ok" or not r.flops_per_iteration or not r.timed_s or not r.steps_run:
            continue
        if not (r.device or "").startswith("gpu"):
            continue
        work = r.flops_per_iteration * r.steps_run
        out.append((r, work, work / r.timed_s))
    return out


def datasheet_tflops(gpu_name: str | None, precision: names.Precision | None) -> float | None:
    """The dense rate of `gpu_name` at `precision` from the compat matrix; None where either is unknown."""
    from gpulab import compat

    spec = compat.gpu_by_name(gpu_name) if gpu_name else None
    if spec is None or precision is None:
        return None
    value = getattr(spec, precision.spec_field, None)
    return float(value) if isinstance(value, (int, float)) else None


def work_line(runs: Sequence[Any]) -> str | None:
    """ "Work per run 380 TFLOP (…); 150 TFLOP/s per GPU (median run), 30 % of the NVIDIA H200's dense TF32 rate
    (494.7 TFLOP/s); batched 32 per batch: 2.55 s per run; one at a time: 2.90 s" — None without counted GPU runs."""
    rated = _rates(runs)
    if not rated:
        return None
    work = statistics.median(w for _, w, _ in rated)
    per_iteration = statistics.median(r.flops_per_iteration for r, _, _ in rated)
    rate = statistics.median(x for _, _, x in rated)
    text = (
        f"Work per run {work / 1e12:.3g} TFLOP ({per_iteration / 1e9:.4g} GFLOP per iteration, torch's FLOP "
        f"counter); {rate / 1e12:.3g} TFLOP/s per GPU (median run)"
    )
    gpu = next((r.gpu_name for r, _, _ in rated if r.gpu_name), None)
    precision = next((r.precision for r, _, _ in rated if r.precision), None)
    peak = datasheet_tflops(gpu, precision)
    if peak and precision is not None:
        dense = precision.value.upper()
        text += f", {100 * rate / 1e12 / peak:.0f} % of the {gpu}'s dense {dense} rate ({peak:g} TFLOP/s)"
    elif gpu:
        text += f" (no datasheet rate for the {gpu} at {precision})"
    batched = [r for r, _, _ in rated if (r.batch_runs or 1) > 1]
    alone = [r for r, _, _ in rated if (r.batch_runs or 1) <= 1]
    parts = []
    if batched:
        sizes = sorted({int(r.batch_runs) for r in batched})
        size = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"
        parts.append(f"batched {size} per batch: {statistics.median(r.timed_s for r in batched):.3g} s per run")
    if alone:
        parts.append(f"one at a time: {statistics.median(r.timed_s for r in alone):.3g} s per run")
    return text + "; " + "; ".join(parts) if parts else text
