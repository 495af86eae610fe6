"""A framework added from outside the launchers: "toyfw", a pure-Python least-squares fit.

It exists to show what a new framework needs: one backend module (this file) and one worker module
(toyfw_worker.py), declared through the `gpulab.backends` entry point group. `gpulab run --framework toyfw` and
`gpulab sweep --framework toyfw` then run it with no change to gpulab's launchers.
"""

from __future__ import annotations

from gpulab.errors import GpulabError
from gpulab.launch.backends import Backend
from gpulab.launch.planning import check_run_fields, plan_batch
from gpulab.launch.spec import Launch, WorkerMessage
from gpulab.records import Result, RunConfig

WORKLOADS = ("linear",)


class ToyBackend(Backend):
    name = "toyfw"
    launchers = ("cpu",)
    sweep_worker = "toyfw_worker"

    def check(self, cfg: RunConfig, builder: str | None) -> None:
        if cfg.workload not in WORKLOADS:
            raise GpulabError(f"unknown workload {cfg.workload!r}; choose one of: {', '.join(WORKLOADS)}")
        check_run_fields(cfg)

    def run(self, launch: Launch) -> Result:
        from toyfw_worker import train

        self.check(launch.cfg, launch.builder)
        message = WorkerMessage(launch.cfg, plan_batch(launch.cfg, 1), "cpu", threads=launch.threads or 1)
        return train(message, index=0, runs=1, ready_dir=None, label="cpu").result


BACKEND = ToyBackend()
