"""TensorFlow: the build sees the GPUs, a pinned TF process allocates on its own GPU only, and TF rows for the
speedup (one CPU thread, all threads, one GPU) and MirroredStrategy scaling. Every TF run is a fresh process."""

import os

import pytest

from gpulab.checks import health
from gpulab.names import Framework
from gpulab.report import spread
from gpulab.validation import verdicts
from gpulab.validation.expectations import SPEEDUP_WORKLOADS, cpu_config, mirrored_floor, speedup_config

pytest.importorskip("tensorflow", reason="TensorFlow is not installed: install gpulab[tf] to run the TensorFlow rows")

from gpulab.launch.tf_launch import run_mirrored

TF = Framework.TENSORFLOW


@pytest.mark.gpu
@pytest.mark.live
def test_tensorflow_sees_gpus(lab, verdict):
    verdict(health.framework_sees_gpus(lab.fingerprint, "tensorflow", len(lab.gpus)))


@pytest.mark.live  # this machine's CPU: not the captured host's
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
@pytest.mark.parametrize("threads", ["1", "all"])
def test_tf_cpu(lab, verdict, cpu_rows, workload, threads, workload_size):
    n = 1 if threads == "1" else (os.cpu_count() or 1)
    (result,) = cpu_rows(cpu_config(speedup_config(workload, workload_size, TF, lab.precision_plan)), TF, threads=n)
    verdict(verdicts.cpu_row(result))


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
def test_tf_gpu_over_cpu(lab, verdict, one_gpu_baseline, cpu_rows, workload, workload_size):
    cfg = speedup_config(workload, workload_size, TF, lab.precision_plan)
    result = one_gpu_baseline(cfg, TF)
    verdict(verdicts.gpu_over_cpu(lab, result, cpu_rows(cpu_config(cfg), TF)))


@pytest.mark.multi_gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", ("resnet50", "cifar10"))
def test_tf_mirrored_scaling(lab, verdict, one_gpu_baseline, workload, workload_size):
    n = len(lab.gpus)
    cfg = speedup_config(workload, workload_size, TF, lab.precision_plan)
    one = one_gpu_baseline(cfg, TF)  # the speedup test's one-GPU row when it ran first, else measured now
    result = run_mirrored(cfg, n)
    lab.record_result(result)
    name = f"scaling.tf_mirrored[{workload},{n}]"
    label = f"TensorFlow {workload} MirroredStrategy: {result.value:.4g} {result.unit} on {n} GPUs vs {one.value:.4g}"
    eff = spread.of_ratio(spread.windows_of(result), spread.windows_of(one), 1 / n, "fraction")
    verdict(verdicts.efficiency(lab, name, label, eff, n, mirrored_floor(lab.nvlink), result))
