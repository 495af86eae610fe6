"""Verdicts shared by the torch and TensorFlow rows of validate/: GPU over CPU, scaling efficiency, isolation."""

from __future__ import annotations

from gpulab.launch.advice import gpu_busy_advice
from gpulab.report.model import Check, Result, Threshold
from gpulab.validation.expectations import MIN_GPU_OVER_ALL_CPU
from gpulab.validation.live import Placement
from gpulab.validation.session import Lab


def cpu_row(result: Result) -> Check:
    """A CPU throughput row: it passes when it is a usable number (the speedup checks judge it later)."""
    return Check(
        f"speedup.cpu[{result.framework},{result.workload},{result.n}]",
        "pass" if result.value > 0 else "error",
        f"{result.framework} {result.workload} on {result.n} CPU thread(s): {result.value:.3g} {result.unit}",
        {"value": result.value, "threads": result.n},
    )


def gpu_over_cpu(lab: Lab, gpu: Result, cpu_rows: list[Result]) -> Check:
    """One GPU against all CPU threads for the same workload and framework (the CPU rows of that run)."""
    cpu = [r for r in cpu_rows if (r.workload, r.framework, r.launcher) == (gpu.workload, gpu.framework, "cpu")]
    # The CPU rows of the GPU's own precision when there are some, else the fp32 ones (as report/scaling.py pairs them).
    cpu = [r for r in cpu if r.precision == gpu.precision] or [r for r in cpu if r.precision == "fp32"]
    best = max(cpu, key=lambda r: r.n, default=None)
    name = f"speedup.gpu_over_cpu[{gpu.framework},{gpu.workload}]"
    if best is None or best.value <= 0:
        return Check(name, "skip", "no CPU row to compare with")
    ratio = gpu.value / best.value
    bound = lab.report.add_threshold(MIN_GPU_OVER_ALL_CPU)
    one = next((r for r in cpu if r.n == 1), None)
    evidence = {
        "gpu": gpu.value,
        "cpu_all": best.value,
        "cpu_threads": best.n,
        "cpu_1": one.value if one else None,
        "ratio": ratio,
    }
    message = (
        f"{gpu.framework} {gpu.workload}: one GPU {gpu.value:.4g} {gpu.unit} ({gpu.precision}) = {ratio:.1f}x all "
        f"{best.n} CPU threads ({best.precision})"
    )
    if one is not None and one.value > 0:
        message += f", {gpu.value / one.value:.0f}x one thread"
    if ratio >= MIN_GPU_OVER_ALL_CPU.value:
        return Check(name, "pass", message, evidence, threshold=bound)
    return Check(
        name,
        "fail",
        f"{message}; below {MIN_GPU_OVER_ALL_CPU.value:g}x. {likely_cause(gpu)}",
        evidence,
        threshold=bound,
    )


def likely_cause(result: Result) -> str:
    """Read the run's telemetry for the usual reasons a GPU falls short."""
    tel = result.telemetry
    if tel is None or not tel.per_gpu:
        return "No telemetry: check the GPU health checks."
    gpu = tel.per_gpu[0]
    causes = []
    busy = gpu_busy_advice(result)
    if busy:
        causes.append(busy)
    throttles = set(gpu.get("throttle_reasons") or []) - {"gpu_idle", "applications_clocks_setting"}
    if throttles:
        causes.append("clocks throttled by " + ", ".join(sorted(throttles)))
    return "Likely: " + "; ".join(causes) if causes else "Telemetry shows a busy, unthrottled GPU: check the PCIe link."


def efficiency(lab: Lab, name: str, label: str, speedup: float, n: int, threshold: Threshold | None) -> Check:
    eff = speedup / n
    evidence = {"n": n, "speedup": speedup, "efficiency": eff}
    message = f"{label}: {speedup:.2f}x, efficiency {eff:.1%}"
    if threshold is None:
        return Check(name, "pass", message + " (measured for comparison only)", evidence)
    bound = lab.report.add_threshold(threshold)
    if eff >= threshold.value:
        return Check(name, "pass", message, evidence, threshold=bound)
    hint = (
        "no NVLink between the GPUs: gradients cross PCIe and the host"
        if not lab.nvlink
        else "check the all-reduce probe and P2P, and the per-GPU telemetry for a throttled GPU"
    )
    return Check(name, "fail", f"{message}; below {threshold.value:.0%}. Likely: {hint}", evidence, threshold=bound)


def isolation(placements: list[Placement], framework: str) -> Check:
    """Each child pinned with CUDA_VISIBLE_DEVICES saw one GPU and allocated on its own GPU only."""
    name = f"isolation.cuda_visible_devices[{framework}]"
    evidence = {
        f"gpu{p.gpu.index}": {"cuda_sees": p.cuda_sees, "allocated_on": p.found_on, "error": p.error}
        for p in placements
    }
    errors = [p.error for p in placements if p.error]
    if errors:
        return Check(name, "error", "; ".join(errors), evidence)
    if all(not p.found_on for p in placements):
        return Check(
            name,
            "skip",
            "NVML lists no per-process memory here (a PID namespace hides the processes): cannot judge isolation",
            evidence,
        )
    leaks = [p for p in placements if not p.isolated]
    if leaks:
        detail = "; ".join(
            f"pinned to GPU {p.gpu.index}, {framework} saw {p.cuda_sees} device(s) and allocated on GPUs {p.found_on}"
            for p in leaks
        )
        fix = "set CUDA_VISIBLE_DEVICES before the framework initialises CUDA (in the launcher, not in the script)"
        if framework == "tensorflow":
            fix += ", and enable memory growth"
        return Check(name, "fail", f"{detail}. Fix: {fix}", evidence)
    return Check(
        name, "pass", f"{len(placements)} pinned {framework} processes each allocated on their own GPU only", evidence
    )
