"""Host contention measured, not guessed: CPU pressure over a run, a short CPU calibration at its start and end, and
the rule that calls the host contended.

- Pressure: /proc/pressure/cpu (Linux 4.20 and later with PSI on) counts, in microseconds since boot, the time in
  which at least one runnable task waited for a CPU (`some`) and, from Linux 5.13, in which every non-idle task did
  (`full`: always 0 for the whole system, meaningful only in a cgroup). Its growth over a run divided by the run's
  wall time is the share of the run in which the CPUs had more work than they could run. The run's own threads count
  too (more threads than CPUs), hence a threshold well above what one thread per CPU adds.
- Calibration: one fixed numpy kernel (sin over BLOCK doubles; numpy releases the GIL for it) for CALIBRATION_S on
  one thread, then on one thread per CPU the process may use: millions of values per second. The all-threads figure
  at the start and at the end of a run shows contention that neither pressure nor steal shows (a hypervisor's
  neighbours on the same cores, a CPU quota). It runs while the run measures nothing.
- Steal: the share of CPU time the hypervisor gave to others (`gpulab.report.hostload`).

Measured on a quiet 16-CPU H200 VM: training a small CNN on 16 torch threads put the CPUs under pressure 0.1 % of the
time (32 threads: 52 %); 16 busy processes beside it made it 97.6 %, the all-threads calibration 5.5× slower
(1,790 → 328 M values/s) and the training 29× slower (5,802 → 202 samples/s).

`contended(entry)` judges one host-load entry (gpulab.report.hostload) with the thresholds below.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PROC_PRESSURE_CPU = Path("/proc/pressure/cpu")

# A run's host is contended when any of these holds (each alone is enough):
# Measured on a 2x H200 guest (32 CPUs) in the standard tier: quiet runs 0.08-0.14 % pressure and 6-8 % busy; beside
# 32 busy loops 6.4 % pressure, 99.97 % busy, load 25 on 32 CPUs at the end.
PRESSURE_PCT = 5.0  # runnable tasks waited for a CPU during at least this share of the run (PSI `some`)
STEAL_PCT = 5.0  # the hypervisor gave at least this share of the CPU time to others
BUSY_PCT = 50.0  # others' work kept the CPUs busy at least this share of the run (the run's own taken out) ...
LOAD_PER_CPU = 0.75  # ... and the load average per CPU at its end was at least this: others' work filled them
# The calibration does not make a host contended: on that quiet guest its all-threads figure read 1,506 at the
# start of a healthy run and 572 at its end, and beside the busy loops 179 and 257 (they ran at both ends). It makes
# it unsteady (`unsteady`): compare then does not judge its host rows, whose band it exceeds.
SLOWDOWN = 1.25  # a calibration this many times slower at one end than at the other: named, and the host unsteady

BLOCK = 16_384  # doubles per kernel call: 128 KiB in and out, in a core's cache; long enough to release the GIL
CALIBRATION_S = 0.15  # per half (one thread, then all threads): about 0.3 s per calibration
WARM_UP_S = 0.03  # the CPU's clock ramps up from idle before the timing starts
CALIBRATION_UNIT = "M values/s"


def read_pressure(path: Path = PROC_PRESSURE_CPU) -> dict[str, int] | None:
    """{"some": µs, "full": µs} from a PSI file ("full" only where the kernel writes it); None where it cannot be
    read (no PSI: kernels before 4.20, `psi=0`, not Linux) or holds no `some` total."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        kind, *fields = line.split() or [""]
        if kind not in ("some", "full"):
            continue
        for item in fields:
            key, _, value = item.partition("=")
            if key == "total" and value.isdigit():
                out[kind] = int(value)
    return out if "some" in out else None


