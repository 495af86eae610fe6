"""Containers: a container started with the NVIDIA container toolkit sees the host's GPUs."""

import pytest

from gpulab.checks import containers


@pytest.mark.gpu
@pytest.mark.live
def test_gpu_in_container(lab, verdict, pytestconfig):
    verdict(
        containers.gpu_in_container(
            lab.fingerprint.gpus,
            requested=pytestconfig.getoption("--container-runtime"),
            image=pytestconfig.getoption("--container-image"),
        )
    )
