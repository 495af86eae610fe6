"""What the speedup and scaling checks expect, with the basis of each number.

The bounds are floors a healthy machine clears with room to spare, not targets: on 4× H200 with NVLink the
plain reference scripts reach 99.6 % DDP efficiency (ResNet50, bf16, 256 per GPU) and a one-process-per-GPU
sweep is limited only by process start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.names import Architecture, Launcher, Precision
from gpulab.records import RunConfig, Threshold
from gpulab.workloads.precision_plan import PrecisionPlan
from gpulab.workloads.registry import REGISTRY

# The plan of the newest GPUs: what the rows follow when there is no GPU to plan for.
NEWEST = PrecisionPlan(Architecture.HOPPER, 9.0, None, None, "newest architecture")

# Workloads the speedup rows run (at the tier's workload size, gpulab.names.Tier.workload_size).
SPEEDUP_WORKLOADS = REGISTRY.names(speedup=True)

# CPU rows run a couple of steps; the big ImageNet-sized models also get a small batch, their registry entry's
# cpu_batch (CPU throughput barely depends on batch beyond a few samples).
CPU_STEPS = 2

MIN_GPU_OVER_ALL_CPU = Threshold(
    name="speedup.gpu_over_all_cpu_threads.min",
    value=2.0,
    unit="x",
    source="gpulab default",
    basis="a GPU that is not 2x a whole CPU on these training steps is starved (loader, PCIe) or throttled; "
    "healthy data-centre GPUs are 10-200x",
)


@dataclass(frozen=True)
class ScalingPlan:
    workload: str
    launcher: Launcher
    precision: Precision
    channels_last: bool
    threshold: Threshold | None  # None: measured for comparison only (DataParallel)
    batch: int | None = None  # the per-GPU batch the threshold was measured at (None: the size's own)
    steps: int | None = None  # timed steps per side (None: the size's own)


# The per-GPU batch the DDP floor's source measured (256/GPU): at 128/GPU and 100 steps the same machine's windows
# spread by +-7 %, and a healthy pair fell below the floor. 48 timed steps a side, in 8 interleaved windows each.
DDP_BOUND_BATCH = 256
DDP_STEPS = 48


def scaling_plans(nvlink: bool, plan: PrecisionPlan | None = None) -> list[ScalingPlan]:
    ddp_floor = 0.9 if nvlink else 0.75
    resnet = (plan or NEWEST).training("resnet50")
    style = (plan or NEWEST).training("style_transfer")
    return [
        ScalingPlan(
            "resnet50",
            Launcher.DDP,
            resnet.precision,
            resnet.channels_last,
            Threshold(
                name="scaling.ddp.min_efficiency",
                value=ddp_floor,
                unit="fraction",
                source="plain DDP script, ResNet50 bf16 256/GPU, 4x H200 NVLink: 18277 vs 4 x 4588 img/s (99.6 %)",
                basis=f"{ddp_floor:.0%} floor " + ("with NVLink" if nvlink else "over PCIe (gradients cross the host)"),
            ),
            batch=DDP_BOUND_BATCH,
            steps=DDP_STEPS,
        ),
        ScalingPlan("resnet50", Launcher.DATAPARALLEL, resnet.precision, resnet.channels_last, None),
        ScalingPlan(
            "style_transfer",
            Launcher.SWEEP,
            style.precision,
            style.channels_last,
            Threshold(
                name="scaling.sweep.min_efficiency",
                value=0.9,
                unit="fraction",
                source="independent runs, one process per GPU: nothing is shared but the host",
                basis="the runs' timed throughput (after start-up and warm-up), all GPUs together against one GPU; "
                "90 % the floor",
            ),
        ),
    ]


def mirrored_floor(nvlink: bool) -> Threshold:
    floor = 0.75 if nvlink else 0.6
    return Threshold(
        name="scaling.tf_mirrored.min_efficiency",
        value=floor,
        unit="fraction",
        source="gpulab default; TensorFlow GPU runs have not been measured on this project's machines",
        basis=f"{floor:.0%}: below DDP's floor, as MirroredStrategy's all-reduce overlaps less with compute",
    )


def speedup_config(workload: str, size: str, framework: str = "torch", plan: PrecisionPlan | None = None) -> RunConfig:
    """How a workload runs on one GPU for the speedup rows: the precision and layout the GPU's plan chooses
    (workloads/precision_plan.py); without a GPU to plan for, the newest architecture's (bf16, TF32 for style
    transfer). TensorFlow is channels_last throughout, so the flag is for torch only.
    """
    choice = (plan or NEWEST).training(workload, framework)
    return RunConfig(workload, precision=choice.precision, channels_last=choice.channels_last, size=size)


def cpu_config(cfg: RunConfig) -> RunConfig:
    """The same workload made short for CPU rows: a small batch, a couple of steps, and fp32.

    fp32 is a CPU's native precision: bf16 autocast on a CPU without bf16 units runs slower than fp32 and would
    flatter the GPU. The speedups pair the GPU row with these fp32 CPU rows (report/scaling.py).
    """
    from dataclasses import replace

    return replace(cfg, batch=_cpu_batch(cfg), steps=CPU_STEPS, warmup=1, precision=Precision.FP32)


def _cpu_batch(cfg: RunConfig) -> int | None:
    declared = REGISTRY.get(cfg.workload)
    return declared.cpu_batch if declared is not None and declared.cpu_batch is not None else cfg.batch
