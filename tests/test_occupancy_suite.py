"""validate/ on busy or hidden GPUs, run as users run it: one named failing check, the timing tests skipped.

Two ways in without a GPU: a real capture (`--from-xml`), and this machine's live path with a stand-in `pynvml`
module first on the path (NVML is the only thing replaced). What only a GPU machine shows: NVML's real process
list and utilisation, and the probes that run once --allow-busy lets them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capture_edits import H200_XML, P100_XML
from gpulab.records import Report
from gpulab.report.io import load_report

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # the validation suite in child processes: the full lane only

# One H100; GPULAB_FAKE_BUSY_PID names a process holding 41.7 GiB and keeping the GPU at 100 %.
FAKE_PYNVML = """
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


BUSY = int(os.environ.get("GPULAB_FAKE_BUSY_PID") or 0)
MIB = 1024 * 1024


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "580.95.05"


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetName(handle):
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetUUID(handle):
    return "GPU-5a1e0c2d-0000-4000-8000-000000000000"


def nvmlDeviceGetPciInfo(handle):
    return SimpleNamespace(busId=b"00000000:18:00.0", pciDeviceId=0x233010DE, pciSubSystemId=0x16C110DE)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    return SimpleNamespace(total=81559 * MIB, used=(42700 if BUSY else 0) * MIB)


def nvmlDeviceGetComputeRunningProcesses(handle):
    return [SimpleNamespace(pid=BUSY, usedGpuMemory=42700 * MIB)] if BUSY else []


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    return []


