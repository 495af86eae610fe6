"""ChestX-ray14 cannot be downloaded: a folder in NIH's published layout is read and checked where it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.workloads.chexnet import data

ROWS = [
    ("00000001_000.png", "Cardiomegaly"),
    ("00000001_001.png", "Cardiomegaly|Emphysema"),
    ("00000002_000.png", "No Finding"),
    ("00000003_000.png", "Hernia|Pleural_Thickening"),
]
HEADER = "Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position\n"


def _nih(root: Path, rows=ROWS, *, skip: str | None = None) -> Path:
    """NIH's layout in small: Data_Entry_2017.csv and the images spread over two unpacked batches."""
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    lines = [HEADER] + [f"{name},{findings},0,1,58,M,PA\n" for name, findings in rows]
    (root / "Data_Entry_2017.csv").write_text("".join(lines))
    for k, (name, _) in enumerate(rows):
        if name == skip:
            continue
        folder = root / f"images_{1 + k % 2:03d}" / "images"
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("L", (40, 40), 30 * k).save(folder / name)
    return root


def test_the_published_layout_is_read_with_the_14_findings_in_chexnets_order(tmp_path):
    root = _nih(tmp_path / "nih")
    folder, paths, labels = data.read_labels(root, "chexnet")
    assert folder == root and len(paths) == 4 and all((root / p).is_file() for p in paths)
    index = {name: k for k, name in enumerate(data.CHESTXRAY14_FINDINGS)}
    assert labels.shape == (4, 14)
    assert labels[1, index["Cardiomegaly"]] == 1 and labels[1, index["Emphysema"]] == 1 and labels[1].sum() == 2
    assert labels[2].sum() == 0  # No Finding
    assert labels[3, 13] == 1 and data.CHESTXRAY14_FINDINGS[13] == "Hernia"


def test_train_val_list_picks_the_training_images(tmp_path):
    root = _nih(tmp_path / "nih")
    (root / "train_val_list.txt").write_text("00000001_000.png\n00000002_000.png\n")
    _, paths, _ = data.read_labels(root, "chexnet")
    assert sorted(Path(p).name for p in paths) == ["00000001_000.png", "00000002_000.png"]


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("missing image", r"1 of 4 listed images are missing \(e.g. 00000002_000.png\); unpack every"),
        ("unknown finding", r"line 3 names finding 'Cardiomegally', not one of the 14"),
        ("no columns", r"has no Image Index and Finding Labels columns"),
        ("no images", r"no .png images under images/ or images_NNN/images/"),
    ],
)
def test_a_damaged_layout_is_one_line_naming_what_is_wrong(tmp_path, damage, expected):
    rows = [(n, "Cardiomegally" if k == 1 and damage == "unknown finding" else f) for k, (n, f) in enumerate(ROWS)]
    root = _nih(tmp_path / "nih", rows, skip="00000002_000.png" if damage == "missing image" else None)
    if damage == "no columns":
        (root / "Data_Entry_2017.csv").write_text("name,labels\na.png,Mass\n")
    if damage == "no images":
        for png in root.glob("images_*/images/*.png"):
            png.unlink()
    with pytest.raises(GpulabError, match=expected) as caught:
        data.read_labels(root, "chexnet")
    assert "\n" not in str(caught.value) and "ChestX-ray14 as NIH publishes it" in str(caught.value)


def test_a_folder_of_neither_layout_names_both(tmp_path):
    with pytest.raises(GpulabError, match=r"labels\.csv .* or ChestX-ray14 as NIH publishes it"):
        data.read_labels(tmp_path, "chexnet")
