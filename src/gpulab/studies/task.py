"""One run of a study, as psweep calls it on a worker: `run_pset(pset) -> the run's result columns`.

A worker is a long-lived process pinned to one GPU (CUDA_VISIBLE_DEVICES set before anything imported a framework)
or a CPU worker; torch, the CUDA context, cuDNN's autotuned kernels and the style-transfer network stay loaded from
one run to the next, so a run costs its iterations plus well under a second. PyTorch runs on one device execute in
the worker; other runs (TensorFlow, a launcher over the machine's GPUs) start `gpulab run` as a child process.

A run never raises: an error becomes `status_: failed` with the reason in `failure_` (the traceback in the run's
error.txt), and the study goes on. Result columns end with "_", psweep's mark for results: they are not parameters,
so they neither enter a run's hash nor count as parameters when a later session adds runs.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from gpulab import names
from gpulab.interrupts import Terminated, child_env, stop_child
from gpulab.studies.cluster import DEVICE_ENV, LABEL_ENV, THREADS_ENV
from gpulab.studies.spec import EPOCH_KEYS, RUN_FIELDS, WORKER
from gpulab.workloads.registry import REGISTRY
from gpulab.workloads.stand_ins import stand_ins

META = ("study", "workload", "framework", "size", "precision", "launcher", "gpus", "repeat", "seed", "data")
CURVE_POINTS = 200  # a loss curve is kept at up to this many points
RESULT = "result.json"
STOP_GRACE_S = 15.0  # for a stopped `gpulab run` to stop its own workers (its torchrun agent's grace and some)


def workload_params(pset: dict[str, Any]) -> dict[str, Any]:
    """The pset's workload parameters: what is neither book-keeping, a run field nor an epoch setting."""
    skip = {*META, *RUN_FIELDS, *EPOCH_KEYS}
    return {k: v for k, v in pset.items() if not k.startswith("_") and k not in skip and not _missing(v)}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def run_pset(pset: dict[str, Any]) -> dict[str, Any]:
    """psweep's function: one run, its result columns (also written to <run dir>/result.json)."""
    from gpulab.report.database import save_row
    from gpulab.report.io import jsonable

    started = time.time()
    run_dir = Path(pset["_calc_dir"]) / str(pset["_pset_id"])
    run_dir.mkdir(parents=True, exist_ok=True)
    device = os.environ.get(DEVICE_ENV, "cpu")
    facts: dict[str, Any] = {"device": os.environ.get(LABEL_ENV, device), "worker": _worker_name() or "machine"}
    batched = _BATCHED.pop(str(pset["_pset_id"]), None)
    note = _BATCH_NOTES.pop(str(pset["_pset_id"]), None)
    if note:
        facts["batch_note"] = note
    try:
        if batched is not None:
            facts.update(batched)
        elif _in_worker(pset):
            facts.update(_run_here(pset, run_dir, device))
        else:
            facts.update(_run_child(pset, run_dir))
        facts.update(status="ok", failure=None)
    except Exception as err:  # any run's failure is recorded, never raised: the study goes on
        (run_dir / "error.txt").write_text(traceback.format_exc())
        facts.update(status="failed", failure=_one_line(err))
        _free_memory()
    if batched is None:
        facts["wall_s"] = round(time.time() - started, 3)
    timed = facts.get("timed_s")
    facts["overhead_s"] = round(facts["wall_s"] - timed, 3) if isinstance(timed, (int, float)) else None
    (run_dir / RESULT).write_text(json.dumps(jsonable(facts), indent=1))
    results = {f"{k}_": v for k, v in facts.items()}  # psweep's convention: result columns end with "_"
    save_row(run_dir, {**pset, **results})  # the row outlives a stopped session: the next read of the database adds it
    return results


# Runs a batch computed on this worker, by pset id, for run_pset to record; and why a batch's runs went alone.
_BATCHED: dict[str, dict[str, Any]] = {}
_BATCH_NOTES: dict[str, str] = {}


def run_batch(func: Callable[[dict[str, Any]], Any], psets: list[dict[str, Any]]) -> list[Any]:
    """On a worker, one batch of runs (gpulab.studies.batching): computed at once, then psweep's function `func`
    for each run, which records it (or, where the batch failed, runs it alone)."""
    if len(psets) > 1:
        prepare_batch(psets)
    return [func(pset) for pset in psets]


