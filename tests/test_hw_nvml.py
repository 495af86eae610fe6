"""NVML path. No GPU here: a small stand-in binding exercises only the decoding and error handling;
the real path is exercised on a GPU machine."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from gpulab.errors import GpulabError
from gpulab.hw import nvml
from gpulab.hw.discover import fingerprint


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


def not_supported(*_args):
    raise NVMLError_NotSupported("Not Supported")


def fake_binding(**overrides):
    """Two GPUs joined by 18 NVLinks each; ECC, retired pages and clocks event reasons not supported."""
    buses = [b"00000000:18:00.0", b"00000000:2A:00.0"]

    def link_pci(handle, link):
        return SimpleNamespace(busId=buses[1 - handle])

    nv = SimpleNamespace(
        NVMLError=NVMLError,
        NVMLError_NotSupported=NVMLError_NotSupported,
        NVMLError_LibraryNotFound=NVMLError_LibraryNotFound,
        NVMLError_DriverNotLoaded=NVMLError_DriverNotLoaded,
        NVML_NVLINK_MAX_LINKS=36,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlSystemGetCudaDriverVersion_v2=lambda: 13000,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetPciInfo_v3=lambda h: SimpleNamespace(
            busId=buses[h], pciDeviceId=0x233010DE, pciSubSystemId=0x16C110DE
        ),
        nvmlDeviceGetArchitecture=lambda h: 9,
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5 if h == 0 else 3,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlMemory_v2=0x02000028,
        nvmlDeviceGetMemoryInfo=lambda h, v=None: SimpleNamespace(total=81559 * 2**20, used=3 * 2**20),
        nvmlDeviceGetEccMode=lambda h: [1, 1],
        nvmlDeviceGetTotalEccErrors=not_supported,
        nvmlDeviceGetRetiredPages=not_supported,
        nvmlDeviceGetRemappedRows=lambda h: (0, 2, 1, 0),
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetVirtualizationMode=lambda h: 1,
        nvmlDeviceGetPerformanceState=lambda h: 0,
        nvmlDeviceGetClockInfo=lambda h, t: {1: 1980, 2: 2619}[t],
        nvmlDeviceGetMaxClockInfo=lambda h, t: {1: 1980, 2: 2619}[t],
        nvmlDeviceGetCurrentClocksEventReasons=not_supported,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x1 | 0x4 | 0x40,
        nvmlDeviceGetTemperature=lambda h, s: 41,
        nvmlDeviceGetPowerUsage=lambda h: 71234,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000,
        nvmlDeviceGetNvLinkState=lambda h, link: 1 if link < 18 else not_supported(),
        nvmlDeviceGetNvLinkRemotePciInfo=link_pci,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 50,
        # NVML_FI_DEV_NVLINK_GET_SPEED scoped by link answers; the older per-link fields do not.
        nvmlDeviceGetFieldValues=lambda h, ids: [
            SimpleNamespace(nvmlReturn=0 if isinstance(ids[0], tuple) else 3, value=SimpleNamespace(uiVal=26562))
        ],
    )
    for key, value in overrides.items():
        setattr(nv, key, value)
    return nv


def test_decode_throttle_bits():
    assert nvml.decode_throttle(0) == []
    assert nvml.decode_throttle(None) == []
    assert nvml.decode_throttle(0x1) == ["gpu_idle"]
    assert nvml.decode_throttle(0x4 | 0x8 | 0x40 | 0x80) == [
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    ]
    assert nvml.decode_throttle(0x2 | 0x10 | 0x20 | 0x100) == [
        "applications_clocks_setting",
        "sync_boost",
        "sw_thermal_slowdown",
        "display_clocks_setting",
    ]


def test_decoding_with_stand_in_binding(tmp_path):
    result = nvml.query(fake_binding(), root=tmp_path)
    assert result.absent_reason is None
    assert (result.driver_version, result.cuda_driver_version) == ("580.159.04", "13.0")
    g0, g1 = result.gpus
    assert g0.bus_id == "0000:18:00.0" and g1.bus_id == "0000:2a:00.0"
    assert g0.pci_device_id == "10de:2330" and g0.pci_subsystem_id == "10de:16c1"
    assert g0.architecture == "Hopper" and g0.compute_capability == "9.0"
    assert g1.pcie.at_max is False
    assert (g0.memory_total_mib, g0.memory_used_mib) == (81559, 3)
    assert g0.ecc_enabled is True
    assert g0.ecc_errors.volatile_uncorrected is None  # NotSupported -> None, not a crash
    assert g0.retirement.retired_single_bit is None
    assert (g0.retirement.remapped_uncorrectable, g0.retirement.remap_pending) == (2, True)
    assert g0.virtualization_mode == "Pass-Through" and g0.performance_state == "P0"
    # The event-reason call is NotSupported; the older throttle spelling answers.
    assert g0.throttle_reasons == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert (g0.power_draw_w, g0.power_limit_w, g0.temperature_c) == (71.234, 700.0, 41.0)
    assert len(g0.nvlinks) == 18 and all(link.peer_bus_id == "0000:2a:00.0" for link in g0.nvlinks)
    assert {link.bandwidth_gbps for link in g0.nvlinks} == {26.562}
    assert result.topology == [["X", "NV18"], ["NV18", "X"]]


def test_throttle_reasons_not_supported_are_not_reported(tmp_path):
    nv = fake_binding(nvmlDeviceGetCurrentClocksThrottleReasons=not_supported)
    g0 = nvml.query(nv, root=tmp_path).gpus[0]
    assert g0.throttle_reasons is None  # neither call answered: not "no reason active"
    quiet = nvml.query(fake_binding(nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0), root=tmp_path)
    assert quiet.gpus[0].throttle_reasons == []


def test_missing_functions_and_pcie_topology(tmp_path):
    nv = fake_binding(nvmlDeviceGetNvLinkState=not_supported, nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 20)
    del nv.nvmlSystemGetCudaDriverVersion_v2  # older binding
    nv.nvmlSystemGetCudaDriverVersion = lambda: 12040
    result = nvml.query(nv, root=tmp_path)
    assert result.cuda_driver_version == "12.4"
    assert result.topology == [["X", "PXB"], ["PXB", "X"]]
    assert result.gpus[0].nvlinks == []


def no_library():
    raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")


def pci_gpu(root: Path, addr: str) -> None:
    dev = root / "sys/bus/pci/devices" / addr
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "class").write_text("0x030200\n")


def test_absent_reason_no_gpu_on_bus(tmp_path):
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    result = nvml.query(fake_binding(nvmlInit=no_library), root=tmp_path)
    assert result.gpus == []
    assert result.absent_reason == "no NVIDIA GPU/driver found: no NVIDIA GPU on the PCI bus"


def test_absent_reason_gpus_without_driver(tmp_path):
    pci_gpu(tmp_path, "0000:3b:00.0")
    pci_gpu(tmp_path, "0000:86:00.0")
    result = nvml.query(fake_binding(nvmlInit=no_library), root=tmp_path)
    assert result.absent_reason is not None
    assert result.absent_reason.startswith("no NVIDIA GPU/driver found: 2 NVIDIA GPUs on the PCI bus but no driver")


def test_absent_reason_without_sysfs(tmp_path):
    result = nvml.query(fake_binding(nvmlInit=no_library), root=tmp_path)
    assert result.absent_reason == ("no NVIDIA GPU/driver found: NVML library not present (install the NVIDIA driver)")


def test_gpu_processes_decoding():
    procs = [SimpleNamespace(pid=42, usedGpuMemory=512 * 2**20), SimpleNamespace(pid=7, usedGpuMemory=None)]
    nv = fake_binding(nvmlDeviceGetComputeRunningProcesses=lambda h: procs)
    assert nvml.gpu_processes(0, nv) == [(42, 512), (7, None)]
    with pytest.raises(GpulabError, match="no NVIDIA GPU/driver found"):
        nvml.gpu_processes(0, fake_binding(nvmlInit=no_library))


@pytest.mark.skipif(Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA driver")
def test_live_fingerprint_without_driver():
    fp = fingerprint(probe_frameworks=False)
    assert fp.gpus == []
    assert fp.gpu_source == "none"
    assert fp.gpu_absent_reason is not None
    assert fp.gpu_absent_reason.startswith("no NVIDIA GPU/driver found")
    assert "\n" not in fp.gpu_absent_reason


@pytest.mark.skipif(not Path("/proc/driver/nvidia/version").exists(), reason="needs an NVIDIA driver")
def test_live_fingerprint_with_driver():
    fp = fingerprint(probe_frameworks=False)
    assert fp.gpu_source == "nvml" and fp.gpus
    for g in fp.gpus:
        assert g.uuid.startswith("GPU-") and g.bus_id.count(":") == 2 and g.pci_device_id.startswith("10de:")
        assert g.memory_total_mib and g.compute_capability
    assert len(fp.topology) == len(fp.gpus)
    assert fp.software.driver_version and fp.software.cuda_driver_version


def test_nvswitch_topology(tmp_path):
    nv = fake_binding(
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, link: SimpleNamespace(busId=b"FFFFFFFF:FF:FF.0"),
        nvmlDeviceGetNvLinkRemoteDeviceType=lambda h, link: 2,  # NVML_NVLINK_DEVICE_TYPE_SWITCH
    )
    # As seen in a passthrough VM: the NVSwitch is hidden, NVML gives an all-F address.
    result = nvml.query(nv, root=tmp_path)
    assert result.topology == [["X", "NV18"], ["NV18", "X"]]
    assert {link.peer_bus_id for link in result.gpus[0].nvlinks} == {None}


def test_brand_utilisation_processes_and_mig_from_nvml(tmp_path):
    mig_handles = {(0, 0): "mig-0", (0, 1): "mig-1"}

    def mig_handle(h, k):
        if (h, k) not in mig_handles:
            raise NVMLError_NotSupported("Not Found")
        return mig_handles[(h, k)]

    def memory(h, v=None):
        total = 19968 if isinstance(h, str) else 81559
        return SimpleNamespace(total=total * 2**20, used=3 * 2**20)

    nv = fake_binding(
        nvmlDeviceGetBrand=lambda h: 2 if h == 0 else 5,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=0 if h == 0 else 87, memory=5),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [] if h == 0 else [SimpleNamespace(pid=7)],
        nvmlDeviceGetMigMode=lambda h: (1, 1) if h == 0 else not_supported(),
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 7,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetGpuInstanceId=lambda m: {"mig-0": 1, "mig-1": 2}[m],
        nvmlDeviceGetComputeInstanceId=lambda m: 0,
        nvmlDeviceGetMemoryInfo=memory,
    )
    g0, g1 = nvml.query(nv, root=tmp_path).gpus
    assert (g0.product_brand, g1.product_brand) == ("Tesla", "GeForce")
    assert (g0.utilization_gpu_pct, g1.utilization_gpu_pct) == (0.0, 87.0)
    assert (g0.compute_processes, g1.compute_processes) == (0, 1)
    assert g0.mig_enabled is True and [(d.index, d.gpu_instance_id, d.memory_total_mib) for d in g0.mig_devices] == [
        (0, 1, 19968),
        (1, 2, 19968),
    ]
    assert g1.mig_enabled is None and g1.mig_devices == []  # no MIG on that GPU: not reported, not "off"
