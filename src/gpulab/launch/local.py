"""In-process launchers: `cpu` (T threads), `gpu` (one CUDA device) and `dataparallel` (nn.DataParallel)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Callable, Iterator
from typing import Any

from gpulab.errors import GpulabError
from gpulab.launch.measuring import (
    LoopTiming,
    make_result,
    memory_params,
    nvml_indices,
    run_params,
    set_cuda_flags,
    timed_loop,
    visible_gpus,
)
from gpulab.launch.planning import BatchPlan, check_config, plan_batch, resolve_builder
from gpulab.names import Launcher
from gpulab.records import Result, RunConfig
from gpulab.telemetry import Sampler
from gpulab.workloads.base import Session


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Run with `threads` intra-op threads (None: leave as is), restoring the previous count afterwards."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise GpulabError(f"--threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _sampling(ordinals: list[int], enabled: bool) -> Iterator[Sampler | None]:
    if not enabled or not ordinals:
        yield None
        return
    with Sampler(nvml_indices(ordinals)) as sampler:
        yield sampler


def run_session(
    cfg: RunConfig,
    device: str,
    plan: BatchPlan,
    *,
    builder: str | None = None,
    wrapper: Callable[[Any], Any] | None = None,
    sync_devices: list[str] | None = None,
    before_timed: Callable[[], None] | None = None,
    losses: list[Any] | None = None,
) -> tuple[Session, LoopTiming, dict[str, Any]]:
    """Build the Session for `device`, wrap its model, warm up, time it; returns (session, timing, finish facts).

    `losses` collects every step's loss (see timed_loop)."""
    for each in sync_devices or [device]:
        set_cuda_flags(each)
    session = resolve_builder(builder)(plan.device_config(cfg), device)
    if wrapper is not None:
        if session.model is None:
            raise GpulabError(
                f"{cfg.workload} optimises an input, not a model: DDP and DataParallel do not apply to it; "
                "run it with --launcher gpu, or over several GPUs with `gpulab sweep`"
            )
        session.wrap(wrapper)
    timing = timed_loop(session, cfg.warmup, sync_devices or [device], before_timed=before_timed, losses=losses)
    finish = session.finish() or {}
    return session, timing, dict(finish)


def run_cpu(
    cfg: RunConfig,
    threads: int = 1,
    *,
    builder: str | None = None,
) -> Result:
    """The workload on the CPU with `threads` intra-op threads; n = threads."""
    check_config(cfg, builder)
    plan = plan_batch(cfg, 1)
    with torch_threads(threads) as used:
        session, timing, finish = run_session(cfg, "cpu", plan, builder=builder)
    plan = plan.resolved(int(session.samples_per_step))
    return make_result(
        cfg,
        launcher=Launcher.CPU,
        n=used,
        samples=timing.samples,
        seconds=timing.seconds,
        steps=timing.steps,
        batch=plan.per_device,
        devices=["cpu"],
        device="cpu",
        params=run_params(cfg, plan, session.info, finish, timing, threads=used),
        window_rates=timing.window_rates(int(session.samples_per_step)),
    )


def _require_gpus(count: int, launcher: str) -> int:
    visible = visible_gpus()
    if visible == 0:
        raise GpulabError(
            f"--launcher {launcher} needs a CUDA GPU and torch sees none (CPU-only torch, no driver, or "
            "CUDA_VISIBLE_DEVICES hides them); check `gpulab info`, or use --launcher cpu"
        )
    if count > visible:
        raise GpulabError(f"asked for {count} GPUs but torch sees {visible}; pass --gpus {visible} or fewer")
    return visible


