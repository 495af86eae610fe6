"""How busy the host was while a run measured: load average before and after, CPU steal and busy time over it, the
share of it under CPU pressure and a CPU calibration at its start and end (gpulab.report.contention).

A report keeps one entry per run that added results (`Report.host_load`); `gpulab compare` reads them to judge
host rows (a shared or stolen-from host widens their noise band; a contended one's host rows are not regressions).
Linux's /proc/stat, /proc/loadavg and /proc/pressure/cpu only: elsewhere the entry has no steal, busy, load or pressure
figure. GPULAB_PROC names another directory laid out as /proc to read them from (a recorded or made-up host).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from pathlib import Path
from typing import Any

from gpulab.report.contention import PROC_PRESSURE_CPU, calibrate, contended, pressure_pct, read_pressure

PROC_ENV = "GPULAB_PROC"


def proc_dir() -> Path:
    """Where the host's load figures are read: /proc, or the directory GPULAB_PROC names."""
    return Path(os.environ.get(PROC_ENV) or "/proc")


def _own_jiffies() -> float:
    """CPU time this process and its reaped children used, in /proc/stat's units (clock ticks)."""
    t = os.times()
    return (t.user + t.system + t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK")


def _cpu_times(stat: Path) -> tuple[int, int, int] | None:
    """(total, idle, steal) jiffies of all CPUs, or None where /proc/stat cannot be read."""
    try:
        first = stat.read_text(encoding="ascii").splitlines()[0].split()
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        fields = [int(x) for x in first[1:9]]
    except ValueError:
        return None
    fields += [0] * (8 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return user + nice + system + idle + iowait + irq + softirq + steal, idle + iowait, steal


def _loadavg(path: Path) -> list[float]:
    """The 1, 5 and 15 minute load averages, or [] where they cannot be read."""
    try:
        return [round(float(x), 2) for x in path.read_text(encoding="ascii").split()[:3]]
    except (OSError, UnicodeDecodeError, ValueError):
        return []


class LoadWatch:
    """Started before a run measures, `finish()`ed after it: the run's host-load entry. `calibrate_cpu`: time the CPU
    calibration at the start and the end (about 0.3 s each); `proc` is the directory laid out as /proc to read
    (proc_dir() by default), `pressure` the PSI file in it to read instead."""

    def __init__(
        self, what: str, proc: Path | None = None, pressure: Path | None = None, calibrate_cpu: bool = True
    ) -> None:
        proc = proc or proc_dir()
        self.what = what
        self.stat, self.loadavg = proc / "stat", proc / "loadavg"
        self.pressure = pressure or proc / PROC_PRESSURE_CPU.relative_to("/proc")
        self.calibration0 = calibrate() if calibrate_cpu else None  # before the clocks: its own work is not the run's
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.monotonic()
        self.load0 = _loadavg(self.loadavg)
        self.times0 = _cpu_times(self.stat)
        self.own0 = _own_jiffies()
        self.psi0 = read_pressure(self.pressure)

    def finish(self, calibrate_cpu: bool = True) -> dict[str, Any]:
        """The entry from the start until now (the run may go on: a reading mid-run is an entry too); the end's
        calibration only where the start had one and `calibrate_cpu`."""
        seconds = time.monotonic() - self.t0
        times1 = _cpu_times(self.stat)
        psi1 = read_pressure(self.pressure)
        entry: dict[str, Any] = {
            "what": self.what,
            "started": self.started,
            "seconds": round(seconds, 1),
            "cpus": os.cpu_count() or 1,
            "loadavg_start": self.load0,
            "loadavg_end": _loadavg(self.loadavg),
            "steal_pct": None,
            "busy_pct": None,
            "own_busy_pct": None,
            "cpu_pressure_pct": pressure_pct(self.psi0, psi1, seconds, "some"),
            "cpu_pressure_full_pct": pressure_pct(self.psi0, psi1, seconds, "full"),
            "calibration_start": self.calibration0,
            "calibration_end": calibrate() if self.calibration0 is not None and calibrate_cpu else None,
        }
        if self.times0 and times1:
            total = times1[0] - self.times0[0]
            if total > 0:
                entry["steal_pct"] = round(min(100.0, max(0.0, (times1[2] - self.times0[2]) / total * 100)), 2)
                entry["busy_pct"] = round(min(100.0, max(0.0, (1 - (times1[1] - self.times0[1]) / total) * 100)), 2)
                own = (_own_jiffies() - self.own0) / total * 100
                entry["own_busy_pct"] = round(min(entry["busy_pct"], max(0.0, own)), 2)
        return entry

    def contention_so_far(self, calibrate_cpu: bool = True) -> str | None:
        """Whether the host has been contended since the start (gpulab.report.contention.contended), mid-run: why,
        or None. With `calibrate_cpu` (and a calibration at the start) it times the calibration now (about 0.3 s)."""
        return contended(self.finish(calibrate_cpu), now=True)
