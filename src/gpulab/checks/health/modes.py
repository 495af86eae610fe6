"""How a GPU is presented (bare metal, passthrough, vGPU guest or host, MIG), and whether whole-GPU checks apply."""

from __future__ import annotations

import re

from gpulab.checks.health.verdict import LIVE_SOURCE, gpu_label, passed, skipped
from gpulab.records import Check, GpuInfo

# A vGPU profile's name ends in its frame-buffer size and series: "GRID T4-4Q", "NVIDIA L40S-2Q", "A100-4C".
_VGPU_PROFILE = re.compile(r"-\d+[ABCQ]$")


def elsewhere(name: str, gpu: GpuInfo, message: str, **evidence: object) -> Check:
    """A skip because this check does not apply to how the GPU is presented (a vGPU slice, MIG): it is judged
    elsewhere, which a verdict must tell apart from a value nobody could read."""
    return skipped(name, message, **evidence, judged_elsewhere=mode(gpu))


def mig_enabled(gpu: GpuInfo) -> bool:
    """MIG is on: the GPU is split into instances, so whole-GPU probes and readings measure no one workload."""
    return gpu.mig_enabled is True


def vgpu_slice(gpu: GpuInfo) -> bool:
    """The GPU is a vGPU slice seen from its guest: the host owns the board, its memory and its link."""
    mode = (gpu.virtualization_mode or "").replace(" ", "").upper()
    return mode == "VGPU" or (not mode and _VGPU_PROFILE.search(gpu.name) is not None)


def vgpu_host(gpu: GpuInfo) -> bool:
    """The GPU is a vGPU hypervisor's board: VMs share it, their processes are the host's purpose."""
    return (gpu.virtualization_mode or "").replace(" ", "").upper() in ("HOSTVGPU", "HOSTVSGA")


def mode(gpu: GpuInfo) -> str | None:
    """How this GPU is presented, as a fact: "MIG", "vGPU guest", "vGPU host", "passthrough" or "bare metal";
    None when the source says nothing of it."""
    if mig_enabled(gpu):
        return "MIG"
    if vgpu_slice(gpu):
        return "vGPU guest"
    if vgpu_host(gpu):
        return "vGPU host"
    value = (gpu.virtualization_mode or "").replace(" ", "").replace("-", "").upper()
    if value == "PASSTHROUGH":
        return "passthrough"
    if value == "NONE":
        return "bare metal"
    return None


def whole_gpu_notice(gpu: GpuInfo) -> str | None:
    """One line saying why whole-GPU probes measure nothing meaningful here (MIG or a vGPU slice); None when
    they do. Probes and reports call it before judging a GPU as a whole."""
    if mig_enabled(gpu):
        sizes = ", ".join(
            f"{d.memory_total_mib} MiB" if d.memory_total_mib is not None else "?" for d in gpu.mig_devices
        )
        held = f"{len(gpu.mig_devices)} MIG instances ({sizes})" if gpu.mig_devices else "no MIG instance"
        return (
            f"{gpu_label(gpu)}: MIG is enabled with {held}: whole-GPU probes and readings measure no single "
            f"workload; judge the instances, or disable MIG (`nvidia-smi -i {gpu.index} -mig 0`) to measure the GPU"
        )
    if vgpu_slice(gpu):
        licence = f", licensed as {gpu.vgpu_licensed_product}" if gpu.vgpu_licensed_product else ""
        return (
            f"{gpu_label(gpu)}: a vGPU slice{licence}: the host owns the physical GPU, so its ECC, memory "
            "retirement and PCIe link are judged on the host, not in this guest"
        )
    if vgpu_host(gpu):
        return (
            f"{gpu_label(gpu)}: a vGPU host's GPU (mode {gpu.virtualization_mode}): VMs share it, so whole-GPU "
            "probes and idle readings measure their work; its board (ECC, memory, link, heat) is judged here"
        )
    return None


def whole_gpu(gpu: GpuInfo, src: str = LIVE_SOURCE) -> Check:
    """Whether whole-GPU checks and probes mean anything on this GPU (no MIG, not a vGPU slice)."""
    name = f"health.whole_gpu[{gpu.index}]"
    ev = {
        "mig_enabled": gpu.mig_enabled,
        "mig_devices": len(gpu.mig_devices),
        "virtualization_mode": gpu.virtualization_mode,
    }
    notice = whole_gpu_notice(gpu)
    if notice is not None:
        return elsewhere(name, gpu, notice, **ev)
    if gpu.mig_enabled is None and gpu.virtualization_mode is None:
        return skipped(name, f"{gpu_label(gpu)}: MIG and virtualization mode not reported by {src}", **ev)
    return passed(name, f"{gpu_label(gpu)}: a whole GPU ({mode(gpu) or 'no MIG, not a vGPU slice'})", **ev)
