"""Neural style transfer (Gatys et al.) on VGG19: Adam optimises the image itself; no model is trained.

Loss as in the classic TensorFlow neural-style: content (mean squared feature difference at relu4_2/relu5_2, blended),
style (mean squared Gram-matrix difference at relu1_1..relu5_1, layer weights ∝ exp^i), total variation (mean squared
neighbour difference). The image lives in 0..255 pixel space, so the classic learning rate 1e1 applies; it is
normalised for torchvision's VGG19 on the way in. VGG weights are random unless `vgg_weights` names a state_dict:
a file, `imagenet` (torchvision's published VGG19 weights, fetched on first use) or an http(s) URL (gpulab.fetch).

Per step: one forward through `features` up to the deepest layer in use (never beyond relu5_2), the losses, one
backward, one Adam step; targets are computed once without gradients; nothing synchronises. The forward and the
losses are one function (style_loss), run as it is or through torch.compile (the `loop` parameter).
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.paths import open_output
from gpulab.records import RunConfig
from gpulab.workloads import checking
from gpulab.workloads.images import crop_to_aspect, default_image, load_image, readable_image, resize_image, to_tensor
from gpulab.workloads.input_files import IMAGE_HINT, input_file
from gpulab.workloads.style_transfer import DEFAULTS, SIZES
from gpulab.workloads.style_transfer.loops import LOOPS, compiled_loss, effective_loop, gram, graphs_or_compiled, tapped
from gpulab.workloads.style_transfer.vgg import VGG_WEIGHTS_HINT, ready_features
from gpulab.workloads.torch_session import Numerics, Params, batch_and_steps, seed_everything

CONTENT_LAYERS = {"relu4_2": 22, "relu5_2": 31}  # indices in torchvision's vgg19().features
STYLE_LAYERS = {"relu1_1": 1, "relu2_1": 6, "relu3_1": 11, "relu4_1": 20, "relu5_1": 29}
REFERENCE_ASPECT = (532, 512)  # height, width of the reference run; the default content image is cropped to it
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# ---------- session ----------


@dataclass(frozen=True)
class StyleSettings:
    """The validated parameters of one style-transfer run, shared by the torch and TensorFlow versions."""

    params: Params
    steps: int
    width: int
    height: int | None
    pooling: str
    initial: str
    content_weight: float
    blend: float
    style_weight: float
    tv_weight: float
    layer_exp: float
    lr: float
    betas: tuple[float, float]
    eps: float
    style_paths: list[Any]
    scales: list[float]
    output: Path | None
    weights_path: Path | None
    content_path: Path | None
    loop: str = "eager"


def torch_vgg_weights(value: Any) -> Path | None:
    """The file of a vgg_weights value that names a download (imagenet, a URL), fetched into torch.hub's cache."""
    from gpulab.workloads import fetch

    return fetch.resolve_weights(value, "vgg19", "style_transfer: parameter vgg_weights")


def style_settings(
    cfg: RunConfig,
    weights_hint: str = VGG_WEIGHTS_HINT,
    download: Callable[[Any], Path | None] = torch_vgg_weights,
) -> StyleSettings:
    """Check `cfg` and its params for style transfer; every problem is a GpulabError naming the param.
    `weights_hint` says which weights file the framework loads, for the error a bad vgg_weights gets; `download`
    fetches the file a vgg_weights value names (imagenet, a URL), or returns None when it names a path."""
    p = Params("style_transfer", cfg.params, DEFAULTS)
    default_width = SIZES.get(cfg.size, SIZES["standard"])[0]
    _, cfg_steps = batch_and_steps(cfg, {size: (1, steps) for size, (_, steps) in SIZES.items()})
    if cfg.batch not in (None, 1):
        raise GpulabError(f"style_transfer optimises one image: batch must be 1 or unset, not {cfg.batch}")
    if cfg.data is not None:
        raise GpulabError("style_transfer takes its images from params content= and style=, not from data")
    iterations = p.integer("iterations")
    if iterations is not None and cfg.steps is not None and iterations != cfg.steps:
        raise GpulabError(f"style_transfer: iterations={iterations} and steps={cfg.steps} disagree; give one")
    steps = iterations or cfg_steps
    width = p.integer("width", minimum=32) or default_width
    height = p.integer("height", minimum=32)
    pooling = p.choice("pooling", ("max", "avg"))
    initial = p.choice("initial", ("noise", "content"))
    content_weight = p.number("content_weight")
    blend = p.number("content_weight_blend", maximum=1.0)
    style_weight = p.number("style_weight")
    tv_weight = p.number("tv_weight")
    layer_exp = p.number("style_layer_weight_exp", above=True)
    lr = p.number("learning_rate", above=True)
    betas = (p.number("beta1", maximum=1.0), p.number("beta2", maximum=1.0))
    eps = p.number("epsilon", above=True)
    style_raw = p.raw("style")
    style_items = style_raw if isinstance(style_raw, (list, tuple)) else [] if style_raw is None else [style_raw]
    # Every input file is checked here, before the network is built.
    style_paths: list[Any] = [input_file("style", item, IMAGE_HINT) for item in style_items]
    scales = p.numbers("style_scales")
    styles_n = max(1, len(style_paths))
    if len(scales) == 1:
        scales = scales * styles_n
    elif len(scales) != styles_n:
        raise GpulabError(
            f"style_transfer: style_scales has {len(scales)} values for {styles_n} style image(s); "
            "give one, or one per style image"
        )
    if content_weight == 0 and style_weight == 0:
        raise GpulabError("style_transfer: content_weight and style_weight are both 0: nothing to optimise")
    output = p.raw("output")
    output_path = Path(output).expanduser() if output else None
    content_path = input_file("content", p.raw("content"), IMAGE_HINT)
    loop = p.choice("loop", LOOPS)
    # Last: a named download is fetched only once everything else checked out.
    weights_path = download(p.raw("vgg_weights")) or input_file("vgg_weights", p.raw("vgg_weights"), weights_hint)
    return StyleSettings(
        p, steps, width, height, pooling, initial, content_weight, blend, style_weight, tv_weight, layer_exp, lr,
        betas, eps, style_paths, scales, output_path, weights_path, content_path, loop,
    )  # fmt: skip


