"""Sweep runs that start their timed loops together: each announces itself in a shared directory and waits.

A run that failed before it got ready leaves "<index>.gone" there (gpulab.launch.sweep), counted as arrived, so
its peers do not wait for it until the time limit. A run whose sweep is gone (its parent process ended, say by a
Ctrl-C that came while the run was being started) stops instead of waiting out the limit alone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SWEEP_PID_ENV = "GPULAB_SWEEP_PID"  # set by the sweep for its runs: the process they belong to


def wait_for_peers(ready_dir: Path, index: int, runs: int, timeout_s: float) -> bool:
    """Announce run `index` as ready and wait for the others; False when they did not all come in time."""
    # The sweep's own pid, as it set it: a run started just as its sweep died has no other parent to compare with.
    parent = int(os.environ.get(SWEEP_PID_ENV) or os.getppid())
    ready_dir.mkdir(parents=True, exist_ok=True)
    (ready_dir / str(index)).touch()
    deadline = time.monotonic() + timeout_s
    while len({entry.name.split(".")[0] for entry in ready_dir.iterdir()}) < runs:
        if time.monotonic() > deadline:
            return False
        if os.getppid() != parent:
            raise SystemExit(f"sweep run {index}: the sweep that started it is gone; stopping")
        time.sleep(0.01)
    return True


def mark_gone(ready_dir: Path, index: int) -> None:
    """Run `index` will never get ready: its peers stop waiting for it."""
    ready_dir.mkdir(parents=True, exist_ok=True)
    (ready_dir / f"{index}.gone").touch()
