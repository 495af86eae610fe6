"""TensorFlow workloads built in this process: precision policy restored, parameter errors as the torch ones."""

from __future__ import annotations

import pytest

from gpulab.errors import GpulabError, UnknownValue
from gpulab.names import Precision
from gpulab.records import RunConfig

pytest.importorskip("tensorflow", reason="TensorFlow is not installed: pip install 'gpulab[tf]' to test its backend")


def test_bf16_policy_is_restored_after_a_run() -> None:
    import keras

    from gpulab.workloads.tf import build

    before = keras.mixed_precision.global_policy().name
    session = build(RunConfig("mnist", precision=Precision.BF16, size="tiny"))
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
    session = build(RunConfig("mnist", precision=Precision.FP32 if before else Precision.TF32, size="tiny"))
    assert tf.config.experimental.tensor_float_32_execution_enabled() != before
    session.finish()
    assert tf.config.experimental.tensor_float_32_execution_enabled() == before


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (RunConfig("mnist", size="tiny", params={"optimizer": "adam"}), "parameter optimizer='adam' is invalid"),
        (RunConfig("cifar10", size="tiny", params={"momentum": 2}), "parameter momentum=2 is invalid"),
        (RunConfig("resnet50", size="tiny", batch=0), "batch must be a positive integer"),
        (RunConfig("style_transfer", size="tiny", batch=2), "batch must be 1 or unset"),
        (RunConfig("style_transfer", size="tiny", params={"vgg_weights": "/no/such.h5"}), "does not exist"),
        (RunConfig("style_transfer", size="tiny", params={"loop": "compile"}), "loop=compile is torch.compile's"),
        (RunConfig("mnist", size="tiny", precision=Precision.FP16), "TensorFlow rows train fp32, tf32, bf16"),
    ],
)
def test_bad_inputs(cfg: RunConfig, message: str) -> None:
    from gpulab.workloads.tf import build

    with pytest.raises(GpulabError, match=message):
        build(cfg)


@pytest.mark.parametrize(
    ("cfg", "what", "value"),
    [
        (RunConfig("nope", size="tiny"), "workload", "nope"),
        (RunConfig("chexnet", size="huge"), "size", "huge"),
    ],
)
def test_bad_names(cfg: RunConfig, what: str, value: str) -> None:
    from gpulab.workloads.tf import build

    with pytest.raises(UnknownValue) as err:
        build(cfg)
    assert (err.value.what, err.value.value) == (what, value)


def test_param_tables_are_the_torch_ones() -> None:
    from gpulab.workloads import mnist, style_transfer
    from gpulab.workloads.style_transfer import session, tf_session

    assert tf_session.torch_st is session and session.SIZES is style_transfer.SIZES
    assert mnist.DEFAULTS["optimizer"] == "adadelta"


KERAS_HINT = "pass the weights file of keras.applications.VGG19(include_top=False)"


def test_vgg_weights_for_keras_load_or_fail_in_one_line(tmp_path) -> None:
    import keras

    from gpulab.workloads.style_transfer.tf_session import vgg19_features

    taps = ["block1_conv1", "block2_conv1"]
    good = tmp_path / "vgg19.weights.h5"
    keras.applications.VGG19(include_top=False, weights=None).save_weights(str(good))
    model, described = vgg19_features(taps, "max", good)
    assert described.startswith(f"{good} sha256:") and len(model.outputs) == 2

    other = tmp_path / "vgg16.weights.h5"
    keras.applications.VGG16(include_top=False, weights=None).save_weights(str(other))
    garbage = tmp_path / "random.weights.h5"
    garbage.write_bytes(bytes(range(256)) * 8)
    torch_file = tmp_path / "vgg19.pth"
    torch_file.write_bytes(b"PK\x03\x04" + bytes(100))
    for path in (other, garbage, torch_file):
        with pytest.raises(GpulabError) as caught:
            vgg19_features(taps, "max", path)
        message = str(caught.value)
        assert "\n" not in message, message
        assert message.startswith(f"style_transfer: {path} is not VGG19 weights for Keras (")
        assert KERAS_HINT in message


@pytest.mark.parametrize("value", ["", "/dev/zero", "folder", "empty.h5"])
def test_vgg_weights_that_are_not_files_name_the_keras_file(tmp_path, value: str) -> None:
    from gpulab.workloads.tf import build

    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.h5").write_bytes(b"")
    path = str(tmp_path / value) if value and not value.startswith("/") else value
    with pytest.raises(GpulabError) as caught:
        build(RunConfig("style_transfer", size="tiny", params={"vgg_weights": path}))
    message = str(caught.value)
    assert message.startswith("style_transfer: parameter vgg_weights: ") and "\n" not in message
    assert KERAS_HINT in message and "torchvision" not in message
