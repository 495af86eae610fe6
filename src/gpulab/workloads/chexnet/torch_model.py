"""CheXNet: DenseNet121 with 14 sigmoid outputs (ChestX-ray14 findings), BCE-with-logits, Adam; random 224 crop
from 264 and horizontal flip on the device, for synthetic and real images alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads import pretrained
from gpulab.workloads.chexnet import DEFAULTS, SIZES
from gpulab.workloads.pretrained import Start
from gpulab.workloads.torch_session import (
    ClassifierSession,
    DeviceAugment,
    OwnOptimizer,
    Params,
    Task,
    batch_and_steps,
    build_classifier,
    choose_optimizer,
)

IMAGE = {"tiny": 64}  # crop side; 224 for other sizes
CLASSES = 14
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def make_model(begin: Start | None = None, described: list[str] | None = None) -> Any:
    """DenseNet121 with 14 outputs, from `begin`'s weights (all but the classifier) or random; the weights'
    description is appended to `described`."""
    from gpulab.workloads.tv import import_torchvision

    model = import_torchvision().models.densenet121(weights=None, num_classes=CLASSES)
    what = pretrained.load(model, begin, "chexnet") if begin is not None else "random"
    if described is not None:
        described.append(what)
    return model


@dataclass(frozen=True)
class Settings:
    """The run's checked size and parameters, read once for the torch and the TensorFlow versions."""

    batch: int
    steps: int
    crop: int
    side: int
    lr: float
    start: Start


def settings(cfg: RunConfig) -> Settings:
    """Check `cfg` and its params for chexnet; every problem is a GpulabError naming the param."""
    p = Params("chexnet", cfg.params, DEFAULTS)
    batch, steps = batch_and_steps(cfg, SIZES)
    crop = p.integer("image", minimum=32) or IMAGE.get(cfg.size, 224)
    lr = p.number("learning_rate", above=True)
    begin = pretrained.start("chexnet", p.raw("pretrained"), "densenet121", "classifier.")
    return Settings(batch, steps, crop, round(crop * 264 / 224), lr, begin)


def own_optimizer(st: Settings) -> OwnOptimizer:
    """Adam (CheXNet's β 0.9, 0.999) at the settings' rate or the one a run overrides it with."""

    def make(params: Any, lr: float | None) -> Any:
        import torch

        return torch.optim.Adam(params, lr=lr or st.lr, betas=(0.9, 0.999))

    return make


def build(cfg: RunConfig, device: str) -> ClassifierSession:
    from gpulab.workloads.chexnet.data import read_labels
    from gpulab.workloads.data import ImageFolderCSV

    st = settings(cfg)
    batch, steps, crop, side = st.batch, st.steps, st.crop, st.side
    make_optimizer = choose_optimizer(cfg, own_optimizer(st))

    def real(root: Path) -> tuple[Any, bool]:
        folder, paths, labels = read_labels(root, "chexnet")
        return ImageFolderCSV(folder, paths, labels, side), False

    def augment(mean: Any = None, std: Any = None) -> DeviceAugment:
        return DeviceAugment(crop=crop, flip=True, mean=mean, std=std, channels_last=cfg.channels_last, seed=cfg.seed)

    described: list[str] = []
    session = build_classifier(
        cfg,
        device,
        batch=batch,
        steps=steps,
        make_model=lambda: make_model(st.start, described),
        make_optimizer=make_optimizer,
        task=Task((3, side, side), CLASSES, multilabel=True),
        synthetic_augment=augment(),
        real=real,
        real_augment=augment(MEAN, STD),
        info={"image_hw": [crop, crop], "loaded_hw": [side, side], "augment": f"crop {crop} of {side}, flip"},
    )
    session.info["weights"] = described[-1]
    return session