def checked_settings(cfg: RunConfig) -> StyleSettings:
    """`style_settings`, and every image they name opened as the run would (a study checks its runs with this)."""
    st = style_settings(cfg)
    if checking.files_here():
        for name, path in (("content", st.content_path), *(("style", p) for p in st.style_paths)):
            if path is not None:
                readable_image(path, name)
    return st


@dataclass(frozen=True)
class StyleImages:
    """The content image at its run size and the style images at their scales (H×W×3 float arrays, RGB 0..255)."""

    content: Any
    content_desc: str
    real_content: bool
    height: int
    width: int
    styles: list[Any]
    style_descs: list[str]


def load_images(st: StyleSettings) -> StyleImages:
    """Read (or generate) and resize the images the same way for every framework."""
    width, height = st.width, st.height
    content_path = st.content_path
    if content_path is not None:
        content_np, content_desc = load_image(content_path, "content"), str(content_path)
        h0, w0 = content_np.shape[:2]
        height = height or max(32, round(width * h0 / w0))
    else:
        content_np, content_desc = default_image("content")
        if height is None:
            content_np = crop_to_aspect(content_np, *REFERENCE_ASPECT)
            height = round(width * REFERENCE_ASPECT[0] / REFERENCE_ASPECT[1])
    styles: list[tuple[Any, str]] = []
    for path in st.style_paths:
        styles.append((load_image(path, "style"), str(path)))
    if not styles:
        styles.append(default_image("style"))
    style_arrays = []
    for (array, _), scale in zip(styles, st.scales, strict=True):
        h0, w0 = array.shape[:2]
        style_w, style_h = scale * width, scale * width * h0 / w0
        grow = max(1.0, 32 / min(style_w, style_h))  # VGG's four poolings need at least 32 pixels a side
        style_h, style_w = round(style_h * grow), round(style_w * grow)
        style_arrays.append(resize_image(array, style_h, style_w))
    return StyleImages(
        content=resize_image(content_np, height, width),
        content_desc=content_desc,
        real_content=content_path is not None,
        height=height,
        width=width,
        styles=style_arrays,
        style_descs=[desc for _, desc in styles],
    )


def tap_weights(
    st: StyleSettings, content_layers: dict[str, Any], style_layers: dict[str, Any]
) -> tuple[dict[Any, float], dict[Any, float]]:
    """Loss weight per tapped layer (keyed as the framework names its layers); zero-weight taps left out."""
    content_taps = {content_layers["relu4_2"]: st.blend, content_layers["relu5_2"]: 1.0 - st.blend}
    content_taps = {k: st.content_weight * w for k, w in content_taps.items() if st.content_weight * w > 0}
    raw = [st.layer_exp**i for i in range(len(style_layers))]
    style_taps = {k: st.style_weight * w / sum(raw) for k, w in zip(style_layers.values(), raw, strict=True)}
    return content_taps, {k: w for k, w in style_taps.items() if w > 0}


