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


_COMPILED: dict[str, Any] = {}


def compiled_loss(loop: str) -> Any:
    """style_loss as `loop` runs it: itself (eager), or compiled once per process for each compiled loop."""
    if loop == "eager":
        return style_loss
    if loop not in _COMPILED:
        import torch

        mode = "reduce-overhead" if loop == "compile-graphs" else None
        _COMPILED[loop] = torch.compile(style_loss, mode=mode)
    return _COMPILED[loop]
