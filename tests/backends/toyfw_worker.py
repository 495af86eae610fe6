"""toyfw's worker: fit y = 3x + 1 by minibatch SGD in pure Python, timed like every gpulab run.

Started once per sweep run with gpulab's worker arguments (--config MESSAGE --out RESULT --index --runs
--ready-dir --device-label); `train` is also called in-process by the backend's cpu launcher.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from gpulab.launch.measuring import make_result
from gpulab.launch.peers import wait_for_peers
from gpulab.launch.spec import TimedResult, WorkerMessage

SIZES = {"tiny": (32, 50), "quick": (64, 200), "standard": (128, 1000), "full": (256, 5000)}  # (batch, steps)


def train(message: WorkerMessage, index: int, runs: int, ready_dir: Path | None, label: str) -> TimedResult:
    cfg = message.run
    batch, steps = cfg.batch or SIZES[cfg.size][0], cfg.steps or SIZES[cfg.size][1]
    rng = random.Random(cfg.seed + index)
    lr = float(cfg.params.get("learning_rate", 0.05))
    w = b = 0.0

    def step() -> float:
        nonlocal w, b
        xs = [rng.uniform(-1, 1) for _ in range(batch)]
        errors = [(w * x + b) - (3 * x + 1) for x in xs]
        w -= lr * 2 * sum(e * x for e, x in zip(errors, xs, strict=True)) / batch
        b -= lr * 2 * sum(errors) / batch
        return sum(e * e for e in errors) / batch

    for _ in range(cfg.warmup):
        step()
    together = wait_for_peers(ready_dir, index, runs, message.start_timeout_s) if ready_dir is not None else True
    wall_start, start = time.time(), time.perf_counter()
    loss = 0.0
    for _ in range(steps):
        loss = step()
    seconds, wall_end = time.perf_counter() - start, time.time()
    launcher = "sweep" if message.mode == "sweep" else "cpu"
    result = make_result(
        cfg,
        launcher=launcher,
        n=1,
        samples=batch * steps,
        seconds=seconds,
        steps=steps,
        batch=batch,
        devices=[label],
        device=label,
        params={"w": w, "b": b, "final_loss": loss, "run_index": index, "started_together": together},
        framework="toyfw",
    )
    return TimedResult(result, wall_start, wall_end)


def main() -> None:
    parser = argparse.ArgumentParser(description="one toyfw run")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--ready-dir", type=Path)
    parser.add_argument("--device-label", default="cpu")
    args = parser.parse_args()
    message = WorkerMessage.read(args.config)
    train(message, args.index, args.runs, args.ready_dir, args.device_label).write(args.out)


if __name__ == "__main__":
    main()
