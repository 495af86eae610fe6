"""Epoch training through the torch launchers: cpu (T threads), gpu (one CUDA device), dataparallel (one process,
the global batch split over GPUs) and ddp (torchrun: one process per GPU, or CPU processes over gloo).

The Result's value is the training samples per second over all epochs (validation excluded); its params carry
the epoch record under "epochs".
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from gpulab.errors import GpulabError
from gpulab.launch.measuring import launch_params, make_result
from gpulab.launch.planning import BatchPlan, check_config, plan_batch
from gpulab.launch.spec import Launch, WorkerMessage
from gpulab.names import CommBackend, Framework, Launcher
from gpulab.records import Result, RunConfig
from gpulab.training.epochs import EpochSpec, current_listener
from gpulab.training.loop import train_epochs

RECORD_FACTS = ("metric", "final_metric", "best_metric", "time_to_target_s", "data", "optimizer", "learning_rate")


def run_epochs(launch: Launch) -> Result:
    """Train launch.cfg for launch.epochs epochs with launch.launcher; one Result for the whole run."""
    spec = launch.epochs
    assert spec is not None
    if launch.builder is not None:
        raise GpulabError("--epochs trains gpulab's own workloads; drop --builder")
    cfg = launch.cfg
    check_config(cfg, None)
    if launch.launcher == Launcher.CPU:
        return _cpu(cfg, spec, launch.threads)
    if launch.launcher == Launcher.GPU:
        return _gpu(cfg, spec, launch.index, launch.telemetry)
    if launch.launcher == Launcher.DATAPARALLEL:
        return _dataparallel(launch, spec)
    if launch.launcher == Launcher.DDP:
        return _ddp(launch, spec)
    raise GpulabError(f"--epochs runs with --launcher cpu, gpu, dataparallel or ddp, not {launch.launcher}")


def epoch_result(
    cfg: RunConfig,
    record: dict[str, Any],
    plan: BatchPlan,
    *,
    launcher: Launcher,
    n: int,
    devices: list[str],
    device: str | None,
    telemetry: Any = None,
    framework: Framework = Framework.TORCH,
    versions: dict[str, str] | None = None,
    comm_backend: CommBackend | None = None,
    **extra: Any,
) -> Result:
    """The Result of an epoch run: value = training samples per second over all epochs, params.epochs = record."""
    epochs = record["epochs"]
    first, last = epochs[0]["train_loss"], epochs[-1]["train_loss"]
    info = {k: record.get(k) for k in RECORD_FACTS}
    info.update(workload=cfg.workload, mode="epochs", precision=record.get("precision"))
    params = launch_params(
        cfg, plan, info, {}, last, last is not None, first, **(versions or {}), epochs=record, **extra
    )
    return make_result(
        cfg,
        launcher=launcher,
        n=n,
        samples=sum(int(e["samples"]) for e in epochs),
        seconds=float(record["train_s"]),
        steps=int(record["steps"]),
        batch=plan.per_device,
        devices=devices,
        device=device,
        params=params,
        telemetry=telemetry,
        framework=framework,
        comm_backend=comm_backend,
    )


def _result(cfg: RunConfig, record: dict[str, Any], plan: BatchPlan, **kwargs: Any) -> Result:
    import torch

    return epoch_result(cfg, record, plan, versions={"torch": torch.__version__}, **kwargs)


def _cpu(cfg: RunConfig, spec: EpochSpec, threads: int | None) -> Result:
    import torch

    from gpulab.launch.local import torch_threads

    with torch_threads(threads or int(torch.get_num_threads()) or os.cpu_count() or 1) as used:
        record = train_epochs(cfg, "cpu", spec)
    plan = plan_batch(cfg, 1).resolved(int(record["batch"]))
    return _result(cfg, record, plan, launcher=Launcher.CPU, n=used, devices=["cpu"], device="cpu", threads=used)


def _gpu(cfg: RunConfig, spec: EpochSpec, index: int, telemetry: bool) -> Result:
    import time

    import torch

    from gpulab.launch.local import _require_gpus, _sampling

    visible = _require_gpus(1, "gpu")
    if not 0 <= index < visible:
        raise GpulabError(f"there is no cuda:{index}; torch sees {visible} GPUs (cuda:0 to cuda:{visible - 1})")
    device = f"cuda:{index}"
    torch.cuda.set_device(index)
    with _sampling([index], telemetry) as sampler:
        start = time.time()
        record = train_epochs(cfg, device, spec)
        end = time.time()
    plan = plan_batch(cfg, 1).resolved(int(record["batch"]))
    summary = sampler.summary(start, end) if sampler else None
    return _result(cfg, record, plan, launcher=Launcher.GPU, n=1, devices=[device], device=device, telemetry=summary)


def _dataparallel(launch: Launch, spec: EpochSpec) -> Result:
    import time

    from torch import nn

    from gpulab.launch.local import _sampling, dataparallel_on_gpu
    from gpulab.workloads.recipes import recipe

    cfg, gpus = launch.cfg, launch.gpus
    on_gpu = dataparallel_on_gpu(gpus)
    plan = plan_batch(cfg, gpus, launch.batch_policy, launch.scale_lr)
    per_device = plan.per_device or recipe(cfg, spec.val_fraction).batch
    plan = plan.resolved(per_device)
    ordinals = list(range(gpus)) if on_gpu else []
    device = "cuda:0" if on_gpu else "cpu"
    global_cfg = dataclasses.replace(plan.device_config(cfg), batch=per_device * gpus)

    def wrapper(model: Any) -> Any:
        return nn.DataParallel(model, device_ids=ordinals or None)

    devices = [f"cuda:{k}" for k in ordinals] or ["cpu"]
    with _sampling(ordinals, launch.telemetry) as sampler:
        start = time.time()
        record = train_epochs(global_cfg, device, spec, wrapper=wrapper)
        end = time.time()
    summary = sampler.summary(start, end) if sampler else None
    extra = {} if on_gpu else {"pass_through": True}
    return _result(
        cfg,
        record,
        plan,
        launcher=Launcher.DATAPARALLEL,
        n=gpus,
        devices=devices,
        device=None,
        telemetry=summary,
        **extra,
    )


def _ddp(launch: Launch, spec: EpochSpec) -> Result:
    from gpulab.launch.ddp import ddp_comm_backend, run_ddp_workers

    cfg, nprocs, threads = launch.cfg, launch.gpus, launch.threads or 1
    backend = ddp_comm_backend(nprocs, launch.comm_backend, threads)
    plan = plan_batch(cfg, nprocs, launch.batch_policy, launch.scale_lr)
    message = WorkerMessage(cfg, plan, Launcher.DDP, threads=threads, comm_backend=backend, epochs=spec.to_dict())
    data, sampler = run_ddp_workers(
        message,
        nprocs,
        what="DDP epoch training",
        prefix="gpulab-ddp-epochs-",
        telemetry=launch.telemetry,
        timeout_s=launch.timeout_s,
    )
    record = data["record"]
    listener = current_listener()
    if listener is not None:  # the ranks' output is captured: show the epochs now
        for epoch in record["epochs"]:
            listener(epoch)
    plan = plan.resolved(int(record["batch"]))
    summary = sampler.summary(data["wall_start"], data["wall_end"]) if sampler is not None else None
    extra = {
        "world": data["world"],
        "threads": data["threads"],
        "rank_final_metrics": data["rank_final_metrics"],
    }
    return _result(
        cfg,
        record,
        plan,
        launcher=Launcher.DDP,
        n=nprocs,
        devices=data["devices"],
        device=None,
        telemetry=summary,
        comm_backend=backend,
        **extra,
    )