def prepare_batch(psets: list[dict[str, Any]]) -> None:
    """Compute a batch of runs at once (gpulab.studies.batching) and leave each run's facts for run_pset; never
    raises: where the batch fails, its runs are left to run one by one, each told why (batch_note)."""
    started = time.time()
    device = os.environ.get(DEVICE_ENV, "cpu")
    try:
        results = _batch_here(psets, device)
    except Exception as err:  # the runs go alone: one bad parameter set then fails by itself
        first = Path(psets[0]["_calc_dir"]) / str(psets[0]["_pset_id"])
        first.mkdir(parents=True, exist_ok=True)
        (first / "batch-error.txt").write_text(traceback.format_exc())
        note = f"its batch of {len(psets)} failed ({_one_line(err)}); run alone"
        _BATCH_NOTES.update({str(p["_pset_id"]): note for p in psets})
        _free_memory()
        return
    wall = (time.time() - started) / len(psets)
    for pset, facts in zip(psets, results, strict=True):
        facts["wall_s"] = round(wall, 3)
        _BATCHED[str(pset["_pset_id"])] = facts


def _batch_here(psets: list[dict[str, Any]], device: str) -> list[dict[str, Any]]:
    """The runs of `psets` as one batched session on this worker's device: each run's result columns, with its
    share of the batch's time (timed_s, the batch's over its runs) and the batch's own figures beside them."""
    import torch

    from gpulab.launch.local import torch_threads
    from gpulab.launch.measuring import set_cuda_flags, timed_loop
    from gpulab.workloads.registry import load

    workload = REGISTRY[str(psets[0]["workload"])]
    if workload.batch is None:
        raise RuntimeError(f"{workload.name} has no batched version")
    dirs = [Path(p["_calc_dir"]) / str(p["_pset_id"]) for p in psets]
    cfgs = [run_config(p, d, device) for p, d in zip(psets, dirs, strict=True)]
    threads = int(os.environ.get(THREADS_ENV, "1")) if device == "cpu" else None
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats(0)
    before = torch.cuda.memory_allocated(0) if cuda else 0
    marks: list[float] = []
    with torch_threads(threads):
        set_cuda_flags(device)
        session = load(workload.batch, f"the batched builder of {workload.name}")(cfgs, device)
        if cuda:
            _steady_peak(session, torch)
        timing = timed_loop(session, cfgs[0].warmup, [device], before_timed=lambda: marks.append(time.time()))
        flops = session.flops_per_step() / len(cfgs)
        losses = torch.stack(session.run_losses).float().cpu().t().tolist() if session.run_losses else []
        finished = session.finish_runs()
        used_threads = torch.get_num_threads()
    n = len(cfgs)
    share = timing.seconds / n
    batch: dict[str, Any] = {
        "precision_used": cfgs[0].precision.value,
        "timed_s": round(share, 4),
        "steps_run": timing.steps + cfgs[0].warmup,
        "samples_per_s": timing.steps / share if share > 0 else None,
        "threads": used_threads,
        "weights": session.info.get("weights"),
        "loop_started": marks[0] if marks else None,
        "loop": session.info.get("loop"),
        "flops_per_iteration": flops,
        "batch": str(psets[0]["_pset_id"]),
        "batch_runs": n,
        "batch_timed_s": round(timing.seconds, 4),
    }
    if cuda:
        batch["gpu_name"] = torch.cuda.get_device_name(0)
        peak = torch.cuda.max_memory_allocated(0)
        batch["max_memory_mib"] = round(peak / n / 2**20, 1)
        batch["batch_memory_mib"] = round((peak - before) / 2**20, 1)
        batch["gpu_context_mib"] = round(_context_bytes(torch) / 2**20, 1)
        batch.update(gpu_footprint(torch))
    out = []
    for k, (cfg, facts) in enumerate(zip(cfgs, finished, strict=True)):
        run = {**batch, "final_loss": facts.get("final_loss")}
        run["loss_curve"] = _thinned(losses[k]) if losses else []
        run["output"] = _relative(facts.get("output"), dirs[k])
        run["data_used"] = facts.get("data")
        run["stand_ins"] = stand_ins(cfg.workload, {**session.info, **facts, "workload_params": cfg.params})
        out.append(run)
    del session
    return out


def _steady_peak(session: Any, torch: Any) -> None:
    """Reset the GPU's peak memory after the session's first step: that step's autotuning tries cuDNN algorithms
    with workspaces no later step needs, which would make a batch look several times larger than it is."""
    first = session.step

    def step() -> Any:
        session.step = first
        loss = first()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(0)
        return loss

    session.step = step


