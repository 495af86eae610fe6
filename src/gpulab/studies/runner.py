"""`gpulab study run` / `resume`: a study's runs through psweep onto Dask workers, kept in one psweep database.

The study directory holds `database.pk` (psweep's; also written as database.json), one folder per run named by
its pset id (the style-transfer image, result.json, error.txt for a failed run), `study.json` (the study as run)
and `sessions.json` (each `run`/`resume`: its psweep run id, workers, wall time, runs). psweep writes each
finished run to `tmpsave/<run id>/` as it comes back, so a study stopped half-way (Ctrl-C, a lost machine) keeps
what finished: `resume` first adds those rows, then runs the parameter sets with no successful row.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.launch.common import jsonable, write_json_atomic
from gpulab.studies import cluster
from gpulab.studies.generated import with_generated_data
from gpulab.studies.psets import parameter_sets
from gpulab.studies.results import write_study_report
from gpulab.studies.spec import NAMED_DATA, Study
from gpulab.studies.task import run_pset

DATABASE = "database.pk"
DATABASE_JSON = "database.json"
STUDY_JSON = "study.json"
STUDY_YML = "study.yml"  # the study file as run (variant applied): what `resume DIR` reads
SESSIONS_JSON = "sessions.json"
ALL_GPUS_ENV = "GPULAB_STUDY_ALL_GPUS"  # the machine's GPU count, for runs with gpus: all


@dataclass
class Session:
    """One `run` or `resume` of a study."""

    run_ids: list[str]
    started: float
    wall_s: float
    workers: list[str]
    runs: int
    ok: int
    failed: int
    where: str  # local, or the scheduler's address
    interrupted: bool = False
    machine_runs: int = 0
    notes: list[str] = field(default_factory=list)
    gpu_use: list[dict[str, Any]] = field(default_factory=list)  # per GPU: util_mean, mem_max_mib, power_mean_w


def study_record(study: Study) -> dict[str, Any]:
    record = asdict(study)
    record["path"] = str(study.path) if study.path else None
    record["data"] = str(study.data) if study.data else None
    return jsonable(record)


def _check_dir(study: Study, study_dir: Path, resume: bool) -> None:
    from gpulab.paths import output_dir

    output_dir(study_dir, "--study-dir")
    recorded = study_dir / STUDY_JSON
    if not recorded.exists():
        if resume:
            raise GpulabError(f"{study_dir} holds no study to resume; start it with `gpulab study run`")
        return
    try:
        before = json.loads(recorded.read_text())
    except (OSError, ValueError):
        raise GpulabError(f"{recorded} is not readable; move {study_dir} away or pass another --study-dir") from None
    if before.get("name") != study.name or before.get("variant") != study.variant:
        raise GpulabError(
            f"{study_dir} holds study {before.get('name')!r} (variant {before.get('variant')}), not {study.name!r} "
            f"(variant {study.variant}); pass another --study-dir"
        )
    if not resume:
        raise GpulabError(
            f"{study_dir} already holds this study; `gpulab study resume` runs what is missing, or pass another "
            "--study-dir to start again"
        )


def _check_data(study: Study) -> None:
    if study.data is None or str(study.data) in NAMED_DATA or study.data.exists():
        return
    raise GpulabError(
        f"data {study.data}: no such file or directory; pass the data set's folder with --data (or data: in the "
        "study file), or one of " + " / ".join(NAMED_DATA)
    )


def _write_document(path: Path, study: Study) -> None:
    import yaml

    head = f"# study {study.name}" + (f", variant {study.variant}" if study.variant else "")
    head += f", from {study.path}\n" if study.path else "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(head + yaml.safe_dump(jsonable(study.document), sort_keys=False))
    tmp.replace(path)


def load_recorded(study_dir: Path) -> Study:
    """The study a directory holds, as it was run (for resume and report)."""
    import dataclasses

    from gpulab.studies.spec import load_study

    study_dir = Path(study_dir)
    if not (study_dir / STUDY_YML).is_file() or not (study_dir / STUDY_JSON).is_file():
        raise GpulabError(
            f"{study_dir} holds no study ({STUDY_YML} and {STUDY_JSON} are missing); give the directory "
            "`gpulab study run --study-dir` wrote"
        )
    try:
        record = json.loads((study_dir / STUDY_JSON).read_text())
    except ValueError as err:
        raise GpulabError(f"{study_dir / STUDY_JSON} is not JSON ({err}); the directory is damaged") from None
    study = load_study(study_dir / STUDY_YML)
    path = record.get("path")
    return dataclasses.replace(study, variant=record.get("variant"), path=Path(path) if path else study.path)


def load_database(study_dir: Path) -> Any:
    """The study's psweep database with the rows of interrupted sessions recovered from psweep's tmpsave."""
    import pandas as pd
    import psweep as ps

    path = study_dir / DATABASE
    df = _read(path, study_dir / DATABASE_JSON) if path.exists() else pd.DataFrame()
    known = set(df["_run_id"]) if "_run_id" in df.columns else set()
    rows = []
    tmp = study_dir / "tmpsave"
    for run_dir in sorted(tmp.iterdir()) if tmp.is_dir() else []:
        if run_dir.name in known:
            continue
        for pk in sorted(run_dir.glob("*.pk")):
            with pk.open("rb") as fh:
                rows.append(pickle.load(fh))
    if rows:
        df = ps.df_ensure_dtypes(pd.concat((df, pd.DataFrame(rows, dtype=object)), ignore_index=True, sort=False))
        ps.df_write(str(path), df)
    return df


def _read(path: Path, json_copy: Path) -> Any:
    """psweep's pickle; its JSON copy where the pickle needs what this machine lacks (a study made elsewhere, with
    pandas on pyarrow, read here without it)."""
    import psweep as ps

    try:
        return ps.df_read(str(path))
    except (ImportError, AttributeError, TypeError, ValueError) as err:
        if not json_copy.is_file():
            raise GpulabError(f"{path} cannot be read here ({err}) and {json_copy.name} is missing") from None
        return ps.df_read(str(json_copy), fmt="json")


def _washed(psets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The psets as psweep will store them (its dtype round trip), each with the `_pset_hash` psweep gives it."""
    import pandas as pd
    import psweep as ps

    washed = ps.df_extract_dicts(ps.df_ensure_dtypes(pd.DataFrame(psets, dtype=object)), py_types=False)
    for pset in washed:
        pset["_pset_hash"] = ps.pset_hash(pset)
    return list(washed)


