"""How busy the host was while a run measured: load average before and after, CPU steal and busy time over it.

A report keeps one entry per run that added results (`Report.host_load`); `gpulab compare` reads them to judge
host rows (a shared or stolen-from host widens their noise band). Linux's /proc/stat and os.getloadavg only:
elsewhere the entry has no steal or busy figure.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from pathlib import Path
from typing import Any

PROC_STAT = Path("/proc/stat")


def _cpu_times(stat: Path = PROC_STAT) -> tuple[int, int, int] | None:
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


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


class LoadWatch:
    """Started before a run measures, `finish()`ed after it: the run's host-load entry."""

    def __init__(self, what: str, stat: Path = PROC_STAT) -> None:
        self.what = what
        self.stat = stat
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.monotonic()
        self.load0 = _loadavg()
        self.times0 = _cpu_times(stat)

    def finish(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "what": self.what,
            "started": self.started,
            "seconds": round(time.monotonic() - self.t0, 1),
            "cpus": os.cpu_count() or 1,
            "loadavg_start": self.load0,
            "loadavg_end": _loadavg(),
            "steal_pct": None,
            "busy_pct": None,
        }
        times1 = _cpu_times(self.stat)
        if self.times0 and times1:
            total = times1[0] - self.times0[0]
            if total > 0:
                entry["steal_pct"] = round(min(100.0, max(0.0, (times1[2] - self.times0[2]) / total * 100)), 2)
                entry["busy_pct"] = round(min(100.0, max(0.0, (1 - (times1[1] - self.times0[1]) / total) * 100)), 2)
        return entry
