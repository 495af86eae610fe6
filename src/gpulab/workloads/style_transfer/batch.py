"""Style-transfer runs that differ only in numbers, optimised together as one batch on one device.

The runs share the network, the image size, the content image and every setting in SPLITS; each keeps its own
seed (its start image), loss weights, layer-weight exponent, style scale (its own Gram targets: a Gram matrix is
C×C whatever the style image's size) and learning rate (Adam's parameter groups, one per rate). The batch's loss is
the sum of the runs' losses, each a per-image mean as a run alone has it, so each image gets exactly its own
gradient; only the order of floating-point sums differs from running them one by one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.workloads.images import to_tensor
from gpulab.workloads.style_transfer import BATCH_SHARED
from gpulab.workloads.style_transfer.loops import (
    batched_style_loss,
    compiled_batched_loss,
    effective_loop,
    gram,
    graphs_or_compiled,
    tapped,
)
from gpulab.workloads.style_transfer.session import (
    CONTENT_LAYERS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    STYLE_LAYERS,
    StyleSessionBase,
    StyleSettings,
    counted_flops,
    load_images,
    ready_features,
    run_facts,
    save_image,
    style_settings,
    tap_weights,
)
from gpulab.workloads.torch_session import Numerics

# What the runs of a batch must have alike (the settings behind the parameters that are not SHARED).
SPLITS = ("steps", "width", "height", "pooling", "initial", "betas", "eps", "style_paths", "weights_path",
          "content_path", "loop")  # fmt: skip


def _alike(settings: Sequence[StyleSettings]) -> None:
    first = settings[0]
    for st in settings[1:]:
        for name in SPLITS:
            if getattr(st, name) != getattr(first, name):
                raise GpulabError(
                    f"style_transfer: runs of one batch differ in {name} ({getattr(first, name)!r} and "
                    f"{getattr(st, name)!r}); only {', '.join(sorted(BATCH_SHARED - {'output'}))} may differ in a batch"
                )


def batch_dynamic(*tensors: Any) -> Any:
    """Mark the batch dimension of `tensors` as one torch.compile need not specialise on, so that a worker's batches
    of every size (the probe's first, the sized ones after, a shorter last) share one compiled loss: without it the
    second size compiles again (20-30 s per worker on an H200). A batch of one stays specialised. Returns the last."""
    import torch

    for tensor in tensors:
        if tensor.shape[0] > 1:
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
    return tensors[-1]


def _targets(
    features: Any,
    taps: frozenset[int],
    layers: int,
    settings: Sequence[StyleSettings],
    tap_weights_of: Sequence[tuple[dict[Any, float], dict[Any, float]]],
    images: Sequence[Any],
    prepared: Any,
) -> tuple[list[tuple[int, Any, Any]], list[tuple[int, Any, Any]]]:
    """The batch's loss terms: per content layer ([B] weights, the shared target), per style layer ([B] Gram scales,
    [B, C, C] targets, each run's from its style images at its scale; style weights folded into the scale, as a run
    alone has them). A run whose weight for a layer is zero gets zeros there: nothing, and no gradient."""
    import torch

    def vector(values: Sequence[float]) -> Any:
        return torch.tensor(list(values), dtype=torch.float32, device=feats[next(iter(feats))].device)

    feats = tapped(features, taps, prepared(images[0].content))
    content_terms = [
        (i, vector([c.get(i, 0.0) for c, _ in tap_weights_of]), feats[i].float())
        for i in CONTENT_LAYERS.values()
        if i < layers
    ]
    style_feats: dict[tuple[float, ...], list[dict[int, Any]]] = {}
    for st, image in zip(settings, images, strict=True):
        if tuple(st.scales) not in style_feats:
            style_feats[tuple(st.scales)] = [tapped(features, taps, prepared(a)) for a in image.styles]
    style_terms = []
    for i in (i for i in STYLE_LAYERS.values() if i < layers):
        _, c, h, wd = feats[i].shape
        scales, targets = [], []
        for (_, style), st in zip(tap_weights_of, settings, strict=True):
            root = math.sqrt(style.get(i, 0.0))
            found = style_feats[tuple(st.scales)]
            targets.append(
                sum(gram(sf[i].float(), root / (c * sf[i].shape[2] * sf[i].shape[3])) / len(found) for sf in found)
            )
            scales.append(root / (c * h * wd))
        style_terms.append((i, vector(scales), torch.stack(targets)))
    return content_terms, style_terms


class BatchedStyleSession(StyleSessionBase):
    """B style-transfer runs as one session: step() returns the batch's summed loss, `run_losses` each run's."""

    def __init__(self, cfgs: Sequence[RunConfig], device: str) -> None:
        if not cfgs:
            raise GpulabError("style_transfer: a batch needs at least one run")
        if len({(c.precision, c.channels_last, c.size) for c in cfgs}) > 1:
            raise GpulabError("style_transfer: runs of one batch differ in precision, channels_last or size")
        self._settings = [style_settings(cfg) for cfg in cfgs]
        _alike(self._settings)
        self._cfgs = list(cfgs)
        self.steps = self._settings[0].steps
        self.samples_per_step = len(cfgs)
        self._output = None
        self._numerics = numerics = Numerics(cfgs[0].precision, device)
        self._finished = False
        self.run_losses: list[Any] = []  # each step's [B] losses, unread until the loop ends
        try:
            self._build(device)
        except BaseException:
            numerics.close()
            raise

    def _build(self, device: str) -> None:
        import torch

        cfgs, first = self._cfgs, replace(self._settings[0], loop=effective_loop(self._settings[0].loop, device))
        settings = [replace(st, loop=first.loop) for st in self._settings]
        taps = [tap_weights(st, CONTENT_LAYERS, STYLE_LAYERS) for st in settings]
        layers = max(i for content, style in taps for i in (*content, *style)) + 1
        channels_last = cfgs[0].channels_last
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self._features, weights = ready_features(layers, first.pooling, first.weights_path, device, memory_format)
        std = torch.tensor(IMAGENET_STD)
        self._scale = (1.0 / (255.0 * std)).view(1, 3, 1, 1).to(device)
        self._shift = (-torch.tensor(IMAGENET_MEAN) / std).view(1, 3, 1, 1).to(device)
        self._channels_last = channels_last
        self._taps = frozenset(CONTENT_LAYERS.values()) | frozenset(STYLE_LAYERS.values())
        self._taps = frozenset(i for i in self._taps if i < layers)

        def prepared(x: Any) -> Any:
            return to_tensor(x, device).contiguous(memory_format=memory_format)

        images = [load_images(st) for st in settings]  # the same content for all; styles at each run's scale
        content = prepared(images[0].content)
        with torch.no_grad():
            content_terms, style_terms = _targets(self._features, self._taps, layers, settings, taps, images, prepared)
        self._content, self._style = content_terms, style_terms
        self._tv_weights = torch.tensor([st.tv_weight for st in settings], dtype=torch.float32, device=device)
        for _, weights, _ in content_terms:
            batch_dynamic(weights)
        for _, scales, targets in style_terms:
            batch_dynamic(scales, targets)
        batch_dynamic(self._tv_weights)
        self._loss = compiled_batched_loss(first.loop)
        autocast = self._numerics.autocast_dtype
        self._autocast = (self._numerics.device_type, getattr(torch, autocast)) if autocast else None
        self._graphs = first.loop == "compile-graphs" and torch.device(device).type == "cuda"

        # One leaf per run (start image from its own seed, as a run alone draws it); Adam's groups by learning rate.
        self._images = []
        for cfg, st in zip(cfgs, settings, strict=True):
            generator = torch.Generator().manual_seed(cfg.seed)
            start = content.clone() if st.initial == "content" else torch.rand(content.shape, generator=generator) * 255
            leaf = start.to(device).contiguous(memory_format=memory_format).requires_grad_(True)
            self._images.append(leaf)
        groups: dict[float, list[Any]] = {}
        for st, leaf in zip(settings, self._images, strict=True):
            groups.setdefault(st.lr, []).append(leaf)
        fused = torch.device(device).type == "cuda"
        self._optimizer = torch.optim.Adam(
            [{"params": params, "lr": lr} for lr, params in groups.items()],
            betas=first.betas,
            eps=first.eps,
            fused=fused or None,
        )
        self._last_loss: Any = None
        self._steps_run = 0
        self._outputs = [st.output for st in settings]
        self._facts = [
            run_facts(cfg, st, image, weights) for cfg, st, image in zip(cfgs, settings, images, strict=True)
        ]
        self.info: dict[str, Any] = {
            "workload": "style_transfer",
            "device": device,
            **self._numerics.facts(),
            "channels_last": channels_last,
            "weights": weights,
            "vgg_layers": layers,
            "optimizer": "Adam" + (" (fused)" if fused else "") + f", {len(groups)} learning rate(s)",
            "loop": first.loop,
            "batch_runs": len(cfgs),
        }

    def _batch(self) -> Any:
        import torch

        return batch_dynamic(torch.cat(self._images))

    def step(self) -> Any:
        total, per_run = graphs_or_compiled(self, self._step, compiled_batched_loss)
        self._steps_run += 1
        # A CUDA graph's outputs are overwritten by its next replay: the step keeps its own copies.
        self.run_losses.append(per_run.detach().clone() if self._graphs else per_run.detach())
        self._last_loss = total.detach().clone() if self._graphs else total.detach()
        return self._last_loss

    def _step(self) -> tuple[Any, Any]:
        self._optimizer.zero_grad(set_to_none=True)
        if self._graphs:
            import torch

            torch.compiler.cudagraph_mark_step_begin()
        total, per_run = self._loss(
            self._features, self._taps, self._batch(), self._shift, self._scale,
            self._channels_last, self._autocast, self._content, self._style, self._tv_weights,
        )  # fmt: skip
        self._numerics.backward_step(total, self._optimizer)
        return total, per_run

    def flops_per_step(self) -> float:
        """Floating-point operations of one step of the batch (forward, losses, backward to the images): one run's,
        counted on its eager loss (style_transfer.counted_flops), times the runs; Adam's update is not counted."""
        image = self._images[0].detach().clone().requires_grad_(True)
        content = [(i, w[:1], t) for i, w, t in self._content]
        style = [(i, g[:1], t[:1]) for i, g, t in self._style]
        args = (self._features, self._taps, image, self._shift, self._scale, self._channels_last, self._autocast,
                content, style, self._tv_weights[:1])  # fmt: skip
        return len(self._images) * counted_flops(lambda: batched_style_loss(*args)[0], image, (*args[:2], *args[5:]))

    def image_of(self, k: int) -> Any:
        """Run k's image as uint8 H×W×3 (numpy)."""
        import torch

        with torch.no_grad():
            pixels = self._images[k].detach()[0].clamp(0, 255).round().to(torch.uint8)
        return pixels.permute(1, 2, 0).contiguous().cpu().numpy()

    def finish_runs(self) -> list[dict[str, Any]]:
        """Each run's facts and final loss, its image written where its settings say (as finish() does for one)."""
        last = self.run_losses[-1].float().cpu().tolist() if self.run_losses else None
        out = []
        for k, output in enumerate(self._outputs):
            facts: dict[str, Any] = {**self._facts[k], "steps_run": self._steps_run}
            if last is not None:
                facts["final_loss"] = last[k]
            if output is not None:
                save_image(output, self.image_of(k))
                facts["output"] = str(output)
            out.append(facts)
        if not self._finished:
            self._finished = True
            self._numerics.close()
        return out

    def image(self) -> Any:
        return self.image_of(0)


def build_batch(cfgs: Sequence[RunConfig], device: str) -> BatchedStyleSession:
    return BatchedStyleSession(cfgs, device)