def run_facts(cfg: RunConfig, st: StyleSettings, images: StyleImages, weights: str) -> dict[str, Any]:
    """What a result records about a style-transfer run, whatever the framework."""
    return {
        "size": cfg.size,
        "iterations": st.steps,
        "image_hw": [images.height, images.width],
        "style_hw": [list(a.shape[:2]) for a in images.styles],
        "data": "real:" + images.content_desc if images.real_content else images.content_desc,
        "content": images.content_desc,
        "style": images.style_descs,
        "weights": weights,
        "pooling": st.pooling,
        "initial": st.initial,
        "learning_rate": st.lr,
        "content_weight": st.content_weight,
        "content_weight_blend": st.blend,
        "style_weight": st.style_weight,
        "tv_weight": st.tv_weight,
        "style_layer_weight_exp": st.layer_exp,
        "style_scales": st.scales,
    }


_FLOPS: dict[tuple[Any, ...], float] = {}


def counted_flops(loss: Callable[[], Any], image: Any, same: tuple[Any, ...]) -> float:
    """The operations of `loss()` and its backward to `image` (a leaf), counted by torch's FlopCounterMode; kept
    per process for the image's shape and the network and taps (`same`): the count depends on them alone."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    key = (tuple(image.shape), id(same[0]), same[1], *[str(v) for v in same[2:4]], len(same[4]), len(same[5]))
    if key not in _FLOPS:
        with FlopCounterMode(display=False) as counter:
            torch.autograd.grad(loss(), image)
        _FLOPS[key] = float(counter.get_total_flops())
    return _FLOPS[key]


def save_image(output: Path, array: Any) -> None:
    """An H×W×3 uint8 image written to `output` in the format its extension names."""
    from PIL import Image

    output.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()  # encoded first: a bad extension fails before the file is touched
    Image.fromarray(array).save(buffer, format=Image.registered_extensions().get(output.suffix.lower()))
    with os.fdopen(open_output(output), "wb") as fh:  # O_NOFOLLOW: never through a link
        fh.write(buffer.getvalue())


class StyleSessionBase:
    """What every framework's style-transfer session does the same way once its loop has run."""

    model: Any = None
    samples_per_step = 1
    _numerics: Any
    _output: Path | None
    _steps_run: int
    _last_loss: Any
    _finished: bool

    def image(self) -> Any:
        raise NotImplementedError

    def finish(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"steps_run": self._steps_run}
        if self._last_loss is not None:
            facts["final_loss"] = float(self._last_loss)
        if self._output is not None:
            save_image(self._output, self.image())
            facts["output"] = str(self._output)
        if not self._finished:
            self._finished = True
            self._numerics.close()
        return facts


