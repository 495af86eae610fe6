"""How a launcher measures a run: the device flags and memory, the timed loop and its windows, and the Result.

Timing rules (the same as the hand-written reference scripts, so the numbers compare):
- `cfg.warmup` untimed steps first (cuDNN autotuning with `cudnn.benchmark`, allocator growth, clocks);
- the timed loop has no host synchronisation inside it: the loss tensors stay on the device, and the device is
  synchronised (and, under DDP, the ranks meet at a barrier) only before the clock starts and before it stops;
- throughput = samples consumed by every process / the slowest process's time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError
from gpulab.hw import cuda_visible
from gpulab.launch.planning import BatchPlan
from gpulab.launch.progress import Tracker
from gpulab.records import Result, RunConfig, TelemetrySummary
from gpulab.report import spread
from gpulab.report.io import atomic_write_text, jsonable
from gpulab.workloads.base import Session


# -- devices -------------------------------------------------------------------------------------------------
def visible_gpus() -> int:
    """CUDA devices torch can use (0 on a CPU-only torch or machine)."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def gpu_uuid(ordinal: int) -> str | None:
    """The UUID ("GPU-...") of CUDA device `ordinal`, or None when torch cannot tell."""
    import torch

    try:
        uuid = str(torch.cuda.get_device_properties(ordinal).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def nvml_indices(ordinals: Sequence[int]) -> list[int]:
    """NVML indices (what the telemetry sampler and nvidia-smi use) of CUDA devices `ordinals`.

    Matched by UUID; failing that, through an all-numeric CUDA_VISIBLE_DEVICES, else the ordinals themselves.
    """
    from gpulab.telemetry import nvml_indices_for_uuids

    uuids = [gpu_uuid(k) for k in ordinals]
    if all(uuids):
        found = nvml_indices_for_uuids(uuids)
        if found is not None:
            return found
    return cuda_visible.nvml_indices_by_number(ordinals) or list(ordinals)


def sync(devices: Sequence[str]) -> None:
    """Wait for queued work on every CUDA device in `devices` (a no-op on CPU)."""
    import torch

    for device in devices:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)


MEMORY_LIMIT_ENV = "GPULAB_GPU_MEMORY_LIMIT_GIB"  # cap each GPU's memory for torch (a smaller card's size)


def memory_limit_gib() -> float | None:
    """The GPU memory cap this process runs under (GPULAB_GPU_MEMORY_LIMIT_GIB), None when unset."""
    raw = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise GpulabError(f"{MEMORY_LIMIT_ENV}={raw!r} is not a number of GiB; unset it or write e.g. 12") from None
    if not math.isfinite(value) or value <= 0:
        raise GpulabError(f"{MEMORY_LIMIT_ENV}={raw!r} must be a positive number of GiB")
    return value


def set_cuda_flags(device: str) -> None:
    """cuDNN autotuning on for CUDA runs (fixed shapes: tuned once in the warm-up, then fast), and the memory cap.

    The cap (torch's per-process memory fraction) makes a larger GPU behave as a smaller one for allocations:
    a workload that fits under 12 GiB here fits a 12 GB P100. cuDNN's autotuner skips the algorithms whose
    trial workspace does not fit.
    """
    import torch

    if device.startswith("cuda"):
        torch.backends.cudnn.benchmark = True
        limit = memory_limit_gib()
        if limit is not None:
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, limit * 2**30 / total), device)


def _cuda(devices: Sequence[str]) -> list[str]:
    return [d for d in devices if d.startswith("cuda")]


def memory_peaks_mib(devices: Sequence[str], reset: bool = False) -> list[float]:
    """Peak memory torch allocated on each CUDA device of `devices` since the last reset; `reset` starts anew."""
    import torch

    peaks = [round(torch.cuda.max_memory_allocated(d) / 2**20, 1) for d in _cuda(devices)]
    if reset:
        for d in _cuda(devices):
            torch.cuda.reset_peak_memory_stats(d)
    return peaks


def memory_params(devices: Sequence[str], timing: LoopTiming) -> dict[str, Any]:
    """What the work needs in GPU memory: the peak over the timed steps, apart from the warm-up's."""
    if not _cuda(devices):
        return {}
    facts: dict[str, Any] = {
        "max_memory_allocated_mib": memory_peaks_mib(devices),
        "warmup_max_memory_allocated_mib": timing.warmup_peak_mib,
        "memory_measured": MEMORY_MEASURED,
    }
    limit = memory_limit_gib()
    if limit is not None:
        facts["memory_limit_gib"] = limit
    return facts


