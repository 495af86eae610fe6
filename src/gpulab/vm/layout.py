"""Where everything goes, as plain data for the template: vCPU pinning and guest NUMA cells, the guest PCIe
tree (root ports, one pxb-pcie per host NUMA node when the GPUs span nodes), hostdev addresses, and the
64-bit MMIO window that large-BAR GPUs need.

Pure functions of the host, the spec and the chosen devices; impossible requests raise GpulabError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpulab.errors import GpulabError
from gpulab.vm.cputopo import cores_of, place_vcpus, smt_width
from gpulab.vm.firmware import firmware_warnings
from gpulab.vm.host import GIB, Gpu, Host
from gpulab.vm.housekeeping import auto_housekeeping, host_cpus, named_housekeeping, short_of_cpus
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
class CpuTopology:
    sockets: int
    dies: int
    cores: int  # per die
    threads: int  # per core


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
    emulator_cpuset: str | None = None  # QEMU's emulator and I/O threads (housekeeping CPUs when there are any)
    vcpu_cpuset: str | None = None  # where floating vCPUs may run (kept off named housekeeping CPUs)
    topology: CpuTopology | None = None
    numa_nodeset: str | None = None
    memnodes: list[tuple[int, int]] = field(default_factory=list)  # (guest cell, host node)
    expanders: list[Expander] = field(default_factory=list)
    root_ports: list[RootPort] = field(default_factory=list)
    hostdevs: list[Hostdev] = field(default_factory=list)
    mmio_window_mb: int | None = None
    pcihole64_kib: int | None = None  # SeaBIOS: the 64-bit PCI hole QEMU's ACPI tables advertise
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


def _topology(layout: Layout, sockets: int, per_socket: int, threads: int) -> None:
    layout.topology = CpuTopology(sockets=sockets, dies=1, cores=per_socket // threads, threads=threads)


def _float(host: Host, spec: VmSpec, layout: Layout) -> None:
    """vCPUs not pinned: one socket; QEMU's own threads and the vCPUs kept apart only when housekeeping is named."""
    _topology(layout, 1, spec.vcpus, 1)
    housekeeping = named_housekeeping(host, spec)
    if not housekeeping:
        return
    layout.emulator_cpuset = format_cpulist(housekeeping)
    rest = [c for c in host_cpus(host) if c not in housekeeping]
    layout.vcpu_cpuset = format_cpulist(rest) if rest else None
    layout.notes.append(f"QEMU's emulator and I/O threads on housekeeping CPUs {layout.emulator_cpuset}")


def _check_cells(spec: VmSpec, nodes: Sequence[int]) -> None:
    """The guest gets one socket per NUMA node the GPUs span: its vCPUs must split evenly over them."""
    if spec.vcpus < len(nodes):
        raise GpulabError(
            f"{spec.name}: the GPUs span NUMA nodes {', '.join(map(str, nodes))}, which needs one vCPU per node at "
            f"least; give vcpus >= {len(nodes)} or set numa_pinning: false."
        )
    if spec.vcpus % len(nodes):
        raise GpulabError(
            f"{spec.name}: the GPUs span NUMA nodes {', '.join(map(str, nodes))} and the guest gets one socket per "
            f"node, so {spec.vcpus} vCPUs do not split evenly; give vcpus a multiple of {len(nodes)} or set "
            "numa_pinning: false."
        )


def _place_emulator(layout: Layout, housekeeping: tuple[int, ...], vcpu_cpus: list[int]) -> None:
    """QEMU's emulator and I/O threads on the housekeeping CPUs, else (with a warning) on the vCPUs' CPUs."""
    if housekeeping:
        layout.emulator_cpuset = format_cpulist(housekeeping)
        layout.notes.append(f"QEMU's emulator and I/O threads on housekeeping CPUs {layout.emulator_cpuset}")
    else:
        layout.emulator_cpuset = format_cpulist(vcpu_cpus)
        layout.warnings.append(
            f"no host CPU is left for QEMU's emulator and I/O threads, so they share the vCPUs' CPUs "
            f"({layout.emulator_cpuset}) and steal time from the guest; lower vcpus by a core or name "
            "housekeeping_cpus."
        )


