"""A psweep database on disk (a study's or a sweep's): read from data, never from code, written whole or not at all.

`database.json` (a list of rows, psweep's `records` layout) is the study's record; `database.pk` is psweep's
pickle of the same rows, written beside it for psweep's own tools and never read back here: unpickling a file runs
whatever code it names, and a study directory is data that may come from anywhere. Each run also saves its row as
`<run folder>/row.json` the moment it finishes (on whichever worker, local or remote), so the rows of a session
stopped half-way (Ctrl-C, a lost machine), and of runs that finished after it, join the database on the next read.
A directory from an older gpulab holds only pickles; those are read with `trust_pickles` (`--trust-pickles`) only.
Both files are written atomically (a temporary file renamed over the old): a full disk leaves the old ones whole.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.paths import parse_json, read_input_text
from gpulab.report.io import atomic_write_bytes, atomic_write_text

DATABASE = "database.pk"
DATABASE_JSON = "database.json"
ROW_JSON = "row.json"
TMPSAVE = "tmpsave"  # psweep's per-run pickles (older gpulab)
MAX_DATABASE_BYTES = 1 << 30
MAX_ROW_BYTES = 16 << 20
TRUST = "pass --trust-pickles if you or someone you trust wrote this directory (a pickle runs code when read)"


def _cell(value: Any) -> Any:
    """A cell as JSON: NA/NaN/NaT as null, timestamps as text, numpy values as Python's."""
    from gpulab.report.io import jsonable

    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
        if isinstance(value, pd.Timestamp):
            return value.isoformat()
    except ImportError:
        pass
    if isinstance(value, float) and math.isnan(value):
        return None
    return jsonable(value)


def records(df: Any) -> list[dict[str, Any]]:
    """The database's rows as JSON values."""
    if not len(df):
        return []
    cols = [str(c) for c in df.columns]
    return [{c: _cell(v) for c, v in zip(cols, row, strict=True)} for row in df.itertuples(index=False, name=None)]


def frame(rows: list[dict[str, Any]]) -> Any:
    """Rows as psweep keeps them: every column of dtype object, empty cells pd.NA."""
    import pandas as pd
    import psweep as ps

    if not rows:
        return pd.DataFrame(dtype=object)
    df = pd.DataFrame(rows, dtype=object)
    if "_time_utc" in df.columns:  # psweep's start time, a Timestamp again (JSON holds it as ISO text)
        df["_time_utc"] = pd.to_datetime(df["_time_utc"], format="ISO8601", errors="coerce").astype(object)
    return ps.df_ensure_dtypes(df)


def save_row(run_dir: Path, row: dict[str, Any]) -> None:
    """A finished run's row in its own folder (the worker writes it; the next read of the database adds it)."""
    atomic_write_text(Path(run_dir) / ROW_JSON, json.dumps({str(k): _cell(v) for k, v in row.items()}))


def _read_json_rows(path: Path, what: str, limit: int) -> Any:
    fix = "the file is damaged: move it away; the study's other files are kept"
    return parse_json(read_input_text(path, what, fix, limit=limit), f"{path} ({what})", fix)


def _saved_rows(study_dir: Path, known: set[str]) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(study_dir.glob(f"*/{ROW_JSON}")):
        if path.parent.name in known:
            continue
        row = _read_json_rows(path, "a run's saved row", MAX_ROW_BYTES)
        if not isinstance(row, dict) or row.get("_pset_id") != path.parent.name:
            raise GpulabError(f"{path} is not the row of run {path.parent.name}; the file is damaged: move it away")
        rows.append(row)
        known.add(path.parent.name)
    return rows


def _unpickle(path: Path) -> Any:
    with path.open("rb") as fh:
        return pickle.load(fh)  # only with trust_pickles: the user's word for the directory


def _legacy_rows(study_dir: Path, known: set[str], trust_pickles: bool) -> list[dict[str, Any]]:
    """Rows psweep pickled per run (tmpsave/<run id>/<pset id>.pk) that no JSON row holds."""
    tmp = study_dir / TMPSAVE
    pickles = [p for p in sorted(tmp.glob("*/*.pk")) if p.stem not in known] if tmp.is_dir() else []
    if pickles and not trust_pickles:
        raise GpulabError(f"{tmp} holds {len(pickles)} run(s) saved only as pickles by an older gpulab; {TRUST}")
    rows = []
    for path in pickles:
        row = _unpickle(path)
        if isinstance(row, dict):
            rows.append(row)
            known.add(path.stem)
    return rows


def read_json_database(path: Path) -> Any:
    """A psweep database's JSON copy (a list of rows) as psweep keeps a database; also `gpulab sweep`'s."""
    data = _read_json_rows(path, "the psweep database", MAX_DATABASE_BYTES)
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise GpulabError(f"{path} is not a list of rows; the file is damaged: move it away")
    return frame(data)


def _listed_rows(path: Path) -> list[dict[str, Any]]:
    """database.json's rows: a list of objects, or one line saying the file is damaged."""
    data = _read_json_rows(path, "the study database", MAX_DATABASE_BYTES)
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise GpulabError(f"{path} is not a list of rows; the file is damaged: move it away")
    return data


def read_database(study_dir: Path, *, trust_pickles: bool = False) -> Any:
    """Every row of the study: database.json, then the saved rows of runs it does not hold yet. Writes nothing."""
    study_dir = Path(study_dir)
    json_path, pk_path = study_dir / DATABASE_JSON, study_dir / DATABASE
    rows: list[dict[str, Any]] = []
    if json_path.exists() or json_path.is_symlink():
        rows = _listed_rows(json_path)
    elif pk_path.exists():
        if not trust_pickles:
            raise GpulabError(f"{study_dir} holds its database only as a pickle ({DATABASE}); {TRUST}")
        rows = records(_unpickle(pk_path))
    known = {str(r.get("_pset_id")) for r in rows}
    rows += _saved_rows(study_dir, known)
    rows += [{str(k): _cell(v) for k, v in r.items()} for r in _legacy_rows(study_dir, known, trust_pickles)]
    return frame(rows)


def _json_rows(study_dir: Path) -> list[dict[str, Any]]:
    """database.json's rows, then the saved rows of runs it does not hold (no pickles read)."""
    path = Path(study_dir) / DATABASE_JSON
    rows = _listed_rows(path) if path.exists() or path.is_symlink() else []
    return rows + _saved_rows(Path(study_dir), {str(r.get("_pset_id")) for r in rows})


def merge_database(study_dir: Path, df: Any) -> Any:
    """Write the database as every row the directory holds (database.json, each run's row.json) joined with `df`'s
    (a run's row in `df` replaces the same run's on disk): a session's view never drops a row another session or
    a run that finished late added. Returns the rows written."""
    mine = records(df)
    by_id = {str(r["_pset_id"]): r for r in mine if r.get("_pset_id") is not None}
    merged = []
    for row in _json_rows(study_dir):
        key = row.get("_pset_id")
        merged.append(by_id.pop(str(key)) if key is not None and str(key) in by_id else row)
    merged += [r for r in mine if r.get("_pset_id") is None or str(r["_pset_id"]) in by_id]
    out = frame(merged)
    write_database(study_dir, out)
    return out


def write_database(study_dir: Path, df: Any) -> None:
    """database.json, then psweep's database.pk of the same rows; each written whole or not at all."""
    rows = records(df)
    atomic_write_text(Path(study_dir) / DATABASE_JSON, json.dumps(rows))
    atomic_write_bytes(Path(study_dir) / DATABASE, pickle.dumps(frame(rows)))
