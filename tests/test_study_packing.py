"""Several study runs per GPU: the setting, the sizing from a probe run's memory and NVML-measured GPU use, and
real Dask workers packed onto one GPU slot running at once. There is no GPU here: NVML (memory, utilisation) and
torch.cuda's memory calls are stood in for at their boundary; Dask, the workers and the sampler are real."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gpulab.errors import GpulabError
from gpulab.hw import nvml
from gpulab.records import GpuInfo, PackingProbe
from gpulab.studies import cluster, packing, task
from gpulab.studies.packing import size
from gpulab.studies.spec import study_from_dict

MIB = 2**20
H100_MIB = 81559.0


class FakeNvml:
    """The pynvml calls the telemetry sampler makes, each GPU `util` % busy with `used_mib` held."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, util: float, gpus: int = 1, used_mib: float = 3000) -> None:
        self.util, self.gpus, self.used_mib = util, gpus, used_mib

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self.util, memory=30)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=int(H100_MIB * MIB), used=int(self.used_mib * MIB), free=0)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 350_000

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 55

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0


def _gpus(monkeypatch: pytest.MonkeyPatch, count: int, util: float = 60) -> list[cluster.Slot]:
    """`count` H100s as NVML reports them, and the study's slots for them (one worker per GPU)."""
    infos = [
        GpuInfo(k, "NVIDIA H100 80GB HBM3", f"GPU-f00d{k}", f"0000:{k + 0x1B:02x}:00.0", "10de:2330")
        for k in range(count)
    ]
    infos = [dataclasses.replace(g, memory_total_mib=int(H100_MIB)) for g in infos]
    fake = FakeNvml(util, gpus=count)
    monkeypatch.setattr(nvml, "load_nvml", lambda: (fake, None))
    monkeypatch.setattr(nvml, "query", lambda: SimpleNamespace(gpus=infos))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return cluster.slots("all", 1)


# ---------- the setting ----------


def test_per_gpu_is_auto_by_default_an_integer_when_given_and_anything_else_is_one_clear_problem():
    base = {"study": "s", "workload": "style_transfer"}
    assert study_from_dict(base).per_gpu == "auto"
    assert study_from_dict({**base, "per_gpu": 3}).per_gpu == 3
    for bad in (0, -1, 1.5, True, "many", [2]):
        with pytest.raises(GpulabError, match=r"per_gpu: .*one run per GPU at a time"):  # the key and its own hint
            study_from_dict({**base, "per_gpu": bad})
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "study", "run", "neural-style", "--per-gpu", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--per-gpu: '0' is not auto or a whole number ≥ 1" in proc.stderr


def test_packed_workers_share_their_gpus_pin_and_memory_and_cpu_workers_are_never_packed(monkeypatch):
    from gpulab.launch.measuring import MEMORY_LIMIT_ENV

    slots = _gpus(monkeypatch, 2)
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    workers = packing.packed(slots, 3, packing.gpu_totals())
    assert [w.name for w in workers] == ["gpu0", "gpu0.1", "gpu0.2", "gpu1", "gpu1.1", "gpu1.2"]
    assert {w.env["CUDA_VISIBLE_DEVICES"] for w in workers[:3]} == {"GPU-f00d0"}
    assert {w.env["CUDA_VISIBLE_DEVICES"] for w in workers[3:]} == {"GPU-f00d1"}
    assert [packing.gpu_index(w.name) for w in workers] == [0, 0, 0, 1, 1, 1]
    # A third of 90 % of the H100 each: the autotuner's trial workspaces stay within a worker's share.
    assert {w.env[MEMORY_LIMIT_ENV] for w in workers} == {f"{0.9 * H100_MIB / 1024 / 3:.2f}"}
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "12")  # a smaller card's size, asked for: kept where it is smaller
    assert {w.env[MEMORY_LIMIT_ENV] for w in packing.packed(slots, 3, packing.gpu_totals())} == {"12.00"}
    assert MEMORY_LIMIT_ENV not in packing.packed(slots, 1, packing.gpu_totals())[0].env
    cpu = cluster.slots(1, 1, gpus=[])
    assert packing.packed(cpu, 4) == cpu
    chosen, todo, record = packing.plan("auto", cpu, [{"a": 1}] * 3, [], run=lambda p, c: pytest.fail("no probe"))
    assert chosen == cpu and len(todo) == 3 and record.chosen == 1 and record.to_json()["per_gpu"] == 1


# ---------- sizing ----------


@pytest.mark.parametrize(
    ("busy", "footprint", "cores", "expected", "said"),
    [
        (0.63, 2500.0, 16, 4, "63% busy: 4"),  # the H100's measured two thirds: four at once
        (0.80, 2500.0, 16, 3, "80% busy: 3"),
        (0.99, 2500.0, 16, 1, "99% busy (≥ 90%): 1"),  # a run that fills the GPU alone is not packed
        (0.91, 2500.0, 16, 1, "91% busy (≥ 90%): 1"),  # nor one that leaves it a tenth: a second costs its start-up
        (0.89, 2500.0, 16, 2, "89% busy: 2"),
        (0.30, 2500.0, 16, 6, "at most 6"),  # never beyond MAX_AUTO
        (0.63, 30000.0, 16, 2, "memory holds 2"),  # a big run: what memory holds
        (0.63, 2500.0, 3, 3, "3 cores for 1 GPU"),  # a worker per core at most
        (None, 2500.0, 16, 2, "NVML did not say"),
        (0.63, None, 16, 1, "memory per run unknown"),
    ],
)
def test_auto_sizes_from_the_probe_runs_gpu_use_and_memory(busy, footprint, cores, expected, said):
    k, why = size([PackingProbe(footprint, H100_MIB, busy, 6.1)], cores=cores, gpus=1)
    assert k == expected and said in why


