"""A classifier's ImageNet start: torchvision's published weights loaded into its backbone, the head left as built.

`pretrained` is `imagenet` (torchvision's published file for the model, fetched on first use), an http(s) URL of a
file named as torch.hub names them (fetched and hash-checked), or a path to a state dict. Every tensor but the head's
must be there with the model's shape; the head (CheXNet's 14 findings, ResNet50's 285 classes) starts fresh when its
shape differs from ImageNet's 1000 classes.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

# torchvision's DenseNet files predate its module names: "denselayer1.norm.1.weight" is "denselayer1.norm1.weight".
_DENSENET_OLD_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$"
)


@dataclass(frozen=True)
class Start:
    """Where a model's weights come from: a file (with its digest), or None for a random start."""

    model: str  # torchvision's name: densenet121, resnet50
    head: str  # the head's module prefix, left as built when its shape differs: "classifier.", "fc."
    path: Path | None

    def describe(self) -> str:
        if self.path is None:
            return "random"
        from gpulab.workloads.input_files import file_digest

        return f"{self.path} sha256:{file_digest(self.path)}"


def start(workload: str, value: Any, model: str, head: str) -> Start:
    """The `pretrained` parameter's start: fetched (imagenet, URL), a checked file, or random (None, "none")."""
    from gpulab.workloads import fetch
    from gpulab.workloads.input_files import input_file

    if value is None or value == "none":
        return Start(model, head, None)
    what = f"{workload}: parameter pretrained"
    fetched = fetch.resolve_weights(value, model, what)
    hint = f"pass pretrained=imagenet (torchvision's {model} weights, fetched on first use), a URL or a state dict file"
    return Start(model, head, fetched or input_file("pretrained", value, hint, workload))


def load(module: Any, begin: Start, workload: str) -> str:
    """Load `begin`'s file into `module` (all but a head of another shape); returns the weights' description."""
    import torch

    if begin.path is None:
        return "random"
    path = begin.path

    def refuse(why: str) -> GpulabError:
        return GpulabError(
            f"{workload}: {path} is not a torchvision {begin.model} state dict ({why}); pass pretrained=imagenet "
            "or the file torchvision's download wrote"
        )

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # whatever torch.load raises for a file that is not a weights-only archive
        from gpulab.workloads.input_files import cause

        raise refuse(cause(err)) from None
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise refuse("it is not a dict of named tensors")
    state = {_DENSENET_OLD_KEY.sub(r"\1\2", k): v for k, v in state.items()}
    wanted = module.state_dict()
    chosen = {}
    for key, tensor in wanted.items():
        given = state.get(key)
        if given is None and key.endswith("num_batches_tracked"):
            continue  # files saved before torch counted batch-norm batches (torchvision's published ones) lack it
        if not isinstance(given, torch.Tensor):
            raise refuse(f"no tensor {key}; its keys start {', '.join(list(state)[:3]) or '(none)'}")
        if given.shape != tensor.shape:
            if key.startswith(begin.head):
                continue  # another number of classes: the head starts fresh
            raise refuse(f"{key} has shape {list(given.shape)}, the model's has {list(tensor.shape)}")
        chosen[key] = given
    module.load_state_dict(chosen, strict=False)
    fresh = any(k.startswith(begin.head) and k not in chosen for k in wanted)
    kept = f" (head {begin.head.rstrip('.')} random: another class count)" if fresh else ""
    return begin.describe() + kept