MEMORY_MEASURED = (
    "peak bytes torch allocated over the timed steps (the work's need); the warm-up's peak, which holds cuDNN "
    "autotuner trial workspaces sized to the free memory, is warmup_max_memory_allocated_mib"
)


# -- the timed loop ------------------------------------------------------------------------------------------
@dataclass
class LoopTiming:
    seconds: float  # timed seconds, this process
    steps: int
    samples: int  # samples this process consumed in the timed steps
    wall_start: float  # time.time() at the start and end of the timed loop (for the telemetry window)
    wall_end: float
    loss: float | None  # the last loss, read once after the clock stopped
    loss_finite: bool | None
    first_loss: float | None = None  # the first step's loss (warm-up included): with `loss`, is it learning?
    warmup_peak_mib: list[float] | None = None  # per CUDA device: peak allocated in the warm-up (autotuner trials)
    # The timed steps in windows, each ended by a synchronisation: seconds and steps of each (gpulab.report.spread)
    window_seconds: list[float] = dataclasses.field(default_factory=list)
    window_steps: list[int] = dataclasses.field(default_factory=list)

    def window_rates(self, samples_per_step: int) -> list[float]:
        """Samples/s of each window (this process)."""
        return [samples_per_step * k / t for k, t in zip(self.window_steps, self.window_seconds, strict=True) if t > 0]


# The timed steps are split into this many windows (fewer when there are fewer steps): the spread of a figure
# comes from its windows, and 8 give a 90 % interval of the median between the 2nd and 7th of them.
WINDOWS = 8


def window_sizes(steps: int, windows: int = WINDOWS) -> list[int]:
    """`steps` split into min(steps, windows) windows of near-equal length."""
    count = max(1, min(steps, windows))
    base, extra = divmod(steps, count)
    return [base + (1 if k < extra else 0) for k in range(count)]


def loss_value(loss: Any) -> float | None:
    if loss is None:
        return None
    try:
        if hasattr(loss, "detach"):
            loss = loss.detach().float().item()
        return float(loss)
    except (TypeError, ValueError, RuntimeError):
        return None


def loss_facts(last: float | None, first: float | None) -> tuple[float | None, bool | None, float | None]:
    """(last loss, whether it is finite, first loss) as a run records them: a NaN or inf loss is None."""
    finite = math.isfinite(last) if last is not None else None
    first_ok = first is not None and math.isfinite(first)
    return (last if finite else None), finite, (first if first_ok else None)


def timed_loop(
    session: Session,
    warmup: int,
    devices: Sequence[str],
    barrier: Callable[[], None] | None = None,
    before_timed: Callable[[], None] | None = None,
    losses: list[Any] | None = None,
    windows: int = WINDOWS,
) -> LoopTiming:
    """Warm up, then time `session.steps` steps in `windows` windows, synchronised (and with `barrier`, aligned
    across processes) at the end of each: the run's figure is the median of the windows' rates.

    With `losses`, every step's loss (warm-up included) is appended to it as the step returns it, unread: the
    caller reads the curve after the clock stopped (a study's convergence record)."""
    loss = first = None
    tracker = Tracker("warm-up", warmup, int(session.samples_per_step))
    for k in range(warmup):
        loss = session.step()
        first = loss if first is None else first
        if losses is not None:
            losses.append(loss)
        tracker.step(k + 1)
    sync(devices)
    warmup_peak = memory_peaks_mib(devices, reset=True) if _cuda(devices) else None
    if before_timed is not None:
        before_timed()
    if barrier is not None:
        barrier()
    wall_start = time.time()
    start = time.perf_counter()
    steps = int(session.steps)
    tracker = Tracker("timed", steps, int(session.samples_per_step))
    window_seconds: list[float] = []
    sizes = window_sizes(steps, windows)
    done = 0
    for size in sizes:
        window_start = time.perf_counter()
        for _ in range(size):
            loss = session.step()
            first = loss if first is None else first  # a reference only: read after the clock stops
            if losses is not None:
                losses.append(loss)
            done += 1
            tracker.step(done)
        sync(devices)  # each window ends when its work is done, not when it was queued
        if barrier is not None:
            barrier()
        window_seconds.append(time.perf_counter() - window_start)
    seconds = time.perf_counter() - start
    wall_end = time.time()
    final_loss, finite, first_loss = loss_facts(loss_value(loss), loss_value(first))
    return LoopTiming(
        seconds=seconds,
        steps=steps,
        samples=int(session.samples_per_step) * steps,
        wall_start=wall_start,
        wall_end=wall_end,
        loss=final_loss,
        loss_finite=finite,
        first_loss=first_loss,
        warmup_peak_mib=warmup_peak,
        window_seconds=window_seconds,
        window_steps=sizes,
    )


