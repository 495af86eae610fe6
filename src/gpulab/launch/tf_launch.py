"""TensorFlow launchers: `cpu`, `gpu`, `mirrored` (tf.distribute.MirroredStrategy) and the sweep.

Every TensorFlow run happens in a fresh process (`python -m gpulab.launch.tf_worker`): TensorFlow never initialises
in the caller (it would claim GPU memory there, next to torch), memory growth is switched on for every GPU before
anything else, and a MirroredStrategy on a machine without GPUs gets its N logical CPU devices before TensorFlow
starts. GPU telemetry is sampled here, in the parent. Results have framework "tensorflow" and the same fields as
the torch launchers' (gpulab.launch.common.make_result), so both compare in one report.

    from gpulab.launch.tf_launch import run_mirrored
    result = run_mirrored(RunConfig("resnet50", precision="bf16", batch=256), gpus=4, scale_lr=False)
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpulab.errors import ERROR_PREFIX, GpulabError
from gpulab.launch.common import check_config, config_to_dict, plan_batch
from gpulab.report.model import Result, result_from_dict
from gpulab.workloads.base import RunConfig

TF_WORKLOADS = ("style_transfer", "mnist", "cifar10", "chexnet", "resnet50")
DEFAULT_TIMEOUT_S = 3600.0


def require_tensorflow() -> None:
    if importlib.util.find_spec("tensorflow") is None:
        raise GpulabError(
            "TensorFlow is not installed: pip install 'gpulab[tf]' (tensorflow, or tensorflow-cpu without GPUs)"
        )


def _check(cfg: RunConfig) -> None:
    require_tensorflow()
    if cfg.workload not in TF_WORKLOADS:
        raise GpulabError(f"unknown workload {cfg.workload!r}; choose one of: {', '.join(TF_WORKLOADS)}")
    check_config(cfg, builder="tensorflow")  # generic fields; the name was checked above


def tf_gpu_count(timeout_s: float = 300.0) -> int:
    """GPUs TensorFlow sees, asked in a child process (0 for a CPU-only build or machine)."""
    from gpulab.hw.software import probe_tensorflow

    info = probe_tensorflow(timeout_s)
    if info is None:
        require_tensorflow()
        return 0
    if info.error:
        raise GpulabError(f"TensorFlow could not be queried: {info.error}")
    return int(info.sees_gpus or 0)


def _nvml_indices(ordinals: list[int]) -> list[int]:
    """NVML indices of the ordinals TensorFlow sees (through a numeric CUDA_VISIBLE_DEVICES, else the ordinals)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.isdigit() for v in visible) and max(ordinals, default=0) < len(visible):
        return [int(visible[k]) for k in ordinals]
    return list(ordinals)


def _worker(
    config: dict[str, Any], *, env: dict[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[dict[str, Any], Path]:
    """Run tf_worker on `config` in a fresh process; return its result payload."""
    with tempfile.TemporaryDirectory(prefix="gpulab-tf-") as tmp:
        cfg_path, out = Path(tmp) / "run.json", Path(tmp) / "result.json"
        cfg_path.write_text(json.dumps(config))
        cmd = [sys.executable, "-m", "gpulab.launch.tf_worker", f"--config={cfg_path}", f"--out={out}"]
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=child_env)
        except subprocess.TimeoutExpired:
            raise GpulabError(f"the TensorFlow run did not finish in {timeout_s:.0f} s") from None
        own = [ln for ln in done.stderr.splitlines() if ln.startswith(ERROR_PREFIX)]
        if done.returncode == 2 and own:
            raise GpulabError(own[-1].removeprefix(ERROR_PREFIX))
        if done.returncode != 0 or not out.exists():
            raise GpulabError(f"the TensorFlow run failed (exit {done.returncode}): {_error_line(done.stderr)}")
        return json.loads(out.read_text()), Path(tmp)


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "GpulabError" in ln or "Error" in ln.split(":")[0]]
    return (errors or lines or ["no output"])[-1][-800:]


def _result(payload: dict[str, Any], telemetry_ordinals: list[int] | None, sampler: Any) -> Result:
    wall_start, wall_end = payload.pop("wall_start"), payload.pop("wall_end")
    result = result_from_dict(payload)
    if sampler is not None:
        result.telemetry = sampler.summary(wall_start, wall_end)
        if sampler.overhead() is not None:
            result.params["telemetry_overhead_pct"] = round(100 * (sampler.overhead() or 0.0), 3)
    return result


