"""Put the host, GPU and software discovery together into one Fingerprint."""

from __future__ import annotations

import re
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.hw import nvml
from gpulab.hw.host import host_info
from gpulab.hw.smi.nvlink import parse_nvlink
from gpulab.hw.smi.topo import Topology, parse_topo
from gpulab.hw.smi.xml import read_capture
from gpulab.hw.software import software_info
from gpulab.records import CAPTURE_SOURCE_PREFIX, Fingerprint, GpuInfo, HostInfo, SoftwareInfo


def _describe(gpu: GpuInfo) -> None:
    """Fill what the compatibility matrix knows of this model: its name there, architecture, compute capability
    and product class. A GPU the matrix lacks keeps what its source reported, and its class comes from its
    name and brand."""
    from gpulab.compat import gpus as matrix  # the matrix is data this module can do without

    try:
        spec = matrix.gpu_for(gpu.name, gpu.pci_device_id)
    except GpulabError:  # a broken matrix must not stop discovery; the health checks name it
        spec = None
    if spec is not None:
        gpu.matrix_name = spec.name
        gpu.compute_capability = gpu.compute_capability or spec.compute_capability
        gpu.architecture = gpu.architecture or spec.architecture
        gpu.product_class = spec.product_class
    else:
        from gpulab.compat import architecture_for_pci_id, product_class

        gpu.product_class = product_class(gpu.name, gpu.product_brand)
        # Drivers before R450 report no architecture: the PCI id's chip family names it.
        gpu.architecture = gpu.architecture or architecture_for_pci_id(gpu.pci_device_id)
    if gpu.compute_capability is None:
        # Used only when the matrix cannot say: an architecture whose chips all have one compute capability.
        from gpulab.compat import sole_compute_capability

        gpu.compute_capability = sole_compute_capability(gpu.architecture)


def _same_device(root: Path, gpu: GpuInfo) -> bool:
    """This machine's PCI function at the GPU's address is that NVIDIA device."""
    dev = root / "sys/bus/pci/devices" / gpu.bus_id
    try:
        vendor = (dev / "vendor").read_text().strip().lower()
        device = (dev / "device").read_text().strip().lower()
    except OSError:
        return False
    return f"{vendor[2:]}:{device[2:]}" == gpu.pci_device_id


def _sysfs_numa(root: Path, gpu: GpuInfo) -> int | None:
    """numa_node of the GPU's PCI function; only trusted when that function is the same NVIDIA device."""
    dev = root / "sys/bus/pci/devices" / gpu.bus_id
    try:
        vendor = (dev / "vendor").read_text().strip().lower()
        device = (dev / "device").read_text().strip().lower()
        node = int((dev / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    if f"{vendor[2:]}:{device[2:]}" != gpu.pci_device_id:
        return None  # a capture from another machine: this bus address is something else here
    return node if node >= 0 else None


# sysfs max_link_speed ("16.0 GT/s PCIe") -> PCIe generation.
_GEN_BY_GTS = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


def upstream_port(root: Path, bus_id: str) -> tuple[int | None, int | None]:
    """(max generation, max width) of the bridge port above a PCI function: what its slot can carry. The
    device's sysfs directory sits inside its parent bridge's; (None, None) where there is none (a VM's root
    bus) or it cannot be read."""
    try:
        parent = (root / "sys/bus/pci/devices" / bus_id).resolve().parent
        width = int((parent / "max_link_width").read_text().strip())
        speed = (parent / "max_link_speed").read_text().split()[0]
    except (OSError, ValueError, IndexError):
        return None, None
    return _GEN_BY_GTS.get(speed), width if width > 0 else None


def _fill(gpus: list[GpuInfo], root: Path, topo: Topology | None, *, captured: bool) -> None:
    for gpu in gpus:
        _describe(gpu)
        # A captured GPU's bus address may hold the same model here: this machine's sysfs says nothing about it.
        gpu.numa_node = None if captured else _sysfs_numa(root, gpu)
        if not captured and _same_device(root, gpu):
            gen, width = upstream_port(root, gpu.bus_id)
            gpu.pcie.gen_host_max = gpu.pcie.gen_host_max or gen
            gpu.pcie.width_host_max = width
        if gpu.numa_node is None and topo is not None and gpu.index < len(topo.affinity):
            # The kernel gives -1 in VMs without a NUMA description; nvidia-smi's affinity still names a node.
            numa = topo.affinity[gpu.index].numa
            if numa and re.fullmatch(r"\d+", numa):
                gpu.numa_node = int(numa)


def captured_software(driver: str | None, cuda: str | None) -> SoftwareInfo:
    """What `nvidia-smi -q -x` says of the software: the driver and its CUDA version; the rest is not captured."""
    return SoftwareInfo(
        driver_version=driver,
        cuda_driver_version=cuda,
        toolkits=None,
        nvcc_version=None,
        cudnn_version=None,
        nccl_version=None,
        python=None,
        frameworks=None,
        env=None,
    )


def fingerprint(
    *,
    smi_xml: Path | None = None,
    topo_file: Path | None = None,
    nvlink_file: Path | None = None,
    probe_frameworks: bool = True,
    root: Path = Path("/"),
) -> Fingerprint:
    """Describe this host from live NVML, or a captured host from a `nvidia-smi -q -x` file.

    A capture is judged on what it holds: its driver, CUDA version and GPUs (plus `topo_file` and
    `nvlink_file` when given). Host, toolkits, cuDNN, frameworks and environment are left None ("not
    captured"), never read from this machine. `topo_file` (`nvidia-smi topo -m`) replaces the NVML-derived
    matrix; `nvlink_file` (`nvidia-smi nvlink -s`) fills per-GPU NVLinks when the GPU source has none
    (captures never do).
    """
    topo = parse_topo(topo_file) if topo_file is not None else None
    captured_from = [str(p) for p in (smi_xml, topo_file, nvlink_file) if p is not None]
    host: HostInfo | None
    if smi_xml is not None:
        capture = read_capture(smi_xml)
        driver, cuda, gpus = capture.driver_version, capture.cuda_version, capture.gpus
        attached = capture.attached_gpus
        source = f"{CAPTURE_SOURCE_PREFIX}{smi_xml}"
        topology: list[list[str]] = []
        reason = None if gpus else f"{nvml.ABSENT}the capture {smi_xml} lists no GPU"
        host = None
        software = captured_software(driver, cuda)
    else:
        result = nvml.query(root=root)
        attached = None
        driver, cuda, gpus = result.driver_version, result.cuda_driver_version, result.gpus
        source = "nvml" if gpus else "none"
        topology = result.topology
        reason = result.absent_reason
        host = host_info(root)
        software = software_info(
            driver_version=driver, cuda_driver_version=cuda, probe_frameworks=probe_frameworks, root=root
        )
    if topo is not None:
        topology = topo.matrix
    if nvlink_file is not None:
        links = parse_nvlink(nvlink_file)
        for gpu in gpus:
            if not gpu.nvlinks:
                gpu.nvlinks = links.get(gpu.index, [])
    _fill(gpus, root, topo, captured=smi_xml is not None)
    return Fingerprint(
        host=host,
        software=software,
        gpus=gpus,
        topology=topology,
        gpu_source=source,
        gpu_absent_reason=reason,
        captured_from=captured_from,
        capture_attached_gpus=attached,
    )
