"""Human-readable `gpulab info` output with rich: host panel, GPU table, topology, software."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpulab.records import Fingerprint, GpuInfo, HostInfo, SoftwareInfo

NOT_CAPTURED = "not captured"


def _v(value: object, unit: str = "") -> str:
    return "?" if value is None else f"{value}{unit}"


def _w(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def _yn(value: bool | None) -> str:
    return "?" if value is None else ("on" if value else "off")


def pcie_text(gpu: GpuInfo) -> Text:
    """ "gen5 x16 (max gen5 x16)", red when the link trained below its maximum."""
    p = gpu.pcie
    text = f"gen{_v(p.gen_current)} x{_v(p.width_current)} (max gen{_v(p.gen_max)} x{_v(p.width_max)})"
    if p.at_max is False:
        # An idle GPU may drop its PCIe generation to save power; width loss is always a fault.
        return Text(text + " DEGRADED", style="bold red")
    return Text(text)


def _ecc_text(gpu: GpuInfo) -> Text:
    if gpu.ecc_enabled is None:
        return Text("?")
    if not gpu.ecc_enabled:
        return Text("off", style="yellow")
    e = gpu.ecc_errors
    unc = (e.volatile_uncorrected or 0) + (e.aggregate_uncorrected or 0)
    corr = e.aggregate_corrected if e.aggregate_corrected is not None else e.volatile_corrected
    text = f"on {_v(corr)}c/{_v(e.aggregate_uncorrected)}u"
    return Text(text, style="bold red" if unc else "")


def _retire_text(gpu: GpuInfo) -> Text:
    r = gpu.retirement
    parts = []
    if r.remapped_correctable is not None or r.remapped_uncorrectable is not None:
        parts.append(f"remap {_v(r.remapped_correctable)}c/{_v(r.remapped_uncorrectable)}u")
    if r.retired_single_bit is not None or r.retired_double_bit is not None:
        parts.append(f"retired {_v(r.retired_single_bit)}sb/{_v(r.retired_double_bit)}db")
    bad = bool(r.remap_failure or r.remap_pending or r.retired_pending or r.remapped_uncorrectable)
    flags = [
        name for name, on in (("PENDING", r.remap_pending or r.retired_pending), ("FAILED", r.remap_failure)) if on
    ]
    return Text(" ".join(parts + flags) or "-", style="bold red" if bad else "")


def _throttle_text(gpu: GpuInfo) -> Text:
    reasons = gpu.throttle_reasons
    if reasons is None:
        return Text("?")  # not reported: neither "none" nor a reason
    if not reasons:
        return Text("none")
    benign = {"gpu_idle", "applications_clocks_setting"}
    return Text(", ".join(reasons), style="" if set(reasons) <= benign else "bold yellow")


def host_panel(host: HostInfo | None, captured_from: list[str] | None = None) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    if host is None:
        # A capture holds no host facts; this machine's must not be shown in their place.
        for label in ("Host", "CPU", "Memory", "NUMA", "OS", "Hypervisor", "IOMMU"):
            grid.add_row(label, Text(NOT_CAPTURED, style="dim"))
        files = ", ".join(captured_from or []) or "a capture"
        return Panel(grid, title=f"Host (captured: {files})", expand=False)
    cpu = host.cpu
    grid.add_row("Host", host.hostname)
    grid.add_row(
        "CPU",
        f"{_v(cpu.model)} ({_v(cpu.vendor)}), {_v(cpu.sockets)} socket(s), {_v(cpu.cores)} cores, "
        f"{_v(cpu.threads)} threads",
    )
    mem = f"{host.memory_total_mib / 1024:.1f} GiB" if host.memory_total_mib else "?"
    grid.add_row("Memory", mem)
    numa = "; ".join(
        f"node{n.node}: cpus {n.cpus}" + (f", {n.memory_mib / 1024:.1f} GiB" if n.memory_mib else "")
        for n in host.numa_nodes
    )
    grid.add_row("NUMA", numa or "?")
    grid.add_row("OS", f"{_v(host.os)}, kernel {_v(host.kernel)}")
    virt = host.hypervisor or "bare metal"
    grid.add_row("Hypervisor", Text(virt, style="bold"))
    for line in host.hypervisor_evidence:
        grid.add_row("", Text(f"- {line}", style="dim"))
    iommu = _yn(host.iommu_enabled).replace("on", "enabled").replace("off", "disabled")
    if host.iommu_groups:
        iommu += f", {len(host.iommu_groups)} groups"
    grid.add_row("IOMMU", iommu)
    return Panel(grid, title="Host", expand=False)


def gpu_table(fp: Fingerprint) -> Table:
    """Identity and link: what each GPU is and where it sits."""
    table = Table(title=f"GPUs (source: {fp.gpu_source})")
    for col in ("#", "Name", "Bus ID", "NUMA", "PCIe", "Memory"):
        table.add_column(col, no_wrap=col in ("#", "Bus ID"))
    # nvidia-smi -q -x has no NUMA node; only a topo -m capture gives one.
    numa_missing = NOT_CAPTURED if fp.is_capture and not fp.topology else "?"
    for g in fp.gpus:
        mem = f"{g.memory_used_mib or 0}/{g.memory_total_mib} MiB" if g.memory_total_mib else "?"
        cc = f" sm_{g.compute_capability.replace('.', '')}" if g.compute_capability else ""
        numa = numa_missing if g.numa_node is None else str(g.numa_node)
        table.add_row(str(g.index), g.name + cc, g.bus_id, numa, pcie_text(g), mem)
    return table


def health_table(fp: Fingerprint) -> Table:
    """Health and state: the columns that decide whether a GPU is fit to run on."""
    table = Table(title="GPU health")
    for col in ("#", "ECC", "Retired/remapped", "Persist", "Throttle", "Temp", "Power"):
        table.add_column(col)
    for g in fp.gpus:
        table.add_row(
            str(g.index),
            _ecc_text(g),
            _retire_text(g),
            _yn(g.persistence_mode),
            _throttle_text(g),
            _v(g.temperature_c, " C"),
            f"{_w(g.power_draw_w)}/{_w(g.power_limit_w)} W",
        )
    return table


def topology_table(topology: list[list[str]]) -> Table:
    table = Table(title="GPU topology (nvidia-smi topo -m)")
    table.add_column("")
    for j in range(len(topology)):
        table.add_column(f"GPU{j}", justify="center")
    for i, row in enumerate(topology):
        table.add_row(f"GPU{i}", *row)
    return table


def software_table(sw: SoftwareInfo) -> Table:
    """The stack; fields a capture does not hold (None where live discovery gives a list) say "not captured"."""
    table = Table(title="Software", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    captured = sw.frameworks is None and sw.toolkits is None
    missing = NOT_CAPTURED if captured else "?"
    table.add_row("Driver", f"{_v(sw.driver_version)} (CUDA {sw.cuda_driver_version or 'not reported'} supported)")
    if sw.toolkits is None:
        table.add_row("CUDA toolkits", NOT_CAPTURED)
    else:
        kits = ", ".join(f"{k['path']} {k.get('version', '?')}" for k in sw.toolkits)
        table.add_row("CUDA toolkits", kits or "none")
    table.add_row("nvcc", sw.nvcc_version or missing)
    table.add_row("cuDNN", sw.cudnn_version or missing)
    table.add_row("NCCL", sw.nccl_version or missing)
    table.add_row("Python", sw.python or missing)
    if sw.frameworks is None:
        table.add_row("Frameworks", NOT_CAPTURED)
    for fw in sw.frameworks or []:
        if fw.error and fw.version == "unknown":
            table.add_row(fw.name, Text(f"error: {fw.error}", style="red"))
            continue
        text = (
            f"{fw.version} (CUDA {_v(fw.built_cuda)}, cuDNN {_v(fw.built_cudnn)}, NCCL {_v(fw.nccl)}, "
            f"sees {_v(fw.sees_gpus)} GPU(s))"
        )
        table.add_row(fw.name, text + (f" [{fw.error}]" if fw.error else ""))
    if sw.env is None:
        table.add_row("Environment", NOT_CAPTURED)
    for key, value in (sw.env or {}).items():
        table.add_row(key, value)
    return table


def render(fp: Fingerprint, console: Console | None = None) -> None:
    console = console or Console()
    parts: list[Panel | Table | Text] = [host_panel(fp.host, fp.captured_from)]
    if fp.gpus:
        parts.extend([gpu_table(fp), health_table(fp)])
    else:
        parts.append(Text(fp.gpu_absent_reason or "no NVIDIA GPU/driver found", style="bold red"))
    if fp.topology:
        parts.append(topology_table(fp.topology))
    elif fp.is_capture:
        parts.append(Text("GPU topology: not captured (add --topo with a saved `nvidia-smi topo -m`)", style="dim"))
    parts.append(software_table(fp.software))
    console.print(Group(*parts))
