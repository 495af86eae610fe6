"""`gpulab study run` / `resume`: a study's runs through psweep onto Dask workers, kept in one psweep database.

The study directory holds `database.json` (the rows; psweep's `database.pk` beside it, never read: see
report.database), one folder per run named by its pset id (the style-transfer image, result.json, row.json,
error.txt for a failed run), `study.json` (the study as run) and `sessions.json` (each `run`/`resume`: its psweep
run id, workers, wall time, runs). Each run saves its row in its folder as it finishes, so a study stopped half-way
(Ctrl-C, a lost machine) keeps what finished: the database is rewritten at the end of every session, interrupted
ones too, and `resume` runs the planned runs with no successful row (studies.ledger decides which).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.interrupts import ctrl_c_held
from gpulab.launch.measuring import write_json_atomic
from gpulab.paths import parse_json, read_input_text
from gpulab.records import Sizing
from gpulab.report.database import DATABASE, DATABASE_JSON, merge_database, read_database
from gpulab.report.io import atomic_write_text, jsonable
from gpulab.studies import batching, cluster, ledger, packing, preflight
from gpulab.studies.generated import with_generated_data
from gpulab.studies.lock import owning
from gpulab.studies.progress import Progress, finished_counter, watching
from gpulab.studies.results import write_study_report
from gpulab.studies.spec import NAMED_DATA, Study
from gpulab.studies.task import run_batch, run_pset

__all__ = ["DATABASE", "DATABASE_JSON", "load_database", "missing_sets", "run_study"]
STUDY_JSON = "study.json"
STUDY_YML = "study.yml"  # the study file as run (variant applied): what `resume DIR` reads
SESSIONS_JSON = "sessions.json"
ALL_GPUS_ENV = "GPULAB_STUDY_ALL_GPUS"  # the machine's GPU count, for runs with gpus: all
MAX_RECORD_BYTES = 64 << 20


@dataclass
class StudySession:
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
    gpu_timeline: list[dict[str, Any]] = field(default_factory=list)  # the samples over the session (telemetry)
    packing: Sizing | None = None  # runs per GPU (gpulab.studies.packing); sessions.json keeps it as a mapping
    batching: Sizing | None = None  # runs per batch (gpulab.studies.batching)


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
    before = _json_file(recorded, "the recorded study")
    if not isinstance(before, dict):
        raise GpulabError(f"{recorded} is not a study record; move {study_dir} away or pass another --study-dir")
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
    atomic_write_text(path, head + yaml.safe_dump(jsonable(study.document), sort_keys=False))


def _json_file(path: Path, what: str) -> Any:
    """A JSON file of the study directory: a regular file (a FIFO or device is refused, not waited on), bounded."""
    fix = "the study directory is damaged: move it away"
    return parse_json(read_input_text(path, what, fix, limit=MAX_RECORD_BYTES), f"{path} ({what})", fix)


def load_recorded(study_dir: Path) -> Study:
    """The study a directory holds, as it was run (for resume and report)."""
    import dataclasses

    from gpulab.studies.spec import load_study

    study_dir = Path(study_dir)
    if not (study_dir / STUDY_YML).exists() or not (study_dir / STUDY_JSON).exists():  # not a file: refused below
        raise GpulabError(
            f"{study_dir} holds no study ({STUDY_YML} and {STUDY_JSON} are missing); give the directory "
            "`gpulab study run --study-dir` wrote"
        )
    record = _json_file(study_dir / STUDY_JSON, "the recorded study")
    if not isinstance(record, dict):
        raise GpulabError(f"{study_dir / STUDY_JSON} is not a study record; the directory is damaged")
    study = load_study(study_dir / STUDY_YML)
    path = record.get("path")
    return dataclasses.replace(study, variant=record.get("variant"), path=Path(path) if path else study.path)


def load_database(study_dir: Path, *, trust_pickles: bool = False) -> Any:
    """Every row of the study (database.json and the rows its runs saved since); reads only, writes nothing."""
    return read_database(Path(study_dir), trust_pickles=trust_pickles)


def missing_sets(study: Study, df: Any) -> tuple[list[dict[str, Any]], int]:
    """(the planned runs with no successful row, how many the study plans)."""
    return ledger.todo(study, df)


def _psweep_run(psets: list[dict[str, Any]], study_dir: Path, df: Any, **how: Any) -> Any:
    """psweep runs `psets` after the rows of `df` (handed over: psweep would otherwise unpickle database.pk); the
    database is written here, not by psweep, and each run saves its own row (no pickles)."""
    import psweep as ps

    # psweep takes the psets' own book-keeping columns (_vary) for new parameters and blanks them, in place, in the
    # rows it is handed: a second call in one session (after a probe) would lose the earlier runs' _vary.
    kept = {c: df[c].to_numpy(copy=True) for c in {k for p in psets for k in p if k.startswith("_")} & set(df.columns)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        out = ps.run(run_pset, psets, df=df, calc_dir=str(study_dir), database_basename=DATABASE, save=False, **how)
    for column, values in kept.items():
        out.loc[out.index[: len(values)], column] = values
    return out


def run_study(
    study: Study,
    study_dir: Path,
    *,
    resume: bool = False,
    scheduler: str | None = None,
    progress: Progress | None = None,
    command: str | None = None,
    trust_pickles: bool = False,
    say: Callable[[str], None] | None = None,
) -> StudySession:
    """Run the study's missing runs; every run (failed ones too) becomes a row of the database. The directory is
    this process's while it runs (studies.lock): a second `run`/`resume` of it is refused."""
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
    preflight.check_runs(study, files_here=not scheduler)  # every run's values and files, as its worker would
    study_dir.mkdir(parents=True, exist_ok=True)
    with owning(study_dir, say or _say):  # before anything is written; held until the record is
        _check_dir(study, study_dir, resume)  # a `run` that started beside this one has finished meanwhile
        df = load_database(study_dir, trust_pickles=trust_pickles)
        return _run_owned(with_generated_data(study, study_dir), study_dir, df, chosen, scheduler, progress, command)


