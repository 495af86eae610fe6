"""What a probe result should reach: the SKU's spec figure (from the compat matrix) and the bound, with provenance.

A probe passes when it reaches `min_pct` of the spec. The bounds are deliberately below what plain reference
scripts measure on an H200 (shared/reference/, 2026-11-21), so a healthy machine of another SKU passes and a real
fault (a slow link, a throttled or broken GPU) does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpulab.compat import GpuSpec
from gpulab.names import NO_PRECISION, Launcher, Precision, ReportPrecision
from gpulab.records import Check, GpuInfo, Result, Threshold
from gpulab.report import spread

# PCIe usable GB/s per lane and direction after line coding (8b/10b up to gen2, 128b/130b for gen3-5,
# FLIT for gen6): PCI-SIG base specifications.
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
PCIE_SOURCE = "PCI-SIG PCIe base specification: per-lane rate after line coding"


def pcie_gbs(gen: int | None, width: int | None) -> float | None:
    if gen is None or width is None or gen not in PCIE_LANE_GBS:
        return None
    return PCIE_LANE_GBS[gen] * width


@dataclass(frozen=True)
class Bound:
    min_pct: float
    basis: str


# probe key (workload, precision) -> minimum % of spec, and why that number.
BOUNDS: dict[tuple[str, ReportPrecision], Bound] = {
    ("matmul", Precision.BF16): Bound(
        60, "reference script: 785 of 989 TFLOP/s (79 %) on H200; 60 % leaves room for SKU clocks"
    ),
    ("matmul", Precision.FP16): Bound(60, "as bf16: same tensor-core rate on Ampere and later"),
    ("matmul", Precision.TF32): Bound(45, "TF32 GEMMs reach 60-75 % of the dense datasheet rate on Ampere/Hopper"),
    ("matmul", Precision.FP32): Bound(60, "reference script: 51 of 67 TFLOP/s (76 %) on H200 with TF32 off"),
    ("copy_d2d", NO_PRECISION): Bound(70, "reference script: 4276 of 4800 GB/s (89 %) on H200, read+write counted"),
    ("h2d_pinned", NO_PRECISION): Bound(70, "reference script: 55.4 of 63 GB/s (88 %) on H200 PCIe gen5 x16"),
    ("d2h_pinned", NO_PRECISION): Bound(70, "as host-to-device: pinned copies run near the link rate both ways"),
    ("allreduce", Precision.FP32): Bound(
        50, "reference script: bus bandwidth 338 of 450 GB/s (75 %) over NVLink on 4x H200, 256 MiB"
    ),
}


@dataclass(frozen=True)
class Expectation:
    spec_value: float
    spec_label: str  # short, for messages: "NVIDIA H200 dense bf16"
    threshold: Threshold  # its `source` carries the full citation


def expectation(result: Result, gpu: GpuInfo | None, spec: GpuSpec | None, nvlink: bool = False) -> Expectation | None:
    """The spec figure and bound for `result` on this GPU, or None when the matrix has no figure for it."""
    bound = BOUNDS.get((result.workload, result.precision))
    if bound is None or result.launcher == Launcher.CPU:
        return None
    figure: float | None = None
    label = source = ""
    if result.workload == "matmul" and spec is not None:
        mode = result.precision
        figure = getattr(spec, mode.spec_field) if isinstance(mode, Precision) else None
        label = f"{spec.name} dense {result.precision}"
        source = f"{label} datasheet figure ({spec.source})"
    elif result.workload == "copy_d2d" and spec is not None:
        figure, label = spec.memory_bandwidth_gbs, f"{spec.name} memory bandwidth"
        source = f"{label} datasheet figure ({spec.source})"
    elif result.workload in ("h2d_pinned", "d2h_pinned") and gpu is not None:
        # Judge against the link's maximum, so a link that trained low shows up here too.
        figure = pcie_gbs(gpu.pcie.gen_max, gpu.pcie.width_max)
        label = f"PCIe gen{gpu.pcie.gen_max} x{gpu.pcie.width_max}"
        source = f"{label}: {PCIE_SOURCE}"
    elif result.workload == "allreduce":
        if nvlink and spec is not None and spec.nvlink_gbs:
            figure = spec.nvlink_gbs / 2  # datasheets quote both directions; bus bandwidth is one
            label = f"{spec.name} NVLink, one direction"
            source = f"{spec.name} NVLink {spec.nvlink_gbs:g} GB/s bidirectional, halved ({spec.source})"
        elif gpu is not None:
            figure = pcie_gbs(gpu.pcie.gen_max, gpu.pcie.width_max)
            label = f"no NVLink: PCIe gen{gpu.pcie.gen_max} x{gpu.pcie.width_max}"
            source = f"{label} ({PCIE_SOURCE})"
    if not figure:
        return None
    name = f"{result.workload}.{result.precision}.min_pct_of_spec"
    return Expectation(
        spec_value=figure,
        spec_label=label,
        threshold=Threshold(name=name, value=bound.min_pct, unit="%", source=source, basis=bound.basis),
    )


def slower_than_siblings(values: dict[str, float], min_ratio: float = 0.9) -> dict[str, float]:
    """Devices whose value is below `min_ratio` × the median of all devices: one bad GPU among good ones."""
    if len(values) < 2:
        return {}
    ordered = sorted(values.values())
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {dev: v / median for dev, v in values.items() if median > 0 and v / median < min_ratio}


# What usually makes each probe fall short, for the failure message: (cause, the health checks that would show it,
# by name prefix). A cause whose checks all passed in the same report is named as ruled out, never as likely.
CAUSES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "matmul": (
        ("clocks throttled (power cap, temperature)", ("health.thermal", "health.idle_throttle")),
        ("another process on the GPU", ("occupancy.gpus_free",)),
        ("a lowered power limit", ("health.idle_throttle",)),
    ),
    "copy_d2d": (
        ("memory clock below max", ()),
        ("ECC/row-remap trouble", ("health.ecc", "health.memory_retirement")),
        ("another process using the GPU", ("occupancy.gpus_free",)),
    ),
    "h2d_pinned": (
        ("PCIe link below its max gen/width", ("health.pcie_link",)),
        ("the GPU on the far NUMA node", ()),
        ("an IOMMU in translation mode (use iommu=pt)", ()),
    ),
    "d2h_pinned": (
        ("PCIe link below its max gen/width", ("health.pcie_link",)),
        ("NUMA placement", ()),
        ("IOMMU mode", ()),
    ),
    "allreduce": (
        ("no NVLink/P2P between the GPUs (traffic through host memory)", ("probe.p2p",)),
        ("NCCL falling back to sockets", ()),
    ),
}


def likely_causes(workload: str, checks: Sequence[Check] = ()) -> str:
    """ "Likely causes: …" for a probe's shortfall, leaving out as "ruled out" a cause whose checks passed here."""
    causes = CAUSES.get(workload)
    if not causes:
        return "Likely causes: see the GPU health checks"
    ruled_out, left = [], []
    for cause, prefixes in causes:
        found = [c for c in checks if prefixes and c.name.startswith(prefixes) and c.status != "skip"]
        if found and all(c.status == "pass" for c in found):
            ruled_out.append(f"{cause} ({', '.join(sorted({c.name.split('[')[0] for c in found}))} passed)")
        else:
            left.append(cause)
    text = "Likely causes: " + (", ".join(left) if left else "none this report can name: see the telemetry")
    return text + (f". Ruled out by this report: {'; '.join(ruled_out)}" if ruled_out else "")


