"""PyTorch: in-process cpu/gpu/DataParallel runs, DDP through torchrun, sweep runs pinned by GPU UUID."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpulab.launch.backends import Backend
from gpulab.names import Launcher

if TYPE_CHECKING:
    from gpulab.launch.spec import Launch
    from gpulab.records import Result, RunConfig


class TorchBackend(Backend):
    name = "torch"
    launchers = (Launcher.CPU, Launcher.GPU, Launcher.DDP, Launcher.DATAPARALLEL)
    sweep_worker = "gpulab.launch.sweep_worker"
    takes_builder = True
    epoch_launchers = (Launcher.CPU, Launcher.GPU, Launcher.DDP, Launcher.DATAPARALLEL)
    pins_by_uuid = True  # torch tells each GPU's UUID; a UUID pins the same GPU whatever the parent's numbering

    def prepare(self) -> None:
        """Import torch with Ctrl-C held back until the import is done (gpulab.interrupts says why)."""
        from gpulab.interrupts import import_torch

        import_torch()

    def check(self, cfg: RunConfig, builder: str | None) -> None:
        from gpulab.launch.planning import check_config

        check_config(cfg, builder)

    def count_devices(self) -> int:
        from gpulab.launch.measuring import visible_gpus

        return visible_gpus()

    def gpu_uuid(self, ordinal: int) -> str | None:
        from gpulab.launch.measuring import gpu_uuid

        return gpu_uuid(ordinal)

    def nvml_indices(self, ordinals: Sequence[int]) -> list[int]:
        from gpulab.launch.measuring import nvml_indices

        return nvml_indices(ordinals)

    def run(self, launch: Launch) -> Result:
        from gpulab.launch import ddp, local

        cfg, builder = launch.cfg, launch.builder
        if launch.epochs is not None:
            from gpulab.launch.epoch_runs import run_epochs

            return run_epochs(launch)
        if launch.launcher == Launcher.CPU:
            return local.run_cpu(cfg, launch.threads or _all_threads(), builder=builder)
        if launch.launcher == Launcher.GPU:
            return local.run_gpu(cfg, launch.index, builder=builder, telemetry=launch.telemetry)
        if launch.launcher == Launcher.DDP:
            return ddp.run_ddp(
                cfg,
                launch.gpus,
                batch_policy=launch.batch_policy,
                scale_lr=launch.scale_lr,
                comm_backend=launch.comm_backend,
                threads=launch.threads or 1,
                builder=builder,
                timeout_s=launch.timeout_s,
                telemetry=launch.telemetry,
            )
        return local.run_dataparallel(
            cfg,
            launch.gpus,
            batch_policy=launch.batch_policy,
            scale_lr=launch.scale_lr,
            builder=builder,
            telemetry=launch.telemetry,
        )


def _all_threads() -> int:
    import torch

    return int(torch.get_num_threads()) or os.cpu_count() or 1


BACKEND = TorchBackend()