def _say(message: str) -> None:
    print(f"gpulab: {message}", file=sys.stderr)


def _run_owned(
    study: Study,
    study_dir: Path,
    df: Any,
    chosen: list[cluster.Slot] | None,
    scheduler: str | None,
    progress: Progress | None,
    command: str | None,
) -> StudySession:
    todo, total = missing_sets(study, df)
    write_json_atomic(study_dir / STUDY_JSON, study_record(study))
    _write_document(study_dir / STUDY_YML, study)
    started, clock = time.time(), time.perf_counter()
    session = StudySession([], started, 0.0, [], len(todo), 0, 0, scheduler or "local")
    if not todo:
        if len(df):
            merge_database(study_dir, df)  # rows the runs saved after the last session ended join the record
        session.notes.append(f"nothing to run: all {total} runs of {study.name} have a successful row")
        return _close(study_dir, session, clock)
    try:
        if study.whole_machine:
            session.machine_runs = len(todo)
            gpus = cluster.visible_gpus()
            session.workers = [g[2] for g in gpus] or ["cpu"]
            os.environ[ALL_GPUS_ENV] = str(max(1, len(gpus)))
            with watching(finished_counter(study_dir), len(todo), progress):
                df = _psweep_run(todo, study_dir, df)
        else:
            planned = len(todo)
            asked = _batch_asked(study, session)
            if chosen is not None and asked != 1 and study.per_gpu == packing.AUTO:
                session.packing = Sizing(packing.KEY, packing.AUTO, 1, "batched runs fill the GPU")
            elif chosen is not None:  # this machine's GPUs take several runs each (the probe's runs done here)
                rows = [df]

                def probe(psets: list[dict[str, Any]], client: Any) -> Any:
                    rows[0] = _psweep_run(psets, study_dir, rows[0], dask_client=client)
                    return rows[0]

                chosen, todo, session.packing = packing.plan(
                    study.per_gpu, chosen, todo, read_sessions(study_dir), probe
                )
                df = rows[0]
            with _client(scheduler, chosen) as client, _sampling(chosen, session):
                session.workers = cluster.worker_labels(client)
                # One count for the session: the packing probe's runs are done, the rest go now.
                counted = finished_counter(study_dir, client, already=planned - len(todo))
                with watching(counted, planned, progress):
                    if asked == 1:
                        df = _psweep_run(todo, study_dir, df, dask_client=client)
                    else:
                        df = _batched_run(study, study_dir, df, todo, client, asked, session)
    except KeyboardInterrupt:
        session.interrupted = True
        with ctrl_c_held():  # a second Ctrl-C waits for the record of what finished
            df = merge_database(study_dir, load_database(study_dir))
            _count(session, df, started)
            _close(study_dir, session, clock)
        raise
    merge_database(study_dir, df)  # never fewer rows than the directory holds
    df = load_database(study_dir)  # the rows as the next session reads them (and any a late run saved)
    _count(session, df, started)
    write_study_report(study_dir, study, df, command)
    return _close(study_dir, session, clock)


