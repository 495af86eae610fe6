"""TensorFlow: the build sees the GPUs, a pinned TF process allocates on its own GPU only, and TF rows for the
speedup (one CPU thread, all threads, one GPU) and MirroredStrategy scaling. Every TF run is a fresh process."""

import os

import pytest

from gpulab import health
from gpulab.report.model import Check
from gpulab.validation import verdicts
from gpulab.validation.expectations import SPEEDUP_WORKLOADS, cpu_config, mirrored_floor, speedup_config

pytest.importorskip("tensorflow", reason="TensorFlow is not installed: install gpulab[tf] to run the TensorFlow rows")

from gpulab.launch.tf_launch import run_mirrored, run_tf_cpu, run_tf_gpu


@pytest.mark.gpu
@pytest.mark.live
def test_tensorflow_sees_gpus(lab, verdict):
    verdict(health.framework_sees_gpus(lab.fingerprint, "tensorflow", len(lab.gpus)))


@pytest.mark.live  # this machine's CPU: not the captured host's
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
@pytest.mark.parametrize("threads", ["1", "all"])
def test_tf_cpu(lab, verdict, workload, threads, workload_size):
    n = 1 if threads == "1" else (os.cpu_count() or 1)
    result = run_tf_cpu(cpu_config(speedup_config(workload, workload_size, "tensorflow")), n)
    lab.record_result(result)
    verdict(verdicts.cpu_row(result))


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
def test_tf_gpu_over_cpu(lab, verdict, workload, workload_size):
    result = run_tf_gpu(speedup_config(workload, workload_size, "tensorflow"), 0)
    lab.record_result(result)
    verdict(verdicts.gpu_over_cpu(lab, result))


@pytest.mark.multi_gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", ("resnet50", "cifar10"))
def test_tf_mirrored_scaling(lab, verdict, workload, workload_size):
    n = len(lab.gpus)
    result = run_mirrored(speedup_config(workload, workload_size, "tensorflow"), n)
    lab.record_result(result)
    one = next(
        (
            r
            for r in lab.report.results
            if r.workload == workload and r.framework == "tensorflow" and r.launcher == "gpu"
        ),
        None,
    )
    name = f"scaling.tf_mirrored[{workload},{n}]"
    if one is None:
        verdict(Check(name, "skip", "no one-GPU TensorFlow row to compare with (run the whole file)"))
    label = f"TensorFlow {workload} MirroredStrategy: {result.value:.4g} {result.unit} on {n} GPUs vs {one.value:.4g}"
    verdict(verdicts.efficiency(lab, name, label, result.value / one.value, n, mirrored_floor(lab.nvlink)))
