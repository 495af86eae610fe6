"""TensorFlow launchers: `cpu`, `gpu` and `mirrored` (tf.distribute.MirroredStrategy).

Every TensorFlow run happens in a fresh process (`python -m gpulab.launch.tf_worker`): TensorFlow never initialises
in the caller (it would claim GPU memory there, next to torch), memory growth is switched on for every GPU before
anything else, and a MirroredStrategy on a machine without GPUs gets its N logical CPU devices before TensorFlow
starts. GPU telemetry is sampled here, in the parent. Results have framework "tensorflow" and the same fields as
the torch launchers' (gpulab.launch.measuring.make_result), so both compare in one report. A TensorFlow sweep is
gpulab.launch.sweep with the tensorflow backend (gpulab.launch.backends.tensorflow_backend).

    from gpulab.launch.tf_launch import run_mirrored
    result = run_mirrored(RunConfig("resnet50", precision=Precision.BF16, batch=256), gpus=4, scale_lr=False)
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpulab.errors import ERROR_PREFIX, GpulabError, UnknownValue
from gpulab.hw import cuda_visible
from gpulab.interrupts import child_env
from gpulab.launch.planning import check_run_fields, plan_batch
from gpulab.launch.spec import DEFAULT_TIMEOUT_S, TimedResult, WorkerMessage
from gpulab.names import Launcher
from gpulab.records import Result, RunConfig
from gpulab.training.epochs import EpochSpec
from gpulab.workloads.registry import REGISTRY
from gpulab.workloads.tf.session import tf_precision


def require_tensorflow() -> None:
    if importlib.util.find_spec("tensorflow") is None:
        raise GpulabError(
            "TensorFlow is not installed: pip install 'gpulab[tf]' (tensorflow, or tensorflow-cpu without GPUs)"
        )


def check_tf_config(cfg: RunConfig) -> None:
    require_tensorflow()
    known = REGISTRY.with_framework("tensorflow")
    if cfg.workload not in known:
        raise UnknownValue("workload", cfg.workload, known)
    check_run_fields(cfg)
    tf_precision(cfg.precision)


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


def _worker(message: WorkerMessage, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> TimedResult:
    """Run tf_worker on `message` in a fresh process; return its result."""
    with tempfile.TemporaryDirectory(prefix="gpulab-tf-") as tmp:
        out = Path(tmp) / "result.json"
        config = message.write(Path(tmp) / "run.json")
        cmd = [sys.executable, "-m", "gpulab.launch.tf_worker", f"--config={config}", f"--out={out}"]
        env = child_env()  # the run ends with this process, however that ends
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise GpulabError(f"the TensorFlow run did not finish in {timeout_s:.0f} s") from None
        own = [ln for ln in done.stderr.splitlines() if ln.startswith(ERROR_PREFIX)]
        if done.returncode == 2 and own:
            raise GpulabError(own[-1].removeprefix(ERROR_PREFIX))
        if done.returncode != 0 or not out.exists():
            raise GpulabError(f"the TensorFlow run failed (exit {done.returncode}): {_error_line(done.stderr)}")
        return TimedResult.read(out)


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "GpulabError" in ln or "Error" in ln.split(":")[0]]
    return (errors or lines or ["no output"])[-1][-800:]


def _run(message: WorkerMessage, ordinals: list[int], telemetry: bool, timeout_s: float) -> Result:
    if not (telemetry and ordinals):
        return _worker(message, timeout_s=timeout_s).result
    from gpulab.telemetry import Sampler

    with Sampler(cuda_visible.nvml_indices_by_number(ordinals) or ordinals) as sampler:
        timed = _worker(message, timeout_s=timeout_s)
    result = timed.result
    result.telemetry = sampler.summary(timed.wall_start, timed.wall_end)
    if sampler.overhead() is not None:
        result.params["telemetry_overhead_pct"] = round(100 * (sampler.overhead() or 0.0), 3)
    return result


def _epochs(spec: EpochSpec | None, cfg: RunConfig) -> dict[str, Any] | None:
    """An epoch run's spec for the worker, checked here first (before TensorFlow starts)."""
    if spec is None:
        return None
    from gpulab.training.tf_epochs import check_tf_epochs

    check_tf_epochs(cfg, spec)
    return spec.to_dict()


def run_tf_cpu(
    cfg: RunConfig, threads: int = 1, *, timeout_s: float = DEFAULT_TIMEOUT_S, epochs: EpochSpec | None = None
) -> Result:
    """The workload on the CPU (GPUs hidden from TensorFlow) with `threads` intra-op threads; n = threads."""
    check_tf_config(cfg)
    if threads < 1:
        raise GpulabError(f"--threads must be at least 1, got {threads}")
    message = WorkerMessage(cfg, plan_batch(cfg, 1), Launcher.CPU, threads=threads, epochs=_epochs(epochs, cfg))
    return _run(message, [], False, timeout_s)


def run_tf_gpu(
    cfg: RunConfig,
    index: int = 0,
    *,
    telemetry: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    epochs: EpochSpec | None = None,
) -> Result:
    """The workload on GPU `index` (the child sees only that GPU); n = 1."""
    check_tf_config(cfg)
    visible = tf_gpu_count()
    if visible == 0:
        raise GpulabError(
            "--launcher gpu needs a GPU and TensorFlow sees none (a CPU-only wheel such as tensorflow-cpu, a CUDA "
            "mismatch, or CUDA_VISIBLE_DEVICES hides them); check `gpulab info`, or use --launcher cpu"
        )
    if not 0 <= index < visible:
        raise GpulabError(f"there is no GPU {index}; TensorFlow sees {visible} GPUs (0 to {visible - 1})")
    message = WorkerMessage(
        cfg,
        plan_batch(cfg, 1),
        Launcher.GPU,
        gpu_index=index,
        device_label=f"cuda:{index}",
        epochs=_epochs(epochs, cfg),
    )
    return _run(message, [index], telemetry, timeout_s)


def run_mirrored(
    cfg: RunConfig,
    gpus: int,
    batch_policy: str = "per_device",
    scale_lr: bool = False,
    *,
    telemetry: bool = True,
    threads: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    epochs: EpochSpec | None = None,
) -> Result:
    """tf.distribute.MirroredStrategy over GPUs 0..gpus-1: global batch = per-replica × N (per_device) or the
    given global batch split over N (global); `scale_lr` multiplies params learning_rate by N. On a machine where
    TensorFlow sees no GPU, the replicas are `gpus` logical CPU devices (a functional test of the path)."""
    check_tf_config(cfg)
    if REGISTRY[cfg.workload].optimises_input:
        raise GpulabError(
            f"{cfg.workload} optimises an input, not a model: MirroredStrategy does not apply to it; "
            "run it on one device, or over several GPUs with `gpulab sweep --framework tensorflow`"
        )
    plan = plan_batch(cfg, gpus, batch_policy, scale_lr)
    visible = tf_gpu_count()
    if visible and gpus > visible:
        raise GpulabError(f"asked for {gpus} GPUs but TensorFlow sees {visible}; pass --gpus {visible} or fewer")
    ordinals = list(range(gpus)) if visible else []
    message = WorkerMessage(cfg, plan, Launcher.MIRRORED, threads=threads, epochs=_epochs(epochs, cfg))
    return _run(message, ordinals, telemetry, timeout_s)
