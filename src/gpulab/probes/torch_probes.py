"""Single-device probes with PyTorch: matmul throughput, device memory copy, pinned host<->device copies.

Timing follows the usual rules: warm up first (cuBLAS handles, clocks ramp), synchronise before reading the
host clock, repeat the timed batch and keep the median so one hiccup does not decide the verdict.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpulab.probes.precision import dtype_for, tf32_mode
from gpulab.report.model import Result


@dataclass(frozen=True)
class ProbeSize:
    """How much work one probe does; the tiers pick among these."""

    matmul_n: int = 8192
    matmul_iters: int = 10
    copy_mib: int = 1024
    copy_iters: int = 10
    repeats: int = 3


QUICK = ProbeSize()
THOROUGH = ProbeSize(matmul_iters=50, copy_mib=2048, copy_iters=20, repeats=5)
CPU_SMALL = ProbeSize(matmul_n=1024, matmul_iters=3, copy_mib=256, copy_iters=3, repeats=3)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def time_per_iteration(fn: Callable[[], Any], device: str, iters: int, repeats: int, warmup: int = 3) -> float:
    """Median seconds per call of `fn` over `repeats` timed batches of `iters` calls."""
    for _ in range(warmup):
        fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - start) / iters)
    return statistics.median(samples)


def _launcher(device: str) -> str:
    return "gpu" if device.startswith("cuda") else "cpu"


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def matmul(device: str, precision: str, size: ProbeSize = QUICK) -> Result:
    """Dense square matmul throughput in TFLOP/s (2·n³ per product) on random data (zeros run faster)."""
    import torch

    n = size.matmul_n
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype_for(precision), generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype_for(precision), generator=gen)
    with tf32_mode(precision == "tf32"):
        per_iter = time_per_iteration(lambda: a @ b, device, size.matmul_iters, size.repeats)
    cpu = not device.startswith("cuda")
    return Result(
        workload="matmul",
        framework="torch",
        launcher=_launcher(device),
        n=_threads() if cpu else 1,
        precision=precision,
        value=2 * n**3 / per_iter / 1e12,
        unit="TFLOP/s",
        device=device,
        devices=[device],
        seconds=per_iter * size.matmul_iters * size.repeats,
        iterations=size.matmul_iters * size.repeats,
        params={"n": n, "dtype": str(dtype_for(precision)).removeprefix("torch.")},
    )


def copy_bandwidth(device: str, size: ProbeSize = QUICK) -> Result:
    """Device-to-device copy in GB/s, counting bytes read plus bytes written (as STREAM and nvbandwidth do)."""
    import torch

    nbytes = size.copy_mib * 2**20
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    per_iter = time_per_iteration(lambda: dst.copy_(src), device, size.copy_iters, size.repeats)
    cpu = not device.startswith("cuda")
    return Result(
        workload="copy_d2d" if not cpu else "copy_host",
        framework="torch",
        launcher=_launcher(device),
        n=_threads() if cpu else 1,
        precision="none",
        value=2 * nbytes / per_iter / 1e9,
        unit="GB/s",
        device=device,
        devices=[device],
        seconds=per_iter * size.copy_iters * size.repeats,
        iterations=size.copy_iters * size.repeats,
        params={"bytes": nbytes, "counts": "read+write"},
    )


def host_transfer(device: str, direction: str, size: ProbeSize = QUICK) -> Result:
    """Pinned host<->device copy in GB/s (`direction` "h2d" or "d2h"): what the PCIe link really carries."""
    import torch

    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', not {direction!r}")
    nbytes = size.copy_mib * 2**20
    host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if direction == "h2d":
        per_iter = time_per_iteration(lambda: dev.copy_(host, non_blocking=True), device, size.copy_iters, size.repeats)
    else:
        per_iter = time_per_iteration(lambda: host.copy_(dev, non_blocking=True), device, size.copy_iters, size.repeats)
    return Result(
        workload=f"{direction}_pinned",
        framework="torch",
        launcher="gpu",
        n=1,
        precision="none",
        value=nbytes / per_iter / 1e9,
        unit="GB/s",
        device=device,
        devices=[device],
        seconds=per_iter * size.copy_iters * size.repeats,
        iterations=size.copy_iters * size.repeats,
        params={"bytes": nbytes, "pinned": True},
    )


def release_cached_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
