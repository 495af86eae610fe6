"""The sweep's pool: real processes on real threads. A stop ends every run under way with all it started and
starts no more; a run past its time is stopped and reported as such; nothing is forked from the sweep itself."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from gpulab.interrupts import descendants
from gpulab.launch.sweep_pool import SweepPool, SweepStopped

# A run that starts a child of its own and then waits: both must go when the run is stopped.
PARENT_AND_CHILD = [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _runs_below(pid: int) -> list[tuple[int, int]]:
    """The PARENT_AND_CHILD runs below `pid` and their sleeps (not whatever else the test process started)."""
    below = descendants(pid)
    runs = [p for p in below if "time.sleep(60)" in _cmdline(p[0])]
    return runs + [p for run, _ in runs for p in descendants(run)]


GONE_S = 5.0  # for a killed process to leave the process table


def _wait_until(ready, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready()


def test_a_run_returns_its_exit_code_and_writes_its_log(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    with SweepPool(2) as pool, log.open("wb") as fh:
        code = pool.run(
            [sys.executable, "-c", "print('hello'); raise SystemExit(3)"], env=dict(os.environ), log=fh, timeout_s=30
        )
    assert code == 3
    assert log.read_text().strip() == "hello"


def test_a_run_past_its_time_is_stopped_with_its_children(tmp_path: Path) -> None:
    me = os.getpid()
    with SweepPool(1, grace_s=0.5) as pool, (tmp_path / "log").open("wb") as fh:
        started = time.monotonic()
        future = pool.map(lambda _: pool.run(PARENT_AND_CHILD, env=dict(os.environ), log=fh, timeout_s=3.0), [0])[0]
        _wait_until(lambda: len(_runs_below(me)) == 2)
        runs = _runs_below(me)
        assert pool.gather([future]) == [None]
    assert time.monotonic() - started < 20
    # SIGKILLed processes take a moment to leave (their orphans are reaped by whoever adopts them)
    _wait_until(lambda: not any(_alive(pid) for pid, _ in runs), timeout_s=GONE_S)


def test_leaving_on_an_exception_stops_every_run_and_starts_no_more(tmp_path: Path) -> None:
    me = os.getpid()
    codes: list[int | None] = []
    refused: list[BaseException] = []

    def one(k: int) -> None:
        with (tmp_path / f"log{k}").open("wb") as fh:
            try:
                codes.append(pool.run(PARENT_AND_CHILD, env=dict(os.environ), log=fh, timeout_s=120))
            except SweepStopped as err:
                refused.append(err)

    with pytest.raises(KeyboardInterrupt), SweepPool(2, grace_s=0.5) as pool:
        futures = pool.map(one, [0, 1])
        # both runs and their sleeps under way
        _wait_until(lambda: len(_runs_below(me)) == 4)
        runs = _runs_below(me)
        stopped = time.monotonic()
        raise KeyboardInterrupt
    assert time.monotonic() - stopped < 20  # not the runs' 60 s
    assert all(f.done() for f in futures)
    assert sorted(c for c in codes if c is not None) == sorted(codes) and len(codes) == 2  # each run was ended
    # SIGKILLed processes take a moment to leave (their orphans are reaped by whoever adopts them)
    _wait_until(lambda: not any(_alive(pid) for pid, _ in runs), timeout_s=GONE_S)
    later = threading.Thread(target=one, args=(2,))
    later.start()
    later.join()
    assert len(refused) == 1 and "stopping" in str(refused[0])


def test_the_sweep_forks_nothing_but_its_runs(tmp_path: Path) -> None:
    """No process below the sweep is a copy of it (a fork shares its command line): only the runs it started."""
    me = os.getpid()
    with SweepPool(2) as pool:
        futures = pool.map(lambda k: pool.run(["sleep", "1"], env=dict(os.environ), log=None, timeout_s=30), [0, 1])
        _wait_until(lambda: [_cmdline(p) for p, _ in descendants(me)].count("sleep 1") == 2)
        below = [_cmdline(p) for p, _ in descendants(me)]
        assert pool.gather(futures) == [0, 0]
    assert _cmdline(me) not in below, below


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
