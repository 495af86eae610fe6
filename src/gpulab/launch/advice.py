"""What a run's telemetry says about a GPU that waited: one sentence with the cause and what to try."""

from __future__ import annotations

import os

from gpulab.records import Result

BUSY_FLOOR_PCT = 60  # a training step that keeps the GPU busy less than this is bound by something else


def gpu_busy_advice(result: Result) -> str | None:
    """Why the GPU was busy less than it should be in this run, and what to try; None when it was busy."""
    tel = result.telemetry
    if tel is None or not tel.per_gpu:
        return None
    utils = [float(g.util_mean) for g in tel.per_gpu if g.util_mean is not None]
    if not utils or min(utils) >= BUSY_FLOOR_PCT:
        return None
    util = min(utils)
    params = result.params
    if params.get("data"):
        workers = params.get("num_workers")
        cores = os.cpu_count() or 1
        more = min(cores, max(2 * (workers or 1), 8))
        return (
            f"GPU busy only {util:.0f} % of the timed loop: the input pipeline ({workers} DataLoader workers) "
            f"cannot keep up; try --num-workers {more} (this host has {cores} CPU cores), pinned memory, "
            "or a larger --batch"
        )
    return (
        f"GPU busy only {util:.0f} % of the timed loop: launch-bound (small kernels, host overhead); "
        "try a larger --batch, --channels-last, or more DataLoader workers with real data"
    )
