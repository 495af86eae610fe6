"""The host fingerprint: what a machine is, as plain typed records.

Discovery (NVML, nvidia-smi captures, sysfs, /proc) fills these; the report stores `Fingerprint.to_dict()`
under its `fingerprint` key, and `Fingerprint.from_dict()` reads it back for compare. The JSON shape is fixed
by `gpulab/report/schema.json`; change both together.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from gpulab.names import Architecture, ReportedArchitecture

# gpu_source of a fingerprint read from `nvidia-smi -q -x`: "nvidia-smi-xml:<path>".
CAPTURE_SOURCE_PREFIX = "nvidia-smi-xml:"


@dataclass
class PcieLink:
    gen_current: int | None = None
    gen_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None
    # What the upstream port (the slot's bridge) can carry: sysfs of the parent bridge when live, the capture's
    # max_host_link_gen where nvidia-smi reports it; None when unknown.
    gen_host_max: int | None = None
    width_host_max: int | None = None

    @property
    def at_max(self) -> bool | None:
        """True when the link runs at its maximum generation and width; None when unknown."""
        vals = (self.gen_current, self.gen_max, self.width_current, self.width_max)
        if any(v is None for v in vals):
            return None
        return self.gen_current == self.gen_max and self.width_current == self.width_max

    def __str__(self) -> str:
        def part(cur: int | None, top: int | None, prefix: str) -> str:
            return f"{prefix}{cur if cur is not None else '?'}/{top if top is not None else '?'}"

        return f"{part(self.gen_current, self.gen_max, 'gen')} {part(self.width_current, self.width_max, 'x')}"


@dataclass
class EccErrors:
    """ECC error counts; `volatile` since the driver loaded, `aggregate` over the board's life."""

    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None


@dataclass
class MemoryRetirement:
    """Retired pages (Pascal/Volta) or remapped rows (Ampere and later); None where not supported."""

    retired_single_bit: int | None = None
    retired_double_bit: int | None = None
    retired_pending: bool | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None


@dataclass
class NvLinkInfo:
    link: int
    active: bool
    peer_bus_id: str | None = None
    bandwidth_gbps: float | None = None


@dataclass
class MigDevice:
    """One MIG instance of a GPU (`nvidia-smi -q -x` <mig_device>)."""

    index: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    multiprocessor_count: int | None = None
    memory_total_mib: int | None = None


@dataclass
class GpuInfo:
    index: int
    name: str
    uuid: str
    bus_id: str  # normalised sysfs form, "0000:3b:00.0"
    pci_device_id: str  # "10de:2335", vendor:device in lower-case hex
    pci_subsystem_id: str | None = None  # "10de:18bf"
    # As the driver names it, or the matrix for a GPU whose driver does not; written as drivers write it ("Ada
    # Lovelace"), read back by Architecture.parse_reported (an architecture newer than the matrix stays its text).
    architecture: ReportedArchitecture | None = None
    compute_capability: str | None = None  # "9.0"
    numa_node: int | None = None
    pcie: PcieLink = field(default_factory=PcieLink)
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    ecc_enabled: bool | None = None
    ecc_errors: EccErrors = field(default_factory=EccErrors)
    retirement: MemoryRetirement = field(default_factory=MemoryRetirement)
    persistence_mode: bool | None = None
    virtualization_mode: str | None = None  # "Pass-Through", "None", "VGPU"...
    vbios_version: str | None = None
    performance_state: str | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None
    # Active ones, e.g. ["gpu_idle"]; [] = the source reported none active, None = it did not report them.
    throttle_reasons: list[str] | None = field(default_factory=list)
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None  # the board's default; a limit below it was set by someone
    min_power_limit_w: float | None = None
    temp_slowdown_c: float | None = None  # the GPU's own thresholds: clocks slow down / it shuts down
    temp_shutdown_c: float | None = None
    pcie_replays: int | None = None  # PCIe replay counter (link-level retransmissions); None = not reported
    pcie_replay_rollovers: int | None = None  # times that counter wrapped
    nvlinks: list[NvLinkInfo] = field(default_factory=list)
    product_brand: str | None = None  # the driver's brand: "GeForce", "NVIDIA RTX", "Tesla"...
    # The compatibility matrix's name for this GPU (found by PCI id first); None when the matrix does not know it.
    matrix_name: str | None = None
    product_class: str | None = None  # who the board is built for: one of gpulab.compat.gpu_names.PRODUCT_CLASSES
    utilization_gpu_pct: float | None = None
    compute_processes: int | None = None  # running compute processes; None = not reported
    mig_enabled: bool | None = None  # None where the GPU has no MIG (N/A)
    mig_devices: list[MigDevice] = field(default_factory=list)
    vgpu_licensed_product: str | None = None  # "NVIDIA RTX Virtual Workstation" in a vGPU guest


