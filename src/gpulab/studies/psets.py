"""A study's parameter sets, in psweep's vocabulary (plist, pgrid, stargrid), one per run.

Every run is one pset: the workload, its run fields and parameters (fixed and varied) as columns, the study's name,
`repeat` (0..repeat-1) and its own `seed` (the study's seed + the run's position), so repeated parameter sets and
the star's repeated centre are distinct runs. psweep hashes each pset (`_pset_hash`, book-keeping columns left out):
`gpulab study resume` runs the sets whose hash has no successful row yet.
"""

from __future__ import annotations

from typing import Any

from gpulab.studies.spec import EPOCH_KEYS, Study


def base_pset(study: Study) -> dict[str, Any]:
    """What every run of the study shares: the fixed columns."""
    pset: dict[str, Any] = {
        "study": study.name,
        "workload": study.workload,
        "framework": study.framework,
        "size": study.size,
        "precision": study.precision,
        "launcher": study.launcher,
        **study.run,
        **study.fixed,
    }
    if study.whole_machine:
        pset["gpus"] = study.gpus
    if study.data is not None:
        pset["data"] = str(study.data)
    if study.epochs is not None:
        pset.update({k: study.epochs[k] for k in EPOCH_KEYS if study.epochs.get(k) is not None})
    return {k: v for k, v in pset.items() if v is not None}


def parameter_sets(study: Study) -> list[dict[str, Any]]:
    """The study's runs in order: the varied sets (star, grid or zip), each `repeat` times, each with its seed."""
    import psweep as ps

    base = base_pset(study)
    params = study.vary.params
    if not params:
        sets: list[dict[str, Any]] = [dict(base)]
    elif study.vary.mode == "star":
        # The centre of the star is the fixed value (the first listed value where none is fixed); each parameter's
        # list is run with the others at the centre. The centre repeats once per parameter, as in the original study.
        const = {**base, **{k: base.get(k, values[0]) for k, values in params.items()}}
        plists = [ps.plist(k, values) for k, values in params.items()]
        sets = ps.stargrid(const, vary=plists, vary_labels=list(params), skip_dups=False)
    elif study.vary.mode == "grid":
        grid = ps.pgrid([ps.plist(k, values) for k, values in params.items()])
        sets = [{**base, **p} for p in grid]
    else:
        zipped = ps.itr2params(zip(*(ps.plist(k, values) for k, values in params.items()), strict=True))
        sets = [{**base, **p} for p in zipped]
    runs: list[dict[str, Any]] = []
    for pset in sets:
        for r in range(study.repeat):
            runs.append({**pset, "repeat": r, "seed": study.seed + len(runs)})
    return runs


def varied_columns(study: Study) -> list[str]:
    """The columns a reader compares runs by: the varied parameters, then repeat where there are repetitions."""
    return [*study.vary.params, *(["repeat"] if study.repeat > 1 else [])]
