"""Pretrained weights for epoch training: a torch state_dict file, checked before it touches the model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

WEIGHTS_LIMIT = 8 * 1024**3  # far above any of the workloads' models (ResNet50: ~100 MB)
FIX = "pass a state_dict saved with torch.save(model.state_dict(), FILE) from the same workload"


def head_prefix(model: Any) -> str | None:
    """The name of the model's last Linear layer (its classifier head), e.g. "fc" or "classifier"."""
    import torch.nn as nn

    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    return last


def read_state_dict(path: Path) -> dict[str, Any]:
    """The tensors in `path`, loaded with weights_only=True (nothing in the file runs)."""
    import torch

    from gpulab.paths import input_file

    input_file(path, "--weights", FIX, limit=WEIGHTS_LIMIT)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # what a foreign or damaged file raises
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise GpulabError(
            f"--weights {path} does not load as a torch state_dict (weights_only=True): {first}; {FIX}"
        ) from None
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise GpulabError(f"--weights {path} holds a {type(state).__name__}, not a state_dict of tensors; {FIX}")
    keys = list(state)
    if keys and all(k.startswith("module.") for k in keys):  # saved from a DDP or DataParallel wrapper
        return {k[len("module.") :]: v for k, v in state.items()}
    return dict(state)


def load_weights(model: Any, path: Path, workload: str) -> list[str]:
    """Load `path` into `model` (on the CPU, before it moves). A classifier head of another class count keeps its
    fresh initialisation; any other missing, extra or differently shaped tensor is refused, naming the first.
    Returns notes for the user."""
    given = read_state_dict(path)
    own = model.state_dict()
    head = head_prefix(model)
    skipped: list[str] = []
    for key, tensor in own.items():
        if key not in given:
            raise GpulabError(f"--weights {path} does not fit {workload}: it has no {key!r}; {FIX}")
        if tuple(given[key].shape) != tuple(tensor.shape):
            if head is not None and key.startswith(f"{head}."):
                skipped.append(key)
                continue
            raise GpulabError(
                f"--weights {path} does not fit {workload}: {key!r} is {tuple(given[key].shape)} in the file, "
                f"{tuple(tensor.shape)} in the model; {FIX}"
            )
    extra = [k for k in given if k not in own]
    if extra:
        raise GpulabError(f"--weights {path} does not fit {workload}: the model has no {extra[0]!r}; {FIX}")
    model.load_state_dict({k: v for k, v in given.items() if k not in skipped}, strict=False)
    if not skipped:
        return []
    was, now = tuple(given[skipped[0]].shape), tuple(own[skipped[0]].shape)
    return [
        f"--weights: the classifier head {head} is {was[0]} classes in {path.name} and {now[0]} here: "
        "it starts from a fresh initialisation"
    ]


def save_weights(model: Any, path: Path) -> None:
    """The model's state_dict (on the CPU) to `path` through a temporary file and a rename."""
    import os
    import tempfile

    import torch

    from gpulab.paths import refuse_link

    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    path = refuse_link(path, "--save-weights")  # never through a link; one planted later is replaced, not followed
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # a fresh file, not a name
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
