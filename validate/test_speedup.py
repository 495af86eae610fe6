"""Speedup: each workload on one CPU thread, on all CPU threads, and on one GPU (the seeds' 45x / 270x question)."""

import os

import pytest

from gpulab.names import Framework
from gpulab.validation import known_good, remeasure, verdicts
from gpulab.validation.baselines import measure_on_first_gpu
from gpulab.validation.expectations import SPEEDUP_WORKLOADS, cpu_config, speedup_config

pytest.importorskip("torch", reason="torch is not installed: install gpulab[torch] to run the workloads")


@pytest.mark.live  # this machine's CPU: not the captured host's
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
@pytest.mark.parametrize("threads", ["1", "all"])
def test_cpu(lab, verdict, cpu_rows, workload, threads, workload_size):
    n = 1 if threads == "1" else (os.cpu_count() or 1)
    cfg = speedup_config(workload, workload_size, plan=lab.precision_plan)
    (result,) = cpu_rows(cpu_config(cfg), threads=n)  # shared with the GPU row
    verdict(verdicts.cpu_row(result))


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
def test_gpu_over_cpu(lab, verdict, one_gpu_baseline, cpu_rows, workload, workload_size):
    cfg = speedup_config(workload, workload_size, plan=lab.precision_plan)
    result = one_gpu_baseline(cfg)  # recorded once, shared with scaling
    verdict(verdicts.gpu_over_cpu(lab, result, cpu_rows(cpu_config(cfg))))


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
def test_gpu_against_known_good(lab, verdict, one_gpu_baseline, workload, workload_size):
    """The one-GPU row against the known-good row of this GPU model (gpulab/validation/known_good.json)."""
    cfg = speedup_config(workload, workload_size, plan=lab.precision_plan)
    result = one_gpu_baseline(cfg)
    lab.report.add_threshold(known_good.BOUND)

    def judge():
        model = lab.gpus[0].name if lab.gpus else None
        host = lab.report.fingerprint.get("host")
        return known_good.judge(model, result, host=host, contention=lab.host_contention())

    verdict(remeasure.settle(judge, lambda: remeasure.merge_into(result, measure_on_first_gpu(cfg, Framework.TORCH))))
