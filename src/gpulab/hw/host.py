"""The host around the GPUs: CPU, memory, NUMA, OS, hypervisor and IOMMU, from /proc and /sys.

Every read goes through `root` so tests can point it at a fake tree; a missing or unreadable file gives
None rather than an error, since containers and VMs hide different parts of /sys.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path

from gpulab.records import CpuInfo, HostInfo, IommuGroup, NumaNode

# DMI sys_vendor / product_name substrings that only virtual hardware reports -> hypervisor name.
_DMI_VM = (
    ("vmware", "VMware"),
    ("virtualbox", "VirtualBox"),
    ("innotek", "VirtualBox"),
    ("qemu", "QEMU"),
    ("kvm", "KVM"),
    ("bochs", "Bochs"),
    ("xen", "Xen"),
    ("parallels", "Parallels"),
    ("openstack", "KVM"),
    ("google compute engine", "KVM"),  # GCE guests run on KVM
)
# lscpu "Hypervisor vendor" -> our name.
_LSCPU_VENDOR = {"kvm": "KVM", "microsoft": "Hyper-V", "vmware": "VMware", "xen": "Xen", "acrn": "ACRN"}
_CLOCKSOURCE = (("kvm-clock", "KVM"), ("hyperv", "Hyper-V"), ("xen", "Xen"), ("vmware", "VMware"))


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_text(errors="replace").strip()
    except OSError:
        return None


def cpulist_count(cpulist: str) -> int:
    """ "0-31,64-95" -> 64."""
    total = 0
    for part in cpulist.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        total += int(hi) - int(lo) + 1 if hi else 1
    return total


# --- lscpu -------------------------------------------------------------------------------------------


def parse_lscpu(text: str) -> dict[str, str]:
    """`lscpu` "Key:   value" lines -> dict; other lines are ignored, so a larger capture can be fed in."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z][\w()\-/ ]*?):\s+(.*\S)\s*$", line)
        if m and not line.startswith(("cat:", "bash:", "ls:")):
            out.setdefault(m.group(1).strip(), m.group(2))
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def cpu_from_lscpu(fields: dict[str, str]) -> CpuInfo:
    sockets = _int(fields.get("Socket(s)"))
    per_socket = _int(fields.get("Core(s) per socket"))
    return CpuInfo(
        model=fields.get("Model name"),
        vendor=fields.get("Vendor ID"),
        sockets=sockets,
        cores=sockets * per_socket if sockets and per_socket else None,
        threads=_int(fields.get("CPU(s)")),
        flags=fields.get("Flags", "").split(),
    )


def numa_from_lscpu(fields: dict[str, str]) -> list[NumaNode]:
    nodes = []
    for key, value in fields.items():
        m = re.fullmatch(r"NUMA node(\d+) CPU\(s\)", key)
        if m:
            nodes.append(NumaNode(node=int(m.group(1)), cpus=value))
    return sorted(nodes, key=lambda n: n.node)


def _live_lscpu(root: Path) -> dict[str, str]:
    """lscpu reads cpuid's hypervisor vendor leaf, which /proc does not show; only on the live root."""
    if root != Path("/") or not shutil.which("lscpu"):
        return {}
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_lscpu(done.stdout) if done.returncode == 0 else {}


# --- CPU, memory, NUMA -------------------------------------------------------------------------------


def read_cpu(root: Path = Path("/")) -> CpuInfo:
    cpu = CpuInfo()
    text = _read(root, "proc/cpuinfo") or ""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    for i, block in enumerate(blocks):
        entry: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                entry[key.strip()] = value.strip()
        if "physical id" in entry:
            packages.add(entry["physical id"])
            cores.add((entry["physical id"], entry.get("core id", str(i))))
        if i == 0:
            cpu.model = entry.get("model name") or entry.get("Model") or entry.get("cpu model")
            cpu.vendor = entry.get("vendor_id") or entry.get("CPU implementer")
            cpu.flags = (entry.get("flags") or entry.get("Features") or "").split()
    online = _read(root, "sys/devices/system/cpu/online")
    cpu.threads = cpulist_count(online) if online else (len(blocks) or None)
    if not packages:
        # ARM and some VMs omit "physical id"; sysfs topology has the same facts.
        for topo in (root / "sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
            pkg = _read(topo, "physical_package_id")
            core = _read(topo, "core_id")
            if pkg is not None:
                packages.add(pkg)
                cores.add((pkg, core or topo.parent.name))
    cpu.sockets = len(packages) or None
    cpu.cores = len(cores) or None
    return cpu


def read_memory_mib(root: Path = Path("/")) -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read(root, "proc/meminfo") or "", re.M)
    return int(m.group(1)) // 1024 if m else None


