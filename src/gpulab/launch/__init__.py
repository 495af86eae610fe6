"""How a workload runs: cpu, gpu, ddp, dataparallel and sweep launchers, each returning a report Result.

    from gpulab.launch import run_cpu, run_ddp
    from gpulab.workloads.base import RunConfig

    result = run_ddp(RunConfig("resnet50", precision="bf16", batch=256, size="standard"), 4)

Every launcher records throughput in samples/s (all processes' samples / the slowest process's timed seconds),
the batch policy (per_device or global) with the per-device and global batch, the linear-scaling-rule learning
rate when asked, the threads, the workload's own facts and, on GPUs, an NVML telemetry summary.
"""

from gpulab.launch.common import BatchPlan, plan_batch
from gpulab.launch.ddp import run_ddp
from gpulab.launch.local import run_cpu, run_dataparallel, run_gpu
from gpulab.launch.sweep import run_sweep

__all__ = ["BatchPlan", "plan_batch", "run_cpu", "run_dataparallel", "run_ddp", "run_gpu", "run_sweep"]