def pressure_pct(
    before: Mapping[str, int] | None, after: Mapping[str, int] | None, seconds: float, kind: str
) -> float | None:
    """The share of `seconds` of wall time (in %) that PSI counted as `kind` between two readings; None when either
    reading lacks it."""
    if not before or not after or kind not in before or kind not in after or seconds <= 0:
        return None
    waited_s = (after[kind] - before[kind]) / 1e6
    return round(min(100.0, max(0.0, waited_s / seconds * 100)), 2)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), else every CPU."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _rate(threads: int, seconds: float) -> float:
    """Millions of values per second that `threads` threads compute together with the calibration kernel."""
    counts = [0] * threads
    clock = [0.0, 0.0]  # start, deadline: set by the barrier once every thread is warm, before any starts

    def go() -> None:
        clock[0] = time.perf_counter()
        clock[1] = clock[0] + seconds

    ready = threading.Barrier(threads, action=go)

    def work(i: int) -> None:
        x = np.linspace(0.0, 1.0, BLOCK)
        y = np.empty_like(x)
        warm = time.perf_counter() + WARM_UP_S
        while time.perf_counter() < warm:
            np.sin(x, out=y)
        ready.wait()
        done, end = 0, clock[1]
        while time.perf_counter() < end:
            np.sin(x, out=y)
            done += 1
        counts[i] = done

    pool = [
        threading.Thread(target=work, args=(i,), name=f"gpulab-calibration-{i}", daemon=True) for i in range(threads)
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(counts) * BLOCK / (time.perf_counter() - clock[0]) / 1e6


def calibrate(seconds: float = CALIBRATION_S, threads: int | None = None) -> dict[str, Any]:
    """The calibration kernel's rate on one thread and on `threads` (default: one per usable CPU), in
    CALIBRATION_UNIT: {"one_thread": 84.1, "all_threads": 2650.3, "threads": 32}."""
    n = threads or usable_cpus()
    one = _rate(1, seconds)
    every = _rate(n, seconds)
    return {"one_thread": round(one, 2), "all_threads": round(every, 2), "threads": n}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def slowdown(entry: Mapping[str, Any], now: bool = False) -> tuple[float, str] | None:
    """(how many times slower, text) of the all-threads calibration at one end of a run than at the other (either
    way round); None without both. The one-thread figure is recorded, not judged: on a quiet 16-CPU VM it moved
    1.7× between back-to-back calibrations (a vCPU's sibling busy elsewhere), all threads' within 10 %. `now`: the
    end is a reading mid-run."""
    start, end = entry.get("calibration_start") or {}, entry.get("calibration_end") or {}
    a, b = _num(start.get("all_threads")), _num(end.get("all_threads"))
    if not a or not b or a <= 0 or b <= 0:
        return None
    factor = max(a / b, b / a)
    where = ("now" if now else "at the end") if a > b else "at the start"
    threads = end.get("threads") or start.get("threads")
    return factor, f"calibration on {threads} threads {factor:.2f}× slower {where}"


def _pct(value: float) -> str:
    return f"{value:.0f} %" if value >= 10 else f"{value:.1f} %"


def figures(entry: Mapping[str, Any], now: bool = False) -> str:
    """The contention figures an entry holds, in words: "CPUs 43 % of the run under pressure, calibration on 32
    threads 2.10× slower at the end, steal 0.4 %" ("" when it holds none)."""
    parts = []
    pressure = _num(entry.get("cpu_pressure_pct"))
    if pressure is not None:
        parts.append(f"CPUs {_pct(pressure)} of the run under pressure")
    slow = slowdown(entry, now)
    if slow is not None:
        parts.append(slow[1] if slow[0] >= 1.05 else "calibration steady (within 5 %)")
    steal = _num(entry.get("steal_pct"))
    if steal is not None:
        parts.append(f"steal {_pct(steal)}")
    return ", ".join(parts)


def busy_with_load(entry: Mapping[str, Any]) -> str | None:
    """ "CPUs 100 % busy (this run 2 %), load 25.1 on 32 CPUs at the end" when others' work filled the CPUs over the
    run, else None. The run's own CPU time does not count: CPU rows on all threads of a quiet host are not contention
    (on 2 CPUs they alone keep them busy with a load of 2)."""
    busy, cpus = _num(entry.get("busy_pct")), _num(entry.get("cpus"))
    own = _num(entry.get("own_busy_pct"))  # older reports lack it: all of it counted as others'
    load = entry.get("loadavg_end") or []
    first = _num(load[0]) if load else None
    if busy is None or not cpus or first is None:
        return None
    if busy - (own or 0.0) >= BUSY_PCT and first / cpus >= LOAD_PER_CPU:
        mine = f" (this run {_pct(own)})" if own is not None else ""
        return f"CPUs {_pct(busy)} busy{mine}, load {first:.1f} on {cpus:.0f} CPUs at the end"
    return None


def contended(entry: Mapping[str, Any], now: bool = False) -> str | None:
    """Why the host was contended over the run an entry describes (its figures), or None when it was not, as far as
    the entry measured: CPU pressure >= PRESSURE_PCT of the run, steal >= STEAL_PCT, or the CPUs BUSY_PCT busy with
    others' work and a load of LOAD_PER_CPU per CPU at the end. The calibration is named among the figures, not
    judged."""
    pressure, steal = _num(entry.get("cpu_pressure_pct")), _num(entry.get("steal_pct"))
    busy = busy_with_load(entry)
    if (pressure is not None and pressure >= PRESSURE_PCT) or (steal is not None and steal >= STEAL_PCT) or busy:
        return ", ".join(filter(None, [busy, figures(entry, now)]))
    return None


def _per_run(entries: Sequence[Mapping[str, Any]], judge: Callable[[Mapping[str, Any]], str | None]) -> str | None:
    """`judge`'s reason for each entry that has one, named by its run when the report has several; None if none."""
    found = [(str(e.get("what") or "a run"), why) for e in entries if (why := judge(e)) is not None]
    if not found:
        return None
    if len(entries) == 1:
        return found[0][1]
    return "; ".join(f"{what}: {why}" for what, why in found)


def report_contention(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a report's host was contended (each contended run's figures, named by the run when it has several), or
    None when none of its host-load entries was."""
    return _per_run(entries, contended)


def unsteady(entry: Mapping[str, Any]) -> str | None:
    """Why a run's host rows cannot be judged at the host band, or None: its all-threads calibration moved SLOWDOWN
    times or more between the run's ends with nothing the run could see busy (a VM's neighbours on the same cores,
    a CPU quota). Three standard runs of a quiet 2x H200 guest (pressure 0.1 %, steal 0.05 %) read 1,101 -> 785,
    1,409 -> 1,322 and 522 -> 1,446, and its CPU rows moved -86 %...+26 % between them while every GPU row held."""
    slow = slowdown(entry)
    return slow[1] if slow is not None and slow[0] >= SLOWDOWN else None


def report_unsteady(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a report's host CPUs moved under it (each such run's calibration, named by the run when it has
    several), or None."""
    return _per_run(entries, unsteady)


def measured(entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any entry measured contention at all (pressure, a calibration or steal)."""
    keys = ("cpu_pressure_pct", "calibration_start", "steal_pct")
    return any(e.get(k) is not None for e in entries for k in keys)


def host_verdict(entries: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The host's verdict on a report's host-load entries, beside the GPU verdict (never changing it): ("contended",
    "host: contended — <why>"), ("unsteady", "host: unsteady — <figures>: ..."), ("quiet", "host: quiet —
    <figures>") or ("not measured", "host: not measured ...")."""
    why = report_contention(entries)
    if why is not None:
        return "contended", f"host: contended — {why}"
    shaky = report_unsteady(entries)
    if shaky is not None:
        shown = figures(entries[0]) if len(entries) == 1 else shaky
        return "unsteady", f"host: unsteady — {shown}: its CPU rows moved with it (judge them only on a steady host)"
    if not measured(entries):
        return "not measured", "host: not measured (no CPU pressure, calibration or steal recorded)"
    shown = figures(entries[0]) if len(entries) == 1 else f"{len(entries)} runs, none contended"
    return "quiet", f"host: quiet — {shown}"
