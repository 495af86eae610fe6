"""The two typed descriptions the launch layer passes around.

`Launch`: what `gpulab run` / `gpulab sweep` (or a caller) asks for — the workload config, the framework, the
launcher and its knobs. A framework's backend (gpulab.launch.backends) turns it into a Result.

`WorkerMessage`: what a parent hands a worker process (a DDP rank, a TensorFlow run, one run of a sweep), written
as JSON beside the run and read back by the worker; `TimedResult` is what a worker hands back: the Result and the
wall-clock window of its timed loop (for telemetry and for checking that sweep runs overlapped).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab import names
from gpulab.launch.measuring import write_json_atomic
from gpulab.launch.planning import BatchPlan, config_from_dict, config_to_dict
from gpulab.records import Result, RunConfig, result_from_dict
from gpulab.training.epochs import EpochSpec

DEFAULT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Launch:
    """One `gpulab run` or `gpulab sweep`, framework-neutral."""

    cfg: RunConfig
    framework: names.Framework = names.DEFAULT_FRAMEWORK
    launcher: names.Launcher = names.Launcher.GPU  # one `gpulab run` takes (Launcher.runs), or the sweep
    gpus: int = 1  # devices for multi-device launchers and the sweep (CPU processes without GPUs)
    index: int = 0  # the GPU of the gpu launcher
    threads: int | None = None  # CPU threads (cpu launcher: per run; multi-process launchers: per process)
    batch_policy: str = "per_device"
    scale_lr: bool = False
    comm_backend: names.CommBackend | None = None  # DDP's process group; None: CommBackend.choose's by the GPUs
    builder: str | None = None  # MODULE:FUNCTION building torch workloads
    timeout_s: float = DEFAULT_TIMEOUT_S
    telemetry: bool = True
    sweep_dir: Path | None = None
    runs: int | None = None  # sweep runs (default one per device)
    epochs: EpochSpec | None = None  # train in epochs over real data with validation, instead of timed steps

    def describe(self) -> str:
        what = f"{self.epochs.epochs} epochs, " if self.epochs is not None else ""
        return (
            f"{self.cfg.workload} ({what}{self.framework} {self.launcher}, {self.cfg.precision}, size {self.cfg.size})"
        )


@dataclass
class WorkerMessage:
    """A worker process's instructions: what to run, how the batch is planned, where and with which threads."""

    run: RunConfig
    plan: BatchPlan
    mode: names.Launcher  # the launcher the worker serves: cpu | gpu | mirrored | ddp | sweep
    builder: str | None = None
    threads: int | None = None
    gpu: bool = False  # a sweep run: the one GPU CUDA_VISIBLE_DEVICES leaves visible (else the CPU)
    gpu_index: int = 0  # a one-GPU run: which of the visible GPUs
    device_label: str | None = None  # the device as the parent names it (cuda:K)
    comm_backend: names.CommBackend | None = None  # DDP: the backend its parent chose
    start_timeout_s: float = 600.0  # a sweep run: how long it waits for its peers after the warm-up
    epochs: dict[str, Any] | None = None  # an EpochSpec's dict: train in epochs instead of timed steps
    extra: dict[str, Any] = field(default_factory=dict)  # a backend's own fields

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["run"] = config_to_dict(self.run)
        data["plan"] = self.plan.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerMessage:
        d = dict(data)
        d["run"] = config_from_dict(d["run"])
        d["plan"] = BatchPlan(**d["plan"])
        d["mode"] = names.Launcher.parse(d["mode"], "worker message's mode")
        if d.get("comm_backend") is not None:
            d["comm_backend"] = names.CommBackend.parse(d["comm_backend"], "worker message's comm_backend")
        return cls(**d)

    def write(self, path: Path) -> Path:
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def read(cls, path: Path) -> WorkerMessage:
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass
class TimedResult:
    """A worker's answer: its Result and the time.time() window of its timed loop."""

    result: Result
    wall_start: float
    wall_end: float

    def write(self, path: Path) -> Path:
        payload = dataclasses.asdict(self.result)
        payload["wall_start"], payload["wall_end"] = self.wall_start, self.wall_end
        write_json_atomic(path, payload)
        return path

    @classmethod
    def read(cls, path: Path) -> TimedResult:
        data = json.loads(Path(path).read_text())
        wall_start, wall_end = data.pop("wall_start"), data.pop("wall_end")
        return cls(result_from_dict(data), wall_start, wall_end)
