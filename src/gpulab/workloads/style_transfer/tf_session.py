"""Neural style transfer on tf.keras: VGG19 from keras.applications (include_top=False), Adam on the image variable.

The same loss terms and parameters as the PyTorch workload (gpulab.workloads.style_transfer.session): content at
relu4_2/relu5_2 (block4_conv2/block5_conv2), style Gram matrices at relu1_1..relu5_1 (blockN_conv1), total variation;
the image lives in 0..255 pixel space and gets Keras VGG19's own preprocessing (BGR, ImageNet means subtracted).
VGG weights are random unless `vgg_weights` names a Keras `.weights.h5` file of keras.applications.VGG19
(include_top=False). The step (forward, losses, gradient, Adam update) is one tf.function.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads.input_files import cause, file_digest
from gpulab.workloads.style_transfer import session as torch_st
from gpulab.workloads.tf.session import TFNumerics, default_strategy, seed_everything, strategy_devices

CONTENT_LAYERS = {"relu4_2": "block4_conv2", "relu5_2": "block5_conv2"}
STYLE_LAYERS = {
    "relu1_1": "block1_conv1",
    "relu2_1": "block2_conv1",
    "relu3_1": "block3_conv1",
    "relu4_1": "block4_conv1",
    "relu5_1": "block5_conv1",
}
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)
KERAS_WEIGHTS_HINT = (
    "pass the weights file of keras.applications.VGG19(include_top=False): the "
    "vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5 Keras downloads to ~/.keras/models, or a .weights.h5 it saved"
)


def keras_vgg_weights(value: Any) -> Path | None:
    """vgg_weights=imagenet: Keras's published VGG19 weights (no top), fetched by Keras on first use."""
    from gpulab.workloads import fetch

    if value == fetch.IMAGENET:
        return fetch.keras_vgg19_notop()
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        raise GpulabError(
            "style_transfer: parameter vgg_weights: a URL is fetched for the torch version only (its name carries "
            f"its checksum); for TensorFlow pass imagenet or a file. {KERAS_WEIGHTS_HINT}"
        )
    return None


def vgg19_features(taps: list[str], pooling: str, weights: Path | None) -> tuple[Any, str]:
    """A model from 0..255-free preprocessed input to the outputs of `taps` (Keras layer names), cut after the
    deepest one; max or average pooling. Returns (model, weights description)."""
    import keras

    vgg = keras.applications.VGG19(include_top=False, weights=None, input_shape=(None, None, 3))
    described = "random"
    if weights is not None:
        digest = file_digest(weights)
        try:
            vgg.load_weights(str(weights))
        except Exception as err:  # h5py, Keras and the OS each raise their own for a file that is not these weights
            why = cause(err)
            raise GpulabError(
                f"style_transfer: {weights} is not VGG19 weights for Keras ({why}); {KERAS_WEIGHTS_HINT}"
            ) from None
        described = f"{weights} sha256:{digest}"
    names = [layer.name for layer in vgg.layers]
    last = max(names.index(t) for t in taps)
    inputs = keras.Input((None, None, 3))
    x = inputs
    outputs = {}
    for layer in vgg.layers[1 : last + 1]:
        if pooling == "avg" and isinstance(layer, keras.layers.MaxPooling2D):
            x = keras.layers.AveragePooling2D(2, 2, name=layer.name + "_avg")(x)
        else:
            x = layer(x)
        if layer.name in taps:
            outputs[layer.name] = x
    model = keras.Model(inputs, [outputs[t] for t in taps])
    model.trainable = False
    return model, described


def _gram(features: Any, scale: float) -> Any:
    import tensorflow as tf

    channels = tf.shape(features)[-1]
    flat = tf.reshape(features, [-1, channels])
    return tf.matmul(flat, flat, transpose_a=True) * scale


