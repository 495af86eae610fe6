"""Sweep runs waiting for their peers (gpulab.launch.peers): a run whose sweep is gone stops, in real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

# A sweep stand-in: it starts one run (with its pid in the environment, as gpulab.launch.sweep does) that waits for a
# peer that never comes, prints the run's pid and ends at once, before the run has even imported gpulab.
SWEEP = """
import os, subprocess, sys
from gpulab.launch.peers import SWEEP_PID_ENV
code = "import sys; from pathlib import Path; from gpulab.launch.peers import wait_for_peers; " \\
       "wait_for_peers(Path(sys.argv[1]), 0, 2, 3600)"
run = subprocess.Popen([sys.executable, "-c", code, sys.argv[1]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, **{SWEEP_PID_ENV: str(os.getpid())}))
print(run.pid, flush=True)
"""


def test_a_run_whose_sweep_is_gone_stops_waiting_for_its_peers(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    sweep = subprocess.run([sys.executable, "-c", SWEEP, str(ready)], capture_output=True, text=True, timeout=60)
    pid = int(sweep.stdout.split()[0])
    deadline = time.monotonic() + 60
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid), "the orphaned run still waits for its peers"
    assert (ready / "0").exists()  # it had announced itself: it stopped in the wait, not before


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan may wait a moment to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
