"""What a run is before any process starts: the workload builder, the config's checks and JSON form, and the
batch-size policy (how the batch splits over devices and whether the learning rate follows it).

A run is planned here before any process starts; the process that runs it times it (gpulab.launch.measuring).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError, UnknownValue
from gpulab.names import BATCH_POLICIES
from gpulab.records import RunConfig
from gpulab.workloads.base import Session
from gpulab.workloads.registry import REGISTRY

DEFAULT_BUILDER = "gpulab.workloads:build"
LR_PARAMS = ("learning_rate", "lr")  # the params key the linear scaling rule scales (gpulab's workloads: learning_rate)


# -- workloads -----------------------------------------------------------------------------------------------
def resolve_builder(spec: str | None = None) -> Callable[[RunConfig, str], Session]:
    """The function `(RunConfig, device) -> Session` named by "module:function" (default gpulab.workloads:build)."""
    spec = spec or DEFAULT_BUILDER
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise GpulabError(f"workload builder {spec!r} is not MODULE:FUNCTION; write e.g. {DEFAULT_BUILDER}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise GpulabError(
            f"cannot import the workload builder module {module_name!r} ({err}); install gpulab with its torch "
            "extra (pip install 'gpulab[torch]') or fix the MODULE:FUNCTION name"
        ) from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise GpulabError(f"{module_name} has no function {attr!r}; fix the MODULE:FUNCTION name ({spec})")
    return fn


def known_workloads() -> list[str] | None:
    """Names in gpulab.workloads.REGISTRY, or None when the package offers no registry."""
    try:
        module = importlib.import_module("gpulab.workloads")
    except ImportError:
        return None
    registry = getattr(module, "REGISTRY", None)
    return sorted(registry) if isinstance(registry, Mapping) else None


def check_config(cfg: RunConfig, builder: str | None = None) -> None:
    """Reject a torch run that cannot start, before any process starts (a builder's own names are its business)."""
    if builder is None:
        workloads = known_workloads()
        if workloads is None:
            resolve_builder(None)  # raises the install hint when the workloads are missing
        elif cfg.workload not in workloads:
            raise UnknownValue("workload", cfg.workload, workloads)
    check_run_fields(cfg)


def check_run_fields(cfg: RunConfig) -> None:
    """The fields every framework reads the same way: size, batch, steps, warm-up, data (the precision is typed)."""
    names.size(cfg.size)
    for name, value, least in (("batch", cfg.batch, 1), ("steps", cfg.steps, 1), ("warmup", cfg.warmup, 0)):
        if value is not None and value < least:
            raise GpulabError(f"--{name} must be at least {least}, got {value}")
    from gpulab.workloads.data import named

    workload = REGISTRY.get(cfg.workload)
    if (
        workload is not None
        and workload.optimises_input
        and (cfg.optimizer is not None or cfg.learning_rate is not None)
    ):
        raise GpulabError(
            f"{cfg.workload} optimises an input with its own optimiser: --optimizer and --lr do not apply; "
            "set its rate with --param learning_rate=VALUE"
        )

    if cfg.data is not None and named(cfg.data) is None and not Path(cfg.data).exists():
        raise GpulabError(
            f"--data {cfg.data}: no such file or directory; pass the dataset's path, digits (the built-in set), "
            "mnist or cifar10 (fetched on first use) or drop --data"
        )


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    data = dataclasses.asdict(cfg)
    data["data"] = str(cfg.data) if cfg.data is not None else None
    return data


def config_from_dict(data: Mapping[str, Any]) -> RunConfig:
    """The config from its JSON form (a worker's message): the edge its precision is read at."""
    d = dict(data)
    d["data"] = Path(d["data"]) if d.get("data") else None
    if "precision" in d:
        d["precision"] = names.Precision.parse(d["precision"], training=True, who="run config")
    return RunConfig(**d)


# -- batch policy --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchPlan:
    """How the batch is split over `devices` and whether the learning rate follows it.

    per_device (weak scaling, the default): every device runs `per_device` samples a step; the global batch
    grows with N. global (strong scaling): `global_batch` is fixed and divided by N. The linear scaling rule
    (`scale_lr`, per_device only: the global batch is N times the one-device batch, so lr × N) multiplies the
    learning rate the run was given (`params["learning_rate"]`, or `params["lr"]` for a workload that calls it
    that) by N.
    """

    policy: str
    devices: int
    per_device: int | None  # None = the workload's default for its size
    global_batch: int | None
    scale_lr: bool = False
    lr_base: float | None = None
    lr: float | None = None
    lr_param: str | None = None  # the params key holding the learning rate

    def device_config(self, cfg: RunConfig) -> RunConfig:
        """The config one device's Session is built from."""
        params = dict(cfg.params)
        if self.scale_lr and self.lr is not None and self.lr_param:
            params[self.lr_param] = self.lr
        return dataclasses.replace(cfg, batch=self.per_device, params=params)

    def resolved(self, per_device: int) -> BatchPlan:
        """The plan with the per-device batch the workload actually used."""
        return dataclasses.replace(self, per_device=per_device, global_batch=per_device * self.devices)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready fields (what a worker process rebuilds it from)."""
        return dataclasses.asdict(self)

    def params(self) -> dict[str, Any]:
        return {
            "batch_policy": self.policy,
            "per_device_batch": self.per_device,
            "global_batch": self.global_batch,
            "lr_scaled": self.scale_lr,
            "lr_base": self.lr_base,
            "lr": self.lr,
            "lr_param": self.lr_param,
            "lr_factor": self.devices if self.scale_lr else 1,
        }


def plan_batch(cfg: RunConfig, devices: int, policy: str = "per_device", scale_lr: bool = False) -> BatchPlan:
    """The batch plan for `devices` devices; `cfg.batch` is per device (per_device) or global (global)."""
    if policy not in BATCH_POLICIES:
        raise UnknownValue("batch policy", policy, BATCH_POLICIES)
    if devices < 1:
        raise GpulabError(f"need at least one device, got {devices}")
    if policy == "global":
        if scale_lr:
            raise GpulabError(
                "--scale-lr applies the linear scaling rule to a growing global batch; with --batch-policy global "
                "the global batch is fixed, so drop --scale-lr or use --batch-policy per_device"
            )
        if cfg.batch is None:
            raise GpulabError(
                "--batch-policy global needs the global batch: pass --batch N (a multiple of the devices)"
            )
        if cfg.batch % devices:
            raise GpulabError(
                f"global batch {cfg.batch} does not divide over {devices} devices; pass a multiple of {devices} "
                f"(e.g. --batch {max(devices, cfg.batch // devices * devices)})"
            )
        return BatchPlan(policy, devices, cfg.batch // devices, cfg.batch)
    lr_base = lr = None
    key = None
    if scale_lr:
        key = next((k for k in LR_PARAMS if cfg.params.get(k) is not None), None)
        if key is None:
            raise GpulabError(
                "--scale-lr needs the one-device learning rate to scale: pass --param learning_rate=VALUE "
                "(e.g. --param learning_rate=0.1)"
            )
        raw = cfg.params[key]
        try:
            lr_base = float(raw)
        except (TypeError, ValueError) as err:
            raise GpulabError(f"--param {key}={raw!r} is not a number; pass e.g. --param {key}=0.1") from err
        lr = lr_base * devices
    global_batch = cfg.batch * devices if cfg.batch else None
    return BatchPlan(policy, devices, cfg.batch, global_batch, scale_lr, lr_base=lr_base, lr=lr, lr_param=key)
