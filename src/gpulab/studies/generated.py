"""`data: generated` in a study file: a small data set in the workload's own format, made in the study directory.

For trying a study's whole path where its real data is not at hand (CI, a new machine): the images are generated
(chexnet's 14 labels, resnet50's classes) or scikit-learn's digits (mnist); the metrics then say nothing about the
model, only that training, validation and the records work.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.studies.spec import Study

GENERATED = "generated"
FOLDER = "generated-data"


def with_generated_data(study: Study, study_dir: Path) -> Study:
    """The study with `data: generated` made real under STUDY_DIR/generated-data (once; resume reuses it)."""
    if study.data is None or str(study.data) != GENERATED:
        return study
    from gpulab.workloads import data

    root = Path(study_dir) / FOLDER
    if not root.exists():
        tmp = root.with_name(f".{FOLDER}.tmp")
        writers = {
            "chexnet": lambda: data.write_image_folder(tmp, 48, label_columns=14, side=64),
            "resnet50": lambda: data.write_image_folder(tmp, 48, label_columns=1, classes=4, side=64),
            "cifar10": lambda: data.write_cifar10_batches(tmp),
            "mnist": lambda: data.write_digits_mnist(tmp),
        }
        if study.workload not in writers:
            raise GpulabError(f"data: generated has no data set for {study.workload}; drop data from the study file")
        tmp.mkdir(parents=True, exist_ok=True)
        writers[study.workload]()
        tmp.replace(root)
    return dataclasses.replace(study, data=root)
