"""GPU telemetry while a workload runs: a daemon thread polling NVML.

    with Sampler([0, 1], interval_s=0.1) as sampler:
        run_the_workload()
    summary = sampler.summary(start=t0, end=t1)  # None when there is no NVML

Each poll reads, per GPU: utilisation %, memory used MiB, power W, SM clock MHz, temperature C and the active
clock-event (throttle) reasons. Without NVML (no driver, no nvidia-ml-py, no GPU) the sampler does nothing and
`summary()` returns None: telemetry is an extra, never a reason for a run to fail.

Cost: one poll is six NVML calls per GPU. The thread's own CPU time is measured (`time.thread_time`) and
reported by `overhead()` as a fraction of the polling interval, so a run can prove the sampler stayed out of its
way. Memory stays bounded on long runs: past `max_stored` polls per GPU the stored series is thinned by half
and the poll interval doubles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from gpulab.hw import nvml
from gpulab.records import GpuTelemetry, TelemetrySummary

# One stored poll: (wall time, util %, memory MiB, power W, SM MHz, temperature C, throttle bitmask)
_Row = tuple[float, float | None, float | None, float | None, float | None, float | None, int | None]
_FIELDS = ("util", "mem_mib", "power_w", "sm_mhz", "temp_c")

DEFAULT_INTERVAL_S = 0.1
TIMELINE_POINTS = 600  # most timeline points per GPU in a summary
MAX_STORED = 20_000  # polls kept per GPU before the series is thinned


class Sampler:
    """Poll NVML every `interval_s` for the GPUs `indices` (NVML indices) while the context is open."""

    def __init__(
        self,
        indices: Sequence[int],
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        nv: Any | None = None,
        timeline_points: int = TIMELINE_POINTS,
        max_stored: int = MAX_STORED,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.indices = list(indices)
        self.interval_s = interval_s
        self.timeline_points = max(1, timeline_points)
        self.max_stored = max(2, max_stored)
        self.problem: str | None = None  # why nothing is sampled, when nothing is
        self._nv = nv
        self._handles: list[Any] = []
        self._rows: dict[int, list[_Row]] = {i: [] for i in self.indices}
        self._lock = threading.Lock()
        # Held while the thread runs; stop() releases it. A timed acquire is the cheapest interruptible sleep.
        self._stop = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stride = 1  # store (and poll) every `stride`-th tick after thinning
        self._polls = 0
        self._cpu_s = 0.0
        self._t0 = 0.0
        self._nvml_open = False

    # -- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def active(self) -> bool:
        """True once NVML answered and the polling thread runs (or ran)."""
        return bool(self._handles)

    def start(self) -> None:
        if self._thread is not None or not self.indices:
            if not self.indices:
                self.problem = "no GPU to sample"
            return
        nv = self._nv
        if nv is None:
            nv, problem = nvml.load_nvml()
            if nv is None:
                self.problem = problem
                return
        try:
            nv.nvmlInit()
        except Exception as err:  # NVMLError (no driver) or OSError (broken library): sample nothing
            self.problem = f"NVML unavailable: {err}"
            return
        self._nv = nv
        self._nvml_open = True
        handles = []
        for index in self.indices:
            handle = nvml._call(nv, "nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                self.problem = f"NVML has no GPU with index {index}"
                self._shutdown()
                return
            handles.append(handle)
        self._handles = handles
        self._t0 = time.time()
        self._stop.acquire()
        self._thread = threading.Thread(target=self._loop, name="gpulab-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.release()
            self._thread.join()
            self._thread = None
            self._shutdown()

    def _shutdown(self) -> None:
        if self._nvml_open:
            nvml._call(self._nv, "nvmlShutdown")
            self._nvml_open = False

    # -- polling -------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        cpu0 = time.thread_time()
        tick = 0
        next_at = time.monotonic()
        while True:
            if tick % self._stride == 0:
                self._poll()
                self._cpu_s = time.thread_time() - cpu0
            tick += 1
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow NVML call): skip the missed ticks instead of bursting
                next_at = time.monotonic()
                delay = 0.0
            if self._stop.acquire(timeout=delay):
                self._stop.release()
                break
        self._cpu_s = time.thread_time() - cpu0

    def _poll(self) -> None:
        nv = self._nv
        now = time.time()
        sm = nvml._const(nv, "NVML_CLOCK_SM", 1)
        sensor = nvml._const(nv, "NVML_TEMPERATURE_GPU", 0)
        rows = []
        for index, handle in zip(self.indices, self._handles, strict=True):
            util = nvml._call(nv, "nvmlDeviceGetUtilizationRates", handle)
            mem = nvml._call(nv, "nvmlDeviceGetMemoryInfo", handle)
            power = nvml._call(nv, "nvmlDeviceGetPowerUsage", handle)
            clock = nvml._call(nv, "nvmlDeviceGetClockInfo", handle, sm)
            temp = nvml._call(nv, "nvmlDeviceGetTemperature", handle, sensor)
            mask = nvml._first(
                nv, ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), handle
            )
            used = getattr(mem, "used", None)
            rows.append(
                (
                    index,
                    (
                        now,
                        _num(getattr(util, "gpu", None)),
                        used / 2**20 if isinstance(used, (int, float)) else None,
                        power / 1000 if isinstance(power, (int, float)) else None,
                        _num(clock),
                        _num(temp),
                        mask if isinstance(mask, int) else None,
                    ),
                )
            )
        with self._lock:
            self._polls += 1
            for index, row in rows:
                self._rows[index].append(row)
            if len(self._rows[self.indices[0]]) > self.max_stored:
                for index in self.indices:
                    self._rows[index] = self._rows[index][::2]
                self._stride *= 2

    # -- results -------------------------------------------------------------------------------------------
    @property
    def polls(self) -> int:
        return self._polls

    @property
    def cpu_seconds(self) -> float:
        """CPU time the sampling thread itself used."""
        return self._cpu_s

    def overhead(self) -> float | None:
        """The sampler's CPU time per poll as a fraction of the poll interval (0.01 = 1 % of one core)."""
        if not self._polls:
            return None
        return self._cpu_s / self._polls / (self.interval_s * self._stride)

    def summary(self, start: float | None = None, end: float | None = None) -> TelemetrySummary | None:
        """Per-GPU statistics over [start, end] (wall-clock `time.time()` values; None = open) and the
        whole run's timeline, at most `timeline_points` points per GPU. None when nothing was sampled."""
        if not self.active:
            return None
        with self._lock:
            series = {index: list(rows) for index, rows in self._rows.items()}
            polls = self._polls
        gpus: list[GpuTelemetry] = []
        timeline: list[dict[str, Any]] = []
        for index in self.indices:
            rows = series[index]
            window = [r for r in rows if (start is None or r[0] >= start) and (end is None or r[0] <= end)]
            gpus.append(self._stats(index, window, start, end))
            timeline.extend(self._timeline(index, rows))
        timeline.sort(key=lambda p: (p["t"], p["index"]))
        return TelemetrySummary(
            samples=polls, interval_s=self.interval_s * self._stride, per_gpu=gpus, timeline=timeline
        )

    def _stats(self, index: int, rows: list[_Row], start: float | None, end: float | None) -> GpuTelemetry:
        def column(k: int) -> list[float]:
            return [v for v in (r[k] for r in rows) if isinstance(v, (int, float))]

        util, mem, power, sm, temp = (column(k) for k in range(1, 6))
        counts: dict[str, int] = {}
        for r in rows:
            for name in nvml.decode_throttle(r[6]):
                counts[name] = counts.get(name, 0) + 1
        window: list[float | None] | None = None
        if start is not None or end is not None:
            window = [
                _round(start - self._t0) if start is not None else None,
                _round(end - self._t0) if end is not None else None,
            ]
        return GpuTelemetry(
            index=index,
            samples=len(rows),
            util_mean=_mean(util),
            util_max=_max(util),
            mem_mean_mib=_mean(mem),
            mem_max_mib=_max(mem),
            power_mean_w=_mean(power),
            power_max_w=_max(power),
            sm_mhz_mean=_mean(sm),
            sm_mhz_min=_round(min(sm)) if sm else None,
            sm_mhz_max=_max(sm),
            temp_mean_c=_mean(temp),
            temp_max_c=_max(temp),
            throttle_reasons=sorted(counts, key=lambda n: -counts[n]),
            throttle_counts=counts,
            window_s=window,
        )

    def _timeline(self, index: int, rows: list[_Row]) -> list[dict[str, Any]]:
        """Average consecutive polls into at most `timeline_points` buckets."""
        if not rows:
            return []
        buckets = min(len(rows), self.timeline_points)
        points = []
        for b in range(buckets):
            chunk = rows[b * len(rows) // buckets : (b + 1) * len(rows) // buckets]
            point: dict[str, Any] = {"t": round(sum(r[0] for r in chunk) / len(chunk) - self._t0, 3), "index": index}
            for k, name in enumerate(_FIELDS, start=1):
                values = [v for v in (r[k] for r in chunk) if isinstance(v, (int, float))]
                point[name] = _mean(values)
            points.append(point)
        return points


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _round(value: float) -> float:
    return round(value, 2)


def _mean(values: list[float]) -> float | None:
    return _round(sum(values) / len(values)) if values else None


def _max(values: list[float]) -> float | None:
    return _round(max(values)) if values else None


def nvml_indices_for_uuids(uuids: Sequence[str | None], nv: Any | None = None) -> list[int] | None:
    """NVML indices of the GPUs with these UUIDs ("GPU-..."); None when NVML cannot tell them all."""
    if nv is None:
        nv, _ = nvml.load_nvml()
        if nv is None:
            return None
    try:
        nv.nvmlInit()
    except Exception:
        return None
    try:
        count = nvml._call(nv, "nvmlDeviceGetCount") or 0
        by_uuid = {}
        for i in range(count):
            handle = nvml._call(nv, "nvmlDeviceGetHandleByIndex", i)
            uuid = nvml._str(nvml._call(nv, "nvmlDeviceGetUUID", handle)) if handle is not None else None
            if uuid:
                by_uuid[uuid.lower()] = i
        found = [by_uuid.get(u.lower()) if u else None for u in uuids]
        return None if any(i is None for i in found) else [i for i in found if i is not None]
    finally:
        nvml._call(nv, "nvmlShutdown")