def _run(cfg: RunConfig, config: dict[str, Any], ordinals: list[int], telemetry: bool, timeout_s: float) -> Result:
    if not (telemetry and ordinals):
        payload, _ = _worker(config, timeout_s=timeout_s)
        return _result(payload, None, None)
    from gpulab.telemetry import Sampler

    with Sampler(_nvml_indices(ordinals)) as sampler:
        payload, _ = _worker(config, timeout_s=timeout_s)
    return _result(payload, ordinals, sampler)


def run_tf_cpu(cfg: RunConfig, threads: int = 1, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Result:
    """The workload on the CPU (GPUs hidden from TensorFlow) with `threads` intra-op threads; n = threads."""
    _check(cfg)
    if threads < 1:
        raise GpulabError(f"--threads must be at least 1, got {threads}")
    plan = plan_batch(cfg, 1)
    config = {"mode": "cpu", "run": config_to_dict(cfg), "plan": plan.to_dict(), "threads": threads}
    return _run(cfg, config, [], False, timeout_s)


def run_tf_gpu(
    cfg: RunConfig, index: int = 0, *, telemetry: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Result:
    """The workload on GPU `index` (the child sees only that GPU); n = 1."""
    _check(cfg)
    visible = tf_gpu_count()
    if visible == 0:
        raise GpulabError(
            "--launcher gpu needs a GPU and TensorFlow sees none (a CPU-only wheel such as tensorflow-cpu, a CUDA "
            "mismatch, or CUDA_VISIBLE_DEVICES hides them); check `gpulab info`, or use --launcher cpu"
        )
    if not 0 <= index < visible:
        raise GpulabError(f"there is no GPU {index}; TensorFlow sees {visible} GPUs (0 to {visible - 1})")
    plan = plan_batch(cfg, 1)
    config = {
        "mode": "gpu",
        "run": config_to_dict(cfg),
        "plan": plan.to_dict(),
        "threads": None,
        "device_label": f"cuda:{index}",
        "gpu_index": index,
    }
    return _run(cfg, config, [index], telemetry, timeout_s)


def run_mirrored(
    cfg: RunConfig,
    gpus: int,
    batch_policy: str = "per_device",
    scale_lr: bool = False,
    *,
    telemetry: bool = True,
    threads: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Result:
    """tf.distribute.MirroredStrategy over GPUs 0..gpus-1: global batch = per-replica × N (per_device) or the
    given global batch split over N (global); `scale_lr` multiplies params learning_rate by N. On a machine where
    TensorFlow sees no GPU, the replicas are `gpus` logical CPU devices (a functional test of the path)."""
    _check(cfg)
    if cfg.workload == "style_transfer":
        raise GpulabError(
            "style_transfer optimises an input, not a model: MirroredStrategy does not apply to it; "
            "run it on one device, or over several GPUs with `gpulab sweep --framework tensorflow`"
        )
    plan = plan_batch(cfg, gpus, batch_policy, scale_lr)
    visible = tf_gpu_count()
    if visible and gpus > visible:
        raise GpulabError(f"asked for {gpus} GPUs but TensorFlow sees {visible}; pass --gpus {visible} or fewer")
    ordinals = list(range(gpus)) if visible else []
    config = {"mode": "mirrored", "run": config_to_dict(cfg), "plan": plan.to_dict(), "threads": threads}
    return _run(cfg, config, ordinals, telemetry, timeout_s)


def run_tf_sweep(
    cfg: RunConfig,
    gpus: int,
    sweep_dir: Path,
    *,
    runs: int | None = None,
    batch_policy: str = "per_device",
    scale_lr: bool = False,
    threads: int = 1,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    telemetry: bool = True,
) -> Result:
    """gpulab.launch.sweep.run_sweep with TensorFlow runs: one tf_worker process per GPU (CUDA_VISIBLE_DEVICES)."""
    from gpulab.launch.sweep import run_sweep

    _check(cfg)
    return run_sweep(
        cfg,
        gpus,
        sweep_dir,
        runs=runs,
        batch_policy=batch_policy,
        scale_lr=scale_lr,
        threads=threads,
        builder=None,
        timeout_s=timeout_s,
        telemetry=telemetry,
        framework="tensorflow",
    )
