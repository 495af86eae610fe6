"""Several study runs per GPU: `per_gpu: auto | N` (study file) or `--per-gpu` (run, resume, worker).

One style-transfer run keeps an H100 only about two thirds busy: between its kernels the GPU waits on the run's own
Python and launches. Runs in other processes fill those gaps (the CUDA driver time-slices their contexts), so a
study packs several workers onto each GPU, every one pinned to the same UUID, and Dask hands each the next run.

`auto` (the default) sizes the packing from a probe: the study's first runs, two per GPU one after the other on
one worker per GPU; the second of each is measured (the first pays for cuDNN's autotuning and the worker's start).
Each run records what it needs of the GPU's memory and the time window of its timed loop; NVML, sampled meanwhile,
gives how busy the GPU was in that window. The count is the smallest k whose runs, their idle gaps independent,
leave the GPU idle less than 1 − TARGET_BUSY of the time (1 − (1 − busy)^k ≥ TARGET_BUSY; a run at least
ALONE_BUSY busy runs alone), no more than the
GPU's memory holds (MEMORY_SHARE of it, at the probe's footprint per process), the host's cores per GPU, or
MAX_AUTO. A resumed study reuses the count its earlier session sized. `1` is one worker per GPU, as before;
CPU workers are never packed (their count already spends the cores). Packed workers each get an equal share of
MEMORY_SHARE of their GPU as torch's memory cap (GPULAB_GPU_MEMORY_LIMIT_GIB, or the user's smaller one): the
autotuner then tries only workspaces within a worker's share, and no worker's cache starves the others.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import PackingProbe, Sizing, measured

AUTO = "auto"
KEY = "per_gpu"  # the chosen count's name in sessions.json
TARGET_BUSY = 0.97
# A run that keeps its GPU this busy runs alone: another would fill at most the last tenth and pays its own start-up
# and compile (measured on an H100: compiled style-transfer runs, 91 % busy alone, took 274 s for 53 runs on two
# workers; one worker runs them in 3.0 s each, about 200 s with its compile).
ALONE_BUSY = 0.9
MEMORY_SHARE = 0.9  # of a GPU's memory for the packed runs: the rest for fragmentation and other tenants
MAX_AUTO = 6  # more contexts than this only add switching (an H100 measured 1.56× at 4, the gain flattening)
UNKNOWN_BUSY_PER_GPU = 2  # where NVML could not say how busy the probe kept the GPU
PROBE_RUNS = 2  # per GPU; the last one is measured
HINT = "give auto or a whole number ≥ 1 (1: one run per GPU at a time)"


def auto_or_count(value: Any, key: str, hint: str) -> int | str:
    """A checked `auto | N` setting (per_gpu, batch_runs): "auto" or an int ≥ 1 (digits in text taken as one);
    GpulabError naming `key` and `hint` otherwise."""
    if value == AUTO:
        return AUTO
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GpulabError(f"{key}: {value!r} is not auto or a whole number ≥ 1; {hint}")
    return int(value)


def runs_per_gpu_value(value: Any) -> int | str:
    """A checked `per_gpu` setting (runs at once on each GPU): "auto" or an int ≥ 1; GpulabError otherwise."""
    return auto_or_count(value, "per_gpu", HINT)


def packed(slots: Sequence[Any], runs_per_gpu: int, totals_mib: dict[str, float] | None = None) -> list[Any]:
    """`runs_per_gpu` workers for each GPU slot (named gpu0, gpu0.1, ..., all pinned as the slot is), each capped to its
    share of the GPU's memory where `totals_mib` (by UUID) knows it; CPU slots as given."""
    from gpulab.launch.measuring import MEMORY_LIMIT_ENV, memory_limit_gib

    out: list[Any] = []
    for slot in slots:
        if not slot.gpu or runs_per_gpu <= 1:
            out.append(slot)
            continue
        total = (totals_mib or {}).get(slot.env.get("CUDA_VISIBLE_DEVICES", ""))
        if total:
            share = MEMORY_SHARE * total / 1024 / runs_per_gpu
            given = memory_limit_gib()
            slot = replace(slot, env={**slot.env, MEMORY_LIMIT_ENV: f"{min(share, given or share):.2f}"})
        out.append(slot)
        out.extend(replace(slot, name=f"{slot.name}.{k}") for k in range(1, runs_per_gpu))
    return out


def gpu_totals() -> dict[str, float]:
    """Each visible GPU's memory in MiB by UUID, as NVML reports it."""
    from gpulab.studies import cluster

    return {g.uuid: float(g.memory_total_mib) for g in cluster.visible_gpu_infos() if g.memory_total_mib}


def gpu_index(name: str) -> int | None:
    """The NVML index in a local worker's name (gpu3, gpu3.1 -> 3); None for CPU or remote workers."""
    head = name.removeprefix("gpu").split(".")[0]
    return int(head) if name.startswith("gpu") and head.isdigit() else None