def run_gpu(
    cfg: RunConfig,
    index: int = 0,
    *,
    builder: str | None = None,
    telemetry: bool = True,
) -> Result:
    """The workload on one GPU, cuda:`index`; n = 1."""
    check_config(cfg, builder)
    visible = _require_gpus(1, "gpu")
    if not 0 <= index < visible:
        raise GpulabError(f"there is no cuda:{index}; torch sees {visible} GPUs (cuda:0 to cuda:{visible - 1})")
    import torch

    device = f"cuda:{index}"
    torch.cuda.set_device(index)
    torch.cuda.reset_peak_memory_stats(index)
    plan = plan_batch(cfg, 1)
    with _sampling([index], telemetry) as sampler:
        session, timing, finish = run_session(cfg, device, plan, builder=builder)
    plan = plan.resolved(int(session.samples_per_step))
    extra = {"threads": torch.get_num_threads(), **memory_params([device], timing), **_overhead(sampler)}
    return make_result(
        cfg,
        launcher=Launcher.GPU,
        n=1,
        samples=timing.samples,
        seconds=timing.seconds,
        steps=timing.steps,
        batch=plan.per_device,
        devices=[device],
        device=device,
        params=run_params(cfg, plan, session.info, finish, timing, **extra),
        telemetry=sampler.summary(timing.wall_start, timing.wall_end) if sampler else None,
        window_rates=timing.window_rates(int(session.samples_per_step)),
    )


def _overhead(sampler: Sampler | None) -> dict[str, Any]:
    if sampler is None or sampler.overhead() is None:
        return {}
    return {"telemetry_overhead_pct": round(100 * (sampler.overhead() or 0.0), 3)}


def _default_batch(cfg: RunConfig, device: str, builder: str | None) -> int:
    """The workload's own per-device batch for cfg.size (built once and dropped)."""
    import torch

    session = resolve_builder(builder)(cfg, device)
    batch = int(session.samples_per_step)
    del session
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return batch


def dataparallel_on_gpu(gpus: int) -> bool:
    """Whether DataParallel over `gpus` runs on GPUs (True) or passes through on the CPU (False), once it can run here.

    The timed-step and epoch launchers share it so that both accept and refuse the same --gpus."""
    on_gpu = visible_gpus() > 0
    if on_gpu:
        _require_gpus(gpus, "dataparallel")
    elif gpus != 1:
        raise GpulabError(
            f"DataParallel spreads a batch over GPUs and torch sees none; --gpus {gpus} cannot run here. "
            "Use --gpus 1 (a pass-through smoke test) or --launcher ddp, which runs CPU processes over gloo"
        )
    return on_gpu


def run_dataparallel(
    cfg: RunConfig,
    gpus: int,
    *,
    batch_policy: str = "per_device",
    scale_lr: bool = False,
    builder: str | None = None,
    telemetry: bool = True,
) -> Result:
    """nn.DataParallel over cuda:0..gpus-1 in this process; the model sees the global batch (per-device × N).

    Without a GPU, DataParallel passes the batch straight to the model; that is allowed for gpus=1 only (a
    smoke test of the wrapping), since there are no devices to spread over.
    """
    import torch
    from torch import nn

    check_config(cfg, builder)
    on_gpu = dataparallel_on_gpu(gpus)
    plan = plan_batch(cfg, gpus, batch_policy, scale_lr)
    ordinals = list(range(gpus)) if on_gpu else []
    device = "cuda:0" if on_gpu else "cpu"
    if on_gpu:
        torch.cuda.set_device(0)
        for k in ordinals:
            torch.cuda.reset_peak_memory_stats(k)
    per_device = plan.per_device or _default_batch(plan.device_config(cfg), device, builder)
    plan = plan.resolved(per_device)
    global_plan = dataclasses.replace(plan, devices=1, per_device=per_device * gpus)

    def wrapper(model: Any) -> Any:
        return nn.DataParallel(model, device_ids=ordinals or None)

    devices = [f"cuda:{k}" for k in ordinals] or ["cpu"]
    with _sampling(ordinals, telemetry) as sampler:
        session, timing, finish = run_session(
            cfg, device, global_plan, builder=builder, wrapper=wrapper, sync_devices=devices
        )
    extra = {"threads": torch.get_num_threads(), **memory_params(devices, timing), **_overhead(sampler)}
    if not on_gpu:
        extra["pass_through"] = True
    return make_result(
        cfg,
        launcher=Launcher.DATAPARALLEL,
        n=gpus,
        samples=timing.samples,
        seconds=timing.seconds,
        steps=timing.steps,
        batch=int(session.samples_per_step) // gpus,
        devices=devices,
        device=None,
        params=run_params(cfg, plan, session.info, finish, timing, **extra),
        telemetry=sampler.summary(timing.wall_start, timing.wall_end) if sampler else None,
        window_rates=timing.window_rates(int(session.samples_per_step)),
    )
