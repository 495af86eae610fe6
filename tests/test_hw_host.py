"""Host discovery on the real lscpu capture and on fake /proc + /sys trees."""

from __future__ import annotations

from pathlib import Path

from gpulab.hw.host import (
    cpu_from_lscpu,
    cpulist_count,
    detect_hypervisor,
    host_from_capture,
    host_info,
    parse_lscpu,
    read_iommu,
)

FIX = Path(__file__).parent / "fixtures" / "h200x4-firecracker"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def cpuinfo(sockets: int, cores: int, threads_per_core: int, flags: str) -> str:
    blocks, cpu = [], 0
    for s in range(sockets):
        for _t in range(threads_per_core):
            for c in range(cores):
                blocks.append(
                    f"processor\t: {cpu}\nvendor_id\t: AuthenticAMD\n"
                    "model name\t: AMD EPYC 9654 96-Core Processor\n"
                    f"physical id\t: {s}\ncore id\t\t: {c}\nflags\t\t: {flags}\n"
                )
                cpu += 1
    return "\n".join(blocks) + "\n"


def bare_metal_tree(root: Path) -> None:
    write(root, "proc/cpuinfo", cpuinfo(2, 4, 2, "fpu sse2 avx2"))
    write(root, "sys/devices/system/cpu/online", "0-15\n")
    write(root, "proc/meminfo", "MemTotal:       263921000 kB\nMemFree: 1 kB\n")
    write(root, "sys/devices/system/node/node0/cpulist", "0-3,8-11\n")
    write(root, "sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       131960500 kB\n")
    write(root, "sys/devices/system/node/node1/cpulist", "4-7,12-15\n")
    write(root, "sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:       131960500 kB\n")
    write(root, "etc/os-release", 'NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    write(root, "proc/sys/kernel/osrelease", "5.15.0-105-generic\n")
    write(root, "proc/sys/kernel/hostname", "gpu-node-07\n")
    write(root, "sys/class/dmi/id/sys_vendor", "Supermicro\n")
    write(root, "sys/class/dmi/id/product_name", "SYS-821GE-TNHR\n")
    write(root, "sys/devices/system/clocksource/clocksource0/available_clocksource", "tsc hpet acpi_pm\n")
    (root / "sys/class/iommu/dmar0").mkdir(parents=True)
    for group, devs in {0: ["0000:00:00.0"], 17: ["0000:3b:00.0", "0000:3b:00.1"]}.items():
        for dev in devs:
            (root / f"sys/kernel/iommu_groups/{group}/devices/{dev}").mkdir(parents=True)


def test_lscpu_capture():
    fields = parse_lscpu((FIX / "host.txt").read_text())
    cpu = cpu_from_lscpu(fields)
    assert cpu.threads == 64
    assert cpu.sockets == 1
    assert cpu.cores == 64
    assert cpu.vendor == "GenuineIntel"
    assert cpu.model == "Intel(R) Xeon(R) Processor"
    assert "avx512f" in cpu.flags and "hypervisor" in cpu.flags
    assert fields["Hypervisor vendor"] == "KVM"


def test_host_from_capture_is_kvm_with_evidence():
    host = host_from_capture((FIX / "host.txt").read_text())
    assert host.hypervisor == "KVM"
    joined = " | ".join(host.hypervisor_evidence)
    assert "lscpu Hypervisor vendor: KVM" in joined
    assert "cpuid hypervisor flag" in joined
    assert "Firecracker" in joined  # a hint in the evidence, not a claim in the name
    assert host.kernel == "6.18.44-fc-v657-gpu"
    assert host.hostname == "vm"
    assert host.os == "Ubuntu 24.04.3 LTS"
    assert [(n.node, n.cpus) for n in host.numa_nodes] == [(0, "0-63")]


def test_bare_metal_tree(tmp_path):
    bare_metal_tree(tmp_path)
    host = host_info(tmp_path)
    assert host.hostname == "gpu-node-07"
    assert host.os == "Ubuntu 22.04.4 LTS"
    assert host.kernel == "5.15.0-105-generic"
    assert host.memory_total_mib == 263921000 // 1024
    assert host.hypervisor is None
    assert host.hypervisor_evidence  # says why it is judged bare metal
    assert (host.cpu.sockets, host.cpu.cores, host.cpu.threads) == (2, 8, 16)
    assert host.cpu.model == "AMD EPYC 9654 96-Core Processor"
    assert host.cpu.flags == ["fpu", "sse2", "avx2"]
    assert [(n.node, n.cpus, n.memory_mib) for n in host.numa_nodes] == [
        (0, "0-3,8-11", 131960500 // 1024),
        (1, "4-7,12-15", 131960500 // 1024),
    ]
    assert host.iommu_enabled is True
    assert [(g.group, g.devices) for g in host.iommu_groups] == [
        (0, ["0000:00:00.0"]),
        (17, ["0000:3b:00.0", "0000:3b:00.1"]),
    ]


def test_qemu_dmi_guest(tmp_path):
    write(tmp_path, "proc/cpuinfo", cpuinfo(1, 4, 1, "fpu sse2 hypervisor"))
    write(tmp_path, "sys/class/dmi/id/sys_vendor", "QEMU\n")
    write(tmp_path, "sys/class/dmi/id/product_name", "Standard PC (Q35 + ICH9, 2009)\n")
    write(tmp_path, "sys/devices/system/clocksource/clocksource0/available_clocksource", "kvm-clock tsc\n")
    host = host_info(tmp_path)
    assert host.hypervisor == "KVM"  # QEMU machine, KVM clock: accelerated by KVM
    assert any("QEMU" in e for e in host.hypervisor_evidence)
    assert any("kvm-clock" in e for e in host.hypervisor_evidence)
    assert host.iommu_enabled is None  # nothing under /sys to judge by


def test_iommu_off_when_dirs_empty(tmp_path):
    (tmp_path / "sys/kernel/iommu_groups").mkdir(parents=True)
    (tmp_path / "sys/class/iommu").mkdir(parents=True)
    assert read_iommu(tmp_path) == (False, [])


def test_hypervisor_sources():
    assert detect_hypervisor(dmi={"sys_vendor": "VMware, Inc."}, cpu_flags=["hypervisor"])[0] == "VMware"
    hv = detect_hypervisor(
        dmi={"sys_vendor": "Microsoft Corporation", "product_name": "Virtual Machine"},
        cpu_flags=["hypervisor"],
    )
    assert hv[0] == "Hyper-V"
    # Cloud bare metal: the cloud's DMI but no hypervisor bit.
    assert detect_hypervisor(dmi={"sys_vendor": "Amazon EC2", "product_name": "p5.48xlarge"}, cpu_flags=[])[0] is None
    nitro = detect_hypervisor(
        dmi={"sys_vendor": "Amazon EC2", "product_name": "p4d.24xlarge"},
        cpu_flags=["hypervisor"],
        lscpu_vendor="KVM",
    )
    assert nitro[0] == "KVM" and any("Amazon EC2" in e for e in nitro[1])
    assert detect_hypervisor(dmi={}, cpu_flags=[], sys_hypervisor="xen")[0] == "Xen"
    assert detect_hypervisor(dmi={}, cpu_flags=["hypervisor"])[0] == "unknown hypervisor"


def test_cpulist_count():
    assert cpulist_count("0-31,64-95") == 64
    assert cpulist_count("0") == 1
    assert cpulist_count("") == 0