def test_the_tightest_gpu_decides_and_a_resume_reuses_the_sized_count():
    probes = [PackingProbe(2500.0, H100_MIB, 0.63, 6.0), PackingProbe(2600.0, H100_MIB, 0.85, 6.0)]
    assert size(probes, cores=32, gpus=2)[0] == 2  # the busier GPU's count (0.85 → 2) for both
    sessions = [{"packing": {"asked": "auto", "per_gpu": 4}}, {"packing": {"asked": 2, "per_gpu": 2}}]
    assert packing.recorded(sessions) == 4 and packing.recorded([{}]) is None
    chosen, todo, record = packing.plan("auto", [_slot()], [{"a": 1}] * 5, sessions, run=lambda p, c: pytest.fail())
    assert len(chosen) == 4 and len(todo) == 5 and record.why == "sized by an earlier session"


def _slot() -> cluster.Slot:
    return cluster.Slot("gpu0", "gpu0 H100 GPU-x", {"CUDA_VISIBLE_DEVICES": "GPU-x", cluster.DEVICE_ENV: "cuda:0"})


def test_a_runs_footprint_counts_its_context_cache_and_peak():
    """task.gpu_footprint against torch.cuda's memory calls (the CUDA boundary), and the probe reading its columns."""
    cuda = SimpleNamespace(
        mem_get_info=lambda d: (int((H100_MIB - 34500) * MIB), int(H100_MIB * MIB)),  # the process holds 34500 MiB
        memory_reserved=lambda d: 34000 * MIB,  # most of it cached by the autotuner of the worker's first run
        max_memory_allocated=lambda d: 2000 * MIB,  # what this run's loop needed at most
    )
    facts = task.gpu_footprint(SimpleNamespace(cuda=cuda))
    assert facts == {"gpu_process_mib": 2500.0, "gpu_total_mib": H100_MIB}  # context 500 + peak 2000
    row = {f"{k}_": v for k, v in {**facts, "timed_s": 6.1}.items()}
    assert packing.probe_from(row, 0.6) == PackingProbe(2500.0, H100_MIB, 0.6, 6.1)


# ---------- real workers ----------


def _probe_run(pset: dict[str, Any]) -> dict[str, Any]:
    """A run as the probe sees its row: a timed loop of `seconds`, the footprint its process measured."""
    from distributed import get_worker

    started = time.time()
    time.sleep(pset["seconds"])
    return {
        "worker_": get_worker().name,
        "status_": "ok",
        "loop_started_": started,
        "timed_s_": pset["seconds"],
        "gpu_process_mib_": pset["footprint"],
        "gpu_total_mib_": H100_MIB,
        "pid": os.getpid(),
        "pinned": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "ended": time.time(),
    }


def _run_on(client: Any, psets: list[dict[str, Any]]) -> Any:
    import pandas as pd

    rows = client.gather(client.map(_probe_run, psets, pure=False))
    return pd.DataFrame([{**r, "_run_id": "probe"} for r in rows])


def test_auto_probes_one_run_per_gpu_then_packs_workers_that_run_at_once(monkeypatch):
    """The probe's two runs go one after the other to one real worker per GPU while the (NVML) sampler reads the GPU
    60 % busy; the second run's footprint counts (the first paid for autotuning), memory holds three runs of
    20 000 MiB, so three workers share each GPU pin, and their runs overlap in time."""
    slots = _gpus(monkeypatch, 1, util=60)
    monkeypatch.setattr(packing.os, "cpu_count", lambda: 16)  # sizing as on a GPU host's cores
    todo = [{"seconds": 1.0, "footprint": 40000.0 if k == 0 else 20000.0, "k": k} for k in range(6)]
    chosen, rest, record = packing.plan("auto", slots, todo, [], run=lambda psets, client: _run_on(client, psets))
    assert record.probe_runs == 2 and len(rest) == 4
    assert record.probe == (PackingProbe(20000.0, H100_MIB, pytest.approx(0.6), 1.0),)
    assert record.chosen == 3 and "60% busy: 4" in record.why
    assert "memory holds 3 (20000 MiB each)" in record.why
    assert [w.name for w in chosen] == ["gpu0", "gpu0.1", "gpu0.2"]
    with cluster.local_client(chosen) as client:
        assert len(cluster.worker_labels(client)) == 3
        df = _run_on(client, [{**p, "seconds": 3.0} for p in rest[:3]])
    assert set(df["pinned"]) == {"GPU-f00d0"} and df["pid"].nunique() == 3
    windows = sorted(zip(df["loop_started_"], df["ended"], strict=True))
    at_once = max(sum(1 for s, e in windows if s <= t < e) for t, _ in windows)
    assert at_once == 3  # three workers ran their runs together on the one GPU slot
