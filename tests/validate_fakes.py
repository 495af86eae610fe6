"""A pytest plugin for running validate/ on a GPU-less machine as if it had two GPUs: `-p validate_fakes`.

The two GPUs are the first two of the captured 4x H200, and every launcher the speedup, scaling and TensorFlow
rows use is replaced by a fake that returns a row at once and appends the call to the JSON-lines file named by
GPULAB_FAKE_CALLS. GPULAB_FAKE_ORDER=reverse runs the selected tests in reverse order.

One GPU runs at 100 samples/s and N GPUs at N x 100, so every scaling row is 100 % efficient; each row has 8 timed
windows within +-1 % of its value, as a real launcher records them.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpulab.hw.discover import fingerprint
from gpulab.names import Framework, Launcher
from gpulab.records import Result, RunConfig
from gpulab.report import spread

if TYPE_CHECKING:
    from gpulab.launch import Launch

FIX = Path(__file__).resolve().parent / "fixtures" / "h200x4-firecracker"
ONE_GPU = 100.0
JITTER = (-0.01, 0.004, -0.002, 0.008, 0.0, -0.006, 0.01, 0.002)  # the windows' deviation from the row's value


def _log(launcher: str, framework: str, cfg: RunConfig, n: int) -> None:
    call = {"launcher": launcher, "framework": framework, "workload": cfg.workload, "precision": cfg.precision, "n": n}
    with open(os.environ["GPULAB_FAKE_CALLS"], "a") as out:
        out.write(json.dumps(call) + "\n")


def _row(launcher: str, framework: str, cfg: RunConfig, n: int, value: float, seconds: float = 1.0) -> Result:
    _log(launcher, framework, cfg, n)
    on_cpu = launcher == "cpu"
    devices = ["cpu"] if on_cpu else [f"cuda:{k}" for k in range(n)]
    return Result(
        cfg.workload,
        Framework.parse(framework),
        Launcher.parse(launcher),
        n,
        cfg.precision,
        value,
        "samples/s",
        device="cpu" if on_cpu else (devices[0] if n == 1 else None),
        devices=devices,
        seconds=seconds,
        spread=spread.of_windows([value * (1 + d) for d in JITTER], "samples/s"),
    )


def fake_cpu(cfg: RunConfig, threads: int = 1, **_: Any) -> Result:
    return _row("cpu", "torch", cfg, threads, 1.0 * threads)


def fake_tf_cpu(cfg: RunConfig, threads: int = 1, **_: Any) -> Result:
    return _row("cpu", "tensorflow", cfg, threads, 1.0 * threads)


def fake_gpu(cfg: RunConfig, index: int = 0, **_: Any) -> Result:
    return _row("gpu", "torch", cfg, 1, ONE_GPU)


def fake_tf_gpu(cfg: RunConfig, index: int = 0, **_: Any) -> Result:
    return _row("gpu", "tensorflow", cfg, 1, ONE_GPU)


def fake_ddp(cfg: RunConfig, gpus: int, *_: Any, **__: Any) -> Result:
    return _row("ddp", "torch", cfg, gpus, ONE_GPU * gpus)


def fake_ddp_pair(cfg: RunConfig, gpus: int, *_: Any, **__: Any) -> tuple[Result, Result]:
    """GPULAB_FAKE_DDP_EFFICIENCY (default 1) scales the N-GPU side: 0.9 sits on the 90 % floor."""
    efficiency = float(os.environ.get("GPULAB_FAKE_DDP_EFFICIENCY", "1"))
    return _row("ddp", "torch", cfg, 1, ONE_GPU), _row("ddp", "torch", cfg, gpus, ONE_GPU * gpus * efficiency)


def fake_dataparallel(cfg: RunConfig, gpus: int, *_: Any, **__: Any) -> Result:
    return _row("dataparallel", "torch", cfg, gpus, ONE_GPU * gpus)


def fake_mirrored(cfg: RunConfig, gpus: int, *_: Any, **__: Any) -> Result:
    return _row("mirrored", "tensorflow", cfg, gpus, ONE_GPU * gpus)


def fake_sweep(launch: Launch, *, first_gpu: int = 0) -> Result:
    gpus, runs = launch.gpus, launch.runs or launch.gpus
    return _row("sweep", "torch", launch.cfg, gpus, ONE_GPU * gpus, seconds=runs / gpus)  # every GPU at ONE_GPU


def _takes_what_the_real_one_does(real: Any, fake: Any) -> None:
    """A fake must be callable as its launcher is, with the real one's required arguments (a fake left with an old
    signature would let validate/ call the launcher the old way unseen)."""
    params = inspect.signature(real).parameters.values()
    required = [p for p in params if p.default is inspect.Parameter.empty]
    positional = [None for p in required if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = {p.name: None for p in required if p.kind is p.KEYWORD_ONLY}
    try:
        inspect.signature(fake).bind(*positional, **keywords)
    except TypeError as err:
        raise pytest.UsageError(f"{fake.__name__} cannot be called as {real.__qualname__} is: {err}") from None


def pytest_configure(config: pytest.Config) -> None:
    # Before collection: validate/'s modules import the launchers by name when pytest imports them.
    import gpulab.launch
    import gpulab.launch.ddp
    import gpulab.launch.local
    import gpulab.launch.tf_launch

    fakes = {
        gpulab.launch.local: {"run_cpu": fake_cpu, "run_gpu": fake_gpu, "run_dataparallel": fake_dataparallel},
        gpulab.launch.ddp: {"run_ddp": fake_ddp, "run_ddp_pair": fake_ddp_pair},
        gpulab.launch: {
            "run_cpu": fake_cpu,
            "run_gpu": fake_gpu,
            "run_ddp": fake_ddp,
            "run_ddp_pair": fake_ddp_pair,
            "run_dataparallel": fake_dataparallel,
            "run_sweep": fake_sweep,
        },
        gpulab.launch.tf_launch: {"run_tf_cpu": fake_tf_cpu, "run_tf_gpu": fake_tf_gpu, "run_mirrored": fake_mirrored},
    }
    for module, names in fakes.items():
        for name, fake in names.items():
            _takes_what_the_real_one_does(getattr(module, name), fake)
            setattr(module, name, fake)


def pytest_sessionstart(session: pytest.Session) -> None:
    from gpulab.validation.plugin import LAB_KEY

    lab = session.config.stash[LAB_KEY]
    lab.gpus = fingerprint(smi_xml=FIX / "nvidia-smi-q-x.xml", probe_frameworks=False).gpus[:2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("GPULAB_FAKE_ORDER") == "reverse":
        items.reverse()