def nvmlSystemGetProcessName(pid):
    return b"/usr/bin/python3"


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=100 if BUSY else 0, memory=0)
"""


def free_pid() -> int:
    """A pid no process here has, so the name comes from NVML as it does for a process in another container."""
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid += 1
    return pid


def run(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Report]:
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "validate"), "-p", "no:cacheprovider"]
    cmd += ["--report-dir", str(tmp_path), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    reports = sorted(tmp_path.glob("report-*.json"))
    assert len(reports) == 1, proc.stdout + proc.stderr
    return proc, load_report(reports[0])


def fake_nvml_env(tmp_path: Path, busy_pid: int = 0, **extra: str) -> dict[str, str]:
    fake = tmp_path / "fake-nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    path = os.pathsep.join(filter(None, [str(fake), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "GPULAB_FAKE_BUSY_PID": str(busy_pid), **extra}


def checks(report: Report) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.message) for c in report.checks}


def test_busy_gpu_fails_one_named_check_and_skips_the_timing_tests(tmp_path):
    pid = free_pid()
    env = fake_nvml_env(tmp_path, busy_pid=pid)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    select = "occupancy or test_matmul or gpu_over_cpu or device_memory or idle"
    proc, report = run(tmp_path, "-k", select, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    got = checks(report)
    assert [c.name for c in report.checks][:2] == ["gpus.selected", "occupancy.gpus_free"]  # first, in that order
    assert got["gpus.selected"] == ("pass", "testing the GPU NVML shows")
    status, message = got["occupancy.gpus_free"]
    assert status == "fail"
    assert message.startswith(
        f"GPU 0 (NVIDIA H100 80GB HBM3) is in use by other work: pid {pid} python3 holds 41.7 GiB, 100 % utilised"
    )
    assert "pass --allow-busy" in message
    assert [name for name, (st, _) in got.items() if st in ("fail", "error")] == ["occupancy.gpus_free"]
    busy = (
        f"GPU 0 is busy (pid {pid} python3 holds 41.7 GiB, 100 % utilised): timing would measure the contention; "
        "--allow-busy runs them anyway"
    )
    timing = {n: m for n, (st, m) in got.items() if n.startswith(("probes.matmul", "probes.device", "speedup."))}
    assert len(timing) >= 3 and set(timing.values()) == {busy}, timing
    assert {st for n, (st, _) in got.items() if n in timing} == {"skip"}
    idle = next(m for n, (_, m) in got.items() if n.startswith("health.no_throttling_at_idle"))
    assert idle.startswith(f"GPU 0 is busy (pid {pid}") and "idle state cannot be judged" in idle
    assert f"GPU 0 is busy (pid {pid} python3 holds 41.7 GiB" in proc.stdout  # the terminal summary says it too


def test_allow_busy_proceeds_and_says_so(tmp_path):
    pid = free_pid()
    env = fake_nvml_env(tmp_path, busy_pid=pid)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc, report = run(tmp_path, "-k", "occupancy or idle", "--allow-busy", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = checks(report)
    status, message = got["occupancy.gpus_free"]
    assert status == "skip" and message.startswith(f"not enforced (--allow-busy): GPU 0 is busy (pid {pid}")
    idle = next(m for n, (_, m) in got.items() if n.startswith("health.idle_throttle"))
    assert "--allow-busy judges it anyway" not in idle  # judged, not skipped for the contention
    assert "timings include the contention (--allow-busy)" in proc.stdout


def test_cuda_visible_devices_hiding_the_only_gpu_fails_the_run(tmp_path):
    env = fake_nvml_env(tmp_path, CUDA_VISIBLE_DEVICES="")
    proc, report = run(tmp_path, "-k", "occupancy or health", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = checks(report)
    status, message = got["gpus.selected"]
    assert status == "fail"
    assert message.startswith("NVML shows GPU 0 but none is tested: CUDA_VISIBLE_DEVICES='' hides GPU 0")
    assert message.endswith("unset CUDA_VISIBLE_DEVICES (or list every GPU to test in it)")
    assert [name for name, (st, _) in got.items() if st in ("fail", "error")] == ["gpus.selected"]
    assert got["occupancy.gpus_free"] == ("skip", "no GPU selected: nothing to look at")
    assert got["health.driver_for_cuda"] == ("skip", "no GPU selected (see gpus.selected)")


def test_captured_p100_fails_on_memory_held_by_something_not_visible(tmp_path):
    proc, report = run(tmp_path, "--from-xml", str(P100_XML), "--expect-gpus", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = checks(report)
    assert [c.name for c in report.checks][:2] == ["gpus.selected", "occupancy.gpus_free"]
    status, message = got["occupancy.gpus_free"]
    assert status == "fail"
    assert message.startswith(
        "GPU 0 (Tesla P100-PCIE-12GB) is in use by other work: 11.1 GiB of 11.3 GiB held by something not visible "
        "(no listed process), 33.4 % utilised"
    )
    assert f"(read from the capture {P100_XML})" in message
    # Persistence mode was off on that machine, and its R375 driver is obsolete: its own findings. Nothing else fails.
    assert {n for n, (st, _) in got.items() if st in ("fail", "error")} == {
        "occupancy.gpus_free",
        "health.persistence[0]",
        "health.persistence[1]",
        "health.stack_supports_arch",  # driver R375: older than every branch the matrix lists
    }
    idle = {n: m for n, (_, m) in got.items() if n.startswith("health.no_throttling_at_idle")}
    assert len(idle) == 2 and all(m.startswith("GPU ") and " is busy (" in m for m in idle.values()), idle


def test_captured_p100_with_allow_busy_judges_the_idle_state(tmp_path):
    proc, report = run(tmp_path, "--from-xml", str(P100_XML), "--allow-busy", "-k", "occupancy or idle")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = checks(report)
    assert got["occupancy.gpus_free"][0] == "skip"
    assert got["occupancy.gpus_free"][1].startswith("not enforced (--allow-busy): GPU 0 is busy (11.1 GiB")
    # Judged by health's own rule now, not skipped for the contention.
    assert all("--allow-busy judges it anyway" not in got[f"health.idle_throttle[{i}]"][1] for i in (0, 1))


def test_captured_idle_h200_passes_and_gpus_option_below_expect_fails(tmp_path):
    proc, report = run(tmp_path, "--from-xml", str(H200_XML), "-k", "occupancy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert checks(report)["occupancy.gpus_free"][0] == "pass"
    other = tmp_path / "selected"
    other.mkdir()
    proc, report = run(other, "--from-xml", str(H200_XML), "--gpus", "2", "--expect-gpus", "4", "-k", "occupancy")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    status, message = checks(report)["gpus.selected"]
    assert status == "fail" and "--gpus 2 leaves out GPUs 2, 3" in message