def read_numa(root: Path = Path("/")) -> list[NumaNode]:
    nodes = []
    for path in (root / "sys/devices/system/node").glob("node[0-9]*"):
        meminfo = _read(path, "meminfo") or ""
        m = re.search(r"MemTotal:\s+(\d+)\s*kB", meminfo)
        nodes.append(
            NumaNode(
                node=int(path.name[4:]),
                cpus=_read(path, "cpulist") or "",
                memory_mib=int(m.group(1)) // 1024 if m else None,
            )
        )
    return sorted(nodes, key=lambda n: n.node)


# --- OS ----------------------------------------------------------------------------------------------


def parse_os_release(text: str) -> str | None:
    m = re.search(r'^PRETTY_NAME=["\']?(.*?)["\']?\s*$', text, re.M)
    return m.group(1) if m else None


def read_os(root: Path = Path("/")) -> str | None:
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = _read(root, rel)
        if text:
            return parse_os_release(text)
    return None


def read_kernel(root: Path = Path("/")) -> str | None:
    release = _read(root, "proc/sys/kernel/osrelease")
    if release is None and root == Path("/"):
        release = platform.release() or None
    return release


def read_hostname(root: Path = Path("/")) -> str:
    name = _read(root, "proc/sys/kernel/hostname") or _read(root, "etc/hostname")
    if not name and root == Path("/"):
        name = socket.gethostname()
    return name or "unknown"


# --- hypervisor --------------------------------------------------------------------------------------


def detect_hypervisor(
    *,
    dmi: dict[str, str | None],
    cpu_flags: list[str],
    lscpu_vendor: str | None = None,
    sys_hypervisor: str | None = None,
    clocksource: str | None = None,
    kernel: str | None = None,
) -> tuple[str | None, list[str]]:
    """Combine the sources into (name or None for bare metal, evidence lines).

    The cpuid `hypervisor` bit is the guest's own statement and decides; DMI alone only counts when it
    names virtual hardware, because cloud bare-metal hosts (EC2 *.metal, Azure) carry the cloud's DMI too.
    """
    evidence: list[str] = []
    names: list[str] = []
    dmi_text = " ".join(v for v in dmi.values() if v)
    dmi_present = any(dmi.values())
    for needle, name in _DMI_VM:
        if needle in dmi_text.lower():
            evidence.append(f"DMI says {dmi_text!r}")
            names.append(name)
            break
    else:
        if "microsoft corporation" in dmi_text.lower() and "virtual machine" in dmi_text.lower():
            evidence.append(f"DMI says {dmi_text!r}")
            names.append("Hyper-V")
    if "hypervisor" in cpu_flags:
        evidence.append("cpuid hypervisor flag set (/proc/cpuinfo)")
    if lscpu_vendor:
        evidence.append(f"lscpu Hypervisor vendor: {lscpu_vendor}")
        names.insert(0, _LSCPU_VENDOR.get(lscpu_vendor.lower(), lscpu_vendor))
    if sys_hypervisor:
        evidence.append(f"/sys/hypervisor/type: {sys_hypervisor}")
        names.append(sys_hypervisor.capitalize() if sys_hypervisor.lower() != "xen" else "Xen")
    if clocksource:
        for needle, name in _CLOCKSOURCE:
            if needle in clocksource:
                evidence.append(f"clocksource {clocksource!r} offered")
                names.append(name)
                break
    if not evidence:
        return None, ["no hypervisor flag, DMI, /sys/hypervisor or paravirtual clock"]
    name = names[0] if names else "unknown hypervisor"
    if name == "QEMU" and "KVM" in names:
        name = "KVM"  # QEMU machine accelerated by KVM
    if not dmi_present and name == "KVM":
        hint = "no DMI tables (as in minimal microVMs such as Firecracker)"
        if kernel and re.search(r"-fc[-.]", kernel):
            hint += f"; kernel {kernel!r} looks like a Firecracker guest build"
        evidence.append(hint)
    if dmi_present:
        cloud = dmi_text.lower()
        for needle, label in (
            ("amazon ec2", "Amazon EC2"),
            ("google", "Google Cloud"),
            ("microsoft", "Azure"),
        ):
            if needle in cloud and label not in evidence[0]:
                evidence.append(f"cloud: {label} (DMI)")
                break
    return name, evidence


