"""The loads tests/device/verdict_harness.py puts beside a validation run, one process group each.

    python tests/device/fault_load.py gpu --duty 0.6 --period-ms 50     # kernels 60 % of every 50 ms, then sleep
    python tests/device/fault_load.py gpu --duty 0 --hold-fraction 0.7  # hold 70 % of the free memory, idle
    python tests/device/fault_load.py cpu --procs 16                    # 16 pure-Python busy loops

`gpu` runs on the GPU that CUDA_VISIBLE_DEVICES leaves visible (the harness pins it to one), or on the CPU with
`--device cpu` (for tests without a GPU; nothing is held there). It never changes clocks, power limits or modes.
Each load writes `--ready-file` once it has started (memory held, first kernel done), runs until SIGTERM or SIGINT,
`--seconds`, or until the process that started it is gone, and then prints what it did (the busy share it kept).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

DEFAULT_SIZE = {"cuda": 8192, "cpu": 64}  # an 8192 bf16 matmul takes about 1.5 ms on an H100: fine steps


def _fraction(text: str, *, low_open: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0 < value < 1 if low_open else 0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"{text} is outside {'(0, 1)' if low_open else '[0, 1]'}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready-file", type=Path, help="written once the load has started")
    parser.add_argument("--seconds", type=_positive, default=3600.0, help="stop after this long (default 3600)")
    parser.add_argument("--parent", type=int, default=None, help="stop when this pid is no longer the parent")
    sub = parser.add_subparsers(dest="load", required=True)
    gpu = sub.add_parser("gpu", help="matmuls at a duty cycle, and/or memory held")
    gpu.add_argument("--duty", type=_fraction, default=0.6, help="busy share of each period, 0 to 1 (default 0.6)")
    gpu.add_argument("--period-ms", type=_positive, default=50.0, help="the period in ms (default 50)")
    gpu.add_argument(
        "--hold-fraction",
        type=lambda t: _fraction(t, low_open=True),
        default=None,
        help="also hold this share of the GPU's free memory (0 < f < 1)",
    )
    gpu.add_argument("--size", type=int, default=None, help="matmul size (default 8192 on cuda, 64 on cpu)")
    gpu.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    cpu = sub.add_parser("cpu", help="busy loops, one process each")
    cpu.add_argument("--procs", type=int, default=_cpus(), help="how many (default: one per CPU it may use)")
    args = parser.parse_args(argv)
    if args.load == "gpu":
        if args.device == "cpu" and args.hold_fraction is not None:
            parser.error("--hold-fraction needs --device cuda: there is no GPU memory to hold on the CPU")
        if args.size is None:
            args.size = DEFAULT_SIZE[args.device]
        if args.size <= 0:
            parser.error(f"--size {args.size}: give a positive matrix size")
    if args.load == "cpu" and args.procs < 1:
        parser.error(f"--procs {args.procs}: give at least 1")
    return args


class Stop(Exception):
    """SIGTERM or SIGINT arrived."""


def _on_signal(signum: int, frame: object) -> None:
    raise Stop(signum)


def _orphaned(parent: int | None) -> bool:
    return parent is not None and os.getppid() != parent


def _ready(path: Path | None, text: str) -> None:
    if path is not None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(path)
    print(f"ready: {text}", flush=True)


def gpu_load(args: argparse.Namespace) -> dict[str, float]:
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible: set CUDA_VISIBLE_DEVICES to one GPU, or pass --device cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if device.type == "cpu":
        torch.set_num_threads(1)  # a stand-in for tests: one core, short steps
    a = torch.randn(args.size, args.size, device=device, dtype=dtype)
    b = torch.randn(args.size, args.size, device=device, dtype=dtype)
    held = None
    if args.hold_fraction is not None:
        free, _total = torch.cuda.mem_get_info(device)
        held = torch.empty(int(free * args.hold_fraction), dtype=torch.uint8, device=device)
        held.fill_(1)  # touched, so the memory is really taken
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    (a @ b).sum().item()
    sync()
    period = args.period_ms / 1000
    busy_s = period * args.duty
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    held_gib = (held.numel() / 1024**3) if held is not None else 0.0
    what = f"gpu load on {where}: duty {args.duty:g} of {args.period_ms:g} ms, {held_gib:.1f} GiB held"
    _ready(args.ready_file, what)
    started = time.monotonic()
    busy_total, periods = 0.0, 0
    try:
        while time.monotonic() - started < args.seconds and not _orphaned(args.parent):
            t0 = time.monotonic()
            while time.monotonic() - t0 < busy_s:
                a @ b
                sync()
            busy_total += time.monotonic() - t0
            periods += 1
            rest = period - (time.monotonic() - t0)
            if rest > 0:
                time.sleep(rest)
    except Stop:
        pass
    wall = time.monotonic() - started
    del held
    return {"seconds": round(wall, 2), "periods": periods, "busy_share": round(busy_total / wall, 3) if wall else 0.0}


def _spin(parent: int, seconds: float) -> None:
    """One busy loop: pure Python, checking now and then whether its parent is still there."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and os.getppid() == parent:
        for _ in range(200_000):
            pass
    os._exit(0)


def cpu_load(args: argparse.Namespace) -> dict[str, float]:
    me = os.getpid()
    workers = []
    try:
        for _ in range(args.procs):
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _spin(me, args.seconds)
            workers.append(pid)
        _ready(args.ready_file, f"cpu load: {args.procs} busy loops (pids {workers[0]}..{workers[-1]})")
        started = time.monotonic()
        while time.monotonic() - started < args.seconds and not _orphaned(args.parent):
            time.sleep(0.2)
    except Stop:
        pass
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in workers:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return {"procs": args.procs}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        done = gpu_load(args) if args.load == "gpu" else cpu_load(args)
    except Stop:  # stopped while starting
        print("done: stopped before the load started", flush=True)
        return 0
    print("done: " + ", ".join(f"{k} {v}" for k, v in done.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