def _batch_asked(study: Study, session: StudySession) -> int | str:
    """The study's batch_runs where its runs can share batches; else 1, and the session says why."""
    if study.batch_runs == 1:
        return 1
    why = batching.why_not(study)
    if why is None:
        return study.batch_runs
    session.batching = Sizing(batching.KEY, study.batch_runs, 1, f"not batched: {why}")
    session.notes.append(f"batch_runs {study.batch_runs}: one run at a time, {why}")
    return 1


def _batched_run(
    study: Study, study_dir: Path, df: Any, todo: list[dict[str, Any]], client: Any, asked: int | str,
    session: StudySession,
) -> Any:  # fmt: skip
    """The runs in batches on the client's workers; with auto, the first batches (one per worker) size the rest."""
    from gpulab.workloads.registry import REGISTRY

    shared = REGISTRY[study.workload].batch_shared
    probe_runs, why = None, "as asked"
    if asked == batching.AUTO:
        again = batching.recorded(read_sessions(study_dir))
        workers = max(1, len(session.workers))
        if again is not None:
            size, why = again, "sized by an earlier session"
        else:
            first, todo = todo[: batching.PROBE_RUNS * workers], todo[batching.PROBE_RUNS * workers :]
            probing = batching.BatchingClient(client, batching.PROBE_RUNS, shared, run_batch)
            df = _psweep_run(first, study_dir, df, dask_client=probing)
            mine = df[df["_run_id"] == df["_run_id"].iloc[-1]] if len(df) else df
            size, why = batching.size_from_probe(
                [batching.probe_from(dict(row)) for _, row in mine.iterrows()], len(todo), workers
            )
            probe_runs = len(first)
    else:
        size = int(asked)
    session.batching = Sizing(batching.KEY, asked, size, why, probe_runs=probe_runs)
    if todo:
        df = _psweep_run(todo, study_dir, df, dask_client=batching.BatchingClient(client, size, shared, run_batch))
    return df


@contextlib.contextmanager
def _client(scheduler: str | None, chosen: list[cluster.Slot] | None) -> Iterator[Any]:
    # A Ctrl-C leaves the client's gather tasks failed with AllExit, which asyncio logs as "never retrieved" when
    # they are collected: the interruption is told in one line, not in their tracebacks.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    if scheduler:
        with cluster.remote_client(scheduler) as client:
            yield client
        return
    with cluster.local_client(chosen or []) as client:
        # For a person at a terminal, as the progress line is: logs and pipes keep the study's own lines.
        link = cluster.dashboard(client) if sys.stderr.isatty() else ""
        if link:
            _say(f"Dask dashboard of this study: {link}")
        yield client


@contextlib.contextmanager
def _sampling(chosen: list[cluster.Slot] | None, session: StudySession) -> Iterator[None]:
    """NVML utilisation, memory and power of this machine's study GPUs while the runs go (per GPU, in the session)."""
    indices = sorted({i for i in (packing.gpu_index(s.name) for s in chosen or [] if s.gpu) if i is not None})
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
            session.gpu_use = jsonable([g.to_dict() for g in summary.per_gpu])
            session.gpu_timeline = jsonable(summary.timeline)


def _count(session: StudySession, df: Any, started: float) -> None:
    if not len(df) or "_time_utc" not in df.columns:
        return
    import pandas as pd

    when = pd.to_datetime(df["_time_utc"], errors="coerce").map(lambda t: t.timestamp() if pd.notna(t) else 0.0)
    mine = df[when >= started - 1]
    session.run_ids = sorted(set(map(str, mine["_run_id"])))
    status = list(mine.get("status_", []))
    session.ok = sum(1 for s in status if s == "ok")
    session.failed = sum(1 for s in status if s == "failed")


def _close(study_dir: Path, session: StudySession, clock: float) -> StudySession:
    session.wall_s = round(time.perf_counter() - clock, 3)
    path = study_dir / SESSIONS_JSON
    sessions = read_sessions(study_dir)
    record = asdict(session)
    for key, sizing in (("packing", session.packing), ("batching", session.batching)):
        record[key] = sizing.to_json() if sizing is not None else {}
    sessions.append(jsonable(record))
    write_json_atomic(path, sessions)
    return session


def read_sessions(study_dir: Path) -> list[dict[str, Any]]:
    path = Path(study_dir) / SESSIONS_JSON
    sessions = _json_file(path, "the study's sessions") if path.exists() else []
    return [s for s in sessions if isinstance(s, dict)] if isinstance(sessions, list) else []
