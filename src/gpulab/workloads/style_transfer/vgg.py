"""VGG19's convolutional `features` for style transfer: built as torchvision builds them (without the classifier),
weights loaded from a torchvision state dict and checked, and kept ready on a device for the next run of a process.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.workloads.input_files import cause, file_digest
from gpulab.workloads.tv import import_torchvision

VGG_WEIGHTS_HINT = (
    "pass vgg_weights=imagenet (torchvision's VGG19 weights, fetched on first use) or the file torchvision's "
    "download wrote (vgg19-dcbb9e9d.pth in ~/.cache/torch/hub/checkpoints)"
)


def vgg19_features(layers: int, pooling: str) -> Any:
    """The first `layers` modules of torchvision's VGG19 `features`, initialised as torchvision does, max or avg
    pooling. Built without the 120M-parameter classifier that only the full model needs."""
    import torch.nn as nn

    tv = import_torchvision()
    vgg = tv.models.vgg
    if hasattr(vgg, "make_layers") and hasattr(vgg, "cfgs"):
        features = vgg.make_layers(vgg.cfgs["E"], batch_norm=False)
        for module in features:
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
    else:
        features = tv.models.vgg19(weights=None).features
    modules = [
        nn.AvgPool2d(kernel_size=2, stride=2) if pooling == "avg" and isinstance(m, nn.MaxPool2d) else m
        for m in list(features)[:layers]
    ]
    return nn.Sequential(*modules)


def load_vgg_weights(features: Any, path: Path) -> str:
    """Load a torchvision VGG19 state dict (the full model's or `features` alone) into `features`."""
    import torch

    digest = file_digest(path)

    def refuse(why: str) -> GpulabError:
        return GpulabError(f"style_transfer: {path} is not a VGG19 state dict ({why}); {VGG_WEIGHTS_HINT}")

    try:
        with warnings.catch_warnings():
            # torch warns about odd pickle protocols on its way to refusing a file; the refusal below says it all.
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # whatever a file that is not a torch.save archive makes torch.load raise
        raise refuse(cause(err)) from None
    if not isinstance(state, dict):
        raise refuse(f"it holds a {type(state).__name__}, not a dict of tensors")
    if not all(isinstance(k, str) for k in state):
        raise refuse("its keys are not all parameter names")
    if any(k.startswith("features.") for k in state):
        state = {k.removeprefix("features."): v for k, v in state.items() if k.startswith("features.")}
    for key, wanted in features.state_dict().items():
        given = state.get(key)
        if given is None:
            raise refuse(f"no features.{key}; its keys start {', '.join(list(state)[:3]) or '(none)'}")
        if not isinstance(given, torch.Tensor):
            raise refuse(f"features.{key} is {type(given).__name__}, not a tensor")
        if given.shape != wanted.shape:
            raise refuse(f"features.{key} has shape {list(given.shape)}, VGG19's has {list(wanted.shape)}")
    try:
        features.load_state_dict({k: state[k] for k in features.state_dict()})
    except Exception as err:  # shapes and types were checked; this is a last line of defence
        raise refuse(cause(err)) from None
    return f"{path} sha256:{digest}"


_READY: OrderedDict[tuple[Any, ...], tuple[Any, str]] = OrderedDict()
_READY_KEPT = 2  # e.g. a study varying max and avg pooling


def ready_features(layers: int, pooling: str, weights: Path | None, device: str, memory_format: Any) -> tuple[Any, str]:
    """VGG19's first `layers` modules on `device`, frozen, and what their weights are ("random" or file + digest).

    Kept for the next session of this process: a study's long-lived worker builds, loads and moves them once
    rather than once per run (a 548 MB weights file costs about a second). Nothing changes them: they are frozen
    and only the image is optimised. Random weights come from a fixed seed, so every run sees the same network and
    a run's seed draws only its start image.
    """
    import torch

    stat = weights.stat() if weights is not None else None
    key = (layers, pooling, str(weights), stat and (stat.st_size, stat.st_mtime_ns), device, str(memory_format))
    if key in _READY:
        _READY.move_to_end(key)
        return _READY[key]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        features = vgg19_features(layers, pooling)
    described = load_vgg_weights(features, weights) if weights is not None else "random"
    features = features.to(device=device, memory_format=memory_format).eval()
    for param in features.parameters():
        param.requires_grad_(False)
    _READY[key] = (features, described)
    while len(_READY) > _READY_KEPT:
        _READY.popitem(last=False)
    return features, described
