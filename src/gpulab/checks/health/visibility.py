"""Which GPUs are seen: by NVML against the inventory and the PCI bus, and by each framework."""

from __future__ import annotations

from gpulab.checks.health.verdict import failed, passed, reporter, skipped
from gpulab.records import Check, Fingerprint


def gpu_count(fp: Fingerprint, expected: int | None, on_pci_bus: int | None = None) -> Check:
    """NVML sees the number of GPUs the inventory promises, and every NVIDIA GPU on the PCI bus."""
    name = "health.gpu_count"
    found = len(fp.gpus)
    seen = f"the capture lists {found}" if fp.is_capture else f"NVML sees {found}"
    ev = {"found": found, "expected": expected, "on_pci_bus": on_pci_bus, "source": reporter(fp)}
    host = fp.capture_attached_gpus
    if host is not None:
        # `nvidia-smi -q -x -i N`: the host's count is known, the other GPUs' health is not.
        ev["host_attached"] = host
        part = f"the capture holds {found} of the host's {host} GPUs (`nvidia-smi -q -x -i`): only those are judged"
        if expected is not None and host != expected:
            return failed(name, f"expected {expected} GPUs, the host reports {host} attached; {part}", **ev)
        if expected is None:
            return skipped(name, f"{part}; no --expect-gpus given to compare the host's count with", **ev)
        return passed(name, f"the host reports {host} GPUs attached, matching {expected} expected; {part}", **ev)
    if expected is not None and found != expected:
        hint = (
            f"{on_pci_bus} are on the PCI bus, so the driver did not bring up the rest: see `dmesg | grep -i nvrm`"
            if on_pci_bus is not None and on_pci_bus > found
            else "check that every card is seated and powered, and for a VM that every GPU is passed through"
        )
        return failed(name, f"expected {expected} GPUs, {seen}; {hint}", **ev)
    if on_pci_bus is not None and on_pci_bus > found:
        return failed(
            name,
            f"{on_pci_bus} NVIDIA GPUs on the PCI bus but {seen}: the driver failed on some of them "
            "(see `dmesg | grep -i nvrm`; a GPU bound to vfio-pci is expected only on a VM host)",
            **ev,
        )
    agreed = [f"{expected} expected"] if expected is not None else []
    if on_pci_bus == found:
        agreed.append(f"{on_pci_bus} NVIDIA GPUs on the PCI bus")
    if not agreed:
        # A count with nothing to compare it to proves nothing: the missing GPU would not be listed either.
        bus = "the PCI bus count is not captured" if fp.is_capture else "the PCI bus count is not reported"
        return skipped(name, f"{seen} GPUs, with nothing to compare: no --expect-gpus given and {bus}", **ev)
    return passed(name, f"{seen} GPUs, matching " + " and ".join(agreed), **ev)


def framework_sees_gpus(fp: Fingerprint, framework: str, visible: int) -> Check:
    """A framework sees as many GPUs as NVML shows (after CUDA_VISIBLE_DEVICES)."""
    name = f"health.{framework}_sees_gpus"
    if fp.software.frameworks is None:
        return skipped(name, f"{framework} not captured by {reporter(fp)}")
    fw = next((f for f in fp.software.frameworks if f.name == framework), None)
    if fw is None:
        return skipped(name, f"{framework} is not installed")
    if fw.error:
        return failed(name, f"{framework} could not be queried: {fw.error}")
    ev = {"version": fw.version, "built_cuda": fw.built_cuda, "sees": fw.sees_gpus, "visible": visible}
    if fw.sees_gpus is None:
        return skipped(name, f"{framework} {fw.version} did not report how many GPUs it sees", **ev)
    if fw.sees_gpus == visible:
        return passed(name, f"{framework} {fw.version} sees {visible} GPUs", **ev)
    if not fw.built_cuda:
        cause = f"{framework} {fw.version} is a CPU-only build: install a CUDA build (`gpulab matrix plan` names it)"
    else:
        cause = (
            f"{framework} {fw.version} (built for CUDA {fw.built_cuda}) cannot use them: check the driver is new "
            "enough for that CUDA and the build ships kernels for this architecture (`gpulab matrix check`)"
        )
    return failed(name, f"{framework} sees {fw.sees_gpus} of {visible} GPUs; {cause}", **ev)
