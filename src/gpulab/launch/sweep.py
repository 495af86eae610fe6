"""A sweep: N independent runs of one workload, one process per GPU, started together, kept in a psweep database.

Each run is `python -m gpulab.launch.sweep_worker` pinned to its GPU with CUDA_VISIBLE_DEVICES=<GPU UUID> (the
CUDA ordinal when torch cannot tell the UUID); psweep (`psweep.run`, its runs handed to a thread per device,
gpulab.launch.sweep_pool) records every run
as a row of `<sweep-dir>/database.pk` (also written as database.json) with its run id (`_run_id`, shared by the
runs of one sweep), pset id (`_pset_id`), host (`_exec_host`), runtime (`_pset_runtime`, seconds) and
`failure` (None, or why the run failed); each run's run.json (its config), result.json and log.txt are in
`<sweep-dir>/<pset id>/`.
A later sweep into the same directory appends rows under a new run id.

With more runs than GPUs (a multiple), each GPU runs its share one after another: the pool has one thread per GPU
and a run takes whichever GPU is free.

The sweep's Result: n = the GPUs used, value = the machine's throughput while every GPU runs (the samples/s of
the runs on each GPU, averaged per GPU, added over the GPUs; with one run per GPU simply their sum), seconds =
wall clock of the whole sweep including process start. The first run on every GPU waits for the others after
its warm-up, so the timed loops overlap (params.overlap_s says by how much). Without GPUs, `gpus` counts CPU
processes (each with `threads` threads).

The sweep names no framework: the framework's backend (gpulab.launch.backends) checks the config, counts the
GPUs, says how a process is pinned to one, and names the worker module each run starts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.interrupts import child_env
from gpulab.launch import backends
from gpulab.launch.peers import SWEEP_PID_ENV, mark_gone
from gpulab.launch.planning import plan_batch
from gpulab.launch.spec import Launch, TimedResult, WorkerMessage
from gpulab.launch.sweep_pool import SweepPool
from gpulab.names import Framework, Launcher
from gpulab.records import Result, RunConfig, Spread
from gpulab.report.database import read_json_database, write_database
from gpulab.report.io import jsonable
from gpulab.report.spread import of_windows
from gpulab.telemetry import Sampler

DATABASE = "database.pk"
DATABASE_JSON = "database.json"


@contextlib.contextmanager
def _gpu_slot(slots: list[tuple[str, str]], free: queue.SimpleQueue[int]) -> Iterator[tuple[int, str, str]]:
    """Hold one of the sweep's devices (slot, label, CUDA_VISIBLE_DEVICES value) for the length of one run.

    The pool has one thread per device, so a thread always finds a free one; taking it keeps two runs off one GPU.
    """
    k = free.get()
    try:
        yield (k, *slots[k])
    finally:
        free.put(k)


def _sweep_run(
    pset: dict[str, Any],
    *,
    pool: SweepPool,
    slots: list[tuple[str, str]],
    free: queue.SimpleQueue[int],
    peers: int,
    work_dir: str,
    timeout_s: float,
    worker: str,
) -> dict[str, Any]:
    """psweep's per-pset function (on one of the pool's threads): start one run pinned to a free device, wait.

    The run's config (pset "config", JSON) is written to <sweep-dir>/<pset id>/run.json beside its result.
    """
    run_dir = Path(pset["_calc_dir"]) / pset["_pset_id"]
    run_dir.mkdir(parents=True, exist_ok=True)
    config, out, log = run_dir / "run.json", run_dir / "result.json", run_dir / "log.txt"
    config.write_text(pset["config"])
    ready = Path(work_dir) / "ready"
    failure: str | None = None
    with _gpu_slot(slots, free) as (slot, label, visible):
        # The run ends with this process (gpulab.interrupts.stop_with_parent), killed outright too: no run trains on
        # after its sweep.
        env = child_env(dict(os.environ, CUDA_VISIBLE_DEVICES=visible, OMP_NUM_THREADS=str(pset["threads"])))
        env[SWEEP_PID_ENV] = str(os.getpid())  # the run stops if this process is gone (gpulab.launch.peers)
        cmd = [
            sys.executable,
            "-m",
            worker,
            f"--config={config}",
            f"--out={out}",
            f"--index={pset['run_index']}",
            f"--runs={peers}",
            f"--ready-dir={ready}",
            f"--device-label={label}",
        ]
        started = time.time()
        with log.open("wb") as fh:
            code = pool.run(cmd, env=env, log=fh, timeout_s=timeout_s)
        if code is None:
            failure = f"did not finish in {timeout_s:.0f} s"
        elif code != 0 or not out.exists():
            failure = f"exit {code}: {_last_line(log)}"
        ended = time.time()
    facts = {"slot": slot, "device": label, "visible": visible, "started": started, "ended": ended}
    if failure is not None:
        mark_gone(ready, pset["run_index"])  # peers waiting to start together stop waiting for it
        return {**facts, "failure": failure, "samples_per_s": None, "timed_seconds": None, "result_file": None}
    result = TimedResult.read(out).result
    return {
        **facts,
        "failure": None,
        "samples_per_s": result.value,
        "timed_seconds": result.seconds,
        "result_file": str(out),
    }


def _last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][-500:] if lines else "no output"


def _sweep_shape(
    backend: backends.Backend,
    framework: Framework,
    cfg: RunConfig,
    builder: str | None,
    gpus: int,
    runs: int | None,
    threads: int,
    first_gpu: int = 0,
) -> tuple[int, bool]:
    """(runs, on GPU?) for a sweep, or GpulabError when the backend, GPUs, runs or threads do not fit."""
    if builder is not None and not backend.takes_builder:
        raise GpulabError(f"--builder builds torch workloads; {framework} takes none: drop --builder")
    backend.check(cfg, builder)
    runs = runs or gpus
    if gpus < 1 or runs < 1:
        raise GpulabError(f"a sweep needs at least one GPU and one run, got --gpus {gpus} --runs {runs}")
    if runs < gpus:
        raise GpulabError(f"--runs {runs} leaves GPUs idle; pass --runs {gpus} or more (or fewer --gpus)")
    if runs % gpus:
        raise GpulabError(f"--runs {runs} does not share evenly over {gpus} GPUs; pass a multiple of {gpus}")
    visible = backend.count_devices()
    on_gpu = visible > 0
    if on_gpu and first_gpu + gpus > visible:
        wanted = first_gpu + gpus
        raise GpulabError(f"asked for {wanted} GPUs but {framework} sees {visible}; pass --gpus {visible} or fewer")
    if not on_gpu and gpus * threads > (os.cpu_count() or 1):
        raise GpulabError(
            f"{gpus} CPU processes × {threads} threads exceed the {os.cpu_count()} CPU cores; lower --gpus or --threads"
        )
    return runs, on_gpu


def _psets(cfg: RunConfig, batch: int | None, runs: int, threads: int, config: str) -> list[dict[str, Any]]:
    """One psweep parameter set per run: the run's index and what it trains, with the worker's message."""
    return [
        {
            "run_index": i,
            "workload": cfg.workload,
            "precision": cfg.precision,
            "size": cfg.size,
            "batch": batch,
            "threads": threads,
            "config": config,
        }
        for i in range(runs)
    ]


def run_sweep(launch: Launch, *, first_gpu: int = 0) -> Result:
    """`launch.runs` (default `launch.gpus`, else a multiple of it) independent runs of `launch.cfg` over
    cuda:`first_gpu`.. (`launch.gpus` of them), recorded in the psweep database under `launch.sweep_dir`.

    Each GPU runs its share of the runs one after another; the first run on every GPU starts together. Each run
    is the `launch.framework` backend's sweep worker, pinned to its GPU the way that backend says.
    """
    import psweep

    if launch.sweep_dir is None:
        raise GpulabError("a sweep needs --sweep-dir DIR for its psweep database")
    cfg, gpus, runs, builder, framework = launch.cfg, launch.gpus, launch.runs, launch.builder, launch.framework
    threads, timeout_s = launch.threads or 1, launch.timeout_s
    backend = backends.get(framework)
    runs, on_gpu = _sweep_shape(backend, framework, cfg, builder, gpus, runs, threads, first_gpu)
    plan = plan_batch(cfg, gpus, launch.batch_policy, launch.scale_lr)
    ordinals = list(range(first_gpu, first_gpu + gpus)) if on_gpu else []
    sweep_dir = Path(launch.sweep_dir).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    before = _read_database(sweep_dir)
    slots = [(f"cuda:{k}", backend.pin(k)) for k in ordinals] or [("cpu", "")] * gpus
    free: queue.SimpleQueue[int] = queue.SimpleQueue()  # the slots no run holds
    for k in range(len(slots)):
        free.put(k)
    message = WorkerMessage(
        cfg, plan, Launcher.SWEEP, builder=builder, threads=threads, gpu=on_gpu, start_timeout_s=float(timeout_s)
    )
    config = json.dumps(message.to_dict())
    psets = _psets(cfg, plan.per_device, runs, threads, config)
    sampler = Sampler(backend.nvml_indices(ordinals)) if launch.telemetry and ordinals else None
    with tempfile.TemporaryDirectory(prefix=".gpulab-sweep-", dir=sweep_dir) as work_dir, SweepPool(gpus) as pool:
        func = functools.partial(
            _sweep_run,
            pool=pool,
            slots=slots,
            free=free,
            peers=min(runs, gpus),
            work_dir=work_dir,
            timeout_s=float(timeout_s),
            worker=backend.sweep_worker,
        )
        start = time.perf_counter()
        if sampler is not None:
            sampler.start()
        try:
            df = psweep.run(
                func, _with_columns(psets, before), df=before, dask_client=pool, calc_dir=str(sweep_dir), save=False
            )
        finally:
            if sampler is not None:
                sampler.stop()
        wall = time.perf_counter() - start
    write_database(sweep_dir, df)  # database.json and database.pk, each whole or not at all
    rows = df.tail(runs)
    run_id = str(rows["_run_id"].iloc[-1])
    failed = [(int(r["run_index"]), str(r["failure"])) for _, r in rows.iterrows() if _present(r["failure"])]
    if failed:
        shown = "; ".join(f"run {i}: {why}" for i, why in failed)
        raise GpulabError(
            f"{len(failed)} of {runs} sweep runs failed ({shown}); their logs are under {sweep_dir}/<pset id>/log.txt "
            f"and the psweep database {sweep_dir / DATABASE} (run id {run_id}) records them"
        )
    return _sweep_result(cfg, plan.params(), rows, runs, gpus, wall, sweep_dir, run_id, sampler, framework)


def _read_database(sweep_dir: Path) -> Any:
    """The rows earlier sweeps left in `sweep_dir` (new runs are added to them), read from database.json before any
    run starts: data, never the pickle (unpickling a file runs the code it names)."""
    import pandas as pd

    path, pickled = sweep_dir / DATABASE_JSON, sweep_dir / DATABASE
    fix = f"move {sweep_dir / DATABASE} and {path.name} away or pass another --sweep-dir"
    if not path.exists() and not path.is_symlink():
        if pickled.exists() or pickled.is_symlink():
            raise GpulabError(f"--sweep-dir {sweep_dir}: {pickled} has no {path.name} beside it; {fix}")
        return pd.DataFrame(dtype=object)
    df = read_json_database(path)
    if len(df) and "_run_id" not in df.columns:
        raise GpulabError(f"--sweep-dir {sweep_dir}: {path} is not a psweep database (no _run_id column); {fix}")
    return df


def _with_columns(psets: list[dict[str, Any]], before: Any) -> list[dict[str, Any]]:
    """The runs with every column earlier sweeps' rows have, empty: psweep refuses runs with fewer parameter
    columns than its database has (a sweep's result columns are plain names, so psweep counts them as such)."""
    cols = [c for c in before.columns if not str(c).startswith("_") and not str(c).endswith("_")]
    return [{**dict.fromkeys(cols), **pset} for pset in psets]


def _present(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _sweep_result(
    cfg: RunConfig,
    plan_params: dict[str, Any],
    rows: Any,
    runs: int,
    n: int,
    wall: float,
    sweep_dir: Path,
    run_id: str,
    sampler: Sampler | None,
    framework: Framework,
) -> Result:
    per_run: list[dict[str, Any]] = []
    results: list[Result] = []
    starts, ends = [], []
    by_slot: dict[int, list[float]] = {}
    windows_by_slot: dict[int, list[list[float]]] = {}
    for _, row in rows.iterrows():
        timed = TimedResult.read(Path(row["result_file"]))
        wall_start, wall_end, result = timed.wall_start, timed.wall_end, timed.result
        starts.append(wall_start)
        ends.append(wall_end)
        results.append(result)
        by_slot.setdefault(int(row["slot"]), []).append(result.value)
        windows_by_slot.setdefault(int(row["slot"]), []).append(result.spread.windows if result.spread else [])
        per_run.append(_run_facts(row, timed))
    first = results[0]
    params = dict(first.params)
    for key in ("run_index", "started_together", "max_memory_allocated_mib"):
        params.pop(key, None)
    params.update(plan_params)
    memory = [r.params.get("max_memory_allocated_mib") for r in results]
    if any(m is not None for m in memory):
        params["max_memory_allocated_mib"] = memory
    params.update(
        per_device_batch=first.batch,
        global_batch=(first.batch or 0) * n if first.batch else None,
        runs=per_run,
        psweep_db=str(sweep_dir / DATABASE),
        psweep_json=str(sweep_dir / DATABASE_JSON),
        psweep_run_id=run_id,
        runs_per_device=runs // n,
        overlap_s=max(0.0, min(ends[:n]) - max(starts[:n])),  # of the first run on every device
        slowest_run_s=max(r.seconds or 0.0 for r in results),
    )
    if sampler is not None and sampler.overhead() is not None:
        params["telemetry_overhead_pct"] = round(100 * (sampler.overhead() or 0.0), 3)
    figure = _machine_windows(windows_by_slot)
    return Result(
        workload=cfg.workload,
        framework=framework,
        launcher=Launcher.SWEEP,
        n=n,
        precision=cfg.precision,
        value=figure.median if figure else sum(sum(rates) / len(rates) for rates in by_slot.values()),
        unit="samples/s",
        device=None,
        devices=[r.device or "cpu" for r in results],
        batch=first.batch,
        seconds=wall,
        iterations=first.iterations,
        params=jsonable(params),
        telemetry=sampler.summary(min(starts), max(ends)) if sampler is not None else None,
        spread=figure,
    )


def _run_facts(row: Any, timed: TimedResult) -> dict[str, Any]:
    """One run of a sweep as its Result's params list it."""
    result = timed.result
    return {
        "run_index": int(row["run_index"]),
        "slot": int(row["slot"]),
        "device": row["device"],
        "visible_devices": row["visible"] or None,
        "samples_per_s": result.value,
        "seconds": result.seconds,
        "pset_id": row["_pset_id"],
        "host": row["_exec_host"],
        "runtime_s": float(row["_pset_runtime"]),
        # Where a run's wall clock goes besides its timed loop: process start, imports, model build,
        # warm-up (and waiting for the peers), then tear-down. This is what bounds a sweep of short runs.
        "before_timed_s": round(timed.wall_start - float(row["started"]), 3),
        "after_timed_s": round(float(row["ended"]) - timed.wall_end, 3),
        "started_together": result.params.get("started_together"),
        "failure": None,
    }


def _machine_windows(windows_by_slot: dict[int, list[list[float]]]) -> Spread | None:
    """The machine's throughput per timed window: each device's runs averaged window by window, added over the
    devices (the first runs on every device time their windows together). None unless every run kept the same
    number of windows."""
    counts = {len(w) for runs in windows_by_slot.values() for w in runs}
    if len(counts) != 1 or 0 in counts:
        return None
    (count,) = counts
    machine = [sum(sum(run[k] for run in runs) / len(runs) for runs in windows_by_slot.values()) for k in range(count)]
    return of_windows(machine, "samples/s")