class StyleTransferSession(StyleSessionBase):
    def __init__(self, cfg: RunConfig, device: str) -> None:
        st = style_settings(cfg)
        self.steps, self._output = st.steps, st.output
        seed_everything(cfg.seed)
        self._numerics = numerics = Numerics(cfg.precision, device)
        self._finished = False
        try:
            self._build(cfg, device, st)
        except BaseException:
            numerics.close()
            raise

    def _build(self, cfg: RunConfig, device: str, st: StyleSettings) -> None:
        import torch

        st = replace(st, loop=effective_loop(st.loop, device))

        images = load_images(st)

        # layer weights, and how deep the network must go
        content_taps, style_taps = tap_weights(st, CONTENT_LAYERS, STYLE_LAYERS)
        layers = max([*content_taps, *style_taps]) + 1

        channels_last = cfg.channels_last
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        features, self._weights = ready_features(layers, st.pooling, st.weights_path, device, memory_format)
        self._features = features
        self._taps = frozenset([*content_taps, *style_taps])
        std = torch.tensor(IMAGENET_STD)
        self._scale = (1.0 / (255.0 * std)).view(1, 3, 1, 1).to(device)
        self._shift = (-torch.tensor(IMAGENET_MEAN) / std).view(1, 3, 1, 1).to(device)
        self._memory_format = memory_format

        # targets, once, without gradients; style weights folded into the Gram scale (w·mse(a, b) = mse(√w·a, √w·b))
        content = to_tensor(images.content, device).contiguous(memory_format=memory_format)
        with torch.no_grad():
            feats = self._run(content)
            self._content = [(i, w, feats[i].float()) for i, w in content_taps.items()]
            blend_styles = 1.0 / len(images.styles)
            self._style: list[tuple[int, float, Any]] = []
            style_feats = [
                self._run(to_tensor(a, device).contiguous(memory_format=memory_format)) for a in images.styles
            ]
            for i, w in style_taps.items():
                _, c, h, wd = feats[i].shape
                scale = math.sqrt(w) / (c * h * wd)
                target = sum(
                    blend_styles * gram(sf[i].float(), math.sqrt(w) / (c * sf[i].shape[2] * sf[i].shape[3]))
                    for sf in style_feats
                )
                self._style.append((i, scale, target))
        self._tv_weight = st.tv_weight
        self._loss = compiled_loss(st.loop)
        if st.loop != "eager":  # weights as tensors: dynamo would specialise on floats in lists, compiling per value

            def tensor(value: float) -> Any:
                return torch.tensor(value, dtype=torch.float32, device=device)

            self._content = [(i, tensor(w), target) for i, w, target in self._content]
            self._style = [(i, tensor(g), target) for i, g, target in self._style]
            self._tv_weight = tensor(st.tv_weight)
        autocast = self._numerics.autocast_dtype
        self._autocast = (self._numerics.device_type, getattr(torch, autocast)) if autocast else None
        self._channels_last = channels_last
        self._graphs = st.loop == "compile-graphs" and torch.device(device).type == "cuda"

        generator = torch.Generator().manual_seed(cfg.seed)
        start = content.clone() if st.initial == "content" else torch.rand(content.shape, generator=generator) * 255.0
        self._image = start.to(device).contiguous(memory_format=memory_format).requires_grad_(True)
        fused = torch.device(device).type == "cuda"
        self._optimizer = torch.optim.Adam([self._image], lr=st.lr, betas=st.betas, eps=st.eps, fused=fused or None)
        self._last_loss: Any = None
        self._steps_run = 0

        self.info: dict[str, Any] = {
            "workload": "style_transfer",
            "device": device,
            **self._numerics.facts(),
            "channels_last": channels_last,
            **run_facts(cfg, st, images, self._weights),
            "vgg_layers": layers,
            "optimizer": "Adam" + (" (fused)" if fused else ""),
            "loop": st.loop,
        }

    def _run(self, x: Any) -> dict[int, Any]:
        return tapped(self._features, self._taps, x)

    def wrap(self, wrapper: Any) -> None:
        """Nothing to wrap: the optimised variable is the image; each process optimises its own."""
        self.info["wrapper"] = None

    def step(self) -> Any:
        loss = graphs_or_compiled(self, self._step, compiled_loss)
        self._steps_run += 1
        # A CUDA graph's output is overwritten by its next replay: the loss a step hands back is its own copy.
        self._last_loss = loss.detach().clone() if self._graphs else loss.detach()
        return self._last_loss

    def _step(self) -> Any:
        self._optimizer.zero_grad(set_to_none=True)
        if self._graphs:
            import torch

            torch.compiler.cudagraph_mark_step_begin()
        loss = self._loss(
            self._features, self._taps, self._image, self._shift, self._scale,
            self._channels_last, self._autocast, self._content, self._style, self._tv_weight,
        )  # fmt: skip
        self._numerics.backward_step(loss, self._optimizer)
        return loss

    def flops_per_step(self) -> float:
        """Floating-point operations of one step (forward, losses, backward to the image), counted by torch's
        FlopCounterMode on the eager loss once per process and shape; Adam's elementwise update is not counted."""
        from gpulab.workloads.style_transfer.loops import style_loss

        content = [(i, float(w), t) for i, w, t in self._content]
        style = [(i, float(g), t) for i, g, t in self._style]
        image = self._image.detach().clone().requires_grad_(True)
        args = (self._features, self._taps, image, self._shift, self._scale, self._channels_last, self._autocast,
                content, style, float(self._tv_weight))  # fmt: skip
        return counted_flops(lambda: style_loss(*args), image, (*args[:2], *args[5:]))

    def image(self) -> Any:
        """The current image as uint8 H×W×3 (numpy)."""
        import torch

        with torch.no_grad():
            pixels = self._image.detach()[0].clamp(0, 255).round().to(torch.uint8)
        return pixels.permute(1, 2, 0).contiguous().cpu().numpy()


def build(cfg: RunConfig, device: str) -> StyleTransferSession:
    return StyleTransferSession(cfg, device)


def study_references(fixed: Mapping[str, Any], varied: Collection[str]) -> list[tuple[str, str, Any]]:
    """(label, source, image array) of the content and style images a study's runs share: its fixed content and
    style, else the defaults; none for a reference the study varies (its report shows them)."""
    out = []
    for kind in ("content", "style"):
        if kind in varied:
            continue
        given = fixed.get(kind)
        items = given if isinstance(given, list) else [given]
        for item in items:
            try:
                if isinstance(item, str):
                    path = input_file(kind, item, IMAGE_HINT)
                    assert path is not None
                    out.append((kind, path.name, load_image(path, kind)))
                else:
                    array, source = default_image(kind)
                    out.append((kind, source, array))
            except GpulabError:
                out.append((kind, f"{item} (unreadable)", None))
    return out