class TFStyleTransferSession(torch_st.StyleSessionBase):
    def __init__(self, cfg: RunConfig, strategy: Any) -> None:
        if int(strategy.num_replicas_in_sync) != 1:
            raise GpulabError(
                "style_transfer optimises an input, not a model: MirroredStrategy does not apply to it; "
                "run it on one device, or over several GPUs with `gpulab sweep --framework tensorflow`"
            )
        st = torch_st.style_settings(cfg, KERAS_WEIGHTS_HINT, keras_vgg_weights)
        if st.loop not in ("eager", "auto"):
            raise GpulabError(
                f"style_transfer: loop={st.loop} is torch.compile's; TensorFlow runs its step as a tf.function: "
                "leave loop out, or run with --framework torch"
            )
        self.steps, self._output = st.steps, st.output
        seed_everything(cfg.seed)
        self._numerics = TFNumerics(cfg.precision)
        self._finished = False
        self._steps_run = 0
        self._last_loss: Any = None
        try:
            with strategy.scope():
                self._build(cfg, strategy, st)
        except BaseException:
            self._numerics.close()
            raise

    def _build(self, cfg: RunConfig, strategy: Any, st: torch_st.StyleSettings) -> None:
        import keras
        import numpy as np
        import tensorflow as tf

        images = torch_st.load_images(st)  # exactly as the PyTorch workload prepares them

        # layer weights and taps
        content_taps, style_taps = torch_st.tap_weights(st, CONTENT_LAYERS, STYLE_LAYERS)
        taps = list(dict.fromkeys([*content_taps, *style_taps]))
        features, self._weights = vgg19_features(taps, st.pooling, st.weights_path)
        self._features = features
        self._taps = taps
        mean = tf.constant(CAFFE_MEAN_BGR, tf.float32)

        def run(image: Any) -> dict[str, Any]:
            x = tf.reverse(image, axis=[-1]) - mean  # RGB 0..255 -> Keras VGG19's caffe input
            outs = features(x, training=False)
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            return {name: tf.cast(out, tf.float32) for name, out in zip(taps, outs, strict=True)}

        def to_tensor(array: Any) -> Any:
            return tf.constant(np.asarray(array, dtype=np.float32)[None])

        content = to_tensor(images.content)
        feats = run(content)
        content_terms = [(n, w, feats[n]) for n, w in content_taps.items()]
        style_feats = [run(to_tensor(a)) for a in images.styles]
        blend_styles = 1.0 / len(images.styles)
        style_terms: list[tuple[str, float, Any]] = []
        for n, w in style_taps.items():
            _, h, wd, c = feats[n].shape
            scale = math.sqrt(w) / (c * h * wd)
            target = tf.add_n(
                [
                    blend_styles * _gram(sf[n], math.sqrt(w) / (c * sf[n].shape[1] * sf[n].shape[2]))
                    for sf in style_feats
                ]
            )
            style_terms.append((n, scale, target))

        rng = np.random.default_rng(cfg.seed)
        start = np.array(content) if st.initial == "content" else rng.random(content.shape, dtype=np.float32) * 255.0
        image = tf.Variable(start, dtype=tf.float32, name="image")
        optimizer = keras.optimizers.Adam(learning_rate=st.lr, beta_1=st.betas[0], beta_2=st.betas[1], epsilon=st.eps)
        optimizer.build([image])
        self._image = image

        def mse(a: Any, b: Any) -> Any:
            return tf.reduce_mean(tf.square(a - b))

        @tf.function
        def train_step() -> Any:
            with tf.GradientTape() as tape:
                f = run(image)
                loss = st.tv_weight * (
                    mse(image[:, 1:, :, :], image[:, :-1, :, :]) + mse(image[:, :, 1:, :], image[:, :, :-1, :])
                )
                for n, weight, target in content_terms:
                    loss = loss + weight * mse(f[n], target)
                for n, scale, target in style_terms:
                    loss = loss + mse(_gram(f[n], scale), target)
            grads = tape.gradient(loss, [image])
            optimizer.apply_gradients(zip(grads, [image], strict=True))
            return loss

        self._train_step = train_step
        self.info: dict[str, Any] = {
            "workload": "style_transfer",
            "devices": strategy_devices(strategy),
            "strategy": type(strategy).__name__,
            **self._numerics.facts(),
            "data_format": "channels_last",
            "channels_last": cfg.channels_last,
            **torch_st.run_facts(cfg, st, images, self._weights),
            "vgg_layers": len(features.layers) - 1,
            "optimizer": "Adam",
            "compiled": "tf.function",
        }

    def wrap(self, wrapper: Any) -> None:
        self.info["wrapper"] = None

    def step(self) -> Any:
        self._last_loss = self._train_step()
        self._steps_run += 1
        return self._last_loss

    def image(self) -> Any:
        """The current image as uint8 H×W×3 (numpy)."""
        import numpy as np

        return np.clip(np.round(self._image.numpy()[0]), 0, 255).astype(np.uint8)


def build(cfg: RunConfig, strategy: Any = None) -> TFStyleTransferSession:
    return TFStyleTransferSession(cfg, strategy if strategy is not None else default_strategy())
