"""One torch run of a sweep: the workload on the one device this process sees, result written as JSON.

    CUDA_VISIBLE_DEVICES=GPU-<uuid> python -m gpulab.launch.sweep_worker --config run.json --out result.json \\
        --index 0 --runs 4 --ready-dir DIR --device-label cuda:2

run.json is a gpulab.launch.spec.WorkerMessage. After its warm-up every run touches DIR/<index> and waits (up to
the message's start_timeout_s) until `runs` runs have, so the first runs on all GPUs overlap as they would in a
real multi-GPU job (later runs find them there).
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from gpulab.interrupts import stop_with_parent
from gpulab.launch.local import run_session, torch_threads
from gpulab.launch.measuring import make_result, memory_params, run_params
from gpulab.launch.peers import wait_for_peers
from gpulab.launch.spec import TimedResult, WorkerMessage
from gpulab.names import Launcher


def run_one(message: WorkerMessage, out: Path, index: int, runs: int, ready_dir: Path, label: str | None) -> None:
    import torch

    cfg, plan = message.run, message.plan
    device = "cuda:0" if message.gpu else "cpu"
    label = label or device  # the device as the sweep's parent names it (cuda:K; this process sees it as cuda:0)
    if device.startswith("cuda"):
        torch.cuda.set_device(0)
    in_step = {"together": True}

    def barrier() -> None:
        in_step["together"] = wait_for_peers(ready_dir, index, runs, message.start_timeout_s)

    with torch_threads(None if device.startswith("cuda") else message.threads or 1) as threads:
        session, timing, finish = run_session(cfg, device, plan, builder=message.builder, before_timed=barrier)
    extra: dict[str, Any] = {"threads": threads, "run_index": index, "started_together": in_step["together"]}
    memory = memory_params([device], timing)
    if memory:  # one device per run: the sweep lists the runs' peaks
        extra.update(memory, max_memory_allocated_mib=memory["max_memory_allocated_mib"][0])
    plan = plan.resolved(int(session.samples_per_step))
    result = make_result(
        cfg,
        launcher=Launcher.SWEEP,
        n=1,
        samples=timing.samples,
        seconds=timing.seconds,
        steps=timing.steps,
        batch=plan.per_device,
        devices=[label],
        device=label,
        params=run_params(cfg, plan, session.info, finish, timing, **extra),
        window_rates=timing.window_rates(int(session.samples_per_step)),
    )
    TimedResult(result, timing.wall_start, timing.wall_end).write(out)


def main(argv: list[str] | None = None) -> None:
    stop_with_parent(signal.SIGKILL)  # a sweep's run ends with the sweep, killed outright too
    parser = argparse.ArgumentParser(description="one run of a gpulab sweep (started by gpulab sweep)")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--ready-dir", type=Path, required=True)
    parser.add_argument("--device-label", help="the device's name in the sweep (cuda:K)")
    args = parser.parse_args(argv)
    run_one(WorkerMessage.read(args.config), args.out, args.index, args.runs, args.ready_dir, args.device_label)


if __name__ == "__main__":
    main()
