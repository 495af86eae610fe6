"""GPUDirect P2P cliques: one per P2P domain of the chosen GPUs.

The guest driver lets GPUs of one clique (x-nv-gpudirect-clique) talk peer to peer. GPUs of different P2P
domains (another root complex, another socket) cannot, so each domain gets its own clique: `p2p_clique` is the
first id, the next domain takes the next one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpulab.errors import GpulabError
from gpulab.vm.host import Gpu
from gpulab.vm.pci import PciAddress
from gpulab.vm.spec import VmSpec

MAX_CLIQUE = 15  # the property is 4 bits wide in QEMU's vfio-pci


@dataclass
class Cliques:
    by_gpu: dict[PciAddress, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def p2p_cliques(spec: VmSpec, gpus: Sequence[Gpu]) -> Cliques:
    """Clique id per GPU address (none when `p2p_clique` is not set), with what the plan says about them."""
    result = Cliques()
    if spec.p2p_clique is None or not gpus:
        return result
    domains: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        domains.setdefault(gpu.domain.key, []).append(gpu)
    last = spec.p2p_clique + len(domains) - 1
    if last > MAX_CLIQUE:
        raise GpulabError(
            f"{spec.name}: the GPUs span {len(domains)} P2P domains, one clique each from p2p_clique "
            f"{spec.p2p_clique} up to {last}, past the highest id {MAX_CLIQUE}; set p2p_clique to at most "
            f"{MAX_CLIQUE + 1 - len(domains)}."
        )
    parts = []
    for clique, members in enumerate(domains.values(), start=spec.p2p_clique):
        result.by_gpu.update((g.address, clique) for g in members)
        parts.append(f"{clique}: {', '.join(str(g.address) for g in members)} ({members[0].domain.label})")
    result.notes.append(f"GPUDirect P2P clique {'; '.join(parts)}")
    if len(domains) > 1:
        result.warnings.append(
            f"the GPUs span {len(domains)} P2P domains ({', '.join(m[0].domain.label for m in domains.values())}): "
            "P2P works inside each clique but not between them (the host cannot route it, e.g. across sockets), "
            "so traffic between cliques goes through host memory; for P2P between all GPUs select GPUs of one "
            "domain (`gpulab vm host` shows each GPU's)."
        )
    unknown = [str(g.address) for g in gpus if g.domain.source == "unknown"]
    if unknown:
        result.warnings.append(
            f"the PCIe topology of GPU {', '.join(unknown)} is unknown (libvirt gives no path and no NUMA node), "
            "so they share one clique; P2P fails in the guest if they are not under one root complex."
        )
    return result