def check_name(workload: str, precision: str, where: str, framework: str = "torch") -> str:
    """A probe check's name: `probe.matmul.bf16[cuda:0]`; another tool's figure of the same probe (nccl-tests'
    all-reduce beside torch's) is a check of its own name. The one place it is made, so a skipped probe and a
    measured one are the same check in every report."""
    tool = "" if framework == "torch" else "." + framework.replace("-", "_")
    name = f"probe.{workload}{tool}.{precision}[{where}]"  # as `name =`, so tests/test_troubleshooting.py reads it
    return name


def check(result: Result, exp: Expectation | None, what: str, checks: Sequence[Check] = ()) -> Check:
    """The verdict on a recorded result: its bound met or not; with no bound, a well-formed number passes. `checks`
    are the report's checks so far: a failure's likely causes leave out what they show is fine."""
    cpu = f"cpu, {result.n} threads" if result.launcher == Launcher.CPU else None
    where = cpu or result.device or f"{result.n} devices"
    shown = f"{what} on {where}: {result.value:.1f} {result.unit}"
    evidence = {
        "value": result.value,
        "unit": result.unit,
        "spec": result.spec_value,
        "pct_of_spec": result.pct_of_spec,
    }
    name = check_name(result.workload, result.precision, where, result.framework)
    if not result.value > 0:
        return Check(name, "error", f"{shown}: the probe produced no usable number", evidence)
    if exp is None or result.pct_of_spec is None:
        return Check(name, "pass", f"{shown} (no spec figure to judge against)", evidence)
    bound = exp.threshold
    evidence["min_pct"] = bound.value
    figure = result.spread
    pct = spread.scaled(figure, 100 / exp.spec_value, "%") if figure else None
    where_pct = spread.position(pct, bound.value) if pct else None
    if figure is not None and pct is not None:
        evidence["pct_interval"] = [round(pct.low, 2), round(pct.high, 2)]
        evidence["windows"] = len(pct.windows)
        shown = f"{what} on {where}: {spread.text(figure, lambda v: f'{v:.1f}')} {result.unit}"
    message = f"{shown} = {result.pct_of_spec:.0f} % of {exp.spec_value:g} ({exp.spec_label}); bound {bound.value:g} %"
    if where_pct == "straddles":
        return Check(
            name,
            "marginal",
            f"{message}: its interval {pct.low:.0f}–{pct.high:.0f} % straddles the bound",  # type: ignore[union-attr]
            evidence,
            threshold=bound.name,
        )
    if where_pct == "above" or (where_pct is None and result.pct_of_spec >= bound.value):
        return Check(name, "pass", message, evidence, threshold=bound.name)
    return Check(name, "fail", f"{message}. {likely_causes(result.workload, checks)}", evidence, threshold=bound.name)
