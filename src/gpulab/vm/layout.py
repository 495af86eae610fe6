"""Where everything goes, as plain data for the template: vCPU pinning and guest NUMA cells, the guest PCIe
tree (root ports, one pxb-pcie per host NUMA node when the GPUs span nodes), hostdev addresses, and the
64-bit MMIO window that large-BAR GPUs need.

Pure functions of the host, the spec and the chosen devices; impossible requests raise GpulabError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpulab.errors import GpulabError
from gpulab.vm.host import GIB, Gpu, Host
from gpulab.vm.nodedev import PciDevice
from gpulab.vm.p2p import p2p_cliques
from gpulab.vm.pci import PciAddress
from gpulab.vm.spec import MAX_GPU_COUNT, VmSpec
from gpulab.vm.sysfs import format_cpulist

# OVMF's default 64-bit PCI aperture; GPUs whose BARs add up to more need a larger window.
OVMF_DEFAULT_MMIO64 = 32 * GIB
MAX_GPUS = MAX_GPU_COUNT  # one root port per GPU on the slots 0x10-0x1f of the guest's root complex
_GPU_SLOT0 = 0x10
_EXPANDER_SLOT0 = 0x08
_EXPANDER_BUS0 = 0x80  # bus numbers behind pxb-pcie j start at 0x80 + 0x10*j, clear of the root complex's
_EXPANDER_BUS_STEP = 0x10


@dataclass(frozen=True)
class Cell:
    id: int
    host_node: int
    vcpus: str  # cpulist of guest vCPUs
    memory_mib: int


@dataclass(frozen=True)
class Pin:
    vcpu: int
    cpuset: str


@dataclass(frozen=True)
class Expander:
    index: int
    bus_nr: int
    cell: int
    slot: int


@dataclass(frozen=True)
class RootPort:
    index: int
    bus: int  # controller index of the parent bus (0: the root complex)
    slot: int


@dataclass(frozen=True)
class Hostdev:
    source: PciAddress
    bus: int  # the root port's index
    function: int
    multifunction: bool
    alias: str | None
    label: str
    clique: int | None = None  # GPUDirect P2P clique (x-nv-gpudirect-clique)
    rom_file: str | None = None
    rom_bar: bool | None = None  # False: `<rom bar='off'/>`


@dataclass(frozen=True)
class MaxPhysAddr:
    mode: str  # passthrough | emulate
    bits: int | None


@dataclass
class Layout:
    cells: list[Cell] = field(default_factory=list)
    pins: list[Pin] = field(default_factory=list)
    emulator_cpuset: str | None = None
    numa_nodeset: str | None = None
    memnodes: list[tuple[int, int]] = field(default_factory=list)  # (guest cell, host node)
    expanders: list[Expander] = field(default_factory=list)
    root_ports: list[RootPort] = field(default_factory=list)
    hostdevs: list[Hostdev] = field(default_factory=list)
    mmio_window_mb: int | None = None
    maxphysaddr: MaxPhysAddr | None = None
    bar_bytes: int = 0
    host_nodes: list[int] = field(default_factory=list)  # host NUMA nodes the VM is pinned to
    memory_per_node_mib: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    p2p_notes: list[str] = field(default_factory=list)
    p2p_warnings: list[str] = field(default_factory=list)


def _split(total: int, parts: int) -> list[int]:
    """`total` in `parts` near-equal whole shares, larger ones first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _pin_nodes(host: Host, spec: VmSpec, gpus: Sequence[Gpu], layout: Layout) -> list[int]:
    """The host NUMA nodes to pin to (empty: no pinning), with a warning for each reason not to."""
    if not spec.numa_pinning or not gpus:
        return []
    unknown = [str(g.address) for g in gpus if g.numa_node is None]
    if unknown:
        layout.warnings.append(
            f"the NUMA node of GPU {', '.join(unknown)} is unknown (the platform reports none); vCPUs and "
            "memory are not pinned."
        )
        return []
    nodes = sorted({g.numa_node for g in gpus if g.numa_node is not None})
    missing = [n for n in nodes if host.numa_node(n) is None]
    if missing:
        layout.warnings.append(
            f"the CPUs of NUMA node {', '.join(map(str, missing))} are unknown (libvirt reports no host topology and "
            "no sysfs was read); vCPUs and memory are not pinned."
        )
        return []
    return nodes


