"""The epoch loop behind `train_epochs`: loaders, one pass over the training shard, validation, the record."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpulab.errors import GpulabError
from gpulab.records import RunConfig
from gpulab.training.epochs import EpochListener, EpochSpec, current_listener, epoch_record
from gpulab.training.metrics import accuracy, mean_auc
from gpulab.workloads.recipes import Recipe, recipe
from gpulab.workloads.torch_session import (
    DeviceAugment,
    Numerics,
    choose_optimizer,
    distributed_rank,
    loader_workers,
    optimizer_lr,
    seed_everything,
)


def _loader(dataset: Any, sampler: Any, batch: int, batched: bool, cfg: RunConfig, device: str) -> Any:
    """Whole passes over `sampler`'s indices, the last batch possibly short (every sample counts)."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader

    # In-memory sets are index lookups: loader workers would only add copies between processes.
    workers = 0 if batched else loader_workers(cfg.num_workers, distributed_rank()[1])
    common: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": torch.device(device).type == "cuda",
        "persistent_workers": workers > 0,
    }
    if batched:
        return DataLoader(dataset, sampler=BatchSampler(sampler, batch, drop_last=False), batch_size=None, **common)
    return DataLoader(dataset, sampler=sampler, batch_size=batch, drop_last=False, **common)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _one_line(err: BaseException) -> str:
    """A loader worker's error comes back with the worker's traceback in its message: keep its last line."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else type(err).__name__
    return last.split("GpulabError: ", 1)[-1]


class EpochTrainer:
    def __init__(
        self, cfg: RunConfig, device: str, spec: EpochSpec, *, wrapper: Callable[[Any], Any] | None = None
    ) -> None:
        import torch
        from torch.utils.data import DistributedSampler, RandomSampler

        from gpulab.training.weights import load_weights

        self.cfg, self.device, self.spec = cfg, device, spec
        self.rank, self.world = distributed_rank()
        seed_everything(cfg.seed)
        self.recipe: Recipe = recipe(cfg, spec.val_fraction)
        r = self.recipe
        model = r.make_model()
        self.notes = load_weights(model, spec.weights, cfg.workload) if spec.weights is not None else []
        model = model.to(device)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.optimizer = choose_optimizer(cfg, r.own_optimizer, choice=spec.optimizer, lr=spec.learning_rate)(
            model.parameters()
        )
        self.net = wrapper(model) if wrapper is not None else model
        self.batch = cfg.batch or r.batch
        self.loss_fn = r.task.loss()
        split = r.split
        if self.world > 1:
            self.sampler: Any = DistributedSampler(
                split.train, num_replicas=self.world, rank=self.rank, shuffle=True, seed=cfg.seed, drop_last=False
            )
        else:
            generator = torch.Generator()
            generator.manual_seed(cfg.seed)
            self.sampler = RandomSampler(split.train, generator=generator)
        self.train_loader = _loader(split.train, self.sampler, self.batch, split.batched, cfg, device)
        shard = list(range(self.rank, len(split.val), self.world))  # no padding: each sample counted once
        self.val_loader = _loader(split.val, shard, self.batch, split.batched, cfg, device)
        self.eval_transform = DeviceAugment(mean=r.mean, std=r.std, channels_last=cfg.channels_last)
        # Last: it changes process-wide settings (TF32, cuDNN autotuning) that close() restores.
        self.numerics = Numerics(cfg.precision, device)

    # -- one epoch -------------------------------------------------------------------------------------------
    def _train_pass(self) -> tuple[float, int, float]:
        """(seconds, samples this rank trained on, mean training loss)."""
        import torch

        r = self.recipe
        self.net.train()
        loss_sum = torch.zeros((), device=self.device)
        samples = 0
        _sync(self.device)
        self._barrier()
        start = time.perf_counter()
        for x, y in self.train_loader:
            x = r.train_augment(x.to(self.device, non_blocking=True))
            y = y.to(self.device, non_blocking=True)
            self.optimizer.zero_grad(set_to_none=True)
            with self.numerics.autocast():
                out = self.net(x)
            loss = self.loss_fn(out.float(), y)
            self.numerics.backward_step(loss, self.optimizer)
            loss_sum += loss.detach() * len(y)  # stays on the device: no sync inside the pass
            samples += len(y)
        _sync(self.device)
        seconds = time.perf_counter() - start
        return seconds, samples, float(loss_sum.item()) / max(samples, 1)

    def _eval_input(self, x: Any) -> Any:
        crop = self.recipe.eval_crop
        if crop is not None and x.shape[-1] > crop:
            top, left = (x.shape[-2] - crop) // 2, (x.shape[-1] - crop) // 2
            x = x[..., top : top + crop, left : left + crop]
        return self.eval_transform(x)

    def _validate(self) -> tuple[float | None, float | None]:
        """(validation loss, metric) over the whole validation set, the same on every rank."""
        import numpy as np
        import torch

        self.model.eval()
        outputs, targets = [], []
        loss_sum = 0.0
        with torch.no_grad():
            for x, y in self.val_loader:
                x = self._eval_input(x.to(self.device, non_blocking=True))
                y = y.to(self.device, non_blocking=True)
                with self.numerics.autocast():
                    out = self.model(x).float()
                loss_sum += float(self.loss_fn(out, y).item()) * len(y)
                outputs.append(out.cpu().numpy())
                targets.append(y.cpu().numpy())
        classes = self.recipe.task.classes
        logits = np.concatenate(outputs) if outputs else np.zeros((0, classes), np.float32)
        labels = np.concatenate(targets) if targets else np.zeros((0,), np.int64)
        if self.world > 1:
            import torch.distributed as dist

            gathered: list[Any] = [None] * self.world
            dist.all_gather_object(gathered, (logits, labels, loss_sum))
            logits = np.concatenate([g[0] for g in gathered])
            labels = np.concatenate([g[1] for g in gathered])
            loss_sum = sum(g[2] for g in gathered)
        if len(labels) == 0:
            return None, None
        metric = mean_auc(logits, labels) if self.recipe.task.multilabel else accuracy(logits, labels)
        return loss_sum / len(labels), metric

    def _barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def _over_ranks(self, seconds: float, samples: int, loss: float) -> tuple[float, int, float]:
        """The slowest rank's seconds, every rank's samples, the sample-weighted mean loss."""
        if self.world == 1:
            return seconds, samples, loss
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, (seconds, samples, loss))
        total = sum(g[1] for g in gathered)
        return max(g[0] for g in gathered), total, sum(g[1] * g[2] for g in gathered) / max(total, 1)

    # -- the run ---------------------------------------------------------------------------------------------
    def run(self, on_epoch: EpochListener | None = None) -> dict[str, Any]:
        try:
            return self._run(on_epoch or current_listener())
        except GpulabError as err:
            raise GpulabError(_one_line(err)) from None

    def _run(self, on_epoch: EpochListener | None) -> dict[str, Any]:
        spec = self.spec
        epochs: list[dict[str, Any]] = []
        time_to_target: float | None = None
        started = time.perf_counter()
        for epoch in range(1, spec.epochs + 1):
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            seconds, samples, train_loss = self._over_ranks(*self._train_pass())
            val_start = time.perf_counter()
            val_loss, metric = self._validate()
            elapsed = time.perf_counter() - started
            record = {
                "epoch": epoch,
                "seconds": seconds,
                "samples": samples,
                "samples_per_s": samples / seconds if seconds > 0 else None,
                "train_loss": train_loss,
                "val_loss": val_loss,
                "val_metric": metric,
                "val_seconds": time.perf_counter() - val_start,
                "elapsed_s": elapsed,
            }
            epochs.append(record)
            target = spec.target_accuracy
            if time_to_target is None and target is not None and metric is not None and metric >= target:
                time_to_target = elapsed  # training and validation time until the epoch that reached it
            if on_epoch is not None and self.rank == 0:
                on_epoch(dict(record))
        total = time.perf_counter() - started
        if spec.save_weights is not None and self.rank == 0:
            from gpulab.training.weights import save_weights

            save_weights(self.model, spec.save_weights)
        return self._record(epochs, total, time_to_target)

    def _record(self, epochs: list[dict[str, Any]], total: float, time_to_target: float | None) -> dict[str, Any]:
        return epoch_record(
            self.recipe,
            epochs,
            workload=self.cfg.workload,
            metric="mean_auc" if self.recipe.task.multilabel else "accuracy",
            total_s=total,
            time_to_target_s=time_to_target,
            target=self.spec.target_accuracy,
            batch=self.batch,
            steps=len(self.train_loader) * len(epochs),  # optimiser steps of one rank
            world=self.world,
            optimizer=self.optimizer,
            learning_rate=optimizer_lr(self.optimizer),
            weights=str(self.spec.weights) if self.spec.weights is not None else None,
            saved_weights=str(self.spec.save_weights) if self.spec.save_weights is not None else None,
            notes=self.notes,
            facts=self.numerics.facts(),
        )

    def close(self) -> None:
        self.numerics.close()
        for loader in (self.train_loader, self.val_loader):
            workers = getattr(loader, "_iterator", None)
            if workers is not None and hasattr(workers, "_shutdown_workers"):
                workers._shutdown_workers()


def train_epochs(
    cfg: RunConfig,
    device: str,
    spec: EpochSpec,
    *,
    on_epoch: EpochListener | None = None,
    wrapper: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """Train cfg.workload on `device` for spec.epochs epochs over cfg.data; returns the JSON-able record."""
    trainer = EpochTrainer(cfg, device, spec, wrapper=wrapper)
    try:
        return trainer.run(on_epoch)
    finally:
        trainer.close()
