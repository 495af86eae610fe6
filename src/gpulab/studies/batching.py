"""Runs of a study optimised together: `batch_runs: auto | N` (study file) or `--batch-runs` (run, resume).

One 512-px style-transfer run keeps a GPU's clock busy but most of its tensor cores idle. Runs that differ only in
numbers (loss weights, learning rate, style scale: the workload's `batch_shared` parameters, and the seed) can run
as one batch: the workload's batched session stacks their images and steps them together (for style transfer,
gpulab.workloads.style_transfer.batch). Every other parameter and run field splits batches: pending runs are grouped by
those, in the study's order, and each group cut into batches of near-equal size (at most two shapes to compile).

Each run keeps its own row, image, loss curve, seed and status; a batch that fails is run again run by run, so one
bad parameter set fails alone and the others finish. `1` is one run at a time, exactly as before.

`auto` on GPU workers sizes the batch from the first batch's memory: one probe batch of PROBE_RUNS runs per GPU
worker, then the largest batch that MEMORY_SHARE of the GPU holds at the probe's memory per run, no larger than
MAX_AUTO and than an even share of the remaining runs per worker (a worker left idle while another runs the last
batch costs more than a smaller batch). On CPU workers `auto` is CPU_AUTO: host memory per run is not measured, and
a CPU gains from batching only the per-step overhead. A resumed study reuses the size its earlier session chose.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from gpulab.records import BatchProbe, Sizing, measured
from gpulab.studies.packing import AUTO, auto_or_count

KEY = "batch_runs"  # the chosen size's name in sessions.json
MAX_AUTO = 64  # 512-px runs on an H200, s per run: 2.79 alone, 2.40 in 8, 2.10 in 32 (compiled, CUDA graphs)
CPU_AUTO = 8
PROBE_RUNS = 4  # per GPU worker: the first batch, which sizes the rest
MEMORY_SHARE = 0.8  # of the GPU's memory free of the worker's context, for one batch: the rest for the allocator
HINT = "give auto or a whole number ≥ 1 (1: one run at a time)"
BOOKKEEPING = ("seed", "repeat")  # may differ inside a batch: each image starts from its own seed


def batch_runs_value(value: Any) -> int | str:
    """A checked `batch_runs` setting: "auto" or an int ≥ 1; GpulabError otherwise."""
    return auto_or_count(value, KEY, HINT)


def why_not(study: Any) -> str | None:
    """Why the study's runs cannot share batches, or None when they can."""
    from gpulab.workloads.registry import REGISTRY

    workload = REGISTRY.get(study.workload)
    if workload is None or workload.batch is None:
        return f"{study.workload} has no batched version: each run trains its own model (see docs/studies.md)"
    if study.framework != "torch":
        return f"{study.workload} batches in its torch version only"
    if study.whole_machine:
        return "its runs take the whole machine through `gpulab run`"
    if study.epochs:
        return "its runs train for epochs"
    return None


def split_key(pset: dict[str, Any], shared: frozenset[str]) -> str:
    """What runs of one batch must have alike: every parameter but the shared ones and the seed (book-keeping
    columns, starting with _, and results, ending with _, left out)."""
    kept = {
        k: v
        for k, v in pset.items()
        if k not in shared and k not in BOOKKEEPING and not k.startswith("_") and not k.endswith("_")
    }
    return json.dumps(kept, sort_keys=True, default=str)


def batches(psets: Sequence[dict[str, Any]], size: int, shared: frozenset[str]) -> list[list[dict[str, Any]]]:
    """`psets` in batches of at most `size` runs that may share one, in the study's order: grouped by split_key,
    each group cut into the fewest batches of at most `size`, their sizes differing by at most one."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for pset in psets:
        groups.setdefault(split_key(pset, shared), []).append(pset)
    out: list[list[dict[str, Any]]] = []
    for members in groups.values():
        count = math.ceil(len(members) / max(1, size))
        base, extra = divmod(len(members), count)
        start = 0
        for k in range(count):
            end = start + base + (1 if k < extra else 0)
            out.append(members[start:end])
            start = end
    return out


class BatchingClient:
    """A Dask client as psweep uses it (map, gather) that sends each batch of runs to one worker as one task.

    psweep gives every run its id, directory and row as always; on the worker, `each_batch(func, psets)`
    (gpulab.studies.task.run_batch) computes the batch and then calls psweep's function for each run, which records
    it from what the batch left for it."""

    def __init__(self, client: Any, size: int, shared: frozenset[str], each_batch: Callable[..., list[Any]]) -> None:
        self.client, self.size, self.shared, self.each_batch = client, size, shared, each_batch

    def map(self, func: Callable[[dict[str, Any]], Any], params: Sequence[dict[str, Any]]) -> list[Any]:
        return [
            self.client.submit(self.each_batch, func, batch, pure=False)
            for batch in batches(params, self.size, self.shared)
        ]

    def gather(self, futures: Sequence[Any]) -> list[Any]:
        return [result for results in self.client.gather(list(futures)) for result in results]


def recorded(sessions: Sequence[dict[str, Any]]) -> int | None:
    """The size an earlier session chose with auto (the latest), so a resume need not probe again."""
    for session in reversed(sessions):
        sizing = Sizing.from_json(KEY, session.get("batching"))
        if sizing is not None and sizing.asked == AUTO:
            return sizing.chosen
    return None


def probe_from(row: dict[str, Any]) -> BatchProbe:
    """A probe batch's run from its result columns (psweep's names, ending in _)."""
    columns = ("timed_s_", "batch_memory_mib_", "batch_runs_", "gpu_total_mib_", "gpu_context_mib_")
    return BatchProbe(row.get("status_") == "ok", *(measured(row.get(c)) for c in columns))


def size_from_probe(probes: Sequence[BatchProbe], remaining: int, workers: int) -> tuple[int, str]:
    """(runs per batch, why) from the probe batches' runs that finished."""
    done = [p for p in probes if p.finished]
    times = [p.run_s for p in done if p.run_s is not None]
    memory = [m for p in done if (m := p.memory) is not None]
    per_run, free = [m[0] for m in memory], [m[1] for m in memory]
    even = max(1, math.ceil(remaining / max(1, workers)))
    why = [f"at most {MAX_AUTO} (MAX_AUTO)", f"{even} to give each of {workers} worker(s) an even share"]
    if not per_run and times:
        return min(CPU_AUTO, even), f"CPU workers: {CPU_AUTO} (CPU_AUTO; host memory per run is not measured)"
    if not per_run:
        return 1, "no probe run finished: one run at a time"
    fits = max(1, math.floor(MEMORY_SHARE * min(free) / max(per_run)))
    why.insert(0, f"memory holds {fits} ({max(per_run):.0f} MiB per run, {MEMORY_SHARE:.0%} of {min(free):.0f} MiB)")
    if times:
        why.append(f"probe: {min(times):.2f} s per run at {PROBE_RUNS} per batch")
    return max(1, min(MAX_AUTO, fits, even)), "; ".join(why)