def outcome(row: Any) -> dict[str, Any]:
    """A database row's results by their plain names (status, wall_s, ...), its parameters beside them."""
    items = dict(row).items()
    plain = {k: v for k, v in items if not k.endswith("_")}
    plain.update({k[:-1]: v for k, v in items if k.endswith("_") and not k.startswith("_")})
    return plain


def _in_worker(pset: dict[str, Any]) -> bool:
    framework = pset.get("framework", names.DEFAULT_FRAMEWORK)
    return framework == names.Framework.TORCH and pset.get("launcher", WORKER) == WORKER


def _worker_name() -> str | None:
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return None


def _one_line(err: BaseException) -> str:
    text = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {text}"[:500]


def _free_memory() -> None:
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _precision(pset: dict[str, Any], device: str) -> tuple[names.Precision, bool]:
    """(precision, channels_last): the pset's, or with `precision: plan` what the precision plan picks for this GPU.
    A pset is a row of the study's database, its precision the text the study file (or its vary list) gave: read
    here, where the pset becomes a RunConfig."""
    channels_last = bool(pset.get("channels_last", False))
    if str(pset.get("precision", "plan")) != "plan":
        return names.Precision.parse(pset["precision"], training=True, who=str(pset["workload"])), channels_last
    if not device.startswith("cuda"):
        return names.Precision.FP32, channels_last
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return planned(pset, torch.cuda.get_device_name(0), f"{major}.{minor}") or (names.Precision.FP32, channels_last)


def planned(pset: dict[str, Any], gpu_name: str, compute_capability: str | None) -> tuple[names.Precision, bool] | None:
    """What the precision plan of this GPU model picks for the pset's workload: (precision, channels_last), the
    pset's own channels_last winning where it sets one; None where the GPU has no plan."""
    from gpulab import compat
    from gpulab.workloads import precision_plan

    plan = precision_plan.for_gpu(compat.gpu_by_name(gpu_name), compute_capability, None)
    if plan is None:
        return None
    choice = plan.training(str(pset["workload"]), str(pset.get("framework", names.DEFAULT_FRAMEWORK)))
    return choice.precision, bool(pset.get("channels_last", choice.channels_last))


def _planned_for_machine(pset: dict[str, Any]) -> tuple[names.Precision, bool] | None:
    """`precision: plan` for a `gpulab run` child: the plan of the first GPU this process may use, read through NVML
    (the study's process opens no CUDA context); None without GPUs."""
    from gpulab.studies import cluster

    visible = cluster.visible_gpu_infos()
    return planned(pset, visible[0].name, visible[0].compute_capability) if visible else None


def run_config(pset: dict[str, Any], run_dir: Path, device: str) -> Any:
    """The pset as a RunConfig; style transfer writes its image into the run's directory."""
    from gpulab.records import RunConfig

    precision, channels_last = _precision(pset, device)
    params = workload_params(pset)
    if REGISTRY[str(pset["workload"])].optimises_input and "output" not in params:
        params["output"] = str(run_dir / "output.png")
    fields = {k: pset[k] for k in ("batch", "steps", "num_workers") if not _missing(pset.get(k))}
    data = pset.get("data")
    return RunConfig(
        workload=str(pset["workload"]),
        precision=precision,
        channels_last=channels_last,
        warmup=int(pset.get("warmup", 0) if not _missing(pset.get("warmup")) else 0),
        size=str(pset.get("size", "standard")),
        data=Path(data) if isinstance(data, str) else None,
        seed=int(pset.get("seed", 0)),
        params=params,
        **fields,
    )


def _run_here(pset: dict[str, Any], run_dir: Path, device: str) -> dict[str, Any]:
    import torch

    from gpulab.launch.local import run_session, torch_threads
    from gpulab.launch.planning import plan_batch

    cfg = run_config(pset, run_dir, device)
    threads = int(os.environ.get(THREADS_ENV, "1")) if device == "cpu" else None
    if device.startswith("cuda"):
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats(0)
    with torch_threads(threads):
        if not _missing(pset.get("epochs")):
            return _epochs_here(pset, cfg, device)
        losses: list[Any] = []
        marks: list[float] = []  # when the timed loop began: the window a packing probe reads NVML over
        session, timing, finish = run_session(
            cfg, device, plan_batch(cfg, 1), losses=losses, before_timed=lambda: marks.append(time.time())
        )
        used_threads = torch.get_num_threads()
        flops = getattr(session, "flops_per_step", None)
    facts: dict[str, Any] = {
        "precision_used": cfg.precision.value,
        "timed_s": round(timing.seconds, 4),
        "steps_run": timing.steps + cfg.warmup,
        "samples_per_s": timing.samples / timing.seconds if timing.seconds > 0 else None,
        "final_loss": timing.loss,
        "loss_curve": _curve(losses),
        "output": _relative(finish.get("output"), run_dir),
        "threads": used_threads,
        "weights": session.info.get("weights"),
        "data_used": session.info.get("data"),
        "loop_started": marks[0] if marks else None,
        "stand_ins": stand_ins(cfg.workload, {**session.info, "workload_params": cfg.params}),
        "loop": session.info.get("loop"),
        "flops_per_iteration": flops() if flops is not None else None,
    }
    if device.startswith("cuda"):
        facts["gpu_name"] = torch.cuda.get_device_name(0)
        facts["max_memory_mib"] = round(torch.cuda.max_memory_allocated(0) / 2**20, 1)
        facts.update(gpu_footprint(torch))
    del session
    return facts


