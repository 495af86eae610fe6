"""DistributedDataParallel through torch's elastic launcher: one process per GPU over NCCL.

`run_ddp(cfg, n)` writes the run's config as JSON, starts
`python -m torch.distributed.run --standalone --nproc_per_node=n -m gpulab.launch.ddp_worker`, samples the
GPUs' telemetry from this (parent) process and reads the result rank 0 wrote. Throughput = samples of all
ranks / the slowest rank's timed seconds.

On a machine where torch sees no GPU, n is a count of CPU processes communicating over gloo (each with
`threads` intra-op threads): a functional test of the DDP path, recorded with devices ["cpu", ...] and
comm_backend "gloo". gloo aborts at start-up now and then (SIGABRT in its rendezvous, a known upstream
bug); such a run is retried once.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.launch.measuring import LoopTiming, make_result, nvml_indices, run_params, visible_gpus
from gpulab.launch.planning import check_config, plan_batch
from gpulab.launch.spec import WorkerMessage
from gpulab.launch.torchrun import run_torchrun
from gpulab.names import CommBackend, Launcher
from gpulab.records import Result, RunConfig, TelemetrySummary
from gpulab.telemetry import Sampler


def ddp_comm_backend(nprocs: int, asked: CommBackend | None, threads: int) -> CommBackend:
    """The process-group backend for `nprocs` local processes (`asked`, else CommBackend.choose's), once they fit."""
    if nprocs < 1:
        raise GpulabError(f"--gpus must be at least 1, got {nprocs}")
    gpus = visible_gpus()
    backend = CommBackend.choose(asked, gpus=gpus > 0)
    if backend is CommBackend.NCCL:
        if gpus == 0:
            raise GpulabError("the nccl backend needs CUDA GPUs and torch sees none; use --backend gloo")
        if nprocs > gpus:
            raise GpulabError(f"asked for {nprocs} GPUs but torch sees {gpus}; pass --gpus {gpus} or fewer")
    else:
        cores = os.cpu_count() or 1
        if nprocs * threads > cores:
            raise GpulabError(
                f"{nprocs} gloo processes × {threads} threads exceed the {cores} CPU cores; lower --gpus or --threads"
            )
    return backend


def run_ddp_workers(
    message: WorkerMessage, nprocs: int, *, what: str, prefix: str, telemetry: bool, timeout_s: float
) -> tuple[dict[str, Any], Sampler | None]:
    """Run gpulab.launch.ddp_worker over `nprocs` ranks with `message`, sampling the GPUs (nccl) meanwhile.

    Returns rank 0's result and the stopped sampler (None without telemetry or GPUs). The timed-step and epoch
    DDP launchers share it, so both start, time and sample their ranks alike."""
    backend, threads = message.comm_backend, message.threads
    assert backend is not None and threads is not None, "a DDP message names its backend and threads"
    ordinals = list(range(nprocs)) if backend is CommBackend.NCCL else []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        out = Path(tmp) / "result.json"
        config_path = message.write(Path(tmp) / "run.json")
        sampler = Sampler(nvml_indices(ordinals)) if telemetry and ordinals else None
        if sampler is not None:
            sampler.start()
        try:
            data = run_torchrun(
                "gpulab.launch.ddp_worker",
                [f"--config={config_path}", f"--out={out}"],
                nprocs,
                out,
                what=what,
                comm_backend=backend,
                threads=threads,
                timeout_s=timeout_s,
            )
        finally:
            if sampler is not None:
                sampler.stop()
    return data, sampler


def run_ddp(
    cfg: RunConfig,
    nprocs: int,
    *,
    batch_policy: str = "per_device",
    scale_lr: bool = False,
    comm_backend: CommBackend | None = None,
    threads: int = 1,
    builder: str | None = None,
    timeout_s: float = 3600.0,
    telemetry: bool = True,
) -> Result:
    """DDP over `nprocs` processes on one host: GPUs cuda:0..nprocs-1 with NCCL, else CPU processes with gloo."""
    check_config(cfg, builder)
    backend = ddp_comm_backend(nprocs, comm_backend, threads)
    plan = plan_batch(cfg, nprocs, batch_policy, scale_lr)
    message = WorkerMessage(cfg, plan, Launcher.DDP, builder=builder, threads=threads, comm_backend=backend)
    data, sampler = run_ddp_workers(
        message, nprocs, what="DDP", prefix="gpulab-ddp-", telemetry=telemetry, timeout_s=timeout_s
    )
    ranks = data["ranks"]
    slowest = max(r["seconds"] for r in ranks)
    per_device = int(ranks[0]["samples_per_step"])
    plan = plan.resolved(per_device)
    timing = LoopTiming(
        seconds=slowest,
        steps=int(data["steps"]),
        samples=sum(int(r["samples"]) for r in ranks),
        wall_start=data["wall_start"],
        wall_end=data["wall_end"],
        loss=ranks[0]["loss"],
        loss_finite=ranks[0]["loss_finite"],
        first_loss=ranks[0].get("first_loss"),
    )
    devices = [r["device"] for r in sorted(ranks, key=lambda r: r["rank"])]
    extra = {
        "world": data["world"],
        "threads": data["threads"],
        "seed_per_rank": "seed + rank",
        "rank_seconds": [r["seconds"] for r in ranks],
    }
    if backend is CommBackend.NCCL:
        by_rank = [r["memory"] for r in sorted(ranks, key=lambda r: r["rank"])]
        extra.update(by_rank[0])
        for key in ("max_memory_allocated_mib", "warmup_max_memory_allocated_mib"):
            extra[key] = [m[key][0] if m.get(key) else None for m in by_rank]
    if sampler is not None and sampler.overhead() is not None:
        extra["telemetry_overhead_pct"] = round(100 * (sampler.overhead() or 0.0), 3)
    return make_result(
        cfg,
        launcher=Launcher.DDP,
        n=nprocs,
        samples=timing.samples,
        seconds=slowest,
        steps=timing.steps,
        batch=per_device,
        devices=devices,
        device=None,
        params=run_params(cfg, plan, data["info"], data["finish"], timing, **extra),
        telemetry=sampler.summary(timing.wall_start, timing.wall_end) if sampler is not None else None,
        window_rates=rank_window_rates(ranks),
        comm_backend=backend,
    )


def rank_window_rates(ranks: list[dict[str, Any]]) -> list[float]:
    """Samples/s of each timed window over all ranks: every rank's samples over the slowest rank's seconds (the
    ranks end each window at a barrier, so their windows line up)."""
    seconds = [r.get("window_seconds") or [] for r in ranks]
    steps = ranks[0].get("window_steps") or []
    if not steps or any(len(s) != len(steps) for s in seconds):
        return []
    rates = []
    for w, k in enumerate(steps):
        slowest = max(s[w] for s in seconds)
        if slowest > 0:
            rates.append(sum(int(r["samples_per_step"]) for r in ranks) * k / slowest)
    return rates


def run_ddp_pair(
    cfg: RunConfig,
    nprocs: int,
    *,
    comm_backend: CommBackend | None = None,
    threads: int = 1,
    builder: str | None = None,
    windows: int | None = None,
    timeout_s: float = 3600.0,
    telemetry: bool = True,
) -> tuple[Result, Result]:
    """DDP on one GPU and on `nprocs` GPUs in one job, windows interleaved (gpulab.launch.ddp_worker._paired_main):
    (one-GPU row, N-GPU row), each with the spread of its windows. Both sides paid the same start-up and warm-up."""
    check_config(cfg, builder)
    backend = ddp_comm_backend(nprocs, comm_backend, threads)
    plan = plan_batch(cfg, nprocs, "per_device", False)
    extra = {"paired": True, **({"windows": windows} if windows else {})}
    message = WorkerMessage(
        cfg, plan, Launcher.DDP, builder=builder, threads=threads, comm_backend=backend, extra=extra
    )
    data, sampler = run_ddp_workers(
        message, nprocs, what="DDP 1 vs N", prefix="gpulab-ddp-pair-", telemetry=telemetry, timeout_s=timeout_s
    )
    ranks = sorted(data["ranks"], key=lambda r: r["rank"])
    per_device = int(ranks[0]["samples_per_step"])
    plan = plan.resolved(per_device)
    steps = [int(k) for k in data["window_steps"]]
    tel = sampler.summary(data["wall_start"], data["wall_end"]) if sampler is not None else None
    rows = []
    for n, seconds, loss, devices in (
        (1, data["solo_seconds"], data["solo_loss"], [ranks[0]["device"]]),
        (nprocs, data["many_seconds"], data["many_loss"], [r["device"] for r in ranks]),
    ):
        rates = [per_device * len(devices) * k / t for k, t in zip(steps, seconds, strict=True) if t > 0]
        finite = loss is not None and math.isfinite(loss)
        timing = LoopTiming(
            seconds=sum(seconds),
            steps=sum(steps),
            samples=per_device * len(devices) * sum(steps),
            wall_start=data["wall_start"],
            wall_end=data["wall_end"],
            loss=loss if finite else None,
            loss_finite=finite if loss is not None else None,
        )
        params = run_params(
            cfg,
            plan,
            data["info"],
            data["finish"],
            timing,
            world=n,
            threads=data["threads"],
            interleaved=f"one-GPU and {nprocs}-GPU windows alternated in one job (ABBA)",
            max_memory_allocated_mib=data.get("max_memory_allocated_mib"),
        )
        rows.append(
            make_result(
                cfg,
                launcher=Launcher.DDP,
                n=n,
                samples=timing.samples,
                seconds=timing.seconds,
                steps=timing.steps,
                batch=per_device,
                devices=devices,
                device=None,
                params=params,
                telemetry=_telemetry_of(tel, len(devices)),
                window_rates=rates,
                comm_backend=backend,
            )
        )
    return rows[0], rows[1]


def _telemetry_of(tel: TelemetrySummary | None, count: int) -> TelemetrySummary | None:
    """The job's telemetry restricted to the row's first `count` GPUs (the one-GPU row: rank 0's)."""
    if tel is None:
        return None
    keep = {g.index for g in tel.per_gpu[:count]}
    return dataclasses.replace(
        tel,
        per_gpu=[g for g in tel.per_gpu if g.index in keep] or tel.per_gpu,
        timeline=[p for p in tel.timeline if p.get("index") in keep] or tel.timeline,
    )