def _cpus_of(host: Host, node: int, count: int, spec: VmSpec) -> tuple[int, ...]:
    numa = host.numa_node(node)
    cpus = numa.cpus if numa else ()
    if count > len(cpus):
        raise GpulabError(
            f"{spec.name}: {count} vCPUs are to be pinned to NUMA node {node}, which has {len(cpus)} CPUs "
            f"({format_cpulist(cpus)}). Lower vcpus, or set numa_pinning: false to let them float."
        )
    # The kernel lists physical cores before their hyper-thread siblings, so vCPUs land on distinct cores first.
    return cpus[:count]


def _numa(host: Host, spec: VmSpec, gpus: Sequence[Gpu], layout: Layout) -> None:
    nodes = _pin_nodes(host, spec, gpus, layout)
    layout.host_nodes = nodes
    if not nodes:
        return
    if len(nodes) == 1:
        cpus = _cpus_of(host, nodes[0], spec.vcpus, spec)
        layout.pins = [Pin(v, str(c)) for v, c in enumerate(cpus)]
        layout.emulator_cpuset = format_cpulist(cpus)
        layout.numa_nodeset = str(nodes[0])
        layout.memory_per_node_mib = {nodes[0]: spec.memory_mib}
        layout.notes.append(
            f"vCPUs pinned to host CPUs {format_cpulist(cpus)} and memory bound to NUMA node {nodes[0]}"
        )
        return
    if spec.vcpus < len(nodes):
        raise GpulabError(
            f"{spec.name}: the GPUs span NUMA nodes {', '.join(map(str, nodes))}, which needs one vCPU per node at "
            f"least; give vcpus >= {len(nodes)} or set numa_pinning: false."
        )
    unit_mib = spec.hugepage_kib // 1024 if spec.hugepages else 1
    memory_units = _split(spec.memory_mib // unit_mib, len(nodes))
    first_vcpu = 0
    all_cpus: list[int] = []
    for cell, (node, vcpus, units) in enumerate(zip(nodes, _split(spec.vcpus, len(nodes)), memory_units, strict=True)):
        if units == 0:
            raise GpulabError(
                f"{spec.name}: {spec.memory_mib} MiB cannot be split over NUMA nodes {nodes} in {spec.hugepage_size} "
                "pages; give more memory or set numa_pinning: false."
            )
        cpus = _cpus_of(host, node, vcpus, spec)
        all_cpus.extend(cpus)
        layout.pins.extend(Pin(first_vcpu + i, str(c)) for i, c in enumerate(cpus))
        guest_vcpus = format_cpulist(list(range(first_vcpu, first_vcpu + vcpus)))
        layout.cells.append(Cell(id=cell, host_node=node, vcpus=guest_vcpus, memory_mib=units * unit_mib))
        layout.memnodes.append((cell, node))
        layout.memory_per_node_mib[node] = units * unit_mib
        first_vcpu += vcpus
    layout.emulator_cpuset = format_cpulist(all_cpus)
    layout.numa_nodeset = format_cpulist(nodes)
    layout.notes.append(
        f"GPUs span host NUMA nodes {', '.join(map(str, nodes))}: one guest NUMA cell and one pxb-pcie per node, "
        "each GPU behind its node's expander"
    )


def _pci_tree(spec: VmSpec, gpus: Sequence[Gpu], extra: Sequence[PciDevice], layout: Layout) -> None:
    if len(gpus) + len(extra) > MAX_GPUS:
        raise GpulabError(
            f"{spec.name}: {len(gpus) + len(extra)} passed-through devices; gpulab lays out at most {MAX_GPUS}."
        )
    index = 1
    cell_of_node = {c.host_node: c for c in layout.cells}
    expander_of_cell: dict[int, Expander] = {}
    for j, cell in enumerate(layout.cells):
        expander = Expander(
            index=index, bus_nr=_EXPANDER_BUS0 + _EXPANDER_BUS_STEP * j, cell=cell.id, slot=_EXPANDER_SLOT0 + j
        )
        layout.expanders.append(expander)
        expander_of_cell[cell.id] = expander
        index += 1
    root_slot = _GPU_SLOT0
    ports_on: dict[int, int] = {}

    def new_port(parent: int) -> RootPort:
        nonlocal index, root_slot
        if parent == 0:
            port = RootPort(index=index, bus=0, slot=root_slot)
            root_slot += 1
        else:
            port = RootPort(index=index, bus=parent, slot=ports_on.get(parent, 0))
            ports_on[parent] = port.slot + 1
        layout.root_ports.append(port)
        index += 1
        return port

    cliques = p2p_cliques(spec, gpus)
    layout.p2p_notes, layout.p2p_warnings = cliques.notes, cliques.warnings
    for i, gpu in enumerate(gpus):
        gpu_cell = cell_of_node.get(gpu.numa_node) if gpu.numa_node is not None else None
        port = new_port(expander_of_cell[gpu_cell.id].index if gpu_cell else 0)
        alias = f"ua-gpu{i}"
        layout.hostdevs.append(
            Hostdev(
                gpu.address,
                port.index,
                0,
                bool(gpu.companions),
                alias,
                gpu.name,
                clique=cliques.by_gpu.get(gpu.address),
                rom_file=str(spec.gpu_rom.file) if spec.gpu_rom and spec.gpu_rom.file else None,
                rom_bar=spec.gpu_rom.bar if spec.gpu_rom else None,
            )
        )
        for function, companion in enumerate(gpu.companions, start=1):
            layout.hostdevs.append(Hostdev(companion.address, port.index, function, False, None, companion.kind))
    for k, device in enumerate(extra):
        port = new_port(0)
        layout.hostdevs.append(Hostdev(device.address, port.index, 0, False, f"ua-hostdev{k}", device.kind))


def _mmio(spec: VmSpec, gpus: Sequence[Gpu], layout: Layout) -> None:
    layout.bar_bytes = sum(g.bar_bytes for g in gpus)
    if spec.mmio_window_gib is not None:
        window = spec.mmio_window_gib * GIB
        if window and window < layout.bar_bytes:
            layout.warnings.append(
                f"mmio_window_gib {spec.mmio_window_gib} is smaller than the GPUs' BARs "
                f"({layout.bar_bytes / GIB:.1f} GiB); the guest firmware will not map them all."
            )
    elif layout.bar_bytes > OVMF_DEFAULT_MMIO64:
        window = 1 << layout.bar_bytes.bit_length()  # the next power of two above the BARs' sum
    else:
        window = 0
    if not window:
        return
    if spec.firmware != "efi":
        layout.warnings.append(
            f"the GPUs' BARs need a {window // GIB} GiB 64-bit MMIO window, which only OVMF can be told to open; "
            "use firmware: efi."
        )
        return
    layout.mmio_window_mb = window // (1 << 20)
    if spec.cpu_mode == "host-passthrough":
        layout.maxphysaddr = MaxPhysAddr("passthrough", None)
    else:
        # OVMF puts the aperture above RAM, aligned to its size; the guest needs address bits to reach its end.
        top = -(-(spec.memory_mib * (1 << 20) + 4 * GIB) // window) * window + window
        bits = max(40, (top - 1).bit_length())
        if bits > 52:
            raise GpulabError(f"{spec.name}: a {window // GIB} GiB MMIO window needs {bits} address bits (max 52).")
        layout.maxphysaddr = MaxPhysAddr("emulate", bits)
    sources = sorted({g.bar_source for g in gpus})
    layout.notes.append(
        f"64-bit MMIO window {window // GIB} GiB for {layout.bar_bytes / GIB:.1f} GiB of GPU BARs ({'/'.join(sources)})"
    )


def plan_layout(host: Host, spec: VmSpec, gpus: Sequence[Gpu], extra: Sequence[PciDevice] = ()) -> Layout:
    layout = Layout()
    _numa(host, spec, gpus, layout)
    _pci_tree(spec, gpus, extra, layout)
    _mmio(spec, gpus, layout)
    if spec.p2p_clique is not None and len(gpus) < 2:
        layout.warnings.append("p2p_clique is set but the VM has fewer than 2 GPUs; there is no peer to reach.")
    return layout