def gpu_footprint(torch: Any) -> dict[str, float]:
    """What this run needs of its GPU, in MiB: the process's context and libraries (what the GPU holds beyond the
    allocator's blocks) plus the run's peak of tensors; and the GPU's memory. What a study packing several runs per
    GPU sizes from (gpulab.studies.packing). Blocks merely cached are left out: cuDNN's autotuner leaves tens of GiB
    cached after a worker's first run, which a later run on the same shapes never asks for again."""
    used = _context_bytes(torch) + torch.cuda.max_memory_allocated(0)
    total = torch.cuda.mem_get_info(0)[1]
    return {"gpu_process_mib": round(used / 2**20, 1), "gpu_total_mib": round(total / 2**20, 1)}


def _context_bytes(torch: Any) -> int:
    """What the GPU holds beyond this process's allocator: its context and libraries (and other tenants')."""
    free, total = torch.cuda.mem_get_info(0)
    return max(0, total - free - torch.cuda.memory_reserved(0))


def _epochs_here(pset: dict[str, Any], cfg: Any, device: str) -> dict[str, Any]:
    from gpulab.training.epochs import EpochSpec
    from gpulab.training.loop import train_epochs

    given = {k: pset[k] for k in EPOCH_KEYS if not _missing(pset.get(k))}
    if "weights" in given:
        given["weights"] = Path(given["weights"])
    record = train_epochs(cfg, device, EpochSpec(**given))
    epochs = record.get("epochs") or []
    return {
        "precision_used": cfg.precision.value,
        "timed_s": record.get("total_s"),
        "samples_per_s": _mean([e.get("samples_per_s") for e in epochs]),
        "final_loss": epochs[-1].get("train_loss") if epochs else None,
        "loss_curve": [[e.get("epoch"), e.get("train_loss")] for e in epochs],
        "metric": record.get("metric"),
        "final_metric": record.get("final_metric"),
        "best_metric": record.get("best_metric"),
        "time_to_target_s": record.get("time_to_target_s"),
        "epoch_records": epochs,
        "stand_ins": stand_ins(
            cfg.workload, {"data": record.get("data"), "weights": record.get("weights"), "workload_params": cfg.params}
        ),
    }


