"""What a study has done: its planned runs against every row of its database, whichever session wrote the row.

A run is known by its parameters (`run_key`), not by psweep's `_pset_hash`: psweep settles a column's value types
over the runs it is handed at once (a learning rate of `10` beside `10.5` becomes `10.0`; handed alone it stays
`10`) and hashes the types, so the same run hashed apart from one session to the next and `resume` ran it again.
The key reads numbers as numbers (10 == 10.0), leaves book-keeping (`_x`) and results (`x_`) out and drops empty
values (a column a later row added). The plan is also washed once, whole, through psweep's type machinery, so a
run gets the same values whichever session runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from gpulab.studies.psets import parameter_sets
from gpulab.studies.spec import Study


def _canonical(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, (str, bytes, list, dict)):  # numpy scalars
        with contextlib.suppress(TypeError, ValueError):  # an array of several values: a list below
            value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if value is None or isinstance(value, str):
        return value
    try:  # numpy arrays (psweep's washing may hand a list back as one)
        return [_canonical(v) for v in value.tolist()]
    except AttributeError:
        return str(value)


def _empty(value: Any) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    try:
        import pandas as pd

        return value is pd.NA or value is pd.NaT
    except ImportError:
        return False


def run_key(pset: dict[str, Any]) -> str:
    """A run's identity from its parameters, the same for every session and every way of storing the row."""
    params = {
        str(k): _canonical(v)
        for k, v in pset.items()
        if not str(k).startswith("_") and not str(k).endswith("_") and not _empty(v)
    }
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def plan(study: Study) -> list[dict[str, Any]]:
    """The study's runs with their values as psweep will store them, settled over the whole plan once."""
    import pandas as pd
    import psweep as ps

    psets = parameter_sets(study)
    return list(ps.df_extract_dicts(ps.df_ensure_dtypes(pd.DataFrame(psets, dtype=object)), py_types=False))


@dataclass(frozen=True)
class Counts:
    """planned runs; done (a successful row); failed (rows, none successful); missing (never run); repeated (runs
    with more than one successful row); rows of the database; extra (rows of no planned run)."""

    planned: int
    done: int
    failed: int
    missing: int
    repeated: int
    rows: int
    extra: int

    def line(self) -> str:
        text = f"{self.done} of {self.planned} planned runs done, {self.failed} failed, {self.missing} missing"
        text += f", {self.repeated} repeated"
        if self.extra:
            text += f"; {self.extra} row(s) of runs the study no longer plans"
        return text

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _rows(df: Any) -> list[dict[str, Any]]:
    return [dict(zip(df.columns, row, strict=True)) for row in df.itertuples(index=False, name=None)] if len(df) else []


def _ok_and_tried(df: Any) -> tuple[dict[str, int], set[str], int]:
    ok: dict[str, int] = {}
    tried: set[str] = set()
    rows = _rows(df)
    for row in rows:
        key = run_key(row)
        tried.add(key)
        if row.get("status_") == "ok":
            ok[key] = ok.get(key, 0) + 1
    return ok, tried, len(rows)


def todo(study: Study, df: Any) -> tuple[list[dict[str, Any]], int]:
    """(the planned runs with no successful row, how many the study plans)."""
    planned = plan(study)
    ok, _, _ = _ok_and_tried(df)
    return [p for p in planned if run_key(p) not in ok], len(planned)


def counts(study: Study, df: Any) -> Counts:
    keys = [run_key(p) for p in plan(study)]
    ok, tried, rows = _ok_and_tried(df)
    wanted = set(keys)
    done = sum(1 for k in keys if k in ok)
    failed = sum(1 for k in keys if k not in ok and k in tried)
    repeated = sum(1 for k in keys if ok.get(k, 0) > 1)
    extra = sum(1 for row in _rows(df) if run_key(row) not in wanted)
    return Counts(len(keys), done, failed, len(keys) - done - failed, repeated, rows, extra)


def summary_line(study: Study, df: Any) -> str:
    """The counts as the report's first line shows them."""
    return "Runs: " + counts(study, df).line()
