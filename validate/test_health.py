"""Health: the GPUs are all there, healthy, on full links, and supported by the installed stack."""

import pytest

from gpulab.checks import health
from gpulab.hw.nvml import pci_gpus


def test_gpu_count(lab, verdict):
    on_bus = None if lab.options.from_xml else len(pci_gpus())
    verdict(health.gpu_count(lab.fingerprint, lab.options.expect_gpus, on_bus))


@pytest.mark.gpu
def test_driver_for_cuda(lab, verdict):
    verdict(health.driver_for_cuda(lab.fingerprint))


@pytest.mark.gpu
def test_stack_supports_arch(lab, verdict):
    verdict(health.stack_supports_arch(lab.fingerprint))


@pytest.mark.gpu
@pytest.mark.live
def test_torch_sees_gpus(lab, verdict):
    verdict(health.framework_sees_gpus(lab.fingerprint, "torch", len(lab.gpus)))


@pytest.mark.gpu
def test_whole_gpu(lab, gpu, verdict):
    """MIG instances or a vGPU slice: whole-GPU probes would measure no single workload (they skip, named)."""
    verdict(health.whole_gpu(gpu, health.reporter(lab.fingerprint)))


@pytest.mark.gpu
def test_pcie_link(lab, gpu, verdict, link_under_load):
    under_load = link_under_load(gpu) if gpu.pcie.at_max is False else None
    verdict(health.pcie_link(gpu, under_load, source=lab.source))


@pytest.mark.gpu
def test_ecc(lab, gpu, verdict):
    verdict(health.ecc(gpu, source=lab.source))


@pytest.mark.gpu
def test_memory_retirement(lab, gpu, verdict):
    verdict(health.memory_retirement(gpu, source=lab.source))


@pytest.mark.gpu
def test_persistence_mode(lab, gpu, verdict):
    verdict(health.persistence(gpu, source=lab.source))


@pytest.mark.gpu
def test_no_throttling_at_idle(lab, gpu, verdict):
    verdict(health.idle_throttle(gpu, source=lab.source))


@pytest.mark.gpu
def test_thermal(lab, gpu, verdict):
    verdict(health.thermal(gpu, source=lab.source))


@pytest.mark.gpu
def test_pcie_replays(lab, gpu, verdict):
    verdict(health.pcie_replays(gpu, source=lab.source))
