"""One TensorFlow run in a fresh process (started by gpulab.launch.tf_launch and by a TensorFlow sweep).

    python -m gpulab.launch.tf_worker --config run.json --out result.json [--index I --runs N --ready-dir DIR]

Before TensorFlow initialises: memory growth on for every GPU, the intra-op threads, and for a MirroredStrategy
on a machine without GPUs, N logical CPU devices. Then the workload is built under its strategy, warmed up and
timed, and the Result (framework "tensorflow") is written as JSON with the timed loop's wall-clock window.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gpulab.errors import ERROR_PREFIX, GpulabError
from gpulab.interrupts import stop_with_parent
from gpulab.launch.measuring import launch_params, loss_facts, loss_value, make_result
from gpulab.launch.peers import wait_for_peers
from gpulab.launch.spec import TimedResult, WorkerMessage
from gpulab.names import Framework, Launcher
from gpulab.report.io import jsonable


def configure(mode: Launcher, replicas: int, threads: int | None, index: int = 0) -> tuple[Any, list[str]]:
    """Set TensorFlow up before it initialises; return (strategy, devices)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if threads is not None:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, threads))
    if mode == Launcher.CPU:
        tf.config.set_visible_devices([], "GPU")
        return tf.distribute.OneDeviceStrategy("/cpu:0"), ["cpu"]
    if mode == Launcher.MIRRORED and not gpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
        devices = [f"/cpu:{k}" for k in range(replicas)]
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        return strategy, [f"cpu:{k}" for k in range(replicas)]
    if not gpus:
        return tf.distribute.OneDeviceStrategy("/cpu:0"), ["cpu"]
    if mode == Launcher.MIRRORED:
        devices = [f"/gpu:{k}" for k in range(replicas)]
        return tf.distribute.MirroredStrategy(devices), [f"cuda:{k}" for k in range(replicas)]
    if mode == Launcher.GPU:
        tf.config.set_visible_devices(gpus[index], "GPU")  # the one GPU asked for; the others stay untouched
    return tf.distribute.OneDeviceStrategy("/gpu:0"), ["cuda:0"]


def run(message: WorkerMessage, out: Path, index: int = 0, runs: int = 1, ready_dir: Path | None = None) -> None:
    mode, plan, threads = message.mode, message.plan, message.threads
    replicas = plan.devices if mode == Launcher.MIRRORED else 1
    strategy, devices = configure(mode, replicas, threads, message.gpu_index)
    import tensorflow as tf

    from gpulab.workloads.tf import build

    cfg = message.run
    if message.epochs is not None:
        _run_epochs(message, strategy, devices, replicas, out)
        return
    session = build(plan.device_config(cfg), strategy)
    together = True
    loss = first = None
    for _ in range(cfg.warmup):
        loss = session.step()
        first = loss if first is None else first
    if loss is not None:
        loss_value(loss)  # wait for the warm-up to finish
    if ready_dir is not None:
        together = wait_for_peers(ready_dir, index, runs, message.start_timeout_s)
    wall_start = time.time()
    start = time.perf_counter()
    steps = int(session.steps)
    for _ in range(steps):
        loss = session.step()
        first = loss if first is None else first
    value = loss_value(loss)  # reading the last loss waits for the queued steps
    seconds = time.perf_counter() - start
    wall_end = time.time()
    first_value = loss_value(first)
    finish = dict(session.finish() or {})
    per_replica = int(session.samples_per_step) // replicas
    plan = plan.resolved(per_replica)
    final_loss, finite, first_loss = loss_facts(value, first_value)
    params = launch_params(
        cfg, plan, session.info, finish, final_loss, finite, first_loss, tensorflow=tf.__version__, threads=threads
    )
    if mode == Launcher.SWEEP:
        params.update(run_index=index, started_together=together)
    if mode in (Launcher.GPU, Launcher.SWEEP, Launcher.MIRRORED) and devices[0].startswith("cuda"):
        params["max_memory_allocated_mib"] = [
            round(tf.config.experimental.get_memory_info(f"GPU:{k}")["peak"] / 2**20, 1) for k in range(len(devices))
        ]
    label = message.device_label or devices[0]
    result = make_result(
        cfg,
        launcher=mode,
        n=(threads or 1) if mode == Launcher.CPU else len(devices),
        samples=int(session.samples_per_step) * steps,
        seconds=seconds,
        steps=steps,
        batch=plan.per_device,
        devices=[label] if mode != Launcher.MIRRORED else devices,
        device=None if mode == Launcher.MIRRORED else label,
        params=jsonable(params),
        framework=Framework.TENSORFLOW,
    )
    TimedResult(result, wall_start, wall_end).write(out)


def _run_epochs(message: WorkerMessage, strategy: Any, devices: list[str], replicas: int, out: Path) -> None:
    """Epoch training with keras fit; the Result as the torch epoch launchers make it."""
    import tensorflow as tf

    from gpulab.launch.epoch_runs import epoch_result
    from gpulab.training.epochs import EpochSpec
    from gpulab.training.tf_epochs import train_epochs_tf

    cfg, mode, threads = message.run, message.mode, message.threads
    start = time.time()
    record = train_epochs_tf(
        message.plan.device_config(cfg), strategy, EpochSpec.from_dict(message.epochs or {}), replicas
    )
    end = time.time()
    label = message.device_label or devices[0]
    result = epoch_result(
        cfg,
        record,
        message.plan.resolved(int(record["batch"])),
        launcher=mode,
        n=(threads or 1) if mode == Launcher.CPU else len(devices),
        devices=[label] if mode != Launcher.MIRRORED else devices,
        device=None if mode == Launcher.MIRRORED else label,
        framework=Framework.TENSORFLOW,
        versions={"tensorflow": tf.__version__},
        threads=threads,
    )
    TimedResult(result, start, end).write(out)


def main(argv: list[str] | None = None) -> None:
    stop_with_parent(signal.SIGKILL)  # the run ends with the process waiting for it (gpulab run, gpulab sweep)
    parser = argparse.ArgumentParser(description="one TensorFlow run of gpulab (started by gpulab run/sweep)")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--ready-dir", type=Path)
    parser.add_argument("--device-label", help="the device's name in the sweep (cuda:K)")
    args = parser.parse_args(argv)
    message = WorkerMessage.read(args.config)
    if args.device_label:
        message.device_label = args.device_label
    try:
        run(message, args.out, args.index, args.runs, args.ready_dir)
    except GpulabError as err:  # the parent passes this line on as it is: a bad input, not a crash
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