# -- results -------------------------------------------------------------------------------------------------
def run_params(
    cfg: RunConfig,
    plan: BatchPlan,
    info: Mapping[str, Any],
    finish: Mapping[str, Any],
    timing: LoopTiming,
    **extra: Any,
) -> dict[str, Any]:
    """Result.params of a torch run: launch_params with torch's version."""
    import torch

    return launch_params(
        cfg, plan, info, finish, timing.loss, timing.loss_finite, timing.first_loss, torch=torch.__version__, **extra
    )


def _loader_workers(cfg: RunConfig) -> int | None:
    """The DataLoader workers a real-data run had (the default resolved as its loader did); None without data."""
    if cfg.data is None:
        return None
    from gpulab.workloads.torch_session import distributed_rank, loader_workers

    return loader_workers(cfg.num_workers, distributed_rank()[1])


def launch_params(
    cfg: RunConfig,
    plan: BatchPlan,
    info: Mapping[str, Any],
    finish: Mapping[str, Any],
    loss: float | None,
    loss_finite: bool | None,
    first_loss: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Result.params: the workload's info and finish facts, then how it was launched (any framework)."""
    params: dict[str, Any] = {**info, **finish}
    params.update(plan.params())
    params.update(
        size=cfg.size,
        channels_last=cfg.channels_last,
        warmup=cfg.warmup,
        seed=cfg.seed,
        data=str(cfg.data) if cfg.data is not None else None,
        num_workers=_loader_workers(cfg),  # DataLoader workers feeding real data
        workload_params=dict(cfg.params),
        first_loss=first_loss,
        final_loss=loss,
        loss_finite=loss_finite,
        # learning: the loss fell from the first step to the last (None when either is unknown)
        loss_falling=loss < first_loss if loss is not None and first_loss is not None else None,
    )
    params.update(extra)
    from gpulab.workloads.stand_ins import stand_ins

    params["stand_ins"] = stand_ins(cfg.workload, params)
    return jsonable(params)


def make_result(
    cfg: RunConfig,
    *,
    launcher: names.Launcher,
    n: int,
    samples: int,
    seconds: float,
    steps: int,
    batch: int | None,
    devices: list[str],
    device: str | None,
    params: dict[str, Any],
    telemetry: TelemetrySummary | None = None,
    framework: names.Framework = names.DEFAULT_FRAMEWORK,
    window_rates: Sequence[float] = (),
    comm_backend: names.CommBackend | None = None,
) -> Result:
    """The run's row. With `window_rates` (samples/s of each timed window) its value is their median and its
    spread their interval; without, samples / seconds (a loop timed as one window). `comm_backend`: a DDP run's."""
    if seconds <= 0:
        raise GpulabError(f"{cfg.workload}: the timed loop took no measurable time; run more --steps")
    figure = spread.of_windows(window_rates, "samples/s") if window_rates else None
    return Result(
        workload=cfg.workload,
        framework=framework,
        launcher=launcher,
        n=n,
        precision=cfg.precision,
        value=figure.median if figure else samples / seconds,
        unit="samples/s",
        device=device,
        devices=devices,
        batch=batch,
        seconds=seconds,
        iterations=steps,
        params=params,
        telemetry=telemetry,
        spread=figure,
        comm_backend=comm_backend,
    )


def result_to_dict(result: Result) -> dict[str, Any]:
    return dataclasses.asdict(result)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to `path` through a temporary file and a rename (readers never see half a file)."""
    atomic_write_text(path, json.dumps(data))
