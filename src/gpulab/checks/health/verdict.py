"""What every health check shares: one Check per verdict, the GPU's label and class, and who reported the facts."""

from __future__ import annotations

from gpulab.compat import product_class as derive_class
from gpulab.records import CAPTURE_SOURCE_PREFIX, Check, Fingerprint, GpuInfo

LIVE_SOURCE = "NVML"


def passed(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="pass", message=message, evidence=dict(evidence))


def failed(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="fail", message=message, evidence=dict(evidence))


def skipped(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="skip", message=message, evidence=dict(evidence))


def gpu_label(gpu: GpuInfo) -> str:
    return f"GPU {gpu.index} ({gpu.name}, {gpu.bus_id})"


def product_class(gpu: GpuInfo) -> str:
    """One of PRODUCT_CLASSES (gpulab.compat.gpu_names): discovery fills it; GpuInfo built elsewhere gets it derived."""
    return gpu.product_class or derive_class(gpu.name, gpu.product_brand)


def reporter(fp: Fingerprint) -> str:
    """What reported the GPU facts, as "not reported by ..." names it: NVML, or the capture file."""
    if fp.is_capture:
        return f"the capture {fp.gpu_source.removeprefix(CAPTURE_SOURCE_PREFIX)}"
    return LIVE_SOURCE
