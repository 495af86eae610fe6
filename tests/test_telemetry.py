"""The NVML telemetry sampler, against a stand-in NVML module (this machine has no GPU; the real binding is
exercised by validate/ on GPU machines)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from gpulab import telemetry
from gpulab.hw import nvml
from gpulab.records import Report, Result
from gpulab.report.io import report_json
from gpulab.telemetry import Sampler, nvml_indices_for_uuids


class FakeNvml:
    """The few pynvml functions the sampler calls, answering fixed per-GPU readings."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: int = 2, throttle: int = 0x004, fail_init: bool = False) -> None:
        self.gpus = gpus
        self.throttle = throttle
        self.fail_init = fail_init
        self.inits = self.shutdowns = 0
        self.calls = 0

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        if i >= self.gpus:
            raise self.NVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-0000000{h}"

    def nvmlDeviceGetUtilizationRates(self, h):
        self.calls += 1
        return SimpleNamespace(gpu=90 + h, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30, used=(1000 + h) * 2**20, free=0)

    def nvmlDeviceGetPowerUsage(self, h):
        return 300_000 + 1000 * h  # mW

    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60 + h

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.throttle if h == 0 else 0


def test_summary_has_per_gpu_statistics_and_a_timeline():
    fake = FakeNvml(gpus=2)
    with Sampler([0, 1], interval_s=0.01, nv=fake) as s:
        time.sleep(0.2)
    summary = s.summary()
    assert summary is not None and fake.inits == 1 and fake.shutdowns == 1
    assert summary.samples == s.polls >= 5 and summary.interval_s == 0.01
    g0, g1 = summary.per_gpu
    assert (g0.index, g0.util_mean, g0.util_max, g0.mem_max_mib) == (0, 90.0, 90.0, 1000.0)
    assert (g1.power_mean_w, g1.sm_mhz_mean, g1.temp_max_c) == (301.0, 1980.0, 61.0)
    assert g0.throttle_reasons == ["sw_power_cap"] and g0.throttle_counts["sw_power_cap"] == g0.samples
    assert g1.throttle_reasons == [] and g0.window_s is None and "window_s" not in g0.to_dict()
    points = {p["index"] for p in summary.timeline}
    assert points == {0, 1} and len(summary.timeline) == 2 * s.polls
    first = summary.timeline[0]
    assert set(first) == {"t", "index", "util", "mem_mib", "power_w", "sm_mhz", "temp_c"} and first["t"] >= 0
    report_json(  # fits the report schema
        Report(
            fingerprint={"host": {"hostname": "t"}},
            results=[Result("w", "torch", "gpu", 1, "bf16", 1.0, "samples/s", telemetry=summary)],
        )
    )


def test_window_restricts_the_statistics_not_the_timeline():
    with Sampler([0], interval_s=0.01, nv=FakeNvml(gpus=1)) as s:
        time.sleep(0.1)
        start = time.time()
        time.sleep(0.1)
        end = time.time()
        time.sleep(0.05)
    whole, window = s.summary(), s.summary(start, end)
    assert whole is not None and window is not None
    assert 0 < window.per_gpu[0].samples < whole.per_gpu[0].samples
    span = window.per_gpu[0].window_s
    assert span is not None and span[0] == pytest.approx(start - s._t0, abs=0.01)
    assert len(window.timeline) == len(whole.timeline)


def test_timeline_is_downsampled_and_memory_stays_bounded():
    with Sampler([0, 1], interval_s=0.001, nv=FakeNvml(), timeline_points=10, max_stored=40) as s:
        time.sleep(0.3)
    summary = s.summary()
    assert summary is not None and s.polls > 40
    for index in (0, 1):
        assert len([p for p in summary.timeline if p["index"] == index]) <= 10
        assert len(s._rows[index]) <= 40
    assert summary.interval_s > 0.001  # thinned: the stored series is coarser than the poll interval


def test_no_nvml_means_no_telemetry_and_no_error(monkeypatch):
    monkeypatch.setattr(nvml, "load_nvml", lambda: (None, "nvidia-ml-py is not installed"))
    with Sampler([0]) as s:
        pass
    assert s.summary() is None and not s.active and "not installed" in (s.problem or "")
    with Sampler([0], nv=FakeNvml(fail_init=True)) as s:
        pass
    assert s.summary() is None and "NVML unavailable" in (s.problem or "")
    fake = FakeNvml(gpus=1)
    with Sampler([3], nv=fake) as s:  # a GPU NVML does not have
        pass
    assert s.summary() is None and fake.shutdowns == 1
    with Sampler([]) as s:
        pass
    assert s.summary() is None


def test_the_real_binding_without_a_driver_is_quietly_absent():
    """On this GPU-less machine nvidia-ml-py is installed and nvmlInit fails: the sampler must shrug."""
    with Sampler([0], interval_s=0.01) as s:
        time.sleep(0.02)
    if s.active:
        pytest.skip("this machine has NVML")
    assert s.summary() is None


def test_overhead_is_under_two_percent():
    """The sampling thread's own CPU time per poll of 8 GPUs (NVML calls, bookkeeping and its timed wait),
    as a share of the default interval."""
    with Sampler(list(range(8)), interval_s=0.02, nv=FakeNvml(gpus=8)) as s:
        time.sleep(1.0)
    assert s.polls >= 20
    per_poll = s.cpu_seconds / s.polls
    assert per_poll / telemetry.DEFAULT_INTERVAL_S < 0.02, f"{per_poll * 1e3:.3f} ms CPU per poll"
    assert s.overhead() == pytest.approx(per_poll / 0.02)


def test_uuids_map_to_nvml_indices():
    fake = FakeNvml(gpus=4)
    assert nvml_indices_for_uuids(["GPU-00000002", "gpu-00000000"], nv=fake) == [2, 0]
    assert nvml_indices_for_uuids(["GPU-00000009"], nv=fake) is None
    assert nvml_indices_for_uuids(["GPU-0"], nv=FakeNvml(fail_init=True)) is None
    assert fake.inits == fake.shutdowns == 2


def test_interval_must_be_positive():
    with pytest.raises(ValueError):
        telemetry.Sampler([0], interval_s=0)
