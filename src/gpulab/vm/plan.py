"""`plan`: everything `define` would do, computed and checked, with nothing changed.

A plan holds the rendered domain XML, the chosen GPUs and their companions, the layout, and a list of
checks (ok / warn / fail). `define` refuses a plan with any failed check; warnings are things that will
not stop the definition but may stop the VM from starting or running well (an IOMMU that is off, GPUs
still bound to the host driver).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.vm import schema
from gpulab.vm.cards import boot_vga_checks, foreign_function_checks, hidden_kvm_checks, kvm_hidden, rom_checks
from gpulab.vm.checks import FAIL, OK, WARN, PlanCheck
from gpulab.vm.connection import is_local
from gpulab.vm.domain import Existing, digest, existing
from gpulab.vm.fabric import fabric_plan, partition_gpus
from gpulab.vm.firmware import firmware_of
from gpulab.vm.host import Gpu, Host, discover_host
from gpulab.vm.identity import domain_uuid, mac_address
from gpulab.vm.iommu import group_problems
from gpulab.vm.layout import Layout, plan_layout
from gpulab.vm.network import network_state
from gpulab.vm.nodedev import PciDevice
from gpulab.vm.pci import PciAddress
from gpulab.vm.rendering import render
from gpulab.vm.seed import Seed, render_seed
from gpulab.vm.select import select_gpus
from gpulab.vm.spec import VmSpec

_IOMMU_FIX = (
    "enable it with intel_iommu=on iommu=pt on the kernel command line (AMD enables it by default; check that "
    "VT-d/AMD-Vi is on in the firmware setup) and reboot: the vfio_host role does both"
)


@dataclass
class Plan:
    spec: VmSpec
    host: Host
    gpus: list[Gpu]
    extra: list[PciDevice]
    layout: Layout
    xml: str
    seed: Seed | None
    seed_path: Path | None
    disk_path: Path | None
    existing: Existing | None
    checks: list[PlanCheck] = field(default_factory=list)

    @property
    def rendered_digest(self) -> str:
        return digest(self.xml)

    @property
    def failures(self) -> list[PlanCheck]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def warnings(self) -> list[PlanCheck]:
        return [c for c in self.checks if c.status == WARN]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def up_to_date(self) -> bool:
        """The domain exists exactly as this plan would define it."""
        e = self.existing
        return e is not None and e.rendered_digest == self.rendered_digest and e.untouched

    def raise_for_failures(self) -> None:
        failures = self.failures
        if len(failures) == 1:  # one reason, one line
            c = failures[0]
            raise GpulabError(f"VM {self.spec.name} cannot be defined on {self.host.uri}: [{c.name}] {c.message}")
        if failures:
            lines = "\n".join(f"- [{c.name}] {c.message}" for c in failures)
            raise GpulabError(f"VM {self.spec.name} cannot be defined on {self.host.uri}:\n{lines}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "uri": self.host.uri,
            "ok": self.ok,
            "exists": self.existing is not None,
            "up_to_date": self.up_to_date,
            "gpus": [g.to_dict() for g in self.gpus],
            "extra_hostdevs": [str(d.address) for d in self.extra],
            "hostdevs": [str(h.source) for h in self.layout.hostdevs],
            "disk": None if self.disk_path is None else str(self.disk_path),
            "seed": None if self.seed_path is None else str(self.seed_path),
            "checks": [c.to_dict() for c in self.checks],
            "xml": self.xml,
        }


def _extra_devices(host: Host, spec: VmSpec) -> list[PciDevice]:
    devices = []
    for text in spec.extra_hostdevs:
        address = PciAddress.parse(text)
        device = host.devices.get(address)
        if device is None:
            raise GpulabError(
                f"extra_hostdevs: no PCI device {address} on this host (see `virsh nodedev-list --cap pci`)."
            )
        if device.is_bridge:
            raise GpulabError(f"extra_hostdevs: {device.describe()} is a bridge; bridges cannot be passed to a VM.")
        if device.is_nvidia_gpu:
            raise GpulabError(f"extra_hostdevs: {address} is an NVIDIA GPU; select it with `gpus` instead.")
        if device in devices:
            raise GpulabError(f"extra_hostdevs: {address} is listed twice.")
        devices.append(device)
    return devices


def _passthrough_checks(host: Host, gpus: list[Gpu], extra: list[PciDevice]) -> list[PlanCheck]:
    checks: list[PlanCheck] = []
    if gpus:
        names = ", ".join(
            f"{g.address} {g.name}" + (f" (+ {', '.join(c.kind for c in g.companions)})" if g.companions else "")
            for g in gpus
        )
        checks.append(PlanCheck("gpus", OK, f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: {names}"))
    else:
        checks.append(PlanCheck("gpus", OK, "no GPU passed through"))
    if not gpus and not extra:
        return checks
    devices = [g.device for g in gpus] + extra
    if host.iommu_enabled is False:
        checks.append(
            PlanCheck(
                "iommu", WARN, f"the IOMMU is off on this host, so the VM can be defined but not started; {_IOMMU_FIX}."
            )
        )
    elif host.iommu_enabled is None:
        checks.append(
            PlanCheck("iommu", WARN, "whether the IOMMU is on is unknown here (no sysfs to read); start will tell.")
        )
    else:
        checks.append(PlanCheck("iommu", OK, "IOMMU on"))
    problems = group_problems(host, gpus, extra)
    checks.extend(PlanCheck("iommu_groups", FAIL, p) for p in problems)
    ungrouped = [str(d.address) for d in devices if d.iommu_group is None]
    if ungrouped and host.iommu_enabled is not False:
        checks.append(PlanCheck("iommu_groups", WARN, f"no IOMMU group reported for {', '.join(ungrouped)}."))
    elif not problems and not ungrouped:
        groups = sorted({d.iommu_group for d in devices if d.iommu_group is not None})
        checks.append(
            PlanCheck("iommu_groups", OK, f"IOMMU group(s) {', '.join(map(str, groups))} can go to the VM whole")
        )
    if host.vfio_modules is not None:
        missing = [m for m, loaded in host.vfio_modules.items() if not loaded]
        if missing:
            checks.append(
                PlanCheck(
                    "vfio",
                    WARN,
                    f"{', '.join(missing)} not loaded: libvirt loads vfio-pci when the VM starts; the "
                    "vfio_host role loads the modules at boot so GPUs never reach the host driver.",
                )
            )
        else:
            checks.append(PlanCheck("vfio", OK, "vfio modules loaded"))
    for gpu in gpus:
        if gpu.driver and gpu.driver != "vfio-pci":
            checks.append(
                PlanCheck(
                    "driver",
                    WARN,
                    f"GPU {gpu.address} is bound to {gpu.driver}; libvirt detaches it when the VM starts "
                    "(managed='yes'), which fails while a process uses it. The vfio_host role binds GPUs to vfio-pci "
                    "at boot.",
                )
            )
    return checks


def _interrupt_checks(host: Host, gpus: list[Gpu], extra: list[PciDevice]) -> list[PlanCheck]:
    """Interrupt remapping keeps a guest from forging interrupts into the host; VFIO refuses devices without it."""
    ir = host.interrupt_remapping
    if (not gpus and not extra) or ir is None or host.iommu_enabled is False:
        return []
    if ir.enabled is None:
        return [
            PlanCheck("interrupt_remapping", WARN, f"whether interrupt remapping is on cannot be read ({ir.detail}).")
        ]
    if ir.enabled:
        return [PlanCheck("interrupt_remapping", OK, f"interrupt remapping on: {ir.detail}")]
    fix = (
        "turn interrupt remapping on (VT-d/AMD-Vi with x2APIC in the firmware setup; no intremap=off or nointremap "
        "on the kernel command line)"
    )
    if ir.allow_unsafe:
        return [
            PlanCheck(
                "interrupt_remapping",
                WARN,
                f"interrupt remapping is off ({ir.detail}); VFIO accepts the devices only because "
                "vfio_iommu_type1.allow_unsafe_interrupts is set, which lets the guest inject interrupts into the "
                f"host; {fix} and drop that option.",
            )
        ]
    return [
        PlanCheck(
            "interrupt_remapping",
            WARN,
            f"interrupt remapping is off ({ir.detail}), so VFIO refuses the devices when the VM starts; {fix}. "
            "vfio_iommu_type1.allow_unsafe_interrupts=1 gets past it only by trusting the guest.",
        )
    ]


def _reset_checks(gpus: list[Gpu]) -> list[PlanCheck]:
    """A GPU the kernel cannot reset keeps its state across guest reboots; a reboot of the VM may hang it."""
    checks = []
    for gpu in gpus:
        if gpu.reset_methods is None:
            continue
        if not gpu.reset_methods and (gpu.companions or gpu.foreign):
            # The kernel lists a bus reset only for a device alone on its bus; vfio-pci still resets a
            # multi-function card (a GeForce board with its audio) by resetting the slot's bus when the VM owns
            # every function, which the plan ensures (companions go along; a foreign function is refused or taken).
            checks.append(
                PlanCheck(
                    "reset",
                    OK,
                    f"GPU {gpu.address} has no reset of its own (a multi-function card: no FLR, and the kernel "
                    "offers a bus reset only to a device alone on its bus); vfio-pci resets it with a bus reset of "
                    "its slot, as the VM owns every function there",
                )
            )
        elif not gpu.reset_methods:
            checks.append(
                PlanCheck(
                    "reset",
                    WARN,
                    f"GPU {gpu.address} has no reset method (sysfs shows no reset_method): the card cannot be reset "
                    "between guest boots, so a VM reboot may leave it hung until the host reboots; move it to a slot "
                    "whose upstream port can do a secondary bus reset (reset_method then lists bus).",
                )
            )
        else:
            checks.append(PlanCheck("reset", OK, f"GPU {gpu.address} resets by {', '.join(gpu.reset_methods)}"))
    return checks


def _mib(value: int) -> str:
    return f"{value} MiB ({value / 1024:.1f} GiB)"


def _memory_checks(host: Host, spec: VmSpec, layout: Layout) -> list[PlanCheck]:
    """Guest memory against the host's, and per NUMA node when it is bound to nodes (like the hugepages).

    Passed-through GPUs make QEMU pin all guest memory, and memory bound `strict` to a node cannot spill over,
    so neither can be overcommitted.
    """
    if host.memory_mib is not None and spec.memory_mib > host.memory_mib:
        return [
            PlanCheck(
                "memory",
                FAIL,
                f"memory_mib {_mib(spec.memory_mib)} is more than this host has, {_mib(host.memory_mib)}; "
                f"lower memory_mib below {host.memory_mib}, leaving room for the host.",
            )
        ]
    short = []
    for node, mib in sorted(layout.memory_per_node_mib.items()):
        numa = host.numa_node(node)
        if numa is not None and numa.memory_mib is not None and mib > numa.memory_mib:
            short.append(f"NUMA node {node} has {_mib(numa.memory_mib)}, the VM needs {_mib(mib)} there")
    if short:
        return [
            PlanCheck(
                "memory",
                FAIL,
                f"{'; '.join(short)}. Lower memory_mib, choose GPUs on more NUMA nodes (the memory is split over "
                "theirs), or set numa_pinning: false.",
            )
        ]
    if host.memory_mib is None:
        return [PlanCheck("memory", WARN, f"the host's memory is unknown here; the VM needs {_mib(spec.memory_mib)}.")]
    return [PlanCheck("memory", OK, f"{_mib(spec.memory_mib)} of the host's {_mib(host.memory_mib)}")]


def _vcpu_checks(host: Host, spec: VmSpec, layout: Layout) -> list[PlanCheck]:
    """Pinned vCPUs were fitted to their nodes' CPUs by the layout; floating ones may outnumber the host's."""
    if layout.pins or host.cpus is None:
        return []
    if spec.vcpus > host.cpus:
        return [
            PlanCheck(
                "vcpus",
                WARN,
                f"{spec.vcpus} vCPUs on a host with {host.cpus} CPUs: they take turns on the CPUs (overcommit), so "
                f"each runs slower and the guest may report soft lockups; lower vcpus to at most {host.cpus}.",
            )
        ]
    return [PlanCheck("vcpus", OK, f"{spec.vcpus} vCPUs of the host's {host.cpus} CPUs, not pinned")]


def _hugepage_checks(host: Host, spec: VmSpec, layout: Layout) -> list[PlanCheck]:
    if not spec.hugepages:
        return []
    page_kib = spec.hugepage_kib
    pages_needed = spec.memory_mib * 1024 // page_kib
    if not host.numa or all(not n.hugepages for n in host.numa):
        return [
            PlanCheck(
                "hugepages",
                WARN,
                f"free {spec.hugepage_size} hugepages cannot be read here; {pages_needed} are needed.",
            )
        ]
    reserve = f"/sys/devices/system/node/node{{node}}/hugepages/hugepages-{page_kib}kB/nr_hugepages"
    if layout.memory_per_node_mib:
        wanted = {node: mib * 1024 // page_kib for node, mib in layout.memory_per_node_mib.items()}
        short = []
        for node, pages in sorted(wanted.items()):
            numa = host.numa_node(node)
            free = (numa.free_pages(page_kib) if numa else None) or 0
            if free < pages:
                short.append((node, free, pages))
        if short:
            lacking = "; ".join(
                f"NUMA node {n} has {f} free {spec.hugepage_size} pages, the VM needs {p}" for n, f, p in short
            )
            node, free, pages = short[0]
            return [
                PlanCheck(
                    "hugepages",
                    FAIL,
                    f"{lacking}. Reserve more (e.g. echo {pages} > {reserve.format(node=node)}, or "
                    f"hugepagesz={spec.hugepage_size} hugepages=N on the kernel command line) or turn hugepages off.",
                )
            ]
        detail = ", ".join(f"node {n}: {p}" for n, p in sorted(wanted.items()))
        return [PlanCheck("hugepages", OK, f"{spec.hugepage_size} hugepages free ({detail})")]
    free_total = sum(n.free_pages(page_kib) or 0 for n in host.numa)
    if free_total < pages_needed:
        return [
            PlanCheck(
                "hugepages",
                FAIL,
                f"{free_total} free {spec.hugepage_size} pages on the host, the VM needs "
                f"{pages_needed}. Reserve more ({reserve.format(node='N')} per node, or hugepagesz="
                f"{spec.hugepage_size} hugepages={pages_needed} on the kernel command line) or turn hugepages off.",
            )
        ]
    return [PlanCheck("hugepages", OK, f"{pages_needed} of {free_total} free {spec.hugepage_size} hugepages")]


def _file_checks(host: Host, spec: VmSpec) -> list[PlanCheck]:
    """Files the hypervisor will open; only checkable when it runs on this machine."""
    if not is_local(host.uri):
        return []
    wanted: list[tuple[str, Path | None]] = []
    if spec.kernel_boot:
        wanted += [("kernel_boot.kernel", spec.kernel_boot.kernel), ("kernel_boot.initrd", spec.kernel_boot.initrd)]
    if spec.disk:
        wanted += [("disk.base", spec.disk.base), ("disk.path", spec.disk.path)]
    checks = []
    for key, path in wanted:
        if path is not None and not path.is_file():
            checks.append(PlanCheck("files", FAIL, f"{key}: {path} does not exist."))
    return checks


def _network_checks(conn: Any, spec: VmSpec) -> list[PlanCheck]:
    if spec.network is None:
        return []
    state = network_state(conn, spec.network.name)
    if state.exists:
        return [
            PlanCheck(
                "network", OK, f"network {spec.network.name} exists{'' if state.active else ' (started at start)'}"
            )
        ]
    if spec.network.create:
        return [
            PlanCheck("network", OK, f"isolated network {spec.network.name} ({spec.network.address}) will be created")
        ]
    return [
        PlanCheck(
            "network",
            FAIL,
            f"libvirt network {spec.network.name!r} does not exist; create it, or give "
            "network.address so gpulab creates an isolated one.",
        )
    ]


def _schema_check(xml: str) -> PlanCheck:
    if not schema.available():
        return PlanCheck(
            "schema", WARN, f"{schema.TOOL} not installed ({schema.INSTALL_HINT}); libvirt validates at define."
        )
    problems = schema.schema_errors(xml, "domain")
    if problems:
        return PlanCheck("schema", FAIL, "the rendered XML does not match libvirt's schema: " + "; ".join(problems))
    return PlanCheck("schema", OK, "the XML validates against libvirt's domain schema")


def _select(host: Host, spec: VmSpec, extra: list[PciDevice]) -> list[Gpu]:
    """The spec's GPUs: its shared-NVSwitch partition's, else its selector's."""
    gpus = partition_gpus(host, spec)
    if gpus is None:
        return select_gpus(host, spec.gpus, {d.address for d in extra})
    if spec.gpus is not None and {g.address for g in select_gpus(host, spec.gpus)} != {g.address for g in gpus}:
        raise GpulabError(
            f"gpus {spec.gpus!r} differs from the GPUs of nvswitch.partition "
            f"{spec.nvswitch.partition if spec.nvswitch else '?'} ({', '.join(str(g.address) for g in gpus)}); "
            "leave gpus out (the partition chooses them)."
        )
    return gpus


