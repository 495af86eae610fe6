"""TensorFlow: every run in a fresh `gpulab.launch.tf_worker` process; sweep runs pinned by CUDA ordinal."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gpulab.launch.backends import Backend
from gpulab.names import Launcher

if TYPE_CHECKING:
    from gpulab.launch.spec import Launch
    from gpulab.records import Result, RunConfig


class TensorflowBackend(Backend):
    name = "tensorflow"
    launchers = (Launcher.CPU, Launcher.GPU, Launcher.MIRRORED)
    epoch_launchers = (Launcher.CPU, Launcher.GPU, Launcher.MIRRORED)
    sweep_worker = "gpulab.launch.tf_worker"
    # TensorFlow is not imported in the parent (it would claim GPU memory there), so GPUs are named by ordinal.

    def check(self, cfg: RunConfig, builder: str | None) -> None:
        from gpulab.launch.tf_launch import check_tf_config

        check_tf_config(cfg)

    def count_devices(self) -> int:
        from gpulab.launch.tf_launch import tf_gpu_count

        return tf_gpu_count()

    def run(self, launch: Launch) -> Result:
        result = self._run(launch)
        from gpulab.training.epochs import current_listener

        listener = current_listener()
        if launch.epochs is not None and listener is not None:  # the worker's output is captured: show them now
            for epoch in result.params["epochs"]["epochs"]:
                listener(epoch)
        return result

    def _run(self, launch: Launch) -> Result:
        from gpulab.launch import tf_launch

        cfg, epochs = launch.cfg, launch.epochs
        if launch.launcher == Launcher.CPU:
            threads = launch.threads or os.cpu_count() or 1
            return tf_launch.run_tf_cpu(cfg, threads, timeout_s=launch.timeout_s, epochs=epochs)
        if launch.launcher == Launcher.GPU:
            return tf_launch.run_tf_gpu(
                cfg, launch.index, telemetry=launch.telemetry, timeout_s=launch.timeout_s, epochs=epochs
            )
        return tf_launch.run_mirrored(
            cfg,
            launch.gpus,
            launch.batch_policy,
            launch.scale_lr,
            telemetry=launch.telemetry,
            threads=launch.threads,
            timeout_s=launch.timeout_s,
            epochs=epochs,
        )


BACKEND = TensorflowBackend()
