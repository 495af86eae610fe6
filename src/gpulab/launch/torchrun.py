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
from gpulab.interrupts import stop_child
from gpulab.names import CommBackend

_RETRIES = 1
STOP_GRACE_S = 10.0  # for the agent to stop its workers before they are killed
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
    comm_backend: CommBackend,
    threads: int = 1,
    timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Run `module` under torchrun on `nprocs` local processes; `out` is the JSON file rank 0 writes."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nprocs}", "-m", module]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc: subprocess.CompletedProcess[str] | None = None
    for _attempt in range(_RETRIES + 1):
        try:
            proc = _run_agent([*cmd, *args], env, timeout_s)
        except subprocess.TimeoutExpired as err:
            raise GpulabError(
                f"{what} over {nprocs} processes did not finish in {timeout_s:.0f} s: a hung collective usually "
                "means a broken P2P/NVLink path or a blocked rendezvous port; rerun with NCCL_DEBUG=INFO to see "
                "where it stops, or allow more time"
            ) from err
        if proc.returncode == 0 and out.exists():
            data: dict[str, Any] = json.loads(out.read_text())
            return data
        if not (comm_backend is CommBackend.GLOO and aborted(proc)):
            break
    assert proc is not None
    tail = ((proc.stderr or "") + (proc.stdout or ""))[-3000:]
    raise GpulabError(f"{what} over {nprocs} {comm_backend} processes failed (exit {proc.returncode}):\n{tail}")


def _run_agent(cmd: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """torchrun's agent to its end. Stopped early (Ctrl-C, SIGTERM, the time limit), it is sent SIGTERM, stops its
    workers as it does then, and whatever of its tree is left after STOP_GRACE_S is killed.

    The agent starts its workers in sessions of their own, out of reach of a signal to this process group; in its
    own session it is out of reach too, so it is told to stop once, by this process, not halfway through stopping
    by a second signal."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    ) as agent:
        try:
            stdout, stderr = agent.communicate(timeout=timeout_s)
        except BaseException:
            stop_child(agent, STOP_GRACE_S)
            raise
    return subprocess.CompletedProcess(cmd, agent.returncode, stdout, stderr)
