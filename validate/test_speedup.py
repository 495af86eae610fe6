"""Speedup: each workload on one CPU thread, on all CPU threads, and on one GPU (the seeds' 45x / 270x question)."""

import os

import pytest

from gpulab.validation import verdicts
from gpulab.validation.expectations import SPEEDUP_WORKLOADS, cpu_config, speedup_config

pytest.importorskip("torch", reason="torch is not installed: install gpulab[torch] to run the workloads")


@pytest.mark.live  # this machine's CPU: not the captured host's
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
@pytest.mark.parametrize("threads", ["1", "all"])
def test_cpu(verdict, cpu_rows, workload, threads, workload_size):
    n = 1 if threads == "1" else (os.cpu_count() or 1)
    (result,) = cpu_rows(cpu_config(speedup_config(workload, workload_size)), threads=n)  # shared with the GPU row
    verdict(verdicts.cpu_row(result))


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
def test_gpu_over_cpu(lab, verdict, one_gpu_baseline, cpu_rows, workload, workload_size):
    cfg = speedup_config(workload, workload_size)
    result = one_gpu_baseline(cfg)  # recorded once, shared with scaling
    verdict(verdicts.gpu_over_cpu(lab, result, cpu_rows(cpu_config(cfg))))
