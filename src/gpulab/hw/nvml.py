"""Live GPU discovery through NVML (the `pynvml` module shipped by the nvidia-ml-py package).

Every device query goes through `_call`, which turns NVMLError (NotSupported on consumer boards, NoPermission
in containers, FunctionNotFound on older drivers) and bindings that lack a function into None: one
unanswerable query must never cost the whole fingerprint. Functions take the binding module as `nv` so
the decoding logic can be tested without a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.hw.pci_gpu import is_nvidia_gpu, parse_id
from gpulab.hw.smi.xml import normalise_bus_id, split_pci_id
from gpulab.names import Architecture
from gpulab.records import EccErrors, GpuInfo, MemoryRetirement, MigDevice, NvLinkInfo, PcieLink

ABSENT = "no NVIDIA GPU/driver found: "

# nvmlClocksEventReason* bits (same values as the older nvmlClocksThrottleReason*), named as in the XML.
THROTTLE_BITS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}

_VIRT = {0: "None", 1: "Pass-Through", 2: "VGPU", 3: "Host VGPU", 4: "Host VSGA"}
# nvmlGpuTopologyLevel_t -> the `nvidia-smi topo -m` label. INTERNAL (two GPUs on one board) has no label
# there; it is at most one bridge away, so PIX.
_TOPO = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_NVLINK_GET_SPEED = 164  # NVML_FI_DEV_NVLINK_GET_SPEED, scoped by link (R535+)
_NVLINK_SPEED_L0 = 84  # NVML_FI_DEV_NVLINK_SPEED_MBPS_L0..L5 (older drivers; Hopper answers NotSupported)
_NVLINK_SPEED_COMMON = 90  # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON


@dataclass
class NvmlResult:
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    topology: list[list[str]] = field(default_factory=list)
    absent_reason: str | None = None  # set when gpus is empty


def decode_throttle(mask: int | None) -> list[str]:
    """Bitmask from nvmlDeviceGetCurrentClocksEventReasons -> active short names, lowest bit first."""
    if mask is None:
        return []
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value).strip("\x00 ") or None


def _call(nv: Any, name: str, *args: Any) -> Any:
    """nv.<name>(*args), or None when the binding lacks it or NVML says no."""
    fn: Callable[..., Any] | None = getattr(nv, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nv.NVMLError:
        return None


def _first(nv: Any, names: tuple[str, ...], *args: Any) -> Any:
    """The first of several spellings that answers (bindings renamed throttle -> event reasons)."""
    for name in names:
        value = _call(nv, name, *args)
        if value is not None:
            return value
    return None


def _const(nv: Any, name: str, default: int) -> int:
    value = getattr(nv, name, default)
    return value if isinstance(value, int) else default


def pci_gpus(root: Path = Path("/")) -> list[str]:
    """PCI addresses of NVIDIA GPUs (gpulab.hw.pci_gpu) from sysfs, whether or not a driver is bound."""
    found = []
    base = root / "sys/bus/pci/devices"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    for dev in entries:
        try:
            vendor, klass = parse_id((dev / "vendor").read_text()), parse_id((dev / "class").read_text())
        except OSError:
            continue
        if vendor is not None and klass is not None and is_nvidia_gpu(vendor, klass):
            found.append(dev.name)
    return found


def absent_reason(nvml_problem: str, root: Path = Path("/")) -> str:
    """One line on why there is no GPU, using the PCI bus and the kernel module to say where it breaks."""
    on_bus = pci_gpus(root)
    module = (root / "proc/driver/nvidia/version").exists()
    if on_bus and not module:
        n = len(on_bus)
        gpus = f"{n} NVIDIA GPU{'s' if n != 1 else ''}"
        return f"{ABSENT}{gpus} on the PCI bus but no driver loaded (install the NVIDIA driver)"
    if on_bus:
        return f"{ABSENT}NVIDIA driver loaded but NVML unusable: {nvml_problem}"
    if (root / "sys/bus/pci/devices").is_dir() and not module:
        return f"{ABSENT}no NVIDIA GPU on the PCI bus"
    return f"{ABSENT}{nvml_problem}"


def _init_problem(nv: Any, err: Exception) -> str:
    """NVMLError from nvmlInit -> what it means for the user, with the fix."""
    kinds = {
        "NVMLError_LibraryNotFound": "NVML library not present (install the NVIDIA driver)",
        "NVMLError_DriverNotLoaded": "NVIDIA kernel driver not loaded (load it: `modprobe nvidia`)",
        "NVMLError_NoPermission": "no permission to open /dev/nvidia* (run as a user in the video group)",
        "NVMLError_LibRmVersionMismatch": "driver library and kernel module differ in version (reboot)",
    }
    for cls_name, text in kinds.items():
        cls = getattr(nv, cls_name, None)
        if isinstance(cls, type) and isinstance(err, cls):
            return text
    return f"NVML init failed: {err}"


def load_nvml() -> tuple[Any | None, str | None]:
    """Import the binding; (module, None) or (None, why)."""
    try:
        import pynvml  # provided by nvidia-ml-py
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    return pynvml, None


def _nvlinks(nv: Any, handle: Any) -> tuple[list[NvLinkInfo], int]:
    """The device's NVLinks and how many of its active links end at an NVSwitch."""
    links: list[NvLinkInfo] = []
    to_switch = 0
    common: float | None = None
    for link in range(_const(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _call(nv, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue
        active = bool(state)
        peer = None
        if active:
            pci = _call(nv, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            bus = _str(getattr(pci, "busId", None)) if pci is not None else None
            # Inside a VM the NVSwitch is not passed through and NVML reports FFFFFFFF:FF:FF.0.
            peer = normalise_bus_id(bus) if bus and not bus.upper().startswith("FFFFFFFF") else None
            if _call(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link) == _NVLINK_SWITCH:
                to_switch += 1
        speed = _link_speed(nv, handle, (_NVLINK_GET_SPEED, link))
        if speed is None and link < 6:
            speed = _link_speed(nv, handle, _NVLINK_SPEED_L0 + link)
        if speed is None:
            common = common if common is not None else _link_speed(nv, handle, _NVLINK_SPEED_COMMON)
            speed = common
        links.append(NvLinkInfo(link=link, active=active, peer_bus_id=peer, bandwidth_gbps=speed))
    return links, to_switch


def _link_speed(nv: Any, handle: Any, field_id: int | tuple[int, int]) -> float | None:
    """NVLink speed in GB/s (nvidia-smi's unit) from an NVML field value in MB/s."""
    values = _call(nv, "nvmlDeviceGetFieldValues", handle, [field_id])
    if not values:
        return None
    value = values[0]
    if getattr(value, "nvmlReturn", 1) != 0:
        return None
    mbps = getattr(getattr(value, "value", None), "uiVal", None)
    return round(mbps / 1000, 3) if isinstance(mbps, int) and mbps > 0 else None


def _mib(num_bytes: Any) -> int | None:
    return int(num_bytes) // (1024 * 1024) if isinstance(num_bytes, int) else None


# nvmlBrandType_t, as nvidia-smi's <product_brand> spells them
_BRAND = {
    1: "Quadro", 2: "Tesla", 3: "NVS", 4: "GRID", 5: "GeForce", 6: "Titan", 7: "NVIDIA Virtual Applications",
    8: "NVIDIA Virtual PC", 9: "NVIDIA Virtual Compute Server", 10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA Cloud Gaming", 12: "Quadro RTX", 13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX", 16: "Titan RTX",
}  # fmt: skip


def _mig(nv: Any, handle: Any) -> tuple[bool | None, list[MigDevice]]:
    """MIG mode (None where the GPU has none) and its instances, as `nvidia-smi -q` lists them."""
    mode = _call(nv, "nvmlDeviceGetMigMode", handle)  # (current, pending); not supported: no MIG
    if not mode:
        return None, []
    enabled = bool(mode[0])
    devices: list[MigDevice] = []
    for k in range(int(_call(nv, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0) if enabled else 0):
        mig = _call(nv, "nvmlDeviceGetMigDeviceHandleByIndex", handle, k)
        if mig is None:
            continue
        mem = _call(nv, "nvmlDeviceGetMemoryInfo", mig)
        devices.append(
            MigDevice(
                index=k,
                gpu_instance_id=_call(nv, "nvmlDeviceGetGpuInstanceId", mig),
                compute_instance_id=_call(nv, "nvmlDeviceGetComputeInstanceId", mig),
                memory_total_mib=_mib(getattr(mem, "total", None)),
            )
        )
    return enabled, devices


def _pcie_link(nv: Any, handle: Any) -> PcieLink:
    return PcieLink(
        gen_current=_call(nv, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        gen_max=_call(nv, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        width_current=_call(nv, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        width_max=_call(nv, "nvmlDeviceGetMaxPcieLinkWidth", handle),
    )


def _ecc_errors(nv: Any, handle: Any) -> EccErrors:
    """The volatile and aggregate ECC error counts; None where the query fails."""
    corrected = _const(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    uncorrected = _const(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile = _const(nv, "NVML_VOLATILE_ECC", 0)
    aggregate = _const(nv, "NVML_AGGREGATE_ECC", 1)

    def ecc(kind: int, counter: int) -> int | None:
        value = _call(nv, "nvmlDeviceGetTotalEccErrors", handle, kind, counter)
        return int(value) if value is not None else None

    return EccErrors(
        volatile_corrected=ecc(corrected, volatile),
        volatile_uncorrected=ecc(uncorrected, volatile),
        aggregate_corrected=ecc(corrected, aggregate),
        aggregate_uncorrected=ecc(uncorrected, aggregate),
    )


def _retirement(nv: Any, handle: Any) -> MemoryRetirement:
    """Retired pages (older GPUs) and remapped rows (Ampere on); None where the query fails."""

    def retired(cause: str, default: int) -> int | None:
        pages = _call(nv, "nvmlDeviceGetRetiredPages", handle, _const(nv, cause, default))
        return len(pages) if pages is not None else None

    remap = _call(nv, "nvmlDeviceGetRemappedRows", handle)
    pending_pages = _call(nv, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    return MemoryRetirement(
        retired_single_bit=retired("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
        retired_double_bit=retired("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
        retired_pending=bool(pending_pages) if pending_pages is not None else None,
        remapped_correctable=remap[0] if remap else None,
        remapped_uncorrectable=remap[1] if remap else None,
        remap_pending=bool(remap[2]) if remap else None,
        remap_failure=bool(remap[3]) if remap else None,
    )


def _gpu(nv: Any, index: int, handle: Any) -> tuple[GpuInfo, int]:
    """The device record and how many of its active NVLinks end at an NVSwitch."""
    pci = _call(nv, "nvmlDeviceGetPciInfo_v3", handle) or _call(nv, "nvmlDeviceGetPciInfo", handle)
    bus = _str(getattr(pci, "busId", None)) or ""
    mem = _memory_info(nv, handle)
    ecc_mode = _call(nv, "nvmlDeviceGetEccMode", handle)
    sm = _const(nv, "NVML_CLOCK_SM", 1)
    memclk = _const(nv, "NVML_CLOCK_MEM", 2)
    cc = _call(nv, "nvmlDeviceGetCudaComputeCapability", handle)
    pstate = _call(nv, "nvmlDeviceGetPerformanceState", handle)
    power = _call(nv, "nvmlDeviceGetPowerUsage", handle)
    limit = _call(nv, "nvmlDeviceGetEnforcedPowerLimit", handle)
    persistence = _call(nv, "nvmlDeviceGetPersistenceMode", handle)
    virt = _call(nv, "nvmlDeviceGetVirtualizationMode", handle)
    temp = _call(nv, "nvmlDeviceGetTemperature", handle, _const(nv, "NVML_TEMPERATURE_GPU", 0))
    slowdown = _call(
        nv, "nvmlDeviceGetTemperatureThreshold", handle, _const(nv, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)
    )
    shutdown = _call(
        nv, "nvmlDeviceGetTemperatureThreshold", handle, _const(nv, "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", 0)
    )
    default_limit = _call(nv, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    limits = _call(nv, "nvmlDeviceGetPowerManagementLimitConstraints", handle)
    reasons = _first(
        nv, ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), handle
    )
    links, to_switch = _nvlinks(nv, handle)
    brand = _call(nv, "nvmlDeviceGetBrand", handle)
    util = _call(nv, "nvmlDeviceGetUtilizationRates", handle)
    procs = _call(nv, "nvmlDeviceGetComputeRunningProcesses", handle)
    mig_enabled, mig_devices = _mig(nv, handle)
    info = GpuInfo(
        index=index,
        name=_str(_call(nv, "nvmlDeviceGetName", handle)) or "unknown",
        uuid=_str(_call(nv, "nvmlDeviceGetUUID", handle)) or "",
        bus_id=normalise_bus_id(bus),
        pci_device_id=split_pci_id(getattr(pci, "pciDeviceId", None)) or "",
        pci_subsystem_id=split_pci_id(getattr(pci, "pciSubSystemId", None)),
        architecture=Architecture.from_nvml(_call(nv, "nvmlDeviceGetArchitecture", handle)),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
        pcie=_pcie_link(nv, handle),
        memory_total_mib=_mib(getattr(mem, "total", None)),
        memory_used_mib=_mib(getattr(mem, "used", None)),
        ecc_enabled=bool(ecc_mode[0]) if ecc_mode else None,
        ecc_errors=_ecc_errors(nv, handle),
        retirement=_retirement(nv, handle),
        persistence_mode=bool(persistence) if persistence is not None else None,
        virtualization_mode=_VIRT.get(virt) if virt is not None else None,
        vbios_version=_str(_call(nv, "nvmlDeviceGetVbiosVersion", handle)),
        performance_state=f"P{pstate}" if isinstance(pstate, int) and 0 <= pstate <= 15 else None,
        sm_clock_mhz=_call(nv, "nvmlDeviceGetClockInfo", handle, sm),
        mem_clock_mhz=_call(nv, "nvmlDeviceGetClockInfo", handle, memclk),
        max_sm_clock_mhz=_call(nv, "nvmlDeviceGetMaxClockInfo", handle, sm),
        max_mem_clock_mhz=_call(nv, "nvmlDeviceGetMaxClockInfo", handle, memclk),
        # A failed query is "not reported", not "no reason active".
        throttle_reasons=decode_throttle(reasons) if reasons is not None else None,
        temperature_c=float(temp) if temp is not None else None,
        power_draw_w=power / 1000 if power is not None else None,
        power_limit_w=limit / 1000 if limit is not None else None,
        default_power_limit_w=default_limit / 1000 if default_limit is not None else None,
        min_power_limit_w=limits[0] / 1000 if limits else None,
        temp_slowdown_c=float(slowdown) if slowdown is not None else None,
        temp_shutdown_c=float(shutdown) if shutdown is not None else None,
        pcie_replays=_call(nv, "nvmlDeviceGetPcieReplayCounter", handle),
        nvlinks=links,
        product_brand=_BRAND.get(brand) if isinstance(brand, int) else None,
        utilization_gpu_pct=float(util.gpu) if getattr(util, "gpu", None) is not None else None,
        compute_processes=len(procs) if procs is not None else None,
        mig_enabled=mig_enabled,
        mig_devices=mig_devices,
    )
    return info, to_switch


def topology_matrix(nv: Any, handles: list[Any], gpus: list[GpuInfo], switch_links: list[int]) -> list[list[str]]:
    """The `nvidia-smi topo -m` GPU matrix: NV<n> for n bonded NVLinks, else the PCIe common ancestor."""
    buses = [g.bus_id for g in gpus]
    matrix: list[list[str]] = []
    for i, gi in enumerate(gpus):
        row = []
        for j in range(len(gpus)):
            if i == j:
                row.append("X")
                continue
            direct = sum(1 for link in gi.nvlinks if link.active and link.peer_bus_id == buses[j])
            # Behind NVSwitches every GPU reaches every other one over all of its switch links.
            via_switch = min(switch_links[i], switch_links[j])
            if direct + via_switch:
                row.append(f"NV{direct + via_switch}")
                continue
            level = _call(nv, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
            row.append(_TOPO.get(level, "N/A") if level is not None else "N/A")
        matrix.append(row)
    return matrix


def _cuda_version(raw: Any) -> str | None:
    if not isinstance(raw, int) or raw <= 0:
        return None
    return f"{raw // 1000}.{(raw % 1000) // 10}"  # 13000 -> "13.0"


def query(nv: Any | None = None, root: Path = Path("/")) -> NvmlResult:
    """All GPUs NVML sees, or none with `absent_reason` set. Never raises for a missing driver."""
    if nv is None:
        nv, problem = load_nvml()
        if nv is None:
            return NvmlResult(absent_reason=absent_reason(problem or "NVML unavailable", root))
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        return NvmlResult(absent_reason=absent_reason(_init_problem(nv, err), root))
    except OSError as err:  # a broken libnvidia-ml.so can fail in the loader itself
        return NvmlResult(absent_reason=absent_reason(f"NVML library failed to load ({err})", root))
    try:
        result = NvmlResult(
            driver_version=_str(_call(nv, "nvmlSystemGetDriverVersion")),
            cuda_driver_version=_cuda_version(
                _first(nv, ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
            ),
        )
        count = _call(nv, "nvmlDeviceGetCount") or 0
        handles = [h for h in (_call(nv, "nvmlDeviceGetHandleByIndex", i) for i in range(count)) if h is not None]
        found = [_gpu(nv, i, h) for i, h in enumerate(handles)]
        result.gpus = [g for g, _ in found]
        result.topology = topology_matrix(nv, handles, result.gpus, [n for _, n in found])
        if not result.gpus:
            result.absent_reason = absent_reason("the driver is loaded but NVML lists no GPU", root)
        return result
    finally:
        _call(nv, "nvmlShutdown")


def _memory_info(nv: Any, handle: Any) -> Any:
    """Device memory; v2 counts driver-reserved memory apart from `used`, as nvidia-smi does (v1 folds it in)."""
    mem_v2 = getattr(nv, "nvmlMemory_v2", None)
    mem = _call(nv, "nvmlDeviceGetMemoryInfo", handle, mem_v2) if mem_v2 else None
    return mem or _call(nv, "nvmlDeviceGetMemoryInfo", handle)


@contextlib.contextmanager
def _initialised(nv: Any | None) -> Iterator[Any]:
    """NVML loaded (unless given) and initialised for the block, shut down after; GpulabError when it cannot be."""
    if nv is None:
        nv, problem = load_nvml()
        if nv is None:
            raise GpulabError(f"{ABSENT}{problem}")
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        raise GpulabError(f"{ABSENT}{_init_problem(nv, err)}") from err
    try:
        yield nv
    finally:
        _call(nv, "nvmlShutdown")


def gpu_processes(index: int, nv: Any | None = None) -> list[tuple[int, int | None]]:
    """(pid, used MiB) of compute processes on GPU `index`; used is None where NVML cannot tell."""
    with _initialised(nv) as nv:
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
        except nv.NVMLError as err:
            raise GpulabError(f"cannot list processes on GPU {index}: {err}") from err
        return [(int(proc.pid), _mib(getattr(proc, "usedGpuMemory", None))) for proc in procs]


@dataclass
class ProcessOnGpu:
    """One process NVML lists on a device."""

    pid: int
    used_mib: int | None  # None where NVML cannot tell (some vGPU and MIG setups)
    kinds: tuple[str, ...]  # "compute", "graphics", "mps" (an MPS client)
    name: str | None = None  # NVML's name for it (the executable's path); None when not answered


@dataclass
class DeviceUse:
    """What occupies one device, read through NVML; None fields were not answered."""

    index: int
    total_mib: int | None = None
    used_mib: int | None = None
    processes: list[ProcessOnGpu] = field(default_factory=list)
    processes_listed: bool = False  # False: NVML refused the listing, so `processes` says nothing
    utilisation_pct: list[int] = field(default_factory=list)  # one per sample; empty when not supported
    problem: str | None = None  # why the device could not be read at all


_PROCESS_LISTS = (
    ("nvmlDeviceGetComputeRunningProcesses", "compute"),
    ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
    ("nvmlDeviceGetMPSComputeRunningProcesses", "mps"),
)


def _processes(nv: Any, handle: Any) -> tuple[list[ProcessOnGpu], bool]:
    """Every process on the device, once each (a process can be in several lists), and whether any list answered."""
    by_pid: dict[int, ProcessOnGpu] = {}
    listed = False
    for fn, kind in _PROCESS_LISTS:
        procs = _call(nv, fn, handle)
        if procs is None:
            continue
        listed = True
        for proc in procs:
            pid = int(proc.pid)
            used = _mib(getattr(proc, "usedGpuMemory", None))
            seen = by_pid.get(pid)
            if seen is None:
                by_pid[pid] = ProcessOnGpu(pid=pid, used_mib=used, kinds=(kind,))
                continue
            # The lists report the same allocation for a process that is in both: keep one figure.
            seen.kinds = (*seen.kinds, kind)
            if seen.used_mib is None:
                seen.used_mib = used
    for proc in by_pid.values():
        proc.name = _str(_call(nv, "nvmlSystemGetProcessName", proc.pid))
    return list(by_pid.values()), listed


def device_use(
    indices: list[int],
    nv: Any | None = None,
    samples: int = 4,
    interval_s: float = 0.15,
    sleep: Callable[[float], None] | None = None,
) -> list[DeviceUse]:
    """Memory, processes and `samples` utilisation readings `interval_s` apart for each NVML index, in order.

    Raises GpulabError when NVML cannot be used at all; a device that cannot be read gets `problem` instead.
    """
    import time

    pause = sleep or time.sleep
    with _initialised(nv) as nv:
        out: list[DeviceUse] = []
        handles: list[Any] = []
        for index in indices:
            use = DeviceUse(index=index)
            handle = _call(nv, "nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                use.problem = f"NVML gives no handle for GPU {index}"
            else:
                mem = _memory_info(nv, handle)
                use.total_mib = _mib(getattr(mem, "total", None))
                use.used_mib = _mib(getattr(mem, "used", None))
                use.processes, use.processes_listed = _processes(nv, handle)
            out.append(use)
            handles.append(handle)
        for sample in range(samples):
            if sample:
                pause(interval_s)
            for use, handle in zip(out, handles, strict=True):
                rates = _call(nv, "nvmlDeviceGetUtilizationRates", handle) if handle is not None else None
                gpu = getattr(rates, "gpu", None)
                if isinstance(gpu, int):
                    use.utilisation_pct.append(gpu)
        return out