def _dmi(root: Path) -> dict[str, str | None]:
    base = "sys/class/dmi/id/"
    return {k: _read(root, base + k) for k in ("sys_vendor", "product_name", "bios_vendor")}


# --- IOMMU -------------------------------------------------------------------------------------------


def read_iommu(root: Path = Path("/")) -> tuple[bool | None, list[IommuGroup]]:
    groups_dir = root / "sys/kernel/iommu_groups"
    class_dir = root / "sys/class/iommu"
    if not groups_dir.is_dir() and not class_dir.is_dir():
        return None, []
    groups = []
    for group in groups_dir.glob("[0-9]*"):
        devices = sorted(p.name for p in (group / "devices").glob("*"))
        groups.append(IommuGroup(group=int(group.name), devices=devices))
    groups.sort(key=lambda g: g.group)
    units = list(class_dir.glob("*")) if class_dir.is_dir() else []
    return bool(units or groups), groups


# --- whole host --------------------------------------------------------------------------------------


def host_info(root: Path = Path("/")) -> HostInfo:
    lscpu = _live_lscpu(root)
    cpu = read_cpu(root)
    if lscpu:
        from_lscpu = cpu_from_lscpu(lscpu)
        cpu.model = cpu.model or from_lscpu.model
        cpu.sockets = from_lscpu.sockets or cpu.sockets
        cpu.cores = from_lscpu.cores or cpu.cores
    kernel = read_kernel(root)
    iommu_enabled, groups = read_iommu(root)
    hypervisor, evidence = detect_hypervisor(
        dmi=_dmi(root),
        cpu_flags=cpu.flags,
        lscpu_vendor=lscpu.get("Hypervisor vendor"),
        sys_hypervisor=_read(root, "sys/hypervisor/type") or None,
        clocksource=_read(root, "sys/devices/system/clocksource/clocksource0/available_clocksource"),
        kernel=kernel,
    )
    return HostInfo(
        hostname=read_hostname(root),
        os=read_os(root),
        kernel=kernel,
        memory_total_mib=read_memory_mib(root),
        hypervisor=hypervisor,
        hypervisor_evidence=evidence,
        iommu_enabled=iommu_enabled,
        iommu_groups=groups,
        numa_nodes=read_numa(root),
        cpu=cpu,
    )


def host_from_capture(text: str) -> HostInfo:
    """A HostInfo from a text capture of `lscpu; cat /sys/class/dmi/id/...; uname -a; cat /etc/os-release`."""
    fields = parse_lscpu(text)
    hostname, kernel = "unknown", None
    m = re.search(r"^Linux (\S+) (\S+) ", text, re.M)
    if m:
        hostname, kernel = m.group(1), m.group(2)
    # The capture's DMI reads are `cat` lines whose output carries no key, so only "absent" is usable.
    dmi: dict[str, str | None] = {"sys_vendor": None, "product_name": None}
    cpu = cpu_from_lscpu(fields)
    hypervisor, evidence = detect_hypervisor(
        dmi=dmi, cpu_flags=cpu.flags, lscpu_vendor=fields.get("Hypervisor vendor"), kernel=kernel
    )
    return HostInfo(
        hostname=hostname,
        os=parse_os_release(text),
        kernel=kernel,
        hypervisor=hypervisor,
        hypervisor_evidence=evidence,
        numa_nodes=numa_from_lscpu(fields),
        cpu=cpu,
    )
