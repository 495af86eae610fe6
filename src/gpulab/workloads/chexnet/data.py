"""CheXNet's data: ChestX-ray14 as NIH publishes it (its index, the findings, the images_NNN folders) or an image
folder with a labels CSV of the 14 findings, and generated images as a stand-in (a study's `data: generated`)."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.workloads.data import read_labels_csv, write_image_folder

CHESTXRAY14_CSVS = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv")
# The 14 findings in CheXNet's order (its output columns); "No Finding" is none of them.
CHESTXRAY14_FINDINGS = (
    "Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
    "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia",
)  # fmt: skip
CHESTXRAY14_LAYOUT = (
    "ChestX-ray14 as NIH publishes it: Data_Entry_2017.csv (columns Image Index, Finding Labels) beside images/ or "
    "the unpacked images_001..012/images/ folders (train_val_list.txt, if present, picks the training images)"
)


def is_chestxray14(root: Path) -> bool:
    """`root` holds NIH's ChestX-ray14 index (Data_Entry_2017*.csv)."""
    return root.is_dir() and any((root / name).is_file() for name in CHESTXRAY14_CSVS)


def _chestxray14_images(root: Path) -> dict[str, str]:
    """Image file name -> path relative to root, over images/ and images_NNN/images/ (or images_NNN/)."""
    folders = [root / "images"]
    for batch in sorted(root.glob("images_*")):
        folders.append(batch / "images" if (batch / "images").is_dir() else batch)
    found: dict[str, str] = {}
    for folder in folders:
        if folder.is_dir():
            for entry in os.scandir(folder):
                if entry.name.endswith(".png"):
                    found.setdefault(entry.name, str(Path(entry.path).relative_to(root)))
    return found


def read_chestxray14(root: Path, workload: str = "chexnet") -> tuple[Path, list[str], Any]:
    """(root, relative image paths, labels N×14 float32) from NIH's layout, checked: the index's columns, every
    finding one of the 14 (or No Finding), every listed image present."""
    import numpy as np

    csv_path = next(root / name for name in CHESTXRAY14_CSVS if (root / name).is_file())
    problem = f"{workload}: {root} is not {CHESTXRAY14_LAYOUT}"
    try:
        with csv_path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise GpulabError(f"{workload}: cannot read {csv_path}: {err}") from None
    if not rows or not {"Image Index", "Finding Labels"} <= set(rows[0]):
        raise GpulabError(f"{problem}: {csv_path.name} has no Image Index and Finding Labels columns")
    keep: set[str] | None = None
    if (root / "train_val_list.txt").is_file():
        keep = {line.strip() for line in (root / "train_val_list.txt").read_text().splitlines() if line.strip()}
    images = _chestxray14_images(root)
    if not images:
        raise GpulabError(f"{problem}: no .png images under images/ or images_NNN/images/")
    index = {name: k for k, name in enumerate(CHESTXRAY14_FINDINGS)}
    paths: list[str] = []
    labels: list[list[float]] = []
    missing: list[str] = []
    for number, row in enumerate(rows, start=2):
        name = (row.get("Image Index") or "").strip()
        if keep is not None and name not in keep:
            continue
        findings = [f.strip() for f in (row.get("Finding Labels") or "").split("|") if f.strip()]
        unknown = [f for f in findings if f not in index and f != "No Finding"]
        if unknown:
            raise GpulabError(
                f"{problem}: {csv_path.name} line {number} names finding {unknown[0]!r}, not one of the 14 "
                f"({', '.join(CHESTXRAY14_FINDINGS)}) or No Finding"
            )
        if name not in images:
            missing.append(name)
            continue
        vector = [0.0] * len(CHESTXRAY14_FINDINGS)
        for finding in findings:
            if finding in index:
                vector[index[finding]] = 1.0
        paths.append(images[name])
        labels.append(vector)
    if missing:
        raise GpulabError(
            f"{problem}: {len(missing)} of {len(missing) + len(paths)} listed images are missing (e.g. {missing[0]}); "
            "unpack every images_NNN.tar.gz there"
        )
    return root, paths, np.asarray(labels, dtype=np.float32)


def read_labels(root: Path, workload: str = "chexnet") -> tuple[Path, list[str], Any]:
    """(image folder, relative paths, labels N×14) from NIH's own ChestX-ray14 layout (read_chestxray14) or from a
    labels CSV of 14 0/1 columns (gpulab.workloads.data.read_labels_csv)."""
    if is_chestxray14(root):
        return read_chestxray14(root, workload)
    return read_labels_csv(root, workload, len(CHESTXRAY14_FINDINGS), also=CHESTXRAY14_LAYOUT)


def generated_data(root: Path) -> None:
    """Generated images with labels.csv of the 14 findings (a study's `data: generated`)."""
    write_image_folder(root, 48, label_columns=len(CHESTXRAY14_FINDINGS), side=64)
