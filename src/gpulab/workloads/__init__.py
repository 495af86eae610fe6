"""PyTorch training workloads for validating GPUs: one folder each, found by the registry; `build(cfg, device)`.

A workload's folder holds its declaration (`WORKLOAD` in its __init__), its torch and Keras models, its data and
its epoch recipe; the modules here hold what workloads share (sessions, data layouts, downloads, the precision plan).

Importing this package does not import torch; building a session does.
"""

from __future__ import annotations

from gpulab.errors import GpulabError
from gpulab.names import SIZES
from gpulab.records import RunConfig
from gpulab.workloads.base import Builder, Session
from gpulab.workloads.registry import REGISTRY, Workload


def default_sizes() -> dict[str, dict[str, tuple[int, int]]]:
    """Per workload and size: (batch, steps); for style_transfer (width in pixels, iterations)."""
    return {name: dict(w.sizes) for name, w in REGISTRY.items()}


def build(cfg: RunConfig, device: str) -> Session:
    """A Session for `cfg.workload` on `device` ("cpu" or "cuda:K")."""
    built: Session = REGISTRY[cfg.workload].builder("torch")(cfg, device)
    return built


__all__ = [
    "REGISTRY",
    "SIZES",
    "Builder",
    "GpulabError",
    "RunConfig",
    "Session",
    "Workload",
    "build",
    "default_sizes",
]

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = (
    "base",
    "checking",
    "data",
    "precision_plan",
    "recipes",
    "registry",
    "stand_ins",
    "tf",
    "tf.session",
    "torch_precision",
    "torch_session",
)
