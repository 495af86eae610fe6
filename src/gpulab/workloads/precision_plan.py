"""The precision a practitioner would train in on a given GPU, per workload: the plan validate/'s rows follow.

- Ampere and later (compute capability ≥ 8.0): bf16 autocast; style transfer in TF32 (its Gram matrices and
  losses stay fp32, so bf16 autocast only adds casts there).
- Before Ampere there is neither bf16 nor TF32. Where the GPU runs fp16 faster than fp32 (P100's 2×, the tensor
  cores of Volta and Turing), the classifiers train in fp16 autocast with dynamic loss scaling; where it does not
  (GeForce Pascal's fp16 runs at 1/64 rate, Maxwell), and for style transfer, fp32.
- TensorFlow rows offer no fp16 loss scaling here: fp32 before Ampere.
- channels_last (NHWC) where tensor cores consume it (Volta on); MNIST's 28×28 single channel never gains.

The plan is read from the GPU's matrix entry (compute capability, fp16 and fp32 datasheet rates), or forced to
an architecture (`pytest validate/ --precision-plan volta`) to run an older GPU's rows on a newer one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpulab import compat, names
from gpulab.compat import GpuSpec
from gpulab.errors import UnknownValue
from gpulab.names import Architecture, Precision, ReportedArchitecture
from gpulab.workloads.registry import REGISTRY

TENSOR_CORES_CC = 7.0  # Volta: the first tensor cores, and NHWC layouts that feed them
FP16_FAST = 1.5  # fp16 counts as faster when its datasheet rate is at least this multiple of fp32's
ONLY_CC = "compute capability only"  # the basis of a plan for a GPU the matrix does not list


@dataclass(frozen=True)
class Choice:
    precision: Precision
    channels_last: bool
    reason: str


@dataclass(frozen=True)
class PrecisionPlan:
    # The matrix's architecture of the GPU, or what its driver reported (None: nothing, so `sm_<cc>` names it).
    architecture: ReportedArchitecture | None
    compute_capability: float
    fp32_tflops: float | None
    fp16_tflops: float | None
    basis: str  # where the figures come from
    forced: bool = False  # chosen with --precision-plan, not read from the GPU

    @property
    def architecture_name(self) -> str:
        """The architecture as the plan's messages and JSON name it: the matrix's name for a GPU the matrix lists,
        the driver's ("Ada Lovelace") for one it does not, else the compute capability's sm_ name."""
        if self.architecture is None:
            return f"sm_{self.compute_capability}"
        return self.architecture.driver_name if self.basis == ONLY_CC else str(self.architecture)

    def has(self, precision: Precision) -> bool:
        """The GPU has hardware for `precision` (TF32 and bf16 from Ampere; fp16 from sm_53)."""
        return self.compute_capability >= precision.min_compute_capability

    @property
    def fp16_fast(self) -> bool:
        if not self.has(Precision.FP16):
            return False
        if self.basis == ONLY_CC:  # no datasheet: the tensor cores of its generation decide
            return self.compute_capability >= TENSOR_CORES_CC
        if self.fp16_tflops is None or self.fp32_tflops is None:  # a datasheet without an fp16 rate: not faster
            return False
        return self.fp16_tflops >= FP16_FAST * self.fp32_tflops

    def training(self, workload: str, framework: str = names.DEFAULT_FRAMEWORK) -> Choice:
        """The precision and memory layout `workload` trains in on this GPU under `framework`."""
        declared = REGISTRY.get(workload)
        gains, autocast = (declared.channels_last_gains, declared.autocast) if declared else (True, True)
        channels_last = framework == names.DEFAULT_FRAMEWORK and gains and self.compute_capability >= TENSOR_CORES_CC
        if self.has(Precision.BF16):
            if not autocast:
                return Choice(Precision.TF32, channels_last, "TF32: its Gram matrices and losses stay fp32")
            return Choice(
                Precision.BF16, channels_last, f"bf16 autocast ({self.architecture_name} has bf16 tensor cores)"
            )
        if not autocast:
            return Choice(
                Precision.FP32, channels_last, f"fp32: its losses need fp32 and {self.architecture_name} has no TF32"
            )
        if framework != names.DEFAULT_FRAMEWORK:
            return Choice(Precision.FP32, channels_last, f"fp32: {framework} rows offer no fp16 loss scaling here")
        if self.fp16_fast:
            rates = (
                f"{self.fp16_tflops:g} vs {self.fp32_tflops:g} TFLOP/s fp32"
                if self.fp16_tflops and self.fp32_tflops
                else f"the tensor cores of compute capability {self.compute_capability:g}"
            )
            return Choice(Precision.FP16, channels_last, f"fp16 autocast with loss scaling: {rates}")
        return Choice(Precision.FP32, channels_last, f"fp32: no faster fp16 on this GPU ({self.basis})")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "architecture": self.architecture_name}


def architectures() -> tuple[str, ...]:
    """The architectures the matrix lists a GPU of, oldest first, in lower case: what --precision-plan accepts."""
    return tuple(a.value.lower() for a in sorted({s.architecture for s in compat.all_gpus()}))


def plan_architecture(name: object) -> Architecture:
    """The architecture `--precision-plan` names (in any case, as the matrix or a driver writes it) when the matrix
    lists a GPU of it to plan by; errors.UnknownValue naming the ones it does otherwise."""
    try:
        architecture = Architecture.parse(name)
    except UnknownValue:
        architecture = None
    if architecture is None or not _specs(architecture):
        raise UnknownValue("architecture", name, architectures(), who="--precision-plan")
    return architecture


def _specs(architecture: Architecture) -> list[GpuSpec]:
    return [s for s in compat.all_gpus() if s.architecture is architecture]


def for_spec(spec: GpuSpec, forced: bool = False) -> PrecisionPlan:
    return PrecisionPlan(
        architecture=spec.architecture,
        compute_capability=float(spec.compute_capability),
        fp32_tflops=spec.fp32_tflops,
        fp16_tflops=spec.fp16_tflops,
        basis=f"{spec.name} datasheet",
        forced=forced,
    )


def for_architecture(architecture: Architecture) -> PrecisionPlan:
    """The plan of the architecture's first data-centre GPU in the matrix (a P100 for Pascal, a V100 for Volta)."""
    specs = _specs(architecture)
    if not specs:
        raise UnknownValue("architecture", str(architecture), architectures(), who="--precision-plan")
    return for_spec(specs[0], forced=True)


def for_gpu(
    spec: GpuSpec | None, compute_capability: str | None, architecture: ReportedArchitecture | None
) -> PrecisionPlan | None:
    """The plan for a selected GPU: from its matrix entry, else from what the driver reports (no rates known)."""
    if spec is not None:
        return for_spec(spec)
    if compute_capability:
        try:
            cc = float(compute_capability)
        except ValueError:
            return None
        return PrecisionPlan(architecture, cc, None, None, ONLY_CC)
    return None
