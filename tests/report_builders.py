"""Realistic report data for the report and compare tests (a 4x H200 VM with torch and nccl-tests)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from gpulab.names import NO_PRECISION, Architecture, Precision
from gpulab.records import (
    Check,
    CpuInfo,
    EccErrors,
    Fingerprint,
    FrameworkInfo,
    GpuInfo,
    GpuTelemetry,
    HostInfo,
    IommuGroup,
    MemoryRetirement,
    NumaNode,
    NvLinkInfo,
    PcieLink,
    Report,
    Result,
    Scaling,
    SoftwareInfo,
    Speedup,
    TelemetrySummary,
    Threshold,
)


def full_fingerprint(n_gpus: int = 4, hypervisor: str | None = "KVM") -> Fingerprint:
    gpus = []
    for i in range(n_gpus):
        bus = f"0000:{0x06 + i:02x}:00.0"
        gpus.append(
            GpuInfo(
                index=i,
                name="NVIDIA H200",
                uuid=f"GPU-6f1c2d3e-0000-4000-8000-00000000000{i}",
                bus_id=bus,
                pci_device_id="10de:2335",
                pci_subsystem_id="10de:18bf",
                architecture=Architecture.HOPPER,
                compute_capability="9.0",
                numa_node=0,
                pcie=PcieLink(gen_current=5, gen_max=5, width_current=16, width_max=16),
                memory_total_mib=143771,
                memory_used_mib=1,
                ecc_enabled=True,
                ecc_errors=EccErrors(0, 0, 0, 0),
                retirement=MemoryRetirement(
                    remapped_correctable=0, remapped_uncorrectable=0, remap_pending=False, remap_failure=False
                ),
                persistence_mode=True,
                virtualization_mode="Pass-Through" if hypervisor else "None",
                vbios_version="96.00.9F.00.04",
                performance_state="P0",
                sm_clock_mhz=1980,
                mem_clock_mhz=3201,
                max_sm_clock_mhz=1980,
                max_mem_clock_mhz=3201,
                throttle_reasons=["gpu_idle"],
                temperature_c=31.0,
                power_draw_w=75.5,
                power_limit_w=700.0,
                nvlinks=[NvLinkInfo(link=k, active=True, bandwidth_gbps=26.562) for k in range(2)],
            )
        )
    return Fingerprint(
        host=HostInfo(
            hostname="gpu-vm-01",
            os="Ubuntu 24.04.2 LTS",
            kernel="6.8.0-57-generic",
            memory_total_mib=1031000,
            hypervisor=hypervisor,
            hypervisor_evidence=["lscpu", "cpuinfo flag"] if hypervisor else [],
            iommu_enabled=True,
            iommu_groups=[IommuGroup(group=12, devices=["0000:06:00.0"])],
            numa_nodes=[NumaNode(node=0, cpus="0-63", memory_mib=1031000)],
            cpu=CpuInfo(
                model="Intel(R) Xeon(R) Platinum 8480+",
                vendor="GenuineIntel",
                sockets=1,
                cores=64,
                threads=64,
                flags=["avx512f", "amx_bf16"],
            ),
        ),
        software=SoftwareInfo(
            driver_version="570.124.06",
            cuda_driver_version="12.8",
            toolkits=[{"path": "/usr/local/cuda-12.8", "version": "12.8.93"}],
            nvcc_version="12.8.93",
            cudnn_version="9.8.0",
            nccl_version="2.26.2",
            python="3.12.3",
            frameworks=[
                FrameworkInfo(
                    name="torch",
                    version="2.7.0+cu128",
                    built_cuda="12.8",
                    built_cudnn="90800",
                    nccl="2.26.2",
                    sees_gpus=n_gpus,
                ),
                FrameworkInfo(name="tensorflow", version="2.19.0", error="No module named 'tensorflow'"),
            ],
            env={"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(n_gpus))},
        ),
        gpus=gpus,
        topology=[["X" if i == j else "NV18" for j in range(n_gpus)] for i in range(n_gpus)],
        gpu_source="nvml",
    )


def minimal_fingerprint() -> Fingerprint:
    return Fingerprint(
        host=HostInfo(hostname="cpu-only"), gpu_absent_reason="no NVIDIA GPU/driver found: no /dev/nvidia0"
    )


def _timeline(n_gpus: int) -> list[dict[str, Any]]:
    samples = []
    for step in range(10):
        for i in range(n_gpus):
            samples.append(
                {
                    "t": step * 0.5,
                    "index": i,
                    "util": 90.0 + i,
                    "mem_mib": 20000.0,
                    "power_w": 600.0 + step,
                    "sm_mhz": 1980.0,
                    "temp_c": 55.0,
                }
            )
    return samples


def sample_report(n_gpus: int = 4, hypervisor: str | None = "KVM") -> Report:
    report = Report(
        fingerprint=full_fingerprint(n_gpus, hypervisor).to_dict(),
        tier="standard",
        command="gpulab validate --tier standard",
        duration_s=412.5,
        created="2025-06-01T12:00:00+00:00",
    )
    spec = report.add_threshold(
        Threshold(
            name="matmul_bf16.min_pct_of_spec",
            value=60.0,
            unit="%",
            source="NVIDIA H200 datasheet (989 TFLOP/s dense bf16)",
            basis="0.6 x spec",
        )
    )
    report.add_threshold(Threshold(name="scaling.ddp.min_efficiency", value=0.85, unit="x", source="gpulab default"))
    report.checks = [
        Check(name="health.driver_loaded", status="pass", message="driver 570.124.06 loaded", seconds=0.1),
        *[
            Check(
                name=f"health.pcie_link[{g['bus_id']}]",
                status="pass",
                message=f"gen{g['pcie']['gen_current']} x{g['pcie']['width_current']} (max)",
                evidence={"pcie": g["pcie"]},
            )
            for g in report.fingerprint["gpus"]
        ],
        Check(name="probe.matmul_bf16", status="pass", message="785 TFLOP/s = 79 % of spec", threshold=spec),
        Check(name="health.nvlink", status="skip", message="only one GPU visible"),
    ]
    results = []
    for i in range(n_gpus):
        results.append(
            Result(
                workload="matmul",
                framework="torch",
                launcher="gpu",
                n=1,
                precision=Precision.BF16,
                value=785.0 - i,
                unit="TFLOP/s",
                device=f"cuda:{i}",
                devices=[f"cuda:{i}"],
                seconds=2.0,
                iterations=50,
                spec_value=989.0,
                pct_of_spec=(785.0 - i) / 989.0 * 100,
                params={"size": 8192},
            )
        )
        results.append(
            Result(
                workload="h2d_pinned",
                framework="torch",
                launcher="gpu",
                n=1,
                precision=NO_PRECISION,
                value=53.1,
                unit="GB/s",
                device=f"cuda:{i}",
                spec_value=64.0,
                pct_of_spec=53.1 / 64.0 * 100,
            )
        )
    results.append(
        Result(
            workload="resnet50",
            framework="torch",
            launcher="cpu",
            n=64,
            precision=Precision.FP32,
            value=95.0,
            unit="samples/s",
            batch=64,
            params={"threads": 64},
        )
    )
    base = 3100.0
    for n in (1, 2, 4):
        if n > n_gpus:
            continue
        tel = TelemetrySummary(
            samples=10 * n,
            interval_s=0.5,
            per_gpu=[GpuTelemetry(i, samples=10 * n, util_mean=95.0, power_mean_w=610.0) for i in range(n)],
            timeline=_timeline(n),
        )
        results.append(
            Result(
                workload="resnet50",
                framework="torch",
                launcher="ddp" if n > 1 else "gpu",
                n=n,
                precision=Precision.BF16,
                value=base * n * (0.95 if n > 1 else 1.0),
                unit="samples/s",
                devices=[f"cuda:{i}" for i in range(n)],
                batch=256,
                seconds=30.0,
                telemetry=tel,
            )
        )
    report.results = results
    report.speedups = [
        Speedup(
            workload="resnet50", framework="torch", precision=Precision.FP32, from_="cpu:64", to="gpu:1", ratio=32.6
        ),
        Speedup(
            workload="resnet50",
            framework="torch",
            precision=Precision.BF16,
            from_="gpu:1",
            to=f"gpu:{n_gpus}",
            ratio=3.8,
        ),
    ]
    report.scaling = [
        Scaling(
            workload="resnet50",
            framework="torch",
            launcher="ddp",
            precision=Precision.BF16,
            n=n,
            throughput=base * n * eff,
            speedup=n * eff,
            efficiency=eff,
            expected=0.85,
            expected_source="gpulab default",
        )
        for n, eff in ((1, 1.0), (2, 0.95), (4, 0.95))
        if n <= n_gpus
    ]
    return report


def scaled(report: Report, factor: float) -> Report:
    """A copy with every measured value multiplied by `factor`."""
    out = copy.deepcopy(report)
    out.results = [dataclasses.replace(r, value=r.value * factor) for r in out.results]
    return out


def quiet_proc(root: Path) -> Path:
    """A directory laid out as /proc for a quiet host: 2 idle CPUs, a load of 0.1, 5 ms of CPU pressure."""
    (root / "pressure").mkdir(parents=True)
    (root / "stat").write_text("cpu  1000 0 500 90000 10 0 5 0 0 0\ncpu0 500 0 250 45000 5 0 3 0 0 0\n")
    (root / "loadavg").write_text("0.10 0.05 0.01 1/123 4567\n")
    (root / "pressure" / "cpu").write_text(
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=5000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    return root
