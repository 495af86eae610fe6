"""What the workloads share: config checks, parameters, precision for a session's lifetime, batches on the device.

Everything a timed `step()` touches stays on the device: synthetic batches are made once there, augmentation (crop,
flip) happens there with offsets drawn from a host RNG, and nothing reads a device value back to the host.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError
from gpulab.records import RunConfig


def batch_and_steps(cfg: RunConfig, sizes: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    """Validate the generic fields and return (batch, steps): the config's, or the size's defaults."""
    names.size(cfg.size, who=cfg.workload)
    for name in ("batch", "steps"):
        value = getattr(cfg, name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise GpulabError(f"{cfg.workload}: {name} must be a positive integer, not {value!r}")
    if cfg.num_workers is not None and cfg.num_workers < 0:
        raise GpulabError(f"{cfg.workload}: num_workers must be 0 or more, not {cfg.num_workers}")
    batch, steps = sizes[cfg.size]
    return cfg.batch or batch, cfg.steps or steps


class Params:
    """A workload's `params`: unknown names and bad values become GpulabErrors that name the allowed ones."""

    def __init__(self, workload: str, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise GpulabError(
                f"{workload}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(defaults))}"
            )
        self.workload = workload
        self.values = {**defaults, **given}

    def _bad(self, name: str, expected: str) -> GpulabError:
        return GpulabError(f"{self.workload}: parameter {name}={self.values[name]!r} is invalid; expected {expected}")

    def raw(self, name: str) -> Any:
        return self.values[name]

    def choice(self, name: str, allowed: Sequence[str]) -> str:
        value = self.values[name]
        if value not in allowed:
            raise self._bad(name, "one of " + ", ".join(allowed))
        return str(value)

    def number(self, name: str, *, minimum: float = 0.0, above: bool = False, maximum: float | None = None) -> float:
        value = self.values[name]
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        ok = math.isfinite(number) and (number > minimum if above else number >= minimum)
        if maximum is not None:
            ok = ok and number <= maximum
        if isinstance(value, bool) or not ok:
            span = f"{'>' if above else '≥'} {minimum:g}" + (f" and ≤ {maximum:g}" if maximum is not None else "")
            raise self._bad(name, f"a number {span}")
        return number

    def integer(self, name: str, *, minimum: int = 1) -> int | None:
        value = self.values[name]
        if value is None:
            return None
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise self._bad(name, f"an integer ≥ {minimum}") from None
        if isinstance(value, bool) or number != float(value) or number < minimum:
            raise self._bad(name, f"an integer ≥ {minimum}")
        return number

    def numbers(self, name: str, *, above: float = 0.0) -> list[float]:
        """A number, a list of numbers, or a comma-separated string of them."""
        value = self.values[name]
        items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
        try:
            numbers = [float(v) for v in items]
        except (TypeError, ValueError):
            numbers = []
        if not numbers or not all(math.isfinite(n) and n > above for n in numbers):
            raise self._bad(name, f"a number > {above:g} or a list of them")
        return numbers

    def existing_file(self, name: str) -> Path | None:
        value = self.values[name]
        if value is None:
            return None
        path = Path(value).expanduser()
        if not path.is_file():
            raise GpulabError(f"{self.workload}: parameter {name}: file {path} does not exist")
        return path


class Numerics:
    """Precision for a session's lifetime (gpulab.names decodes it): TF32 on or off, the autocast type, and for
    fp16 a dynamic loss scaler; cuDNN autotuning on CUDA. `close()` restores the previous settings."""

    def __init__(self, precision: names.Precision, device: str) -> None:
        import torch

        from gpulab.workloads.torch_precision import tf32_mode

        self.precision = mode = precision
        self.device_type = torch.device(device).type
        self.tf32 = mode.tf32
        self.autocast_dtype = mode.autocast
        # Dynamic loss scaling keeps fp16's small gradients from flushing to zero (torch.amp's recipe).
        self.scaler = torch.amp.GradScaler(self.device_type) if mode.loss_scaling else None
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(tf32_mode(self.tf32))
        if self.device_type == "cuda":
            before = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = True
            self._stack.callback(setattr, torch.backends.cudnn, "benchmark", before)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        if self.autocast_dtype is not None:
            return torch.autocast(device_type=self.device_type, dtype=getattr(torch, self.autocast_dtype))
        return contextlib.nullcontext()

    def backward_step(self, loss: Any, optimizer: Any) -> None:
        """Backward and optimiser step, through the loss scaler when the precision has one."""
        if self.scaler is None:
            loss.backward()
            optimizer.step()
            return
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)  # skips the step when the scaled gradients overflowed
        self.scaler.update()

    def facts(self) -> dict[str, Any]:
        autocast = self.precision if self.autocast_dtype else None
        return {"precision": self.precision, "tf32": self.tf32, "autocast": autocast, "loss_scaling": bool(self.scaler)}

    def close(self) -> None:
        self._stack.close()


