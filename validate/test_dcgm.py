"""DCGM's active diagnostic (`dcgmi diag`) at the tier's level, where DCGM is installed (gpulab_dcgm: true)."""

import pytest

from gpulab.checks import dcgm


@pytest.mark.gpu
@pytest.mark.live
def test_dcgm_diag(request, lab, verdict):
    level = dcgm.level_for(lab.options.tier, request.config.getoption("--dcgm-diag-level"))
    verdict(dcgm.run_diag(level))
