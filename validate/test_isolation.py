"""Isolation: a process pinned with CUDA_VISIBLE_DEVICES sees and allocates on its own GPU only.

The seeds' trouble: a framework pinned to one card took memory on all four.
"""

import pytest

from gpulab.report.model import Check
from gpulab.validation.live import pinned_allocations

pytest.importorskip("torch", reason="torch is not installed: install gpulab[torch] to run the isolation check")


@pytest.mark.gpu
@pytest.mark.live
def test_pinned_process_allocates_on_its_gpu_only(lab, verdict):
    all_gpus = lab.fingerprint.gpus
    placements = pinned_allocations(lab.gpus, all_gpus)
    evidence = {
        f"gpu{p.gpu.index}": {"cuda_sees": p.cuda_sees, "allocated_on": p.found_on, "error": p.error}
        for p in placements
    }
    if any(p.error for p in placements):
        problems = "; ".join(p.error for p in placements if p.error)
        verdict(Check("isolation.cuda_visible_devices", "error", problems, evidence))
    if all(not p.found_on for p in placements):
        verdict(
            Check(
                "isolation.cuda_visible_devices",
                "skip",
                "NVML lists no per-process memory here (a PID namespace hides the processes): cannot judge isolation",
                evidence,
            )
        )
    leaks = [p for p in placements if not p.isolated]
    if leaks:
        detail = "; ".join(
            f"pinned to GPU {p.gpu.index}, CUDA saw {p.cuda_sees} device(s) and it allocated on GPUs {p.found_on}"
            for p in leaks
        )
        verdict(
            Check(
                "isolation.cuda_visible_devices",
                "fail",
                f"{detail}. Fix: set CUDA_VISIBLE_DEVICES before the framework initialises CUDA (in the launcher, "
                "not in the script), and for TensorFlow enable memory growth",
                evidence,
            )
        )
    verdict(
        Check(
            "isolation.cuda_visible_devices",
            "pass",
            f"{len(placements)} pinned processes each allocated on their own GPU only",
            evidence,
        )
    )