def render_domain(spec: VmSpec, layout: Layout, gpus: list[Gpu], uuid: str, seed_path: Path | None) -> str:
    title = f"gpulab VM, {len(gpus)} x {gpus[0].name}" if gpus and len({g.name for g in gpus}) == 1 else "gpulab VM"
    if gpus and len({g.name for g in gpus}) > 1:
        title = "gpulab VM, " + ", ".join(g.name for g in gpus)
    firmware = firmware_of(spec)
    disk = None
    if spec.disk is not None:
        disk = {"path": spec.disk.disk_path(spec.name), "format": spec.disk.disk_format}
    return render(
        "domain.xml.j2",
        vm={
            "name": spec.name,
            "uuid": uuid,
            "title": title,
            "domain_type": spec.domain_type,
            "memory_mib": spec.memory_mib,
            "vcpus": spec.vcpus,
            "cpu_mode": spec.cpu_mode,
            "firmware": spec.firmware,
            "kvm_hidden": kvm_hidden(spec, gpus) and spec.domain_type == "kvm",
            "secure_boot": firmware.secure_boot,
            "firmware_features": firmware.features,
            "hugepage_kib": spec.hugepage_kib if spec.hugepages else None,
        },
        layout=layout,
        qemu_namespace=bool(layout.mmio_window_mb) or any(h.clique is not None for h in layout.hostdevs),
        p2p=any(h.clique is not None for h in layout.hostdevs),
        kernel=spec.kernel_boot,
        disk=disk,
        seed=seed_path,
        network=None if spec.network is None else {"name": spec.network.name, "mac": mac_address(spec.name)},
        console_log=spec.console_log,
    )


