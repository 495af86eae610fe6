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

from gpulab import names
from gpulab.names import Framework, Launcher, ProbeSize
from gpulab.records import Result, Spread
from gpulab.report.spread import of_windows
from gpulab.workloads.torch_precision import dtype_for, tf32_mode

QUICK = names.ValidationTier.QUICK.meaning.probe  # the default; each tier's size is in gpulab.names
CPU_SMALL = ProbeSize(matmul_n=1024, matmul_iters=2, copy_mib=256, copy_iters=2, repeats=5)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Timing:
    per_call: float  # median seconds per call
    calls: int  # timed calls in all
    seconds: float  # timed seconds in all
    repeats: int = 1  # timed batches
    spread_pct: float = 0.0  # (slowest - fastest) / median batch, in %: the noise a comparison allows for
    batch_seconds: tuple[float, ...] = ()  # seconds per call of each timed batch: the figure's windows

    def params(self) -> dict[str, Any]:
        return {"repeats": self.repeats, "repeat_spread_pct": round(self.spread_pct, 2)}

    def spread(self, work: float, unit: str) -> Spread | None:
        """The figure `work / seconds per call` of each batch as windows, with the interval of their median."""
        rates = [work / t for t in self.batch_seconds if t > 0]
        return of_windows(rates, unit) if rates else None


def time_per_iteration(
    fn: Callable[[], Any], device: str, iters: int, repeats: int, warmup_s: float = 0.3, min_batch_s: float = 0.05
) -> Timing:
    """Median seconds per call of `fn` over `repeats` timed batches.

    Warm-up runs for `warmup_s` of wall time, not a fixed count: an idle GPU needs a few hundred milliseconds of
    work before its clocks leave the idle state, and a short fixed warm-up measures the ramp. Each batch runs at
    least `iters` calls and is lengthened to last `min_batch_s`, so timer and launch overheads stay negligible.
    """
    deadline = time.perf_counter() + warmup_s
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() < deadline:
        fn()
        calls += 1
        if calls % 4 == 0:
            _sync(device)
    _sync(device)
    per_call = (time.perf_counter() - start) / calls
    batch = max(iters, int(min_batch_s / per_call) + 1) if per_call > 0 else iters
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - start) / batch)
    median = statistics.median(samples)
    spread = (max(samples) - min(samples)) / median * 100 if median > 0 else 0.0
    return Timing(
        median,
        calls=batch * repeats,
        seconds=sum(samples) * batch,
        repeats=repeats,
        spread_pct=spread,
        batch_seconds=tuple(samples),
    )


def _launcher(device: str) -> Launcher:
    return Launcher.GPU if device.startswith("cuda") else Launcher.CPU


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def matmul(device: str, precision: names.Precision, size: ProbeSize = QUICK) -> Result:
    """Dense square matmul throughput in TFLOP/s (2·n³ per product) on random data (zeros run faster)."""
    import torch

    n = size.matmul_n
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype_for(precision), generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype_for(precision), generator=gen)
    with tf32_mode(precision.tf32):
        timing = time_per_iteration(lambda: a @ b, device, size.matmul_iters, size.repeats)
    cpu = not device.startswith("cuda")
    figure = timing.spread(2 * n**3 / 1e12, "TFLOP/s")
    return Result(
        workload="matmul",
        framework=Framework.TORCH,
        launcher=_launcher(device),
        n=_threads() if cpu else 1,
        precision=precision,
        value=figure.median if figure else 2 * n**3 / timing.per_call / 1e12,
        unit="TFLOP/s",
        device=device,
        devices=[device],
        seconds=timing.seconds,
        iterations=timing.calls,
        params={"n": n, "dtype": str(dtype_for(precision)).removeprefix("torch."), **timing.params()},
        spread=figure,
    )


def copy_bandwidth(device: str, size: ProbeSize = QUICK) -> Result:
    """Device-to-device copy in GB/s, counting bytes read plus bytes written (as STREAM and nvbandwidth do)."""
    import torch

    nbytes = size.copy_mib * 2**20
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    timing = time_per_iteration(lambda: dst.copy_(src), device, size.copy_iters, size.repeats)
    cpu = not device.startswith("cuda")
    figure = timing.spread(2 * nbytes / 1e9, "GB/s")
    return Result(
        workload="copy_d2d" if not cpu else "copy_host",
        framework=Framework.TORCH,
        launcher=_launcher(device),
        n=_threads() if cpu else 1,
        precision=names.NO_PRECISION,
        value=figure.median if figure else 2 * nbytes / timing.per_call / 1e9,
        unit="GB/s",
        device=device,
        devices=[device],
        seconds=timing.seconds,
        iterations=timing.calls,
        params={"bytes": nbytes, "counts": "read+write", **timing.params()},
        spread=figure,
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
        timing = time_per_iteration(lambda: dev.copy_(host, non_blocking=True), device, size.copy_iters, size.repeats)
    else:
        timing = time_per_iteration(lambda: host.copy_(dev, non_blocking=True), device, size.copy_iters, size.repeats)
    figure = timing.spread(nbytes / 1e9, "GB/s")
    return Result(
        workload=f"{direction}_pinned",
        framework=Framework.TORCH,
        launcher=Launcher.GPU,
        n=1,
        precision=names.NO_PRECISION,
        value=figure.median if figure else nbytes / timing.per_call / 1e9,
        unit="GB/s",
        device=device,
        devices=[device],
        seconds=timing.seconds,
        iterations=timing.calls,
        params={"bytes": nbytes, "pinned": True, **timing.params()},
        spread=figure,
    )


def release_cached_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
