"""`data: generated` in a study file: a small data set in the workload's own format, made in the study directory.

For trying a study's whole path where its real data is not at hand (CI, a new machine): the workload's registry
entry writes it (`generated_data`: chexnet's 14 labels, resnet50's classes, scikit-learn's digits for mnist); the
metrics then say nothing about the model, only that training, validation and the records work.
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
    from gpulab.workloads.registry import REGISTRY, load

    root = Path(study_dir) / FOLDER
    if not root.exists():
        tmp = root.with_name(f".{FOLDER}.tmp")
        declared = REGISTRY.get(study.workload)
        if declared is None or declared.generated_data is None:
            raise GpulabError(f"data: generated has no data set for {study.workload}; drop data from the study file")
        write = load(declared.generated_data, f"the generated data of {study.workload}")
        tmp.mkdir(parents=True, exist_ok=True)
        write(tmp)
        tmp.replace(root)
    return dataclasses.replace(study, data=root)