@dataclass
class CpuInfo:
    model: str | None = None
    vendor: str | None = None
    sockets: int | None = None
    cores: int | None = None  # physical cores, all sockets
    threads: int | None = None  # logical CPUs online
    flags: list[str] = field(default_factory=list)


@dataclass
class NumaNode:
    node: int
    cpus: str  # cpulist form, "0-31,64-95"
    memory_mib: int | None = None


@dataclass
class IommuGroup:
    group: int
    devices: list[str]  # PCI addresses


@dataclass
class HostInfo:
    hostname: str
    os: str | None = None  # PRETTY_NAME
    kernel: str | None = None
    memory_total_mib: int | None = None
    hypervisor: str | None = None  # None = bare metal; else "KVM", "VMware", "Firecracker"...
    hypervisor_evidence: list[str] = field(default_factory=list)  # which sources said so
    iommu_enabled: bool | None = None
    iommu_groups: list[IommuGroup] = field(default_factory=list)
    numa_nodes: list[NumaNode] = field(default_factory=list)
    cpu: CpuInfo = field(default_factory=CpuInfo)


@dataclass
class FrameworkInfo:
    name: str  # "torch", "tensorflow"
    version: str
    built_cuda: str | None = None
    built_cudnn: str | None = None
    nccl: str | None = None
    sees_gpus: int | None = None  # GPUs the framework reports; None when it was not asked
    error: str | None = None  # why it could not be imported or queried


@dataclass
class SoftwareInfo:
    """The stack; in a fingerprint read from captures, what the capture does not hold is None ("not captured")
    rather than an empty list, which would claim that nothing is installed."""

    driver_version: str | None = None
    cuda_driver_version: str | None = None  # what the driver supports, "13.0"
    toolkits: list[dict[str, str]] | None = field(default_factory=list)  # [{"path": ..., "version": ...}]
    nvcc_version: str | None = None
    cudnn_version: str | None = None
    nccl_version: str | None = None
    python: str | None = None
    frameworks: list[FrameworkInfo] | None = field(default_factory=list)
    env: dict[str, str] | None = field(default_factory=dict)  # CUDA_VISIBLE_DEVICES, NVIDIA_TF32_OVERRIDE...


@dataclass
class Fingerprint:
    # None when the fingerprint was read from captures that hold no host facts (`nvidia-smi -q -x` has none):
    # this machine's CPU, memory and name must never stand in for the captured host's.
    host: HostInfo | None
    software: SoftwareInfo = field(default_factory=SoftwareInfo)
    gpus: list[GpuInfo] = field(default_factory=list)
    # topology[i][j]: link kind between GPU i and j as `nvidia-smi topo -m` names it ("NV18", "PIX", "SYS"...)
    topology: list[list[str]] = field(default_factory=list)
    gpu_source: str = "none"  # "nvml", "nvidia-smi-xml:<path>" or "none"
    gpu_absent_reason: str | None = None  # one line when no GPU was found, e.g. "no NVIDIA GPU/driver found: ..."
    # Files read instead of querying this machine (`nvidia-smi -q -x`, `topo -m`, `nvlink -s`); [] = all live.
    captured_from: list[str] = field(default_factory=list)
    # A per-GPU capture (`nvidia-smi -q -x -i N`) keeps the host's <attached_gpus> beside fewer <gpu> sections:
    # that host count, when it differs from len(gpus); None otherwise.
    capture_attached_gpus: int | None = None

    @property
    def is_capture(self) -> bool:
        """The GPUs come from a capture file, so nothing else about this machine belongs in the fingerprint."""
        return self.gpu_source.startswith(CAPTURE_SOURCE_PREFIX)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for gpu, written in zip(self.gpus, out["gpus"], strict=True):
            written["architecture"] = gpu.architecture.driver_name if gpu.architecture is not None else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        return _build(cls, data)


def _build(kind: Any, data: dict[str, Any]) -> Any:
    """Rebuild nested dataclasses from `asdict` output (the report's fingerprint); unknown keys are ignored."""
    hints = typing.get_type_hints(kind)
    return kind(**{f.name: _convert(hints[f.name], data[f.name]) for f in dataclasses.fields(kind) if f.name in data})


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        # `X | None`: the value is not None here, so it is an X.
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hint is Architecture:  # a GPU's architecture: as its driver wrote it, or one newer than the matrix
        return Architecture.parse_reported(value, "fingerprint gpus[].architecture")
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args and dataclasses.is_dataclass(args[0]):
        return [_build(args[0], v) for v in value]
    return value
