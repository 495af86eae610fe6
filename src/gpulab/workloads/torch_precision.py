"""Precision settings for torch: fp32 means true IEEE fp32 (TF32 off), tf32 turns it on (names: gpulab.names)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

from gpulab import names


def dtype_for(precision: names.Precision) -> Any:
    """The torch dtype a probe's tensors have at `precision` (its meaning: gpulab.names.Precision)."""
    import torch

    return getattr(torch, precision.dtype)


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """Set TF32 for cuBLAS and cuDNN, restoring the previous setting afterwards.

    torch >= 2.9 has `fp32_precision`; mixing it with the legacy `allow_tf32` flags is an error there, so use
    whichever API this torch offers.
    """
    import torch

    matmul, cudnn = torch.backends.cuda.matmul, cast(Any, torch.backends.cudnn)
    if hasattr(matmul, "fp32_precision"):
        before = (matmul.fp32_precision, cudnn.conv.fp32_precision)
        matmul.fp32_precision = cudnn.conv.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision, cudnn.conv.fp32_precision = before
    else:
        legacy = (matmul.allow_tf32, cudnn.allow_tf32)
        matmul.allow_tf32 = cudnn.allow_tf32 = enabled
        try:
            yield
        finally:
            matmul.allow_tf32, cudnn.allow_tf32 = legacy
