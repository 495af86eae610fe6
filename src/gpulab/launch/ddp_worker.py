"""One rank of a DDP run (started by torch's elastic launcher, `python -m torch.distributed.run`).

    python -m torch.distributed.run --standalone --nproc_per_node=N -m gpulab.launch.ddp_worker \\
        --config run.json --out result.json

run.json (written by `gpulab.launch.ddp.run_ddp`) is a gpulab.launch.spec.WorkerMessage: the RunConfig, the
batch plan, the builder, the comm_backend its parent chose (nccl | gloo) and the threads per process. Each rank
builds its Session on cuda:LOCAL_RANK (NCCL) or the CPU (gloo) with seed = run.seed + rank, so ranks draw different
synthetic batches while DDP broadcasts rank 0's initial weights to all. Rank 0 writes the result atomically.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulab.launch.measuring import (
    WINDOWS,
    loss_value,
    memory_params,
    memory_peaks_mib,
    set_cuda_flags,
    sync,
    timed_loop,
    window_sizes,
    write_json_atomic,
)
from gpulab.launch.planning import resolve_builder
from gpulab.launch.spec import WorkerMessage
from gpulab.names import CommBackend

PG_TIMEOUT_S = 1800.0  # a collective that waits longer than this is stuck


def rank_main(message: WorkerMessage, out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    cfg = message.run
    backend = message.comm_backend
    assert backend is not None, "the parent names the backend it chose (gpulab.launch.ddp.ddp_comm_backend)"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = _dt.timedelta(seconds=PG_TIMEOUT_S)
    nccl = backend is CommBackend.NCCL
    if nccl:
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend.value, timeout=timeout, device_id=torch.device(device))
    else:
        device = "cpu"
        torch.set_num_threads(message.threads or 1)
        dist.init_process_group(backend.value, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    set_cuda_flags(device)
    if message.epochs is not None:
        _epochs_main(message, device, local_rank, out)
        dist.destroy_process_group()
        return
    rank_cfg = message.plan.device_config(cfg)
    rank_cfg.seed = cfg.seed + rank
    session = resolve_builder(message.builder)(rank_cfg, device)
    if session.model is None:
        raise SystemExit(
            f"{cfg.workload} optimises an input, not a model: DDP does not apply; use `gpulab sweep` instead"
        )

    def wrap(model: Any) -> Any:
        return DistributedDataParallel(model, device_ids=[local_rank] if nccl else None)

    session.wrap(wrap)
    if nccl:

        def barrier() -> None:
            dist.barrier(device_ids=[local_rank])
    else:

        def barrier() -> None:
            dist.barrier()

    if message.extra.get("paired"):
        _paired_main(message, session, rank_cfg, device, local_rank, barrier, out)
        dist.destroy_process_group()
        return
    timing = timed_loop(session, cfg.warmup, [device], barrier=barrier)
    finish = session.finish() or {}
    mine = {
        "rank": rank,
        "seconds": timing.seconds,
        "samples": timing.samples,
        "samples_per_step": int(session.samples_per_step),
        "device": device,
        "loss": timing.loss,
        "loss_finite": timing.loss_finite,
        "first_loss": timing.first_loss,
        "memory": memory_params([device], timing),
        "window_seconds": timing.window_seconds,
        "window_steps": timing.window_steps,
    }
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        payload = {
            "world": world,
            "ranks": gathered,
            "steps": timing.steps,
            "wall_start": timing.wall_start,
            "wall_end": timing.wall_end,
            "info": session.info,
            "finish": finish,
            "threads": torch.get_num_threads(),
        }
        write_json_atomic(out, json.loads(json.dumps(payload, default=str)))
    dist.destroy_process_group()


def _paired_main(
    message: WorkerMessage,
    session: Any,
    rank_cfg: Any,
    device: str,
    local_rank: int,
    barrier: Callable[[], None],
    out: Path,
) -> None:
    """One GPU and every GPU measured in one job, their windows interleaved (scaling's 1 vs N).

    Rank 0 also builds the same workload as DDP over a group of itself alone: the one-GPU side runs DDP too (so
    efficiency measures scaling, not DDP's own overhead), in the same process, after the same start-up, compile and
    warm-up as the N-GPU side. Windows alternate ABBA (N, 1, 1, N, ...) so that drift of the clocks, the host or
    the temperature falls on both sides; while rank 0 times a one-GPU window, the other ranks wait at a barrier.
    """
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank, world = dist.get_rank(), dist.get_world_size()
    on_gpu = device.startswith("cuda")
    alone = dist.new_group([0])  # every rank takes part in creating it
    solo = None
    if rank == 0:
        solo_cfg = dataclasses.replace(rank_cfg, seed=message.run.seed)
        solo = resolve_builder(message.builder)(solo_cfg, device)

        def wrap_alone(model: Any) -> Any:
            return DistributedDataParallel(model, device_ids=[local_rank] if on_gpu else None, process_group=alone)

        solo.wrap(wrap_alone)
    warmup = message.run.warmup
    for _ in range(warmup):
        session.step()
    sync([device])
    barrier()
    if solo is not None:
        for _ in range(warmup):
            solo.step()
        sync([device])
    barrier()
    sizes = window_sizes(int(session.steps), int(message.extra.get("windows") or WINDOWS))
    wall_start = time.time()
    many_s, solo_s, many_loss, solo_loss = _interleaved(session, solo, sizes, device, barrier)
    wall_end = time.time()
    finish = session.finish() or {}
    per_device = int(session.samples_per_step)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "device": device, "samples_per_step": per_device})
    if rank == 0:
        payload = {
            "world": world,
            "ranks": gathered,
            "window_steps": sizes,
            "many_seconds": many_s,
            "solo_seconds": solo_s,
            "many_loss": loss_value(many_loss),
            "solo_loss": loss_value(solo_loss),
            "wall_start": wall_start,
            "wall_end": wall_end,
            "info": session.info,
            "finish": finish,
            "threads": torch.get_num_threads(),
            "max_memory_allocated_mib": memory_peaks_mib([device]) if on_gpu else None,
        }
        write_json_atomic(out, json.loads(json.dumps(payload, default=str)))


def _interleaved(
    session: Any, solo: Any, sizes: list[int], device: str, barrier: Callable[[], None]
) -> tuple[list[float], list[float], Any, Any]:
    """Time windows of `sizes` steps, the N-process and one-process sides alternating ABBA: (N-side seconds,
    one-side seconds, last losses). `solo` is None on the ranks that only wait while rank 0 times its side."""
    import time

    many_s: list[float] = []
    solo_s: list[float] = []
    many_loss = solo_loss = None
    for k, size in enumerate(sizes):
        for side in ("many", "solo") if k % 2 == 0 else ("solo", "many"):
            barrier()
            start = time.perf_counter()
            if side == "many":
                for _ in range(size):
                    many_loss = session.step()
                sync([device])
                barrier()  # the window lasts until the slowest rank is done
                many_s.append(time.perf_counter() - start)
            else:
                if solo is not None:
                    for _ in range(size):
                        solo_loss = solo.step()
                    sync([device])
                    solo_s.append(time.perf_counter() - start)
                barrier()
    return many_s, solo_s, many_loss, solo_loss


def _epochs_main(message: WorkerMessage, device: str, local_rank: int, out: Path) -> None:
    """Epoch training on this rank. Every rank keeps the run's seed: the DistributedSampler shards one shuffle."""
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gpulab.training.epochs import EpochSpec
    from gpulab.training.loop import train_epochs

    assert message.epochs is not None
    rank, world = dist.get_rank(), dist.get_world_size()
    on_gpu = device.startswith("cuda")

    def wrap(model: Any) -> Any:
        return DistributedDataParallel(model, device_ids=[local_rank] if on_gpu else None)

    start = time.time()
    record = train_epochs(
        message.plan.device_config(message.run), device, EpochSpec.from_dict(message.epochs), wrapper=wrap
    )
    end = time.time()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (device, record["final_metric"]))
    if rank == 0:
        payload = {
            "world": world,
            "threads": torch.get_num_threads(),
            "devices": [g[0] for g in gathered],
            "rank_final_metrics": [g[1] for g in gathered],
            "wall_start": start,
            "wall_end": end,
            "record": record,
        }
        write_json_atomic(out, json.loads(json.dumps(payload, default=str)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one rank of a gpulab DDP run (start it with torchrun)")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rank_main(WorkerMessage.read(args.config), args.out)


if __name__ == "__main__":
    main()
