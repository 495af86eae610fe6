"""Start `python -m torch.distributed.run --standalone` with one process per device and read rank 0's JSON.

Shared by the DDP launcher and the all-reduce probe: one place for the command line, the time limit and the
retry of gloo's occasional SIGABRT at rendezvous (a known upstream flake; real failures are not retried).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

_RETRIES = 1
_ABORT_MARKS = ("SIGABRT", "Signal 6")


def aborted(proc: subprocess.CompletedProcess[str]) -> bool:
    text = (proc.stderr or "") + (proc.stdout or "")
    return proc.returncode in (-6, 134) or any(mark in text for mark in _ABORT_MARKS)


def run_torchrun(
    module: str,
    args: list[str],
    nprocs: int,
    out: Path,
    *,
    what: str,
    backend: str,
    threads: int = 1,
    timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Run `module` under torchrun on `nprocs` local processes; `out` is the JSON file rank 0 writes."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nprocs}", "-m", module]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc: subprocess.CompletedProcess[str] | None = None
    for _attempt in range(_RETRIES + 1):
        try:
            proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired as err:
            raise GpulabError(
                f"{what} over {nprocs} processes did not finish in {timeout_s:.0f} s: a hung collective usually "
                "means a broken P2P/NVLink path or a blocked rendezvous port; rerun with NCCL_DEBUG=INFO to see "
                "where it stops, or allow more time"
            ) from err
        if proc.returncode == 0 and out.exists():
            data: dict[str, Any] = json.loads(out.read_text())
            return data
        if not (backend == "gloo" and aborted(proc)):
            break
    assert proc is not None
    tail = ((proc.stderr or "") + (proc.stdout or ""))[-3000:]
    raise GpulabError(f"{what} over {nprocs} {backend} processes failed (exit {proc.returncode}):\n{tail}")
