"""How a workload runs: one typed `Launch`, one backend per framework, and the launchers behind them.

    from gpulab.launch import Launch, start
    from gpulab.names import Precision
    from gpulab.records import RunConfig

    result = start(Launch(RunConfig("resnet50", precision=Precision.BF16, batch=256), launcher=Launcher.DDP, gpus=4))

`start` asks the framework's backend (gpulab.launch.backends: torch, tensorflow, or one a package declares) to
run the launcher, or runs a sweep of the backend's worker processes. The torch launchers are also callable
directly (run_cpu, run_gpu, run_ddp, run_dataparallel, run_sweep).

Every launcher records throughput in samples/s (all processes' samples / the slowest process's timed seconds),
the batch policy (per_device or global) with the per-device and global batch, the linear-scaling-rule learning
rate when asked, the threads, the workload's own facts and, on GPUs, an NVML telemetry summary.
"""

from gpulab.launch.ddp import run_ddp, run_ddp_pair
from gpulab.launch.dispatch import start
from gpulab.launch.local import run_cpu, run_dataparallel, run_gpu
from gpulab.launch.planning import BatchPlan, plan_batch
from gpulab.launch.spec import Launch
from gpulab.launch.sweep import run_sweep

__all__ = [
    "BatchPlan",
    "Launch",
    "plan_batch",
    "run_cpu",
    "run_dataparallel",
    "run_ddp",
    "run_ddp_pair",
    "run_gpu",
    "run_sweep",
    "start",
]

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = (
    "advice",
    "commands",
    "dispatch",
    "local",
    "measuring",
    "planning",
    "progress",
    "spec",
    "torchrun",
)
