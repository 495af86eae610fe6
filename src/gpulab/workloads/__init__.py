"""PyTorch training workloads for validating GPUs: a registry of builders, `build(cfg, device)` -> Session.

Importing this package does not import torch; building a session does.
"""

from __future__ import annotations

from gpulab.errors import GpulabError
from gpulab.names import SIZES
from gpulab.workloads.base import Builder, RunConfig, Session


def _lazy(module: str) -> Builder:
    def builder(cfg: RunConfig, device: str) -> Session:
        import importlib

        built: Session = importlib.import_module(f"gpulab.workloads.{module}").build(cfg, device)
        return built

    builder.__name__ = f"build_{module}"
    return builder


WORKLOADS: dict[str, Builder] = {
    name: _lazy(name) for name in ("style_transfer", "mnist", "cifar10", "chexnet", "resnet50")
}


def default_sizes() -> dict[str, dict[str, tuple[int, int]]]:
    """Per workload and size: (batch, steps); for style_transfer (width in pixels, iterations)."""
    import importlib

    return {name: dict(importlib.import_module(f"gpulab.workloads.{name}").SIZES) for name in WORKLOADS}


def build(cfg: RunConfig, device: str) -> Session:
    """A Session for `cfg.workload` on `device` ("cpu" or "cuda:K")."""
    builder = WORKLOADS.get(cfg.workload)
    if builder is None:
        raise GpulabError(f"unknown workload {cfg.workload!r}; choose one of {', '.join(WORKLOADS)}")
    return builder(cfg, device)


__all__ = ["SIZES", "WORKLOADS", "Builder", "GpulabError", "RunConfig", "Session", "build", "default_sizes"]
