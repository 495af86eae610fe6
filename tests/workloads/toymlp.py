"""A workload added from outside gpulab: "mlp", a two-layer perceptron on synthetic vectors (torch).

It exists to show what a new workload needs: this one module, declared through the `gpulab.workloads` entry point
group. `gpulab run mlp`, the suite's speedup rows and a study then run it with no change to gpulab.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpulab.records import RunConfig
from gpulab.workloads.registry import Workload

SIZES = {"tiny": (16, 4), "quick": (64, 20), "standard": (64, 50), "full": (256, 500)}
DEFAULTS: dict[str, Any] = {"hidden": 32, "features": 16, "learning_rate": 0.05}


class MlpSession:
    """SGD on a fixed random regression target: the loss falls, so the steps really train."""

    def __init__(self, cfg: RunConfig, device: str) -> None:
        import torch

        params = {**DEFAULTS, **cfg.params}
        batch, steps = SIZES[cfg.size]
        self.samples_per_step = cfg.batch or batch
        self.steps = cfg.steps or steps
        generator = torch.Generator().manual_seed(cfg.seed)
        features, hidden = int(params["features"]), int(params["hidden"])
        self.model: Any = torch.nn.Sequential(
            torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        ).to(device)
        self.x = torch.randn(self.samples_per_step, features, generator=generator).to(device)
        self.y = self.x.sum(dim=1, keepdim=True)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=float(params["learning_rate"]))
        self.info: dict[str, Any] = {"hidden": hidden, "features": features, "data": "synthetic"}
        self.losses: list[float] = []

    def wrap(self, wrapper: Callable[[Any], Any]) -> None:
        self.model = wrapper(self.model)

    def step(self) -> Any:
        import torch

        self.optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.optimizer.step()
        self.losses.append(float(loss.detach()))
        return loss

    def finish(self) -> dict[str, Any]:
        return {"first_loss": self.losses[0], "last_loss": self.losses[-1]} if self.losses else {}


def build(cfg: RunConfig, device: str) -> MlpSession:
    return MlpSession(cfg, device)


WORKLOAD = Workload(
    name="mlp",
    sizes=SIZES,
    torch="toymlp:build",
    params=DEFAULTS,
    channels_last_gains=False,  # vectors, no image layout
)
