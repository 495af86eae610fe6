"""Verdicts shared by the torch and TensorFlow rows of validate/: GPU over CPU, scaling efficiency, isolation."""

from __future__ import annotations

from gpulab.launch.advice import gpu_busy_advice
from gpulab.names import Launcher, Precision
from gpulab.records import Check, GpuTelemetry, Result, Spread, Threshold
from gpulab.report import spread
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
    cpu = [r for r in cpu_rows if (r.workload, r.framework, r.launcher) == (gpu.workload, gpu.framework, Launcher.CPU)]
    # The CPU rows of the GPU's own precision when there are some, else the fp32 ones (as report/scaling.py pairs them).
    cpu = [r for r in cpu if r.precision == gpu.precision] or [r for r in cpu if r.precision == Precision.FP32]
    best = max(cpu, key=lambda r: r.n, default=None)
    name = f"speedup.gpu_over_cpu[{gpu.framework},{gpu.workload}]"
    if best is None or best.value <= 0:
        return Check(name, "skip", "no CPU row to compare with")
    interval = spread.of_ratio(spread.windows_of(gpu), spread.windows_of(best), 1.0, "x")
    ratio = interval.median
    bound = lab.report.add_threshold(MIN_GPU_OVER_ALL_CPU)
    one = next((r for r in cpu if r.n == 1), None)
    evidence = {
        "gpu": gpu.value,
        "cpu_all": best.value,
        "cpu_threads": best.n,
        "cpu_1": one.value if one else None,
        "ratio": ratio,
        "ratio_interval": [round(interval.low, 3), round(interval.high, 3)],
    }
    message = (
        f"{gpu.framework} {gpu.workload}: one GPU {gpu.value:.4g} {gpu.unit} ({gpu.precision}) = {ratio:.1f}x all "
        f"{best.n} CPU threads ({best.precision})"
    )
    if one is not None and one.value > 0:
        message += f", {gpu.value / one.value:.0f}x one thread"
    where = spread.position(interval, MIN_GPU_OVER_ALL_CPU.value)
    if where == "above":
        return Check(name, "pass", message, evidence, threshold=bound)
    if where == "straddles":
        return Check(
            name, "marginal", f"{message}: its interval {spread.text(interval)} straddles the bound", evidence, bound
        )
    return Check(
        name,
        "fail",
        f"{message}; below {MIN_GPU_OVER_ALL_CPU.value:g}x. {likely_cause(gpu)}",
        evidence,
        threshold=bound,
    )


def _throttles(gpu: GpuTelemetry) -> list[str]:
    """A GPU's telemetry throttle reasons that slow work (idle and an application clock setting do not)."""
    return sorted(set(gpu.throttle_reasons) - {"gpu_idle", "applications_clocks_setting"})


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
    throttles = _throttles(gpu)
    if throttles:
        causes.append("clocks throttled by " + ", ".join(throttles))
    return "Likely: " + "; ".join(causes) if causes else "Telemetry shows a busy, unthrottled GPU: check the PCIe link."


def efficiency(
    lab: Lab, name: str, label: str, eff: Spread, n: int, threshold: Threshold | None, many: Result | None = None
) -> Check:
    """Scaling efficiency (N-GPU throughput over N x one GPU) with its interval, judged by where the interval lies.

    Above 100 % beyond the noise (the whole interval over 1) is a measurement fault: one side paid costs the other
    did not. It is an error, never a pass."""
    evidence = {
        "n": n,
        "speedup": eff.median * n,
        "efficiency": eff.median,
        "interval": [round(eff.low, 4), round(eff.high, 4)],
        "windows": len(eff.windows),
        "method": eff.method,
    }
    shown = spread.text(eff, lambda v: f"{v:.1%}")
    message = f"{label}: {eff.median * n:.2f}x, efficiency {shown}"
    if eff.low > 1.0:
        evidence["superlinear"] = True
        return Check(
            name,
            "error",
            f"{message}: above 100 % beyond its noise, a measurement fault (one side paid start-up or cache costs the "
            "other did not), not a verdict on the GPUs; run the suite again, and report it if it repeats",
            evidence,
        )
    if threshold is None:
        return Check(name, "pass", message + " (measured for comparison only)", evidence)
    bound = lab.report.add_threshold(threshold)
    where = spread.position(eff, threshold.value)
    if where == "above":
        return Check(name, "pass", message, evidence, threshold=bound)
    if where == "straddles":
        return Check(
            name, "marginal", f"{message}: its interval straddles the {threshold.value:.0%} floor", evidence, bound
        )
    return Check(
        name,
        "fail",
        f"{message}; below {threshold.value:.0%}. {scaling_hint(lab, many)}",
        evidence,
        threshold=bound,
    )


# What a scaling shortfall can come from, as the report's own checks name it (check-name prefix, what it tests).
SCALING_SUSPECTS = (
    ("probe.allreduce", "the all-reduce bandwidth"),
    ("probe.p2p", "peer access between the GPUs"),
    ("probe.gpus_alike", "every GPU as fast as its siblings"),
)


def scaling_hint(lab: Lab, many: Result | None) -> str:
    """What this report rules out for a scaling shortfall (checks that passed) and what is left: never a check
    that passed. The per-GPU telemetry of the N-GPU row names a throttled or idle GPU."""
    ruled_out: list[str] = []
    left: list[str] = []
    if not lab.nvlink:
        left.append("no NVLink between the GPUs: gradients cross PCIe and the host")
    for prefix, what in SCALING_SUSPECTS:
        found = [c for c in lab.report.checks if c.name.startswith(prefix) and c.status != "skip"]
        bad = [c for c in found if c.status != "pass"]
        if bad:
            left.append(f"{what} ({', '.join(f'{c.name} {c.status}' for c in bad)})")
        elif found:
            ruled_out.append(f"{what} ({', '.join(c.name for c in found)} passed)")
        else:
            left.append(f"{what} (not measured in this run)")
    tel = many.telemetry if many is not None else None
    for gpu in tel.per_gpu if tel is not None else []:
        throttles = _throttles(gpu)
        if throttles:
            left.append(f"GPU {gpu.index} throttled by {', '.join(throttles)}")
        util = gpu.util_mean
        if isinstance(util, (int, float)) and util < 80:
            left.append(f"GPU {gpu.index} only {util:.0f} % busy: the input pipeline or the host")
    reason = lab.host_contention()
    if reason:
        left.append(f"the host contended: {reason}")
    text = ""
    if ruled_out:
        text += "Ruled out by this report: " + "; ".join(ruled_out) + ". "
    return text + ("Left: " + "; ".join(left) if left else "Left: the per-GPU telemetry of the N-GPU row")


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
