"""A VM's NVSwitch setting and, for shared mode, its partition layouts: {id: [GPU PCI addresses]}, or Fabric
Manager's `fmpm -l` JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.vm.pci import PciAddress

NVSWITCH_MODES = ("passthrough", "shared")


@dataclass(frozen=True)
class NvswitchSpec:
    mode: str  # passthrough: every GPU and NVSwitch to this VM; shared: a partition of the host's Fabric Manager
    partition: int | None = None
    partitions: Mapping[int, tuple[PciAddress, ...]] | None = None  # partition id -> its GPUs
    partitions_file: Path | None = None


def partition_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _addresses(value: Any) -> tuple[PciAddress, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    try:
        return tuple(PciAddress.parse(v) for v in value)
    except GpulabError:
        return None


def parse_partitions(data: Any) -> dict[int, tuple[PciAddress, ...]] | None:
    """A partition layout: {id: [GPU PCI addresses]}, or the `partitionInfo` JSON of Fabric Manager's partition
    list (`fmpm -l`: each partition's partitionId and gpuInfo[].pciBusId). None when it is neither."""
    if isinstance(data, dict) and isinstance(data.get("partitionInfo"), list):
        layout: dict[int, tuple[PciAddress, ...]] = {}
        for entry in data["partitionInfo"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("gpuInfo"), list):
                return None
            pid = partition_id(entry.get("partitionId"))
            gpus = _addresses([g.get("pciBusId") for g in entry["gpuInfo"] if isinstance(g, dict)])
            if pid is None or gpus is None:
                return None
            layout[pid] = gpus
        return layout
    if not isinstance(data, dict) or not data:
        return None
    found = {partition_id(k): _addresses(v) for k, v in data.items()}
    if any(k is None or v is None for k, v in found.items()):
        return None
    return {k: v for k, v in found.items() if k is not None and v is not None}


PARTITIONS_FORM = (
    "a mapping of partition id to GPU addresses ({1: ['0000:18:00.0', '0000:2a:00.0']}), or `fmpm -l` JSON"
)
