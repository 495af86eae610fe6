"""Before anything is measured: the run tests the GPUs the host has, and no other work occupies them."""

from gpulab.checks import occupancy


def test_gpus_selected(lab, verdict):
    verdict(
        occupancy.gpus_selected(
            lab.fingerprint.gpus,
            lab.gpus,
            env_value=lab.cuda_visible,
            spec=lab.options.gpus,
            expect=lab.options.expect_gpus,
            source=lab.source,
        )
    )


def test_gpus_free(lab, verdict):
    verdict(occupancy.gpus_free(lab.occupancy, lab.gpus, allow_busy=lab.options.allow_busy))
