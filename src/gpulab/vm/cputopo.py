"""Host CPU cores from their hyper-thread sibling lists, and where vCPUs and QEMU's own threads go on them.

The kernel's CPU numbering says nothing about which CPUs share a core: some hosts number siblings side by side
(0,1), others half the machine apart (0,N/2). Cores are therefore built from the sibling lists that libvirt's
capabilities (`<cpu id siblings=...>`) or sysfs (`topology/thread_siblings_list`) report; without them every CPU
counts as its own core.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpulab.vm.sysfs import parse_cpulist

Core = tuple[int, ...]  # the CPUs (hyper-threads) of one physical core, ascending


def siblings_from_capabilities(capabilities_xml: str) -> dict[int, tuple[int, ...]]:
    """{cpu: its siblings} from libvirt's host capabilities (empty when it lists none)."""
    found: dict[int, tuple[int, ...]] = {}
    for cpu in ET.fromstring(capabilities_xml).findall("host/topology/cells/cell/cpus/cpu"):
        cpu_id, siblings = cpu.get("id"), cpu.get("siblings")
        if cpu_id is not None and siblings:
            found[int(cpu_id)] = parse_cpulist(siblings)
    return found


def siblings_from_sysfs(root: Path) -> dict[int, tuple[int, ...]] | None:
    """{cpu: its siblings} from /sys/devices/system/cpu/cpu*/topology/thread_siblings_list."""
    cpus_dir = root / "sys/devices/system/cpu"
    found: dict[int, tuple[int, ...]] = {}
    for path in cpus_dir.glob("cpu[0-9]*"):
        try:
            text = (path / "topology/thread_siblings_list").read_text().strip()
        except OSError:
            continue
        found[int(path.name[3:])] = parse_cpulist(text)
    return found or None


def cores_of(cpus: Sequence[int], siblings: Mapping[int, tuple[int, ...]]) -> list[Core]:
    """`cpus` grouped into physical cores, ordered by each core's first CPU."""
    wanted = set(cpus)
    seen: set[int] = set()
    cores: list[Core] = []
    for cpu in sorted(wanted):
        if cpu in seen:
            continue
        core = tuple(sorted({cpu} | {s for s in siblings.get(cpu, ()) if s in wanted and s not in seen}))
        seen.update(core)
        cores.append(core)
    return cores


def smt_width(cores: Sequence[Core]) -> int:
    """Threads per core that every core offers (1 without SMT or without sibling data)."""
    return min((len(c) for c in cores), default=1)


def place_vcpus(cores: Sequence[Core], count: int, threads: int) -> list[int]:
    """Host CPUs for `count` vCPUs in guest order. threads > 1: whole cores, one vCPU per sibling, so the guest's
    thread pairs are the host's. threads == 1: distinct cores first, their siblings only once cores run out."""
    if threads > 1:
        whole = [core for core in cores if len(core) >= threads]
        return [cpu for core in whole[: count // threads] for cpu in core[:threads]]
    by_thread = [core[t] for t in range(max((len(c) for c in cores), default=0)) for core in cores if t < len(core)]
    return by_thread[:count]
