"""The records every part of gpulab speaks: what a machine is (`GpuInfo`, `Fingerprint`), what a run is asked to do
(`RunConfig`), what a run found (`Result` with its `TelemetrySummary` of `GpuTelemetry`, `Check`, `Report`) and how a
study session sized its work (`Sizing`, its probe runs `PackingProbe` or `BatchProbe`). Plain typed dataclasses on
the ground floor, above only the vocabulary (`gpulab.names`): discovery, workloads, launchers, checks and the report
all import them from here, and none of them needs the report's pages, plots or compare code to do so."""

from gpulab.records.machine import (
    CAPTURE_SOURCE_PREFIX,
    CpuInfo,
    EccErrors,
    Fingerprint,
    FrameworkInfo,
    GpuInfo,
    HostInfo,
    IommuGroup,
    MemoryRetirement,
    MigDevice,
    NumaNode,
    NvLinkInfo,
    PcieLink,
    SoftwareInfo,
)
from gpulab.records.report import (
    READABLE_SCHEMAS,
    SCHEMA_ID,
    STATUSES,
    Check,
    GpuTelemetry,
    Report,
    Result,
    Scaling,
    Speedup,
    Spread,
    Status,
    TelemetrySummary,
    Threshold,
    result_from_dict,
    scaling_from_dict,
    spread_from_dict,
)
from gpulab.records.run import RunConfig
from gpulab.records.study import BatchProbe, PackingProbe, Sizing, SizingProbe, measured

__all__ = [
    "CAPTURE_SOURCE_PREFIX",
    "READABLE_SCHEMAS",
    "SCHEMA_ID",
    "STATUSES",
    "BatchProbe",
    "Check",
    "CpuInfo",
    "EccErrors",
    "Fingerprint",
    "FrameworkInfo",
    "GpuInfo",
    "GpuTelemetry",
    "HostInfo",
    "IommuGroup",
    "MemoryRetirement",
    "MigDevice",
    "NumaNode",
    "NvLinkInfo",
    "PackingProbe",
    "PcieLink",
    "Report",
    "Result",
    "RunConfig",
    "Scaling",
    "Sizing",
    "SizingProbe",
    "SoftwareInfo",
    "Speedup",
    "Spread",
    "Status",
    "TelemetrySummary",
    "Threshold",
    "measured",
    "result_from_dict",
    "scaling_from_dict",
    "spread_from_dict",
]

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ()
