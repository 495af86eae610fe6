"""A study's runs checked before anything is written: every distinct run's fields, epochs and workload parameters as
the run would check them on its worker, with the files they name (images, weights) and the downloads they ask for.
A value the study file lets through (a negative width, an image Pillow cannot read, a weights URL that does not
answer) would otherwise fail each run after the study directory was made and the workers started; here it is one
line and nothing is written. Nothing is built, imported from a framework or downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.studies.psets import parameter_sets
from gpulab.studies.spec import EPOCH_KEYS, HINT, Study
from gpulab.studies.task import run_config

# What tells runs of one parameter set apart: their checks are the same.
BOOKKEEPING = ("repeat", "seed")
# Run fields a pset may carry and the least whole number each takes.
RUN_FIELDS_LEAST = (("batch", 1), ("steps", 1), ("warmup", 0), ("num_workers", 0))


def check_runs(study: Study, *, files_here: bool = True) -> None:
    """Refuse the study (GpulabError, one line) when one of its runs would fail on its settings. `files_here` is
    False when the runs go to another host's workers: the files they name are that host's, not checked here."""
    seen: set[str] = set()
    failed: list[tuple[dict[str, Any], str]] = []
    for pset in parameter_sets(study):
        key = json.dumps({k: v for k, v in pset.items() if k not in BOOKKEEPING}, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            check_pset(pset, files_here=files_here)
        except GpulabError as err:
            failed.append((pset, str(err).splitlines()[0] if str(err) else type(err).__name__))
    if failed:
        pset, problem = failed[0]
        varied = [f"{k}={pset[k]!r}" for k in study.vary.params if k in pset]
        which = f"the run with {', '.join(varied)}" if varied and len(failed) < len(seen) else "every run"
        more = f" (and {len(failed) - 1} other parameter set(s))" if len(failed) > 1 and varied else ""
        raise GpulabError(
            f"study {study.name}: {which} would fail{more}: {problem.rstrip('.')}; fix the study file or --param "
            f"({HINT}); nothing was written"
        )


def check_pset(pset: dict[str, Any], *, files_here: bool = True) -> None:
    """One run's settings as its worker would check them (GpulabError naming the value)."""
    from gpulab.workloads.checking import check_run

    for key, least in RUN_FIELDS_LEAST:
        value = pset.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise GpulabError(f"{key}: {value!r} is not a whole number ≥ {least}")
    check_run(run_config(pset, Path("run"), "cpu"), files_here=files_here)  # the config only: nothing is written
    given = {k: pset[k] for k in EPOCH_KEYS if pset.get(k) is not None}
    if "epochs" in given:
        from gpulab.training.epochs import EpochSpec

        EpochSpec(**given)
        if "weights" in given and files_here:
            from gpulab.paths import input_file

            input_file(given["weights"], "epochs.weights", "give a state dict file a run saved (--save-weights)")
