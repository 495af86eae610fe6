"""Health verdicts on the real 4x H200 capture, and on copies with one fault planted each."""

import dataclasses
from pathlib import Path

import pytest

from gpulab import health
from gpulab.hw.discover import fingerprint
from gpulab.hw.model import FrameworkInfo, PcieLink

FIX = Path(__file__).parent / "fixtures" / "h200x4-firecracker"


@pytest.fixture
def fp():
    return fingerprint(
        smi_xml=FIX / "nvidia-smi-q-x.xml", topo_file=FIX / "nvidia-smi-topo-m.txt", probe_frameworks=False
    )


def test_real_capture_is_healthy(fp):
    checks = [health.gpu_count(fp, 4, 4)]
    for gpu in fp.gpus:
        checks += [
            health.pcie_link(gpu),
            health.ecc(gpu),
            health.memory_retirement(gpu),
            health.persistence(gpu),
            health.idle_throttle(gpu),
        ]
    assert [c for c in checks if c.status != "pass"] == []
    assert len(checks) == 1 + 5 * 4


def test_gpu_count_names_missing_gpus(fp):
    check = health.gpu_count(fp, expected=8, on_pci_bus=4)
    assert check.status == "fail"
    assert "expected 8 GPUs, NVML sees 4" in check.message
    lost = health.gpu_count(fp, expected=None, on_pci_bus=5)
    assert lost.status == "fail" and "5 NVIDIA GPUs on the PCI bus" in lost.message


def test_narrow_link_fails_with_cause(fp):
    gpu = dataclasses.replace(fp.gpus[1], pcie=PcieLink(5, 5, 8, 16))
    check = health.pcie_link(gpu)
    assert check.status == "fail"
    assert "x8 of x16" in check.message and "0000:00:07.0" in check.message


def test_low_idle_gen_is_judged_under_load(fp):
    idle = dataclasses.replace(fp.gpus[0], pcie=PcieLink(1, 5, 16, 16))
    assert health.pcie_link(idle, under_load=PcieLink(5, 5, 16, 16)).status == "pass"
    still_low = health.pcie_link(idle, under_load=PcieLink(3, 5, 16, 16))
    assert still_low.status == "fail" and "gen3 of gen5 even under load" in still_low.message


def test_ecc_and_retirement_faults(fp):
    gpu = fp.gpus[2]
    off = dataclasses.replace(gpu, ecc_enabled=False)
    assert health.ecc(off).status == "fail" and "nvidia-smi -i 2 -e 1" in health.ecc(off).message
    errs = dataclasses.replace(gpu, ecc_errors=dataclasses.replace(gpu.ecc_errors, volatile_uncorrected=3))
    assert "3 uncorrectable" in health.ecc(errs).message
    pending = dataclasses.replace(gpu, retirement=dataclasses.replace(gpu.retirement, remap_pending=True))
    assert health.memory_retirement(pending).status == "fail"


def test_persistence_and_throttle(fp):
    gpu = fp.gpus[3]
    assert health.persistence(dataclasses.replace(gpu, persistence_mode=False)).status == "fail"
    hot = dataclasses.replace(gpu, throttle_reasons=["gpu_idle", "hw_thermal_slowdown"])
    check = health.idle_throttle(hot)
    assert check.status == "fail" and "airflow" in check.message


def test_driver_too_old_for_framework_cuda(fp):
    fp.software.frameworks = [FrameworkInfo(name="torch", version="2.11.0+cu130", built_cuda="13.0")]
    assert health.driver_supports_cuda(fp).status == "pass"
    fp.software.driver_version = "535.261.03"
    check = health.driver_supports_cuda(fp)
    assert check.status == "fail" and "535.261.03" in check.message and "CUDA 13.0" in check.message


def test_stack_check_refuses_p100_on_cuda13(fp):
    p100 = dataclasses.replace(fp.gpus[0], name="Tesla P100-PCIE-16GB", pci_device_id="10de:15f8")
    fp.gpus = [p100]
    fp.software.frameworks = [FrameworkInfo(name="torch", version="2.11.0+cu130", built_cuda="13.0")]
    check = health.stack_supports_gpus(fp)
    assert check.status == "fail"
    assert "Tesla P100-PCIE-16GB" in check.message


def test_framework_sees_fewer_gpus(fp):
    fp.software.frameworks = [FrameworkInfo(name="torch", version="2.13.0+cpu", sees_gpus=0)]
    check = health.framework_sees_gpus(fp, "torch", 4)
    assert check.status == "fail" and "CPU-only build" in check.message
    assert health.framework_sees_gpus(fp, "tensorflow", 4).status == "skip"
