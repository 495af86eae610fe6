"""Speedup: each workload on one CPU thread, on all CPU threads, and on one GPU (the seeds' 45x / 270x question)."""

import os

import pytest

from gpulab.launch import run_cpu, run_gpu
from gpulab.report.model import Check
from gpulab.validation.expectations import MIN_GPU_OVER_ALL_CPU, SPEEDUP_WORKLOADS, TIER_SIZE, cpu_config
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
    ok = result.value > 0
    verdict(
        Check(
            f"speedup.cpu[{workload},{result.n}]",
            "pass" if ok else "error",
            f"{workload} on {result.n} CPU thread(s): {result.value:.3g} {result.unit}",
            {"value": result.value, "threads": result.n},
        )
    )


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("workload", SPEEDUP_WORKLOADS)
def test_gpu_over_cpu(lab, verdict, workload, size):
    result = run_gpu(config(workload, size), 0)
    lab.record_result(result)
    cpu = [r for r in lab.report.results if r.workload == workload and r.launcher == "cpu"]
    best = max(cpu, key=lambda r: r.n, default=None)
    name = f"speedup.gpu_over_cpu[{workload}]"
    if best is None:
        verdict(Check(name, "skip", "no CPU row to compare with (run the whole file)"))
    ratio = result.value / best.value
    bound = lab.report.add_threshold(MIN_GPU_OVER_ALL_CPU)
    one = next((r for r in cpu if r.n == 1), None)
    evidence = {
        "gpu": result.value,
        "cpu_all": best.value,
        "cpu_threads": best.n,
        "cpu_1": one.value if one else None,
        "ratio": ratio,
    }
    message = f"{workload}: one GPU {result.value:.4g} {result.unit} = {ratio:.1f}x all {best.n} CPU threads" + (
        f", {result.value / one.value:.0f}x one thread" if one else ""
    )
    if ratio >= MIN_GPU_OVER_ALL_CPU.value:
        verdict(Check(name, "pass", message, evidence, threshold=bound))
    verdict(
        Check(
            name,
            "fail",
            f"{message}; below {MIN_GPU_OVER_ALL_CPU.value:g}x. {likely_cause(result)}",
            evidence,
            threshold=bound,
        )
    )


def likely_cause(result):
    """Read the run's telemetry for the usual reasons a GPU falls short."""
    tel = result.telemetry
    if tel is None or not tel.per_gpu:
        return "No telemetry: check the GPU health checks above."
    gpu = tel.per_gpu[0]
    causes = []
    if (gpu.get("util_mean") or 100) < 60:
        causes.append(
            f"GPU busy only {gpu['util_mean']:.0f} % of the time: loader- or launch-bound "
            "(more DataLoader workers, pinned memory, a larger batch)"
        )
    throttles = set(gpu.get("throttle_reasons") or []) - {"gpu_idle", "applications_clocks_setting"}
    if throttles:
        causes.append("clocks throttled by " + ", ".join(sorted(throttles)))
    return "Likely: " + "; ".join(causes) if causes else "Telemetry shows a busy, unthrottled GPU: check the PCIe link."
