"""Import torchvision where its compiled ops cannot load.

PyPI's torchvision wheels that match a CPU-only torch may be CUDA builds whose `_C` extension cannot load.
torchvision then fails at import (`operator torchvision::nms does not exist`): it registers fake kernels for `nms` and
`qnms` without checking that the ops exist. Defining those two schemas first lets the import finish; models and
transforms work, `torchvision.ops` and `torchvision.io` do not (gpulab reads images with Pillow).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARY: Any = None  # kept alive: a torch.library.Library deregisters its definitions when collected
_STATUS = "not imported"


def _ops_failed_to_load() -> bool:
    extension = sys.modules.get("torchvision.extension")
    return extension is not None and not extension._has_ops()


def _forget_partial_import() -> None:
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]


def _define_missing_schemas() -> None:
    global _LIBRARY
    import torch

    if _LIBRARY is not None:
        return
    lib = torch.library.Library("torchvision", "DEF")  # schemas only: no kernels, calling them raises
    for schema in _SCHEMAS:
        if not hasattr(torch.ops.torchvision, schema.split("(", 1)[0]):
            lib.define(schema)
    _LIBRARY = lib


def import_torchvision() -> ModuleType:
    """`import torchvision`, defining the `nms`/`qnms` schemas and retrying when its `_C` extension cannot load."""
    global _STATUS
    try:
        import torchvision

        if _STATUS == "not imported":
            _STATUS = "native" if torchvision.extension._has_ops() else "without ops"
        return torchvision
    except RuntimeError as err:
        if "torchvision::" not in str(err) or not _ops_failed_to_load():
            raise
    _forget_partial_import()
    _define_missing_schemas()
    import torchvision

    _STATUS = "shim: compiled ops unavailable (models and transforms only)"
    return torchvision


def torchvision_status() -> str:
    """How torchvision was imported: "native", "without ops", or the shim's description."""
    return _STATUS
