"""TensorFlow workloads built in this process: precision policy restored, parameter errors as the torch ones."""

from __future__ import annotations

import pytest

from gpulab.errors import GpulabError
from gpulab.workloads.base import RunConfig

pytest.importorskip("tensorflow", reason="TensorFlow is not installed: pip install 'gpulab[tf]' to test its backend")


def test_bf16_policy_is_restored_after_a_run() -> None:
    import keras

    from gpulab.workloads.tf import build

    before = keras.mixed_precision.global_policy().name
    session = build(RunConfig("mnist", precision="bf16", size="tiny"))
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    loss = float(session.step())
    assert loss == loss  # finite enough to compare
    assert session.info["keras_policy"] == "mixed_bfloat16"
    session.finish()
    assert keras.mixed_precision.global_policy().name == before


def test_tf32_setting_is_restored() -> None:
    import tensorflow as tf

    from gpulab.workloads.tf import build

    before = tf.config.experimental.tensor_float_32_execution_enabled()
    session = build(RunConfig("mnist", precision="fp32" if before else "tf32", size="tiny"))
    assert tf.config.experimental.tensor_float_32_execution_enabled() != before
    session.finish()
    assert tf.config.experimental.tensor_float_32_execution_enabled() == before


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (RunConfig("nope", size="tiny"), "unknown workload"),
        (RunConfig("mnist", size="tiny", params={"optimizer": "adam"}), "parameter optimizer='adam' is invalid"),
        (RunConfig("cifar10", size="tiny", params={"momentum": 2}), "parameter momentum=2 is invalid"),
        (RunConfig("resnet50", size="tiny", batch=0), "batch must be a positive integer"),
        (RunConfig("chexnet", size="huge"), "size 'huge' is not known"),
        (RunConfig("style_transfer", size="tiny", batch=2), "batch must be 1 or unset"),
        (RunConfig("style_transfer", size="tiny", params={"vgg_weights": "/no/such.h5"}), "does not exist"),
        (RunConfig("mnist", size="tiny", precision="fp16"), "precision 'fp16' is not supported"),
    ],
)
def test_bad_inputs(cfg: RunConfig, message: str) -> None:
    from gpulab.workloads.tf import build

    with pytest.raises(GpulabError, match=message):
        build(cfg)


def test_param_tables_are_the_torch_ones() -> None:
    from gpulab.workloads import mnist, style_transfer
    from gpulab.workloads.tf import style_transfer as tf_style

    assert tf_style.SIZES is style_transfer.SIZES
    assert mnist.DEFAULTS["optimizer"] == "adadelta"