def missing_sets(study: Study, df: Any) -> tuple[list[dict[str, Any]], int]:
    """(the parameter sets with no successful row, how many the study has)."""
    psets = parameter_sets(study)
    done: set[str] = set()
    if len(df) and "_pset_hash" in df.columns and "status_" in df.columns:
        done = {h for h, s in zip(df["_pset_hash"], df["status_"], strict=True) if s == "ok"}
    todo = [p for p, w in zip(psets, _washed(psets), strict=True) if w["_pset_hash"] not in done]
    return todo, len(psets)


Progress = Callable[[int, int], None]


@contextlib.contextmanager
def _watch(client: Any, total: int, progress: Progress | None) -> Iterator[None]:
    """Report finished runs while psweep waits on Dask (the keys the cluster holds results for)."""
    if progress is None or client is None:
        yield
        return
    stop = threading.Event()

    def poll() -> None:
        shown = -1
        while not stop.wait(2.0):
            with contextlib.suppress(Exception):  # a cluster going down mid-poll is reported by psweep, not here
                done = sum(1 for where in client.who_has().values() if where)
                if done != shown:
                    shown = done
                    progress(min(done, total), total)

    thread = threading.Thread(target=poll, daemon=True, name="study-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _psweep_run(psets: list[dict[str, Any]], study_dir: Path, **how: Any) -> Any:
    import psweep as ps

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        return ps.run(
            run_pset, psets, calc_dir=str(study_dir), database_basename=DATABASE, tmpsave=True, save=True, **how
        )


def run_study(
    study: Study,
    study_dir: Path,
    *,
    resume: bool = False,
    scheduler: str | None = None,
    progress: Progress | None = None,
    command: str | None = None,
) -> Session:
    """Run the study's missing runs; every run (failed ones too) becomes a row of the database."""
    study_dir = Path(study_dir).resolve()
    _check_dir(study, study_dir, resume)
    # Where the runs go is checked before anything is written: a refused study leaves no directory behind.
    chosen = None
    if scheduler:
        cluster.reachable(scheduler)  # the data is then the workers' hosts' to have
    else:
        _check_data(study)
        if not study.whole_machine:
            chosen = cluster.slots(study.workers, study.threads)
    study_dir.mkdir(parents=True, exist_ok=True)
    study = with_generated_data(study, study_dir)
    df = load_database(study_dir)
    todo, total = missing_sets(study, df)
    write_json_atomic(study_dir / STUDY_JSON, study_record(study))
    _write_document(study_dir / STUDY_YML, study)
    started, clock = time.time(), time.perf_counter()
    session = Session([], started, 0.0, [], len(todo), 0, 0, scheduler or "local")
    if not todo:
        session.notes.append(f"nothing to run: all {total} runs of {study.name} have a successful row")
        return _close(study_dir, session, clock)
    try:
        if study.whole_machine:
            session.machine_runs = len(todo)
            gpus = cluster.visible_gpus()
            session.workers = [g[2] for g in gpus] or ["cpu"]
            os.environ[ALL_GPUS_ENV] = str(max(1, len(gpus)))
            df = _psweep_run(todo, study_dir)
        else:
            with _client(scheduler, chosen) as client, _sampling(chosen, session):
                session.workers = cluster.worker_labels(client)
                with _watch(client, len(todo), progress):
                    df = _psweep_run(todo, study_dir, dask_client=client)
    except KeyboardInterrupt:
        session.interrupted = True
        df = load_database(study_dir)
        _count(session, df, started)
        _close(study_dir, session, clock)
        raise
    _count(session, df, started)
    _write_json_db(study_dir, df)
    write_study_report(study_dir, study, df, command)
    return _close(study_dir, session, clock)


@contextlib.contextmanager
def _client(scheduler: str | None, chosen: list[cluster.Slot] | None) -> Iterator[Any]:
    if scheduler:
        with cluster.remote_client(scheduler) as client:
            yield client
        return
    with cluster.local_client(chosen or []) as client:
        yield client


@contextlib.contextmanager
def _sampling(chosen: list[cluster.Slot] | None, session: Session) -> Iterator[None]:
    """NVML utilisation, memory and power of this machine's study GPUs while the runs go (per GPU, in the session)."""
    indices = [int(s.name.removeprefix("gpu")) for s in chosen or [] if s.gpu and s.name.startswith("gpu")]
    if not indices:
        yield
        return
    from gpulab.telemetry import Sampler

    sampler = Sampler(indices)
    sampler.start()
    try:
        yield
    finally:
        sampler.stop()
        summary = sampler.summary()
        if summary is not None:
            session.gpu_use = jsonable(summary.per_gpu)


def _count(session: Session, df: Any, started: float) -> None:
    if not len(df) or "_time_utc" not in df.columns:
        return
    import pandas as pd

    mine = df[pd.to_datetime(df["_time_utc"]).map(lambda t: t.timestamp()) >= started - 1]
    session.run_ids = sorted(set(map(str, mine["_run_id"])))
    status = list(mine.get("status_", []))
    session.ok = sum(1 for s in status if s == "ok")
    session.failed = sum(1 for s in status if s == "failed")


def _write_json_db(study_dir: Path, df: Any) -> None:
    import psweep as ps

    ps.df_write(str(study_dir / DATABASE_JSON), df, fmt="json")


def _close(study_dir: Path, session: Session, clock: float) -> Session:
    session.wall_s = round(time.perf_counter() - clock, 3)
    path = study_dir / SESSIONS_JSON
    sessions = json.loads(path.read_text()) if path.exists() else []
    sessions.append(jsonable(asdict(session)))
    write_json_atomic(path, sessions)
    return session


def read_sessions(study_dir: Path) -> list[dict[str, Any]]:
    path = Path(study_dir) / SESSIONS_JSON
    return list(json.loads(path.read_text())) if path.exists() else []
