"""A torch style-transfer step's loss, and how a session runs it (the workload's `loop` parameter)."""

from __future__ import annotations

import contextlib
from typing import Any

# How a torch session runs its step: eager (each op launched from Python); compile: torch.compile of the forward and
# the losses (fused elementwise work, the backward through AOTAutograd); compile-graphs: the same replayed as CUDA
# graphs (torch.compile's reduce-overhead mode; on a CPU the same as compile), which takes the launches off the host.
# Compiled once per process and shape: a study's long-lived worker pays for it in its first run. auto: compile-graphs
# on a GPU (H100, 1000 iterations at 512 px: 2.9 s, eager 5.2 s, same loss), eager on a CPU (compiling costs more).
LOOPS = ("eager", "compile", "compile-graphs", "auto")


def effective_loop(loop: str, device: str) -> str:
    """The loop a session on `device` runs for the `loop` setting."""
    return ("compile-graphs" if device.startswith("cuda") else "eager") if loop == "auto" else loop


def gram(features: Any, scale: float) -> Any:
    _, channels, height, width = features.shape
    flat = features.reshape(channels, height * width)
    return (flat @ flat.t()) * scale


def style_loss(
    features: Any,
    taps: frozenset[int],
    image: Any,
    shift: Any,
    scale: Any,
    channels_last: bool,
    autocast: tuple[str, Any] | None,
    content: list[tuple[int, float, Any]],
    style: list[tuple[int, float, Any]],
    tv_weight: float,
) -> Any:
    """One step's loss of `image` (pixels 0..255): the forward through `features` (under `autocast`, (device type,
    dtype), where the precision has one) and the fp32 losses. A function of its arguments alone, so that
    torch.compile traces it once per process and shape rather than once per run."""
    import torch
    import torch.nn.functional as F

    x = torch.addcmul(shift, image, scale)
    x = x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    feats = {}
    with torch.autocast(autocast[0], dtype=autocast[1]) if autocast else contextlib.nullcontext():
        for i, layer in enumerate(features):
            x = layer(x)
            if i in taps:
                feats[i] = x
    loss = tv_weight * (
        F.mse_loss(image[:, :, 1:, :], image[:, :, :-1, :]) + F.mse_loss(image[:, :, :, 1:], image[:, :, :, :-1])
    )
    for i, weight, target in content:
        loss = loss + weight * F.mse_loss(feats[i].float(), target)
    for i, gram_scale, target in style:
        loss = loss + F.mse_loss(gram(feats[i].float(), gram_scale), target)
    return loss


_COMPILED: dict[tuple[str, str], Any] = {}


def compiled(loss: Any, loop: str) -> Any:
    """`loss` (style_loss or batched_style_loss) as `loop` runs it: itself (eager), or compiled once per process for
    each compiled loop."""
    if loop == "eager":
        return loss
    key = (loss.__name__, loop)
    if key not in _COMPILED:
        import torch

        mode = "reduce-overhead" if loop == "compile-graphs" else None
        _COMPILED[key] = torch.compile(loss, mode=mode)
    return _COMPILED[key]


def compiled_loss(loop: str) -> Any:
    """style_loss as `loop` runs it."""
    return compiled(style_loss, loop)


def graphs_or_compiled(session: Any, step: Any, compiled_without_graphs: Any) -> Any:
    """`step()` of a torch style-transfer session (one run or a batch). Should torch's CUDA-graph trees fail to record
    it ("graph recording observed an input tensor deallocate", pytorch/pytorch#154306; seen on an H100 in 2 of 252
    study runs, on an H200 in 2 of 20 batches), the session goes on compiled without graphs
    (`compiled_without_graphs("compile")` is its loss), says so in its facts, and runs the step again."""
    try:
        return step()
    except RuntimeError as err:
        if not (session._graphs and "graph recording" in str(err)):
            raise
        session._graphs, session._loss = False, compiled_without_graphs("compile")
        session.info.update(loop="compile", loop_note=f"CUDA graphs failed to record ({str(err)[:80]})")
        return step()


def tapped(features: Any, taps: frozenset[int], x: Any) -> dict[int, Any]:
    """`x` through `features`, the outputs of the layers in `taps` by index (targets, computed without gradients)."""
    out = {}
    for i, layer in enumerate(features):
        x = layer(x)
        if i in taps:
            out[i] = x
    return out


def batched_style_loss(
    features: Any,
    taps: frozenset[int],
    images: Any,
    shift: Any,
    scale: Any,
    channels_last: bool,
    autocast: tuple[str, Any] | None,
    content: list[tuple[int, Any, Any]],
    style: list[tuple[int, Any, Any]],
    tv_weights: Any,
) -> tuple[Any, Any]:
    """style_loss for B independent runs stacked as one batch: (the sum of the runs' losses, each run's loss).

    Each run brings its own weights: `content` holds (layer, [B] weights, the shared target), `style` (layer, [B]
    Gram scales, [B, C, C] targets), `tv_weights` is [B]. Every term is a per-image mean, so run k's loss is the
    loss style_loss gives it alone, and the gradient of the sum with respect to image k is its own gradient."""
    import torch

    x = torch.addcmul(shift, images, scale)
    x = x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    feats = {}
    with torch.autocast(autocast[0], dtype=autocast[1]) if autocast else contextlib.nullcontext():
        for i, layer in enumerate(features):
            x = layer(x)
            if i in taps:
                feats[i] = x
    dims = (1, 2, 3)
    tv = (images[:, :, 1:, :] - images[:, :, :-1, :]).square().mean(dims)
    tv = tv + (images[:, :, :, 1:] - images[:, :, :, :-1]).square().mean(dims)
    per_run = tv_weights * tv
    for i, weights, target in content:
        per_run = per_run + weights * (feats[i].float() - target).square().mean(dims)
    for i, gram_scales, targets in style:
        grams = batched_gram(feats[i].float()) * gram_scales.view(-1, 1, 1)
        per_run = per_run + (grams - targets).square().mean((1, 2))
    return per_run.sum(), per_run


GRAM_SPLIT = 32  # pieces of the pixel sum per Gram matrix: an early layer's C×C product otherwise fills a few SMs


def batched_gram(features: Any) -> Any:
    """[B, C, C] Gram matrices of [B, C, H, W] features. In channels-last memory the pixels are summed in up to
    GRAM_SPLIT pieces, each its own small product, then added: a 64-channel layer's product over 272k pixels is
    otherwise one or two tiles of work for the whole GPU (measured: 11 % of an eager batched step on an H200)."""
    import torch

    b, c, h, w = features.shape
    pixels = h * w
    if features.is_contiguous(memory_format=torch.channels_last) and c > 1:
        split = next(s for s in (GRAM_SPLIT, 16, 8, 4, 2, 1) if pixels % s == 0)
        flat = features.permute(0, 2, 3, 1).reshape(b, split, pixels // split, c)  # a view: NHWC is [B, HW, C]
        return (flat.transpose(2, 3) @ flat).sum(1)
    flat = features.reshape(b, c, pixels)
    return torch.bmm(flat, flat.transpose(1, 2))


def compiled_batched_loss(loop: str) -> Any:
    """batched_style_loss as `loop` runs it."""
    return compiled(batched_style_loss, loop)