def plan(conn: Any, spec: VmSpec, host: Host | None = None, root: Path | None = None) -> Plan:
    """Plan `spec` on the host behind `conn` (see `discover_host` for `root`). Changes nothing."""
    host = host or discover_host(conn, root)
    extra = _extra_devices(host, spec)
    gpus = _select(host, spec, extra)
    switches, fabric_checks = fabric_plan(host, spec, gpus)
    extra += [d for d in switches if d not in extra]
    layout = plan_layout(host, spec, gpus, extra)
    current = existing(conn, spec.name)
    seed = render_seed(spec.name, spec.cloud_init) if spec.cloud_init is not None else None
    seed_path = seed.iso_path(spec.disk.dir, spec.name) if seed is not None and spec.disk is not None else None
    xml = render_domain(spec, layout, gpus, current.uuid if current else domain_uuid(spec.name), seed_path)
    result = Plan(
        spec=spec,
        host=host,
        gpus=gpus,
        extra=extra,
        layout=layout,
        xml=xml,
        seed=seed,
        seed_path=seed_path,
        disk_path=spec.disk.disk_path(spec.name) if spec.disk else None,
        existing=current,
    )
    checks = _passthrough_checks(host, gpus, extra)
    checks += _interrupt_checks(host, gpus, extra)
    checks += _reset_checks(gpus)
    checks += fabric_checks
    checks += foreign_function_checks(gpus, extra)
    checks += boot_vga_checks(host, gpus, spec)
    checks += hidden_kvm_checks(spec, gpus)
    checks += rom_checks(host, spec, gpus)
    checks += [PlanCheck("layout", OK, note) for note in layout.notes]
    checks += [PlanCheck("layout", WARN, warning) for warning in layout.warnings]
    checks += [PlanCheck("p2p", OK, note) for note in layout.p2p_notes]
    checks += [PlanCheck("p2p", WARN, warning) for warning in layout.p2p_warnings]
    checks += _vcpu_checks(host, spec, layout)
    checks += _memory_checks(host, spec, layout)
    checks += _hugepage_checks(host, spec, layout)
    checks += _file_checks(host, spec)
    checks += _network_checks(conn, spec)
    checks.append(_schema_check(xml))
    if current is None:
        checks.append(PlanCheck("domain", OK, f"{spec.name} is not defined yet; define creates it"))
    elif result.up_to_date:
        checks.append(PlanCheck("domain", OK, f"{spec.name} is defined exactly like this; define changes nothing"))
    else:
        checks.append(
            PlanCheck("domain", OK, f"{spec.name} is defined differently; define updates it and shows the diff")
        )
    result.checks = checks
    return result
