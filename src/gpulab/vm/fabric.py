"""NVSwitch fabrics (HGX and DGX baseboards): the NVLink fabric must be set up before CUDA starts in a guest.

On a baseboard whose SXM GPUs meet in NVSwitches, a GPU whose fabric nobody trained fails CUDA start-up in the
guest (error 802, "system not yet initialized"). NVIDIA documents two ways for VMs:

- full passthrough: every GPU and every NVSwitch of the baseboard goes to one VM, whose Fabric Manager trains
  the fabric;
- shared NVSwitch: the host keeps the NVSwitches and runs Fabric Manager in shared mode (FABRIC_MODE=1), which
  activates predefined GPU partitions; a VM gets the GPUs of one partition.

Anything else is refused with both fixes.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpulab.errors import GpulabError
from gpulab.vm.checks import FAIL, OK, PlanCheck
from gpulab.vm.host import Gpu, Host
from gpulab.vm.nodedev import PciDevice
from gpulab.vm.select import host_gpu_listing
from gpulab.vm.spec import VmSpec


def fabric_gpus(host: Host) -> list[Gpu]:
    """The GPUs the host's NVSwitches join: its SXM boards (and GPUs the matrix does not know)."""
    if not host.nvswitches:
        return []
    return [g for g in host.gpus if g.spec is None or g.spec.form_factor.upper().startswith("SXM")]


def _switches(host: Host) -> str:
    ids = sorted({d.pci_id for d in host.nvswitches})
    return f"{len(host.nvswitches)} NVSwitch{'es' if len(host.nvswitches) != 1 else ''} ({', '.join(ids)})"


def partition_gpus(host: Host, spec: VmSpec) -> list[Gpu] | None:
    """The GPUs of the spec's shared-NVSwitch partition; None when the spec names no partition."""
    chosen = spec.nvswitch
    if chosen is None or chosen.mode != "shared" or chosen.partition is None or chosen.partitions is None:
        return None
    layout = chosen.partitions
    if chosen.partition not in layout:
        known = ", ".join(str(k) for k in sorted(layout)) or "none"
        raise GpulabError(
            f"nvswitch.partition {chosen.partition} is not in the partition layout (partitions {known}); "
            "pick one of them (`fmpm -l` on the host lists them)."
        )
    gpus = []
    for address in layout[chosen.partition]:
        gpu = host.gpu_at(address)
        if gpu is None:
            raise GpulabError(
                f"partition {chosen.partition} names {address}, which is no GPU of this host; use the layout of "
                f"this host's Fabric Manager (`fmpm -l`); {host_gpu_listing(host)}."
            )
        gpus.append(gpu)
    return sorted(gpus, key=lambda g: g.address)


def fabric_plan(host: Host, spec: VmSpec, gpus: Sequence[Gpu]) -> tuple[list[PciDevice], list[PlanCheck]]:
    """The NVSwitches the VM takes, and the fabric checks."""
    mode = spec.nvswitch.mode if spec.nvswitch else None
    if not host.nvswitches:
        if mode is not None:
            return [], [
                PlanCheck("nvswitch", FAIL, "nvswitch is set but this host has no NVSwitch; leave the key out.")
            ]
        return [], []
    fabric = fabric_gpus(host)
    on_fabric = [g for g in gpus if g in fabric]
    if not on_fabric:
        return [], []
    switches = _switches(host)
    fixes = (
        "pass the whole fabric (gpus: all, nvswitch: passthrough; the guest runs Fabric Manager) or a partition "
        "of the host's Fabric Manager in shared NVSwitch mode (nvswitch: {mode: shared, partition: ID, "
        "partitions_file: FILE})"
    )
    if mode == "shared":
        return [], [
            PlanCheck(
                "nvswitch",
                OK,
                f"shared NVSwitch partition {spec.nvswitch.partition if spec.nvswitch else '?'} "
                f"({len(on_fabric)} GPUs); the host keeps its {switches}: run Fabric Manager there with "
                "FABRIC_MODE=1 and activate the partition (fmpm -a ID) before the VM starts",
            )
        ]
    whole = {g.address for g in on_fabric} == {g.address for g in fabric}
    if not whole:
        why = "full passthrough takes every GPU of the fabric" if mode == "passthrough" else "the fabric is not set up"
        return [], [
            PlanCheck(
                "nvswitch",
                FAIL,
                f"this host's {len(fabric)} GPUs meet in {switches}; a VM with {len(on_fabric)} of them fails CUDA "
                f"start-up (error 802) because {why}: {fixes}.",
            )
        ]
    return list(host.nvswitches), [
        PlanCheck(
            "nvswitch",
            OK,
            f"full passthrough: all {len(fabric)} GPUs and {switches} go to the VM; install and run "
            "nvidia-fabricmanager (the driver's version) in the guest",
        )
    ]
