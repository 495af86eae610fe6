"""Speedup: each workload on one CPU thread, on all CPU threads, and on one GPU (the seeds' 45x / 270x question)."""

import os

import pytest

from gpulab.launch import run_cpu, run_gpu
from gpulab.validation import verdicts
from gpulab.validation.expectations import SPEEDUP_WORKLOADS, TIER_SIZE, cpu_config
from gpulab.workloads.base import RunConfig

pytest.importorskip("torch", reason="torch is not installed: install gpulab[torch] to run the workloads")


@pytest.fixture(scope="module")
def size(lab):
    if lab.options.tier not in TIER_SIZE:
        pytest.skip("workloads run in --tier standard and full")
    return TIER_SIZE[lab.options.tier]


def config(workload, size):
    precision = "tf32" if workload == "style_transfer" else "bf16"
    return RunConfig(workload, precision=precision, channels_last=workload != "mnist", size=size)


@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
@pytest.mark.parametrize("threads", ["1", "all"])
def test_cpu(lab, verdict, workload, threads, size):
    n = 1 if threads == "1" else (os.cpu_count() or 1)
    result = run_cpu(cpu_config(config(workload, size)), threads=n)
    lab.record_result(result)
    verdict(verdicts.cpu_row(result))


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
def test_gpu_over_cpu(lab, verdict, workload, size):
    result = run_gpu(config(workload, size), 0)
    lab.record_result(result)
    verdict(verdicts.gpu_over_cpu(lab, result))