def size(probes: Sequence[PackingProbe], *, cores: int, gpus: int) -> tuple[int, str]:
    """(runs per GPU, why) from the probe runs, one per GPU (the tightest GPU decides)."""
    cap = max(1, min(MAX_AUTO, cores // max(1, gpus)))
    why = [f"at most {cap} (MAX_AUTO {MAX_AUTO}, {cores} cores for {gpus} GPU(s))"]
    busy = [p.busy for p in probes if p.busy is not None]
    if busy:
        u = min(max(busy), 1.0)
        if u >= ALONE_BUSY:
            k, said = 1, f"one run kept the GPU {u:.0%} busy (≥ {ALONE_BUSY:.0%}): 1"
        else:
            k = cap if u <= 0 else math.ceil(math.log(1 - TARGET_BUSY) / math.log(1 - u))
            said = f"one run kept the GPU {u:.0%} busy: {k} for ≥ {TARGET_BUSY:.0%}"
        why.insert(0, said)
    else:
        k = UNKNOWN_BUSY_PER_GPU
        why.insert(0, f"NVML did not say how busy one run kept the GPU: {k}")
    fits = [
        math.floor(MEMORY_SHARE * p.total_mib / p.footprint_mib)
        for p in probes
        if p.footprint_mib and p.total_mib and p.footprint_mib > 0
    ]
    if fits:
        why.append(f"memory holds {min(fits)} ({max(p.footprint_mib or 0 for p in probes):.0f} MiB each)")
        k = min(k, min(fits))
    else:
        why.append("memory per run unknown: 1")
        k = 1
    return max(1, min(k, cap)), "; ".join(why)


def probe_from(row: dict[str, Any], busy: float | None) -> PackingProbe:
    """A probe from a run's result columns (psweep's names, ending in _) and the GPU's measured busy fraction."""
    return PackingProbe(
        measured(row.get("gpu_process_mib_")), measured(row.get("gpu_total_mib_")), busy, measured(row.get("timed_s_"))
    )


def recorded(sessions: Sequence[dict[str, Any]]) -> int | None:
    """The count an earlier session of the study sized with auto (the latest), so a resume need not probe again."""
    for session in reversed(sessions):
        sizing = Sizing.from_json(KEY, session.get("packing"))
        if sizing is not None and sizing.asked == AUTO:
            return sizing.chosen
    return None


Runner = Callable[[list[dict[str, Any]], Any], Any]  # (psets, Dask client) -> psweep's database


def plan(
    asked: int | str,
    chosen: list[Any],
    todo: list[dict[str, Any]],
    sessions: Sequence[dict[str, Any]],
    run: Runner,
) -> tuple[list[Any], list[dict[str, Any]], Sizing]:
    """(the workers to start, the runs still to do, how it was decided).

    With `auto` and GPU workers, the probe's runs are done here (through `run`, on one worker per GPU) and leave
    the list of runs still to do."""
    gpu_slots = [s for s in chosen if s.gpu]
    if not gpu_slots:
        return chosen, todo, Sizing(KEY, asked, 1, "CPU workers are not packed")
    totals = gpu_totals()
    if asked != AUTO:
        return packed(chosen, int(asked), totals), todo, Sizing(KEY, asked, int(asked), "as asked")
    again = recorded(sessions)
    if again is not None:
        return packed(chosen, again, totals), todo, Sizing(KEY, AUTO, again, "sized by an earlier session")
    probe_runs = PROBE_RUNS * len(gpu_slots)
    if len(todo) <= probe_runs:
        return chosen, todo, Sizing(KEY, AUTO, 1, "too few runs to size a packing")
    first, rest = todo[:probe_runs], todo[probe_runs:]
    probes = _probe(first, chosen, run)
    k, why = size(probes, cores=os.cpu_count() or 1, gpus=len(gpu_slots))
    return packed(chosen, k, totals), rest, Sizing(KEY, AUTO, k, why, tuple(probes), len(first))


def _probe(first: list[dict[str, Any]], chosen: list[Any], run: Runner) -> list[PackingProbe]:
    """Run `first` on one worker per GPU while NVML is sampled; a probe from each worker's last finished run."""
    from gpulab.studies import cluster
    from gpulab.telemetry import Sampler

    indices = sorted({i for i in (gpu_index(s.name) for s in chosen if s.gpu) if i is not None})
    with cluster.local_client(chosen) as client, Sampler(indices) as sampler:
        df = run(first, client)
    mine = df[df["_run_id"] == df["_run_id"].iloc[-1]] if len(df) and "_run_id" in df.columns else df.iloc[:0]
    last: dict[str, dict[str, Any]] = {}
    for _, row in mine.iterrows():
        values = dict(row)
        started = values.get("loop_started_")
        if values.get("status_") != "ok" or not isinstance(started, (int, float)):
            continue
        worker = str(values.get("worker_"))
        if worker not in last or started > last[worker]["loop_started_"]:
            last[worker] = values
    return [probe_from(values, _busy(sampler, values)) for _, values in sorted(last.items())]


def _busy(sampler: Any, row: dict[str, Any]) -> float | None:
    """NVML utilisation of the run's GPU over its timed loop (0..1), None where nothing was sampled there."""
    start, seconds = row.get("loop_started_"), row.get("timed_s_")
    index = gpu_index(str(row.get("worker_") or ""))
    if not isinstance(start, (int, float)) or not isinstance(seconds, (int, float)) or index is None:
        return None
    summary = sampler.summary(start=float(start), end=float(start) + float(seconds))
    for stats in summary.per_gpu if summary is not None else []:
        if stats.index == index and stats.samples >= 3 and stats.util_mean is not None:
            return float(stats.util_mean) / 100.0
    return None