AUTO_WORKERS = (2, 8)  # a recent core decodes and resizes ~500 224 px JPEGs/s: 8 feed a GPU's ResNet50 in bf16


def loader_workers(requested: int | None, processes: int = 1) -> int:
    """DataLoader workers: the ones asked for, else a share of the cores this process may use, one left for each
    training process itself, 2 to 8. (A fixed 2 held a 285-class ResNet50 on an H100 to a third of its speed.)"""
    if requested is not None:
        return requested
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    low, high = AUTO_WORKERS
    return max(low, min(high, cores // max(1, processes) - 1))


def distributed_rank() -> tuple[int, int]:
    """(rank, world size) of an initialised torch.distributed group, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class DeviceAugment:
    """Per-batch augmentation on the device: uint8 → normalised float, zero padding, random crop, random flip,
    memory format. Crop offsets come from a host RNG (one per batch); flips are drawn per sample on the device."""

    def __init__(
        self,
        *,
        crop: int | None = None,
        pad: int = 0,
        flip: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        channels_last: bool = False,
        seed: int = 0,
    ) -> None:
        self.crop, self.pad, self.flip, self.channels_last = crop, pad, flip, channels_last
        self.mean, self.std = mean, std
        self._rng = random.Random(seed)
        self._affine: dict[Any, tuple[Any, Any]] = {}

    def _normalise(self, x: Any) -> Any:
        import torch

        key = x.device
        if key not in self._affine:
            channels = x.shape[1]
            mean = torch.tensor(self.mean or [0.0] * channels, dtype=torch.float32)
            std = torch.tensor(self.std or [1.0] * channels, dtype=torch.float32)
            scale = (1.0 / (255.0 * std)).view(1, -1, 1, 1).to(x.device)
            shift = (-mean / std).view(1, -1, 1, 1).to(x.device)
            self._affine[key] = (scale, shift)
        scale, shift = self._affine[key]
        return torch.addcmul(shift, x.float(), scale)

    def __call__(self, x: Any) -> Any:
        import torch
        import torch.nn.functional as F

        if self.pad:
            x = F.pad(x, (self.pad,) * 4)
        if self.crop is not None:
            height, width = x.shape[-2], x.shape[-1]
            top = self._rng.randrange(height - self.crop + 1)
            left = self._rng.randrange(width - self.crop + 1)
            x = x[..., top : top + self.crop, left : left + self.crop]
        if self.flip:
            flip = torch.rand(x.shape[0], device=x.device) < 0.5
            x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
        if x.dtype == torch.uint8:
            x = self._normalise(x)
        if self.channels_last:
            return x.contiguous(memory_format=torch.channels_last)
        return x.contiguous()


class SyntheticBatches:
    """One batch made on the device at build time and reused (optionally augmented) every step."""

    def __init__(self, x: Any, y: Any, augment: DeviceAugment | None = None) -> None:
        self.x, self.y, self.augment = x, y, augment
        self.source = "synthetic"
        self.epochs = 0

    def next(self) -> tuple[Any, Any]:
        if self.augment is None:
            return self.x, self.y
        return self.augment(self.x), self.y

    def close(self) -> None:
        pass


class LoaderBatches:
    """Batches from a DataLoader, copied to the device without blocking and augmented there; restarts at epoch end."""

    def __init__(self, loader: Any, device: str, augment: DeviceAugment, source: str) -> None:
        self.loader, self.device, self.augment, self.source = loader, device, augment, source
        self.epochs = 0
        self._it: Iterator[Any] | None = None

    def _next_raw(self) -> tuple[Any, Any]:
        if self._it is None:
            sampler: Any = getattr(self.loader, "sampler", None)
            sampler = getattr(sampler, "sampler", sampler)  # a BatchSampler's inner sampler
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(self.epochs)
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            self.epochs += 1
            self._it = None
            return self._next_raw()

    def next(self) -> tuple[Any, Any]:
        x, y = self._next_raw()
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        return self.augment(x), y

    def close(self) -> None:
        """Stop the loader's persistent workers now rather than at garbage collection."""
        self._it = None
        workers = getattr(self.loader, "_iterator", None)
        if workers is not None and hasattr(workers, "_shutdown_workers"):
            workers._shutdown_workers()


def make_loader(dataset: Any, *, batch: int, cfg: RunConfig, device: str, batched: bool = False) -> Any:
    """A shuffling DataLoader with `cfg.num_workers` persistent workers, pinned memory on CUDA, whole batches only.

    `batched`: the dataset's __getitem__ takes a list of indices and returns a whole batch (in-memory datasets).
    Under torch.distributed each rank reads its own shard."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

    size = len(dataset)
    rank, world = distributed_rank()
    if size // world < batch:
        raise GpulabError(
            f"{cfg.workload}: the data set at {cfg.data} has {size} samples"
            + (f" ({size // world} per rank)" if world > 1 else "")
            + f", fewer than one batch of {batch}"
        )
    generator = torch.Generator()
    generator.manual_seed(cfg.seed)
    workers = loader_workers(cfg.num_workers, world)
    common: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": torch.device(device).type == "cuda",
        "persistent_workers": workers > 0,
    }
    sampler: Any
    if world > 1:
        sampler = DistributedSampler(
            dataset, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True
        )
    else:
        sampler = RandomSampler(dataset, generator=generator)
    if batched:
        return DataLoader(dataset, sampler=BatchSampler(sampler, batch, drop_last=True), batch_size=None, **common)
    return DataLoader(dataset, sampler=sampler, batch_size=batch, drop_last=True, **common)


class ClassifierSession:
    """Supervised training of an image classifier: fetch a batch, forward under the precision's autocast, fp32 loss,
    backward, optimiser step. The returned loss stays on the device."""

    def __init__(
        self,
        *,
        cfg: RunConfig,
        device: str,
        model: Any,
        make_optimizer: Callable[[Any], Any],
        loss_fn: Callable[[Any, Any], Any],
        batches: SyntheticBatches | LoaderBatches,
        numerics: Numerics,
        batch: int,
        steps: int,
        info: dict[str, Any],
    ) -> None:
        import torch

        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.samples_per_step = batch
        self.steps = steps
        self._optimizer = make_optimizer(model.parameters())
        self._loss_fn = loss_fn
        self._batches = batches
        self._numerics = numerics
        self._steps_run = 0
        self._finished = False
        self.info = {
            "workload": cfg.workload,
            "device": device,
            **numerics.facts(),
            "channels_last": cfg.channels_last,
            "size": cfg.size,
            "batch": batch,
            "steps": steps,
            "data": batches.source,
            "parameters": sum(p.numel() for p in model.parameters()),
            "optimizer": type(self._optimizer).__name__,
            **info,
            "learning_rate": optimizer_lr(self._optimizer),  # the rate in use, whoever chose it
        }

    def wrap(self, wrapper: Callable[[Any], Any]) -> None:
        self.model = wrapper(self.model)
        self.info["wrapper"] = type(self.model).__name__

    def step(self) -> Any:
        x, y = self._batches.next()
        self._optimizer.zero_grad(set_to_none=True)
        with self._numerics.autocast():
            out = self.model(x)
        loss = self._loss_fn(out.float(), y)
        self._numerics.backward_step(loss, self._optimizer)
        self._steps_run += 1
        return loss.detach()

    def finish(self) -> dict[str, Any]:
        if not self._finished:
            self._finished = True
            self._batches.close()
            self._numerics.close()
        return {"steps_run": self._steps_run, "epochs_completed": self._batches.epochs}


def synthetic_generator(device: str, seed: int) -> Any:
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def seed_everything(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    random.seed(seed)


def data_root(cfg: RunConfig) -> Path:
    """The data set's folder: the path given, or a named one (mnist, cifar10) fetched into gpulab's cache."""
    assert cfg.data is not None
    from gpulab.workloads.data import FETCHED, named

    name = named(cfg.data)
    if name in FETCHED:
        from gpulab.workloads.fetch import fetch_dataset

        return fetch_dataset(name)
    root = Path(cfg.data).expanduser()
    if not root.exists():
        raise GpulabError(f"{cfg.workload}: data path {root} does not exist")
    return root


@dataclass(frozen=True)
class Task:
    """What a classifier maps: inputs of `input_shape` (C, H, W) to `classes` logits, one label each (softmax
    cross-entropy) or any number of them (`multilabel`: independent sigmoids, BCE, as CheXNet's 14 findings)."""

    input_shape: tuple[int, int, int]
    classes: int
    multilabel: bool = False

    def synthetic(self, n: int, device: str, generator: Any) -> tuple[Any, Any]:
        """A batch of `n` random inputs and labels of the real shapes and dtypes, on `device`."""
        import torch

        x = torch.randn(n, *self.input_shape, device=device, generator=generator)
        if self.multilabel:
            return x, torch.randint(0, 2, (n, self.classes), device=device, generator=generator).float()
        return x, torch.randint(0, self.classes, (n,), device=device, generator=generator)

    def loss(self) -> Any:
        import torch

        return torch.nn.BCEWithLogitsLoss() if self.multilabel else torch.nn.CrossEntropyLoss()


def digits_dataset(cfg: RunConfig, task: Task, indices: Any = None) -> Any:
    """scikit-learn's digits in the task's image shape (28×28 as MNIST frames them; else the whole image), all
    of them or those at `indices`; a multi-label task cannot use them."""
    import torch

    from gpulab.workloads.data import DIGITS, InMemoryBatches, digits_images

    if task.multilabel:
        raise GpulabError(
            f"{cfg.workload}: --data {DIGITS} has one label per image; {cfg.workload} needs multi-label data"
        )
    channels, side, _ = task.input_shape
    images, labels = digits_images(side, 20 if side == 28 else side, channels)
    if indices is not None:
        images, labels = images[indices], labels[indices]
    return InMemoryBatches(torch.from_numpy(images), torch.from_numpy(labels))


def build_classifier(
    cfg: RunConfig,
    device: str,
    *,
    batch: int,
    steps: int,
    make_model: Callable[[], Any],
    make_optimizer: Callable[[Any], Any],
    task: Task,
    synthetic_augment: DeviceAugment | None,
    real: Callable[[Path], tuple[Any, bool]],
    real_augment: DeviceAugment,
    info: dict[str, Any],
) -> ClassifierSession:
    """Seed, set precision, build the model on the device and the batches (synthetic, made once on the device in
    `task`'s shapes; or real, a DataLoader over `real(root)` -> (dataset, batched)), and start a session.
    """
    import torch

    seed_everything(cfg.seed)
    numerics = Numerics(cfg.precision, device)
    try:
        batches: SyntheticBatches | LoaderBatches
        if cfg.data is not None:
            from gpulab.workloads.data import DIGITS, is_digits

            if is_digits(cfg.data):
                dataset, batched, source = digits_dataset(cfg, task), True, DIGITS
            else:
                root = data_root(cfg)
                (dataset, batched), source = real(root), f"real:{root}"
            loader = make_loader(dataset, batch=batch, cfg=cfg, device=device, batched=batched)
            batches = LoaderBatches(loader, device, real_augment, source)
        else:
            with torch.no_grad():
                x, y = task.synthetic(batch, device, synthetic_generator(device, cfg.seed))
            if cfg.channels_last and synthetic_augment is None:
                x = x.contiguous(memory_format=torch.channels_last)
            batches = SyntheticBatches(x, y, synthetic_augment)
        model = make_model().to(device)
        return ClassifierSession(
            cfg=cfg,
            device=device,
            model=model,
            make_optimizer=make_optimizer,
            loss_fn=task.loss(),
            batches=batches,
            numerics=numerics,
            batch=batch,
            steps=steps,
            info=info,
        )
    except BaseException:
        numerics.close()
        raise


OwnOptimizer = Callable[[Any, "float | None"], Any]  # (parameters, learning rate or None) -> the workload's optimiser


def choose_optimizer(
    cfg: RunConfig, own: OwnOptimizer, *, choice: str | None = None, lr: float | None = None
) -> Callable[[Any], Any]:
    """The optimiser factory a run asked for: `choice` (else cfg.optimizer) adam | sgd at `lr` (else
    cfg.learning_rate, else that optimiser's default), or the workload's `own` when none is chosen."""
    import torch

    choice = choice or cfg.optimizer
    lr = lr if lr is not None else cfg.learning_rate
    if choice is not None:
        names.optimizer(choice, who=cfg.workload)
    if lr is not None and (not math.isfinite(lr) or lr <= 0):
        raise GpulabError(f"{cfg.workload}: the learning rate must be a positive number, not {lr!r}")

    def make(params: Any) -> Any:
        if choice is None:
            return own(params, lr)
        rate = lr if lr is not None else names.OPTIMIZER_LR[choice]
        if choice == "adam":
            return torch.optim.Adam(params, lr=rate)
        return torch.optim.SGD(params, lr=rate, momentum=0.9)

    return make


def optimizer_lr(optimizer: Any) -> float | None:
    """The learning rate an optimiser was built with (its first parameter group's)."""
    groups = getattr(optimizer, "param_groups", None)
    return float(groups[0]["lr"]) if groups else None