def _mean(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    return sum(numbers) / len(numbers) if numbers else None


def _curve(losses: list[Any]) -> list[list[Any]]:
    """[[step, loss], ...] thinned to CURVE_POINTS (the last step always kept); read once, after the run."""
    if not losses or losses[0] is None:
        return []
    import torch

    return _thinned(torch.stack([loss.detach().float().reshape(()) for loss in losses]).cpu().tolist())


def _thinned(values: list[float]) -> list[list[Any]]:
    """[[step, loss], ...] of every step's loss, thinned to CURVE_POINTS (the last step always kept)."""
    every = max(1, math.ceil(len(values) / CURVE_POINTS))
    kept = [(k + 1, v) for k, v in enumerate(values) if k % every == 0 or k == len(values) - 1]
    return [[step, v if math.isfinite(v) else None] for step, v in kept]


def _relative(path: Any, run_dir: Path) -> str | None:
    if not path:
        return None
    try:
        return str(Path(path).resolve().relative_to(run_dir.parent.resolve()))
    except ValueError:
        return str(path)


def study_relative(value: Any) -> str | None:
    """A run's file as a page may link it: a plain relative path inside the study directory (no scheme such as
    `javascript:`, no `..`, not absolute, no control characters); anything else None."""
    if not isinstance(value, str) or not value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return None
    parts = PurePosixPath(value).parts
    if value.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts or "\\" in value:
        return None
    return value


def gpulab_run_command(pset: dict[str, Any], report: Path) -> list[str]:
    """The `gpulab run` line for a run that is not executed in a worker (TensorFlow, a multi-GPU launcher)."""
    asked = pset.get("launcher", WORKER)
    cmd = [sys.executable, "-m", "gpulab", "run", str(pset["workload"]), "--framework", str(pset["framework"])]
    if asked == WORKER:
        device = os.environ.get(DEVICE_ENV, "cpu")
        launcher = names.Launcher.GPU if device.startswith("cuda") else names.Launcher.CPU
    else:
        launcher = names.Launcher.parse(asked, "the study's launcher", run=True)
    cmd += [
        "--launcher",
        launcher.value,
        "--size",
        str(pset.get("size", "standard")),
        "--seed",
        str(pset.get("seed", 0)),
    ]
    gpus = pset.get("gpus")
    if not launcher.one_device and isinstance(gpus, (int, float, str)) and not _missing(gpus):
        cmd += ["--gpus", str(_gpu_count() if gpus == "all" else int(gpus))]
    precision, channels_last = str(pset.get("precision", "plan")), bool(pset.get("channels_last"))
    if precision == "plan":  # `gpulab run` alone would train in fp32
        chosen, channels_last = _planned_for_machine(pset) or (names.Precision.FP32, channels_last)
        precision = chosen.value
    cmd += ["--precision", precision]
    for key in ("batch", "steps", "warmup", "num_workers"):
        value = pset.get(key)
        if isinstance(value, (int, float)) and not _missing(value):
            cmd += [f"--{key.replace('_', '-')}", str(int(value))]
    if channels_last:
        cmd.append("--channels-last")
    if isinstance(pset.get("data"), str):
        cmd += ["--data", str(pset["data"])]
    epoch_flags = {"epochs": "--epochs", "val_fraction": "--val-fraction", "optimizer": "--optimizer"}
    epoch_flags.update(target_accuracy="--target-accuracy", weights="--weights")
    for key, flag in epoch_flags.items():
        if not _missing(pset.get(key)):
            cmd += [flag, str(pset[key])]
    for key, value in workload_params(pset).items():
        cmd += ["--param", f"{key}={json.dumps(value)}"]
    return [*cmd, "--json", "--report", str(report)]


def _gpu_count() -> int:
    """The machine's GPUs for `gpus: all`, as the study counted them before starting (GPULAB_STUDY_ALL_GPUS)."""
    return int(os.environ.get("GPULAB_STUDY_ALL_GPUS", "1"))


def _run_child(pset: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    report = run_dir / "report.json"
    cmd = gpulab_run_command(pset, report)
    (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
    with (run_dir / "log.txt").open("w") as log:
        proc = _run_gpulab(cmd, log)
    if proc.returncode != 0:
        lines = [ln for ln in (run_dir / "log.txt").read_text(errors="replace").splitlines() if ln.strip()]
        raise RuntimeError(f"gpulab run exited {proc.returncode}: {lines[-1] if lines else 'no output'}")
    result = json.loads(proc.stdout)
    params = result.get("params") or {}
    found = params.get("epochs")
    record: dict[str, Any] = found if isinstance(found, dict) else {}
    return {
        "device": f"{result.get('launcher')}×{result.get('n')}",  # the machine's devices the run took
        "precision_used": result.get("precision"),
        "timed_s": result.get("seconds") if not record else record.get("total_s"),
        "samples_per_s": result.get("value"),
        "final_loss": params.get("final_loss"),
        "launcher_used": result.get("launcher"),
        "gpus_used": result.get("n"),
        "metric": record.get("metric"),
        "final_metric": record.get("final_metric"),
        "best_metric": record.get("best_metric"),
        "time_to_target_s": record.get("time_to_target_s"),
        "epoch_records": record.get("epochs"),
        "loss_curve": [[e.get("epoch"), e.get("train_loss")] for e in record.get("epochs") or []],
        "stand_ins": params.get("stand_ins") or [],
    }


def _run_gpulab(cmd: list[str], log: TextIO) -> subprocess.CompletedProcess[str]:
    """A `gpulab run` to its end, stopped as this process is: Ctrl-C or SIGTERM here is passed on to it (in a session
    of its own, it gets it once, from here), and it ends with this process (or the Dask worker thread waiting for it)
    should that be killed."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=child_env(), start_new_session=True
    ) as proc:
        try:
            stdout, _ = proc.communicate()
        except KeyboardInterrupt as stop:
            stop_child(proc, STOP_GRACE_S, signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, None)


def _jsonable(value: Any) -> Any:
    from gpulab.report.io import jsonable

    return jsonable(value)
