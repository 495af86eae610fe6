"""Host CPUs for QEMU's own threads (emulator, disk I/O) apart from the vCPUs, and the errors of a node too small.

Pinned beside the vCPUs, QEMU's threads take time from them; on CPUs of their own (preferably a whole core of the
GPUs' node) they do not.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpulab.errors import GpulabError
from gpulab.vm.cputopo import cores_of
from gpulab.vm.host import Host
from gpulab.vm.spec import VmSpec
from gpulab.vm.sysfs import format_cpulist


def short_of_cpus(spec: VmSpec, node: int, count: int, cpus: Sequence[int], housekeeping: Sequence[int]) -> GpulabError:
    kept = [c for c in housekeeping if c in set(cpus)]
    aside = f"; housekeeping_cpus takes {format_cpulist(kept)}" if kept else ""
    return GpulabError(
        f"{spec.name}: {count} vCPUs are to be pinned to NUMA node {node}, which has {len(cpus)} CPUs "
        f"({format_cpulist(tuple(cpus))}{aside}). Lower vcpus, or set numa_pinning: false to let them float."
    )


def host_cpus(host: Host) -> list[int]:
    cpus = sorted({c for n in host.numa for c in n.cpus})
    return cpus or (list(range(host.cpus)) if host.cpus else [])


def named_housekeeping(host: Host, spec: VmSpec) -> tuple[int, ...]:
    """housekeeping_cpus as the spec names them, each checked against the host's CPUs when those are known."""
    wanted = spec.housekeeping_cpus or ()
    known = host_cpus(host)
    unknown = [c for c in wanted if known and c not in known]
    if unknown:
        raise GpulabError(
            f"{spec.name}: housekeeping_cpus {format_cpulist(unknown)} are not CPUs of this host (it has "
            f"{format_cpulist(known)}); name CPUs it has, or leave the key out to let gpulab choose."
        )
    return wanted


def auto_housekeeping(host: Host, nodes: Sequence[int], per_cell: int) -> tuple[int, ...]:
    """A whole core not needed for vCPUs: the first core of the GPUs' node (core 0 when they sit on node 0),
    else the host's core 0, else any core off the pinned nodes. (): none is free."""
    node_cpus = {n: host.numa_node(n).cpus for n in nodes}  # type: ignore[union-attr]
    candidates = [cores_of(node_cpus[n], host.siblings)[0] for n in nodes if node_cpus[n]]
    host_cores = cores_of(host_cpus(host), host.siblings)
    candidates += host_cores[:1]
    pinned = {c for cpus in node_cpus.values() for c in cpus}
    candidates += [core for core in host_cores if not set(core) & pinned]
    for core in candidates:
        if all(len(set(node_cpus[n]) - set(core)) >= per_cell for n in nodes):
            return core
    return ()
