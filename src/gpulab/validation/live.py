"""Live measurements that need a real GPU: the PCIe link under load, and per-process GPU memory isolation."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from gpulab.errors import GpulabError
from gpulab.hw import nvml
from gpulab.records import GpuInfo, PcieLink


def busy(device: str, seconds: float) -> threading.Thread:
    """Keep `device` busy with matmuls for `seconds` in a background thread (so the link and clocks ramp up)."""
    import torch

    def work() -> None:
        a = torch.randn(4096, 4096, device=device)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(8):
                a = torch.tanh(a @ a)
            torch.cuda.synchronize(device)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def link_under_load(gpu: GpuInfo, device: str, settle_s: float = 0.5) -> PcieLink | None:
    """The PCIe link of `gpu` read from NVML while `device` (the same GPU as torch numbers it) is busy."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    thread = busy(device, settle_s + 1.5)
    time.sleep(settle_s)
    now = next((g for g in nvml.query().gpus if g.uuid == gpu.uuid), None)
    thread.join()
    return now.pcie if now else None


# Each child allocates on whatever CUDA shows it, reports "ready <devices it sees>", and holds the memory until
# stdin closes.
CHILDREN = {
    "torch": """
import sys, torch
x = torch.empty({mib} * 2**20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", torch.cuda.device_count(), flush=True)
sys.stdin.read()
""",
    "tensorflow": """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
for g in gpus:
    tf.config.experimental.set_memory_growth(g, True)
with tf.device("/gpu:0"):
    x = tf.ones([{mib} * 2**18], tf.float32)
    float(tf.reduce_sum(x))
print("ready", len(gpus), flush=True)
sys.stdin.read()
""",
}


@dataclass
class Placement:
    gpu: GpuInfo  # the GPU the child was pinned to
    pid: int
    cuda_sees: int | None = None  # torch.cuda.device_count() in the child
    found_on: list[int] = field(default_factory=list)  # NVML indices where the child's pid holds memory
    error: str | None = None

    @property
    def isolated(self) -> bool:
        return self.error is None and self.cuda_sees == 1 and self.found_on == [self.gpu.index]


def pinned_allocations(
    gpus: list[GpuInfo], all_gpus: list[GpuInfo], framework: str = "torch", mib: int = 256, timeout_s: float = 300.0
) -> list[Placement]:
    """Start one child per GPU with CUDA_VISIBLE_DEVICES=<that GPU>, all at once, and see where each allocates."""
    children = []
    for gpu in gpus:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu.uuid)
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILDREN[framework].format(mib=mib)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append((gpu, proc))
    placements = []
    try:
        for gpu, proc in children:
            placement = Placement(gpu=gpu, pid=proc.pid)
            line = _read_line(proc, timeout_s)
            if line.startswith("ready"):
                placement.cuda_sees = int(line.split()[1])
            else:
                placement.error = f"child pinned to GPU {gpu.index} did not allocate: {line or 'no output'}"
            placements.append(placement)
        by_pid = {p.pid: p for p in placements}
        for other in all_gpus:
            for pid, _used in nvml.gpu_processes(other.index):
                if pid in by_pid:
                    by_pid[pid].found_on.append(other.index)
    finally:
        for _gpu, proc in children:
            if proc.stdin:
                proc.stdin.close()
        for _gpu, proc in children:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return placements


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline() if proc.stdout else ""))
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        proc.kill()
        raise GpulabError(f"a child process on the GPU gave no sign of life in {timeout_s:.0f} s")
    line = result[0].strip() if result else ""
    if not line and proc.wait(timeout=30) is not None and proc.stderr:
        tail = proc.stderr.read().strip().splitlines()
        line = tail[-1] if tail else f"exit {proc.returncode}"
    return line
