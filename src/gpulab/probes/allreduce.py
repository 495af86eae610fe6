"""All-reduce bus bandwidth over torch.distributed: NCCL on GPUs, gloo on CPUs.

`run_allreduce()` starts one process per device through torch's elastic launcher (torchrun) and reads the
result rank 0 writes. Bus bandwidth = algorithm bandwidth × 2(n-1)/n, the figure nccl-tests prints, so the
two are comparable.

    python -m gpulab.probes.allreduce --mib 256 --iters 20 --backend nccl --out result.json  # a rank, under torchrun
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.launch.measuring import window_sizes, write_json_atomic
from gpulab.launch.torchrun import run_torchrun
from gpulab.names import CommBackend, Framework, Launcher, Precision
from gpulab.records import Result
from gpulab.report.spread import of_windows


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def bus_bandwidth(algbw_gbs: float, n: int) -> float:
    return algbw_gbs * 2 * (n - 1) / n if n > 1 else algbw_gbs


def _rank_main(mib: int, iters: int, backend: CommBackend, out: Path) -> None:
    import torch
    import torch.distributed as dist

    use_cuda = backend is CommBackend.NCCL
    dist.init_process_group(backend.value)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(device)
    numel = mib * 2**20 // 4
    buf = torch.ones(numel, dtype=torch.float32, device=device)

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    for _ in range(3):
        dist.all_reduce(buf)
    sync()
    windows: list[float] = []  # seconds per all-reduce of each window, ended by a barrier (the slowest rank's)
    for size in window_sizes(iters):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(size):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        windows.append((time.perf_counter() - start) / size)
    # Every rank must agree: a sum of ones over `world` ranks, applied (3 + iters) times, grows as world**k.
    # Reset and check one reduction so a broken transport cannot report a fast, wrong result.
    buf.fill_(1.0)
    dist.all_reduce(buf)
    sync()
    correct = bool(torch.all(buf == world).item())
    gathered: list[list[float]] = [[] for _ in range(world)]
    dist.all_gather_object(gathered, windows)
    if rank == 0:
        # each window as long as its slowest rank; the figure is the median window's
        slowest_windows = [max(ws) for ws in zip(*gathered, strict=True)]
        algbw = statistics.median(numel * 4 / t / 1e9 for t in slowest_windows)
        slowest = numel * 4 / algbw / 1e9
        payload = {
            "world": world,
            "bytes": numel * 4,
            "iters": iters,
            "seconds_per_iter": slowest,
            "algbw_gbs": algbw,
            "busbw_gbs": bus_bandwidth(algbw, world),
            "correct": correct,
            "window_seconds_per_iter": slowest_windows,
            "devices": [f"cuda:{i}" for i in range(world)] if use_cuda else ["cpu"] * world,
        }
        write_json_atomic(out, payload)
    dist.destroy_process_group()


def run_allreduce(nprocs: int, mib: int = 256, iters: int = 20, timeout_s: float = 180.0) -> Result:
    """All-reduce over `nprocs` local processes (one per visible GPU, or CPU processes over gloo)."""
    if nprocs < 1:
        raise GpulabError(f"all-reduce needs at least 1 process, got {nprocs}")
    backend = CommBackend.choose(None, gpus=_cuda())
    with tempfile.TemporaryDirectory(prefix="gpulab-allreduce-") as tmp:
        out = Path(tmp) / "result.json"
        data = run_torchrun(
            "gpulab.probes.allreduce",
            [f"--mib={mib}", f"--iters={iters}", f"--backend={backend}", f"--out={out}"],
            nprocs,
            out,
            what="all-reduce",
            comm_backend=backend,
            timeout_s=timeout_s,
        )
    per_window = [t for t in data.get("window_seconds_per_iter") or [] if t > 0]
    world = int(data["world"])
    figure = (
        of_windows([bus_bandwidth(data["bytes"] / t / 1e9, world) for t in per_window], "GB/s") if per_window else None
    )
    return Result(
        workload="allreduce",
        framework=Framework.TORCH,
        launcher=Launcher.DDP,  # torchrun's one process per device in a process group, as DDP's
        n=data["world"],
        precision=Precision.FP32,
        value=figure.median if figure else data["busbw_gbs"],
        unit="GB/s",
        devices=data["devices"],
        seconds=data["seconds_per_iter"] * data["iters"],
        iterations=data["iters"],
        params={
            "bytes": data["bytes"],
            "algbw_gbs": data["algbw_gbs"],
            "metric": "bus bandwidth",
            "correct": data["correct"],
        },
        spread=figure,
        comm_backend=backend,  # the transport the probe measures
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one rank of the all-reduce probe (start it with torchrun)")
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", type=CommBackend.parse, required=True, help="the one its parent chose")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    _rank_main(args.mib, args.iters, args.backend, args.out)


if __name__ == "__main__":
    main()