def _numa(host: Host, spec: VmSpec, gpus: Sequence[Gpu], layout: Layout) -> None:
    nodes = _pin_nodes(host, spec, gpus, layout)
    layout.host_nodes = nodes
    if not nodes:
        _float(host, spec, layout)
        return
    _check_cells(spec, nodes)
    per_cell = spec.vcpus // len(nodes)
    housekeeping = named_housekeeping(host, spec) if spec.housekeeping_cpus else ()
    node_cpus = {n: host.numa_node(n).cpus for n in nodes}  # type: ignore[union-attr]
    for n in nodes:
        if len(set(node_cpus[n]) - set(housekeeping)) < per_cell:
            raise short_of_cpus(spec, n, per_cell, node_cpus[n], housekeeping)
    if not spec.housekeeping_cpus:
        housekeeping = auto_housekeeping(host, nodes, per_cell)
    free = {
        n: [
            k
            for k in (tuple(c for c in core if c not in housekeeping) for core in cores_of(node_cpus[n], host.siblings))
            if k
        ]
        for n in nodes
    }
    width = min(smt_width(cores_of(node_cpus[n], host.siblings)) for n in nodes)
    # Whole cores (a core housekeeping took a thread of does not count) to the guest as thread pairs when every
    # cell can take them; else one vCPU per core.
    whole = {n: sum(len(core) >= width for core in free[n]) for n in nodes}
    threads = width if width > 1 and per_cell % width == 0 and all(per_cell // width <= whole[n] for n in nodes) else 1
    _topology(layout, len(nodes), per_cell, threads)
    if not host.siblings:
        layout.notes.append("hyper-thread siblings unknown (no libvirt topology, no sysfs): each CPU counted as a core")
    vcpu_cpus: list[int] = []
    for n in nodes:
        cpus = place_vcpus(free[n], per_cell, threads)
        if threads == 1 and per_cell > len(free[n]):
            layout.notes.append(
                f"{per_cell} vCPUs on {len(free[n])} cores of node {n}: some share a core as hyper-threads the guest "
                "sees as separate cores; an even vcpus gives it whole cores as thread pairs"
            )
        vcpu_cpus.extend(cpus)
    layout.pins = [Pin(v, str(c)) for v, c in enumerate(vcpu_cpus)]
    _place_emulator(layout, housekeeping, vcpu_cpus)
    layout.numa_nodeset = format_cpulist(nodes)
    threads_text = f", {threads} threads per core" if threads > 1 else ""
    if len(nodes) == 1:
        layout.memory_per_node_mib = {nodes[0]: spec.memory_mib}
        layout.notes.append(
            f"vCPUs pinned to host CPUs {format_cpulist(vcpu_cpus)}{threads_text} and memory bound to NUMA node "
            f"{nodes[0]}"
        )
        return
    unit_mib = spec.hugepage_kib // 1024 if spec.hugepages else 1
    for cell, (node, units) in enumerate(zip(nodes, _split(spec.memory_mib // unit_mib, len(nodes)), strict=True)):
        if units == 0:
            raise GpulabError(
                f"{spec.name}: {spec.memory_mib} MiB cannot be split over NUMA nodes {nodes} in {spec.hugepage_size} "
                "pages; give more memory or set numa_pinning: false."
            )
        first = cell * per_cell
        guest_vcpus = format_cpulist(list(range(first, first + per_cell)))
        layout.cells.append(Cell(id=cell, host_node=node, vcpus=guest_vcpus, memory_mib=units * unit_mib))
        layout.memnodes.append((cell, node))
        layout.memory_per_node_mib[node] = units * unit_mib
    layout.notes.append(
        f"GPUs span host NUMA nodes {', '.join(map(str, nodes))}: one guest NUMA cell, socket and pxb-pcie per node, "
        f"each GPU behind its node's expander{threads_text}"
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
    if spec.firmware == "efi":
        layout.mmio_window_mb = window // (1 << 20)
    else:
        # q35 with SeaBIOS: SeaBIOS places 64-bit BARs itself and can leave large ones unassigned; the hole QEMU's
        # ACPI tables advertise (pcihole64 on pcie-root) at least lets the guest kernel assign them.
        layout.pcihole64_kib = window // 1024
        layout.warnings.append(
            f"the GPUs' BARs need a {window // GIB} GiB 64-bit MMIO window; SeaBIOS cannot be told to open one, so "
            "the VM only advertises the 64-bit PCI hole (pcihole64) and the guest kernel may have to assign the BARs "
            "(pci=realloc). Use firmware: efi."
        )
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
    layout.warnings.extend(firmware_warnings(spec))
    if spec.p2p_clique is not None and len(gpus) < 2:
        layout.warnings.append("p2p_clique is set but the VM has fewer than 2 GPUs; there is no peer to reach.")
    return layout
