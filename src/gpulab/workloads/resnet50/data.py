"""ResNet50's stand-in data: generated images with labels.csv (its real data is an image folder, read by
gpulab.workloads.data)."""

from __future__ import annotations

from pathlib import Path

from gpulab.workloads.data import write_image_folder


def generated_data(root: Path) -> None:
    """Generated images of 4 classes with labels.csv (a study's `data: generated`)."""
    write_image_folder(root, 48, label_columns=1, classes=4, side=64)
